//! The AVX-512 (`Zmm`, 16 lanes) and AVX2+FMA (`Ymm`, 8 lanes) vector types.

use super::{array_of, held_as_results, Isa, Lanes, LookUpTable, Vector};
use std::arch::x86_64::*;

#[derive(Clone, Copy)]
pub struct Zmm(pub __m512);
#[derive(Clone, Copy)]
pub struct Ymm(pub __m256);

/// The operations that are one instruction at either width: the two impls
/// differ only in the intrinsics named.
macro_rules! one_instruction_ops {
    ($ty:ident: $load:ident, $splat:ident, $store:ident, $fma:ident,
     $($op:ident $intrinsic:ident),*) => {
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            $ty($load(p))
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            $ty($splat(x))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            $store(p, self.0)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            $ty($fma(a.0, b.0, c.0))
        }
        $(
            #[inline(always)]
            unsafe fn $op(a: Self, b: Self) -> Self {
                $ty($intrinsic(a.0, b.0))
            }
        )*
    };
}

/// A `LookUpTable` held in registers (`Zmm::hold`): its packed bytes, their
/// grid, its last index and result; else its results, gathered.
#[derive(Clone, Copy)]
pub struct HeldTable {
    words: [__m512i; 4],
    zero: __m512,
    step: __m512,
    last: __m512,
    at_last: __m512,
    results: *const f32,
    packed: bool,
}

/// The mask of lanes `0..k` (`k < 16`).
#[inline(always)]
fn first_lanes(k: usize) -> __mmask16 {
    ((1u32 << k) - 1) as __mmask16
}

impl Vector for Zmm {
    const LANES: usize = 16;
    const KIND: Lanes = Lanes::Isa(Isa::Avx512);
    one_instruction_ops!(Zmm: _mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps, _mm512_fmadd_ps,
        add _mm512_add_ps, sub _mm512_sub_ps, mul _mm512_mul_ps, div _mm512_div_ps,
        max _mm512_max_ps, min _mm512_min_ps);
    #[inline(always)]
    unsafe fn fused_mul_add(a: Self, b: Self, c: Self) -> Self {
        Self::fma(a, b, c)
    }
    // Masked lanes are neither read nor written (nor fault).
    #[inline(always)]
    unsafe fn load_first(p: *const f32, k: usize, fill: f32) -> Self {
        Zmm(_mm512_mask_loadu_ps(
            _mm512_set1_ps(fill),
            first_lanes(k),
            p,
        ))
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, k: usize) {
        _mm512_mask_storeu_ps(p, first_lanes(k), self.0)
    }
    #[inline(always)]
    unsafe fn store_bytes(self, p: *mut u8) {
        let ints = _mm512_cvtps_epi32(self.0);
        _mm_storeu_si128(p.cast(), _mm512_cvtepi32_epi8(ints));
    }
    #[inline(always)]
    unsafe fn load_bytes(p: *const u8) -> Self {
        Zmm(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
            p.cast(),
        ))))
    }
    type Held = HeldTable;
    #[inline(always)]
    unsafe fn hold(table: &LookUpTable) -> HeldTable {
        let last = table.results.len() - 1;
        let (words, zero, step) = match &table.bytes {
            Some(b) => (&b.words, b.zero, b.step),
            None => (&[0; 64], 0.0, 0.0),
        };
        HeldTable {
            words: array_of(_mm512_setzero_si512(), |k| {
                _mm512_loadu_si512(words[16 * k..].as_ptr().cast())
            }),
            zero: _mm512_set1_ps(zero),
            step: _mm512_set1_ps(step),
            last: _mm512_set1_ps(last as f32),
            at_last: _mm512_set1_ps(table.results[last]),
            results: table.results.as_ptr(),
            packed: table.bytes.is_some(),
        }
    }
    #[inline(always)]
    unsafe fn look_up_held(held: HeldTable, index: Self) -> Self {
        if !held.packed {
            return Self::lookup(held.results, index);
        }
        let i = _mm512_cvttps_epi32(index.0);
        // Word `i / 4` from the first two registers (`i < 128`) or the
        // other two, then its byte `i % 4`.
        let word = _mm512_srli_epi32::<2>(i);
        let low = _mm512_permutex2var_epi32(held.words[0], word, held.words[1]);
        let high = _mm512_permutex2var_epi32(held.words[2], word, held.words[3]);
        let upper = _mm512_test_epi32_mask(i, _mm512_set1_epi32(128));
        let word = _mm512_mask_blend_epi32(upper, low, high);
        let shift = _mm512_slli_epi32::<3>(_mm512_and_si512(i, _mm512_set1_epi32(3)));
        let byte = _mm512_and_si512(_mm512_srlv_epi32(word, shift), _mm512_set1_epi32(255));
        let v = _mm512_mul_ps(
            _mm512_sub_ps(_mm512_cvtepi32_ps(byte), held.zero),
            held.step,
        );
        let at_last = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(index.0, held.last);
        Zmm(_mm512_mask_blend_ps(at_last, v, held.at_last))
    }
    #[inline(always)]
    unsafe fn lookup(table: *const f32, index: Self) -> Self {
        Zmm(_mm512_i32gather_ps::<4>(
            _mm512_cvttps_epi32(index.0),
            table,
        ))
    }
    #[inline(always)]
    unsafe fn even(a: Self, b: Self) -> Self {
        let idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        Zmm(_mm512_permutex2var_ps(a.0, idx, b.0))
    }
    #[inline(always)]
    unsafe fn select_negative(a: Self, neg: Self, pos: Self) -> Self {
        let m = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a.0, _mm512_setzero_ps());
        Zmm(_mm512_mask_blend_ps(m, pos.0, neg.0))
    }
    #[inline(always)]
    unsafe fn nan_of(a: Self, b: Self) -> Self {
        let m = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(b.0, b.0);
        Zmm(_mm512_mask_blend_ps(m, a.0, b.0))
    }
    #[inline(always)]
    unsafe fn sqrt(a: Self) -> Self {
        Zmm(_mm512_sqrt_ps(a.0))
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        Zmm(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a.0))
    }
    #[inline(always)]
    unsafe fn floor(a: Self) -> Self {
        Zmm(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC },
        >(a.0))
    }
    #[inline(always)]
    unsafe fn scale2(a: Self, n: Self) -> Self {
        Zmm(_mm512_scalef_ps(a.0, n.0))
    }
    #[inline(always)]
    unsafe fn any_at_most(a: Self, x: f32) -> bool {
        _mm512_cmp_ps_mask::<_CMP_LE_OQ>(a.0, _mm512_set1_ps(x)) != 0
    }
    #[inline(always)]
    unsafe fn spread<const G: usize>(a: Self, j: usize) -> Self {
        if G == 1 {
            return a;
        }
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let first = _mm512_andnot_si512(_mm512_set1_epi32(G as i32 - 1), lane);
        let idx = _mm512_add_epi32(first, _mm512_set1_epi32(j as i32));
        Zmm(_mm512_permutexvar_ps(idx, a.0))
    }
}

/// The mask of lanes `0..k` (`k < 8`): all ones where the lane is below `k`.
#[inline(always)]
unsafe fn first_lanes_avx2(k: usize) -> __m256i {
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(k as i32),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// 2^(k + bias − 127) in each lane of the integers `k`: the biased exponent
/// shifted into place (a normal power of two for k + bias in [1, 254]).
#[inline(always)]
unsafe fn power_of_two(k: __m256i, bias: i32) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        k,
        _mm256_set1_epi32(bias),
    )))
}

impl Vector for Ymm {
    const LANES: usize = 8;
    const KIND: Lanes = Lanes::Isa(Isa::Avx2);
    one_instruction_ops!(Ymm: _mm256_loadu_ps, _mm256_set1_ps, _mm256_storeu_ps, _mm256_fmadd_ps,
        add _mm256_add_ps, sub _mm256_sub_ps, mul _mm256_mul_ps, div _mm256_div_ps,
        max _mm256_max_ps, min _mm256_min_ps);
    #[inline(always)]
    unsafe fn fused_mul_add(a: Self, b: Self, c: Self) -> Self {
        Self::fma(a, b, c)
    }
    // Masked lanes are neither read nor written (nor fault); a staged copy
    // through the stack cost a call to memcpy per vector.
    #[inline(always)]
    unsafe fn load_first(p: *const f32, k: usize, fill: f32) -> Self {
        let mask = first_lanes_avx2(k);
        let loaded = _mm256_maskload_ps(p, mask);
        Ymm(_mm256_blendv_ps(
            _mm256_set1_ps(fill),
            loaded,
            _mm256_castsi256_ps(mask),
        ))
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, k: usize) {
        _mm256_maskstore_ps(p, first_lanes_avx2(k), self.0)
    }
    #[inline(always)]
    unsafe fn store_bytes(self, p: *mut u8) {
        let ints = _mm256_cvtps_epi32(self.0);
        let (low, high) = (
            _mm256_castsi256_si128(ints),
            _mm256_extracti128_si256::<1>(ints),
        );
        let words = _mm_packus_epi32(low, high);
        _mm_storel_epi64(p.cast(), _mm_packus_epi16(words, words));
    }
    #[inline(always)]
    unsafe fn load_bytes(p: *const u8) -> Self {
        Ymm(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
            p.cast(),
        ))))
    }
    held_as_results!();
    #[inline(always)]
    unsafe fn lookup(table: *const f32, index: Self) -> Self {
        Ymm(_mm256_i32gather_ps::<4>(
            table,
            _mm256_cvttps_epi32(index.0),
        ))
    }
    #[inline(always)]
    unsafe fn even(a: Self, b: Self) -> Self {
        // a0 a2 b0 b2 | a4 a6 b4 b6, then the 64-bit pairs reordered.
        let pairs = _mm256_shuffle_ps::<0b10_00_10_00>(a.0, b.0);
        let ordered = _mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(pairs));
        Ymm(_mm256_castpd_ps(ordered))
    }
    #[inline(always)]
    unsafe fn select_negative(a: Self, neg: Self, pos: Self) -> Self {
        let m = _mm256_cmp_ps::<_CMP_LT_OQ>(a.0, _mm256_setzero_ps());
        Ymm(_mm256_blendv_ps(pos.0, neg.0, m))
    }
    #[inline(always)]
    unsafe fn nan_of(a: Self, b: Self) -> Self {
        let m = _mm256_cmp_ps::<_CMP_UNORD_Q>(b.0, b.0);
        Ymm(_mm256_blendv_ps(a.0, b.0, m))
    }
    #[inline(always)]
    unsafe fn sqrt(a: Self) -> Self {
        Ymm(_mm256_sqrt_ps(a.0))
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        Ymm(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a.0))
    }
    #[inline(always)]
    unsafe fn floor(a: Self) -> Self {
        Ymm(_mm256_floor_ps(a.0))
    }
    #[inline(always)]
    unsafe fn scale2(a: Self, n: Self) -> Self {
        // 2^n as two factors from their exponent bits (as `LaneOps::mul_pow2` of f32).
        let n = _mm256_cvtps_epi32(n.0);
        let half = _mm256_srai_epi32::<1>(n);
        let rest = _mm256_sub_epi32(n, half);
        let power = |k| power_of_two(k, 127);
        Ymm(_mm256_mul_ps(_mm256_mul_ps(a.0, power(half)), power(rest)))
    }
    #[inline(always)]
    unsafe fn scale2_normal(a: Self, n: Self) -> Self {
        // (2a) · 2^(n-1): one power of two, normal for every n here.
        let power = power_of_two(_mm256_cvtps_epi32(n.0), 126);
        let twice = _mm256_add_ps(a.0, a.0);
        Ymm(_mm256_mul_ps(twice, power))
    }
    #[inline(always)]
    unsafe fn any_at_most(a: Self, x: f32) -> bool {
        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(a.0, _mm256_set1_ps(x))) != 0
    }
    #[inline(always)]
    unsafe fn spread<const G: usize>(a: Self, j: usize) -> Self {
        if G == 1 {
            return a;
        }
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let first = _mm256_andnot_si256(_mm256_set1_epi32(G as i32 - 1), lane);
        let idx = _mm256_add_epi32(first, _mm256_set1_epi32(j as i32));
        Ymm(_mm256_permutevar8x32_ps(a.0, idx))
    }
}
