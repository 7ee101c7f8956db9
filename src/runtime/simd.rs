//! Register-blocked convolution micro-kernel, written once over a vector type
//! and instantiated for AVX-512 (16 lanes), AVX2+FMA (8 lanes) and a portable
//! fallback (8 lanes of plain f32 the compiler may vectorize). The instruction
//! set is chosen at run time (`Isa::detect`).
//!
//! The kernel computes a tile of `T` output pixels of one output row times one
//! vector of `LANES` consecutive output channels: every accumulator stays in a
//! register while it runs over the kernel window and the input channels, each
//! step one weight-vector load, then a broadcast and an FMA per pixel.

use super::activation::activate;
use crate::fusion::Activation;

/// The instruction set a kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512F: 16 lanes.
    Avx512,
    /// AVX2 with FMA: 8 lanes.
    Avx2,
    /// Plain Rust that the compiler vectorizes as it can.
    Portable,
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Portable => "portable",
        })
    }
}

impl std::str::FromStr for Isa {
    type Err = String;

    fn from_str(s: &str) -> Result<Isa, String> {
        match s {
            "avx512" => Ok(Isa::Avx512),
            "avx2" => Ok(Isa::Avx2),
            "portable" => Ok(Isa::Portable),
            _ => Err(format!(
                "'{s}' is not an instruction set (avx512, avx2, portable)"
            )),
        }
    }
}

impl Isa {
    /// Every instruction set, widest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Portable];

    /// The widest instruction set this CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// Whether this CPU can run kernels of this instruction set.
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Output channels one kernel call computes.
    pub fn lanes(self) -> usize {
        match self {
            Isa::Avx512 => 16,
            Isa::Avx2 | Isa::Portable => 8,
        }
    }
}

/// Pixels per register tile: 12 accumulators leave room for the weight vector
/// and broadcasts in 16 (AVX2) or 32 (AVX-512) registers.
pub const TILE: usize = 12;

/// The geometry of one tile call. Offsets and strides are in f32 elements.
#[derive(Clone, Copy, Debug)]
pub struct Tile {
    /// Output pixels in this tile (1..=TILE).
    pub pixels: usize,
    /// Kernel rows and columns to visit (all pixels of the tile have their
    /// whole window inside the input for these).
    pub kh: (usize, usize),
    /// (see `kh`) for the columns.
    pub kw: (usize, usize),
    /// Input offset of pixel 0 at kernel position (0, 0) (may be "negative"
    /// for a border tile; only in-range positions are visited).
    pub x_origin: isize,
    /// Input stride between neighbouring output pixels (stride_w * pixel).
    pub x_pixel: isize,
    /// Input strides of a kernel row and a kernel column (dilated).
    pub x_kh: isize,
    /// (see `x_kh`) for a kernel column.
    pub x_kw: isize,
    /// Input channels, and their split into blocks of `x_cb` that lie `x_cblock` apart.
    pub cin: usize,
    /// Channels per input block.
    pub x_cb: usize,
    /// Distance between input channel blocks.
    pub x_cblock: isize,
    /// Packed weights of this output-channel group: `[kh][kw][cin][w_width]`,
    /// of which the tile uses the first `vectors * LANES` of each row.
    pub kw_total: usize,
    /// Width of a packed weight row (lanes of output channels).
    pub w_width: usize,
    /// Output-channel vectors the tile computes (1 or 2).
    pub vectors: usize,
}

/// What the epilogue applies to each accumulator before the store.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epilogue {
    /// Lower bound of the clamp (`-inf`: none).
    pub min: f32,
    /// Upper bound of the clamp (`inf`: none).
    pub max: f32,
    /// The activation after the clamp.
    pub act: Option<Activation>,
}

impl Epilogue {
    /// The epilogue applying `act`: a relu or clip as the clamp, anything else
    /// after it.
    pub fn of(act: Option<Activation>) -> Epilogue {
        let clamp = act.and_then(|a| match a {
            Activation::Unary(u) => u.clamp_bounds(),
            Activation::Swish => None,
        });
        let (min, max) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        Epilogue {
            min,
            max,
            act: act.filter(|_| clamp.is_none()),
        }
    }

    /// Applies the epilogue to `v` (after the bias and residual).
    ///
    /// # Safety
    /// `V`'s instruction set must be available.
    #[inline(always)]
    pub(super) unsafe fn apply<V: Vector>(self, v: V) -> V {
        let v = V::clamp(v, V::splat(self.min), V::splat(self.max));
        match self.act {
            Some(a) => activate(a, v),
            None => v,
        }
    }
}

/// The widest vector type has 16 lanes; partial vectors are staged in
/// buffers this long.
pub(super) const MAX_LANES: usize = 16;

/// Elements per parallel task of the memory-bound kernels (elementwise,
/// rows, gathers): enough to amortize a task, few enough to spread a 1 MB
/// tensor over the cores.
pub(super) const ELEMENTS_PER_TASK: usize = 16 * 1024;

/// The `k` floats at `p` (the whole vector when `k` is `V::LANES`), `fill` in
/// the lanes after them; nothing past them is read.
#[inline(always)]
pub(super) unsafe fn load_part<V: Vector>(p: *const f32, k: usize, fill: f32) -> V {
    if k == V::LANES {
        return V::load(p);
    }
    let mut staged = [fill; MAX_LANES];
    std::ptr::copy_nonoverlapping(p, staged.as_mut_ptr(), k);
    V::load(staged.as_ptr())
}

/// Stores the first `k` lanes of `v` at `p` (the whole vector when `k` is
/// `V::LANES`); nothing past them is written.
#[inline(always)]
pub(super) unsafe fn store_part<V: Vector>(v: V, p: *mut f32, k: usize) {
    if k == V::LANES {
        return v.store(p);
    }
    let mut staged = [0f32; MAX_LANES];
    v.store(staged.as_mut_ptr());
    std::ptr::copy_nonoverlapping(staged.as_ptr(), p, k);
}

/// Operations of one vector of `LANES` f32.
pub(super) trait Vector: Copy {
    const LANES: usize;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn splat(x: f32) -> Self;
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    /// `a` clamped into `[lo, hi]`; NaN passes through (`max` and `min` return
    /// their second operand for it), as ONNX Relu and Clip want.
    #[inline(always)]
    unsafe fn clamp(a: Self, lo: Self, hi: Self) -> Self {
        Self::min(hi, Self::max(lo, a))
    }
    unsafe fn store(self, p: *mut f32);
    unsafe fn sub(a: Self, b: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    unsafe fn div(a: Self, b: Self) -> Self;
    /// The larger operand; `b` when either is NaN.
    unsafe fn max(a: Self, b: Self) -> Self;
    /// The smaller operand; `b` when either is NaN.
    unsafe fn min(a: Self, b: Self) -> Self;
    /// The even-numbered of the `2 * LANES` values `a` then `b`: a stride-2
    /// pick of consecutive elements.
    unsafe fn even(a: Self, b: Self) -> Self;
    /// `neg` in the lanes where `a < 0`, else `pos` (NaN selects `pos`).
    unsafe fn select_negative(a: Self, neg: Self, pos: Self) -> Self;
    /// `a`, with NaN wherever `b` is NaN.
    unsafe fn nan_of(a: Self, b: Self) -> Self;
    /// Rounded to the nearest integer.
    unsafe fn round(a: Self) -> Self;
    /// `a · 2^n` for integral `n` in [-150, 128] and `a` in [0.5, 2] (rounded
    /// once, so it over- or underflows only where the exact product does).
    unsafe fn scale2(a: Self, n: Self) -> Self;
    /// Whether some lane of `a` is at most `x` (NaN is not).
    unsafe fn any_at_most(a: Self, x: f32) -> bool;
}

/// `a · 2^n` of one lane, for integral `n` in [-150, 128]: 2^n as two
/// factors built from their exponent bits, each in range where 2^n may not be.
#[inline(always)]
fn scale2_lane(a: f32, n: f32) -> f32 {
    let power = |k: i32| f32::from_bits(((k + 127) << 23) as u32);
    let half = n as i32 >> 1;
    a * power(half) * power(n as i32 - half)
}

#[derive(Clone, Copy)]
struct Portable([f32; 8]);

/// One f32 as a vector, for data whose blocks no wider vector divides.
#[derive(Clone, Copy)]
pub(super) struct Scalar(f32);

impl Scalar {
    /// The larger operand, a NaN skipped: NaN only when both are (IEEE
    /// maximumNumber, `f32::max`).
    #[inline(always)]
    pub(super) fn max_number(self, b: Self) -> Self {
        Scalar(self.0.max(b.0))
    }
}

impl Vector for Scalar {
    const LANES: usize = 1;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Scalar(*p)
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Scalar(x)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        // Not `mul_add`: without FMA in the baseline it is a library call.
        Scalar(a.0 * b.0 + c.0)
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        Scalar(a.0 + b.0)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        *p = self.0
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        Scalar(a.0 - b.0)
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        Scalar(a.0 * b.0)
    }
    #[inline(always)]
    unsafe fn div(a: Self, b: Self) -> Self {
        Scalar(a.0 / b.0)
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        Scalar(if a.0 > b.0 { a.0 } else { b.0 })
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        Scalar(if a.0 < b.0 { a.0 } else { b.0 })
    }
    #[inline(always)]
    unsafe fn even(a: Self, _: Self) -> Self {
        a
    }
    #[inline(always)]
    unsafe fn select_negative(a: Self, neg: Self, pos: Self) -> Self {
        Scalar(if a.0 < 0.0 { neg.0 } else { pos.0 })
    }
    #[inline(always)]
    unsafe fn nan_of(a: Self, b: Self) -> Self {
        Scalar(if b.0.is_nan() { b.0 } else { a.0 })
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        Scalar(a.0.round())
    }
    #[inline(always)]
    unsafe fn scale2(a: Self, n: Self) -> Self {
        Scalar(scale2_lane(a.0, n.0))
    }
    #[inline(always)]
    unsafe fn any_at_most(a: Self, x: f32) -> bool {
        a.0 <= x
    }
}

impl Vector for Portable {
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Portable(std::ptr::read_unaligned(p as *const [f32; 8]))
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Portable([x; 8])
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        Portable(std::array::from_fn(|i| a.0[i] * b.0[i] + c.0[i]))
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| a.0[i] + b.0[i]))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        std::ptr::write_unaligned(p as *mut [f32; 8], self.0)
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| a.0[i] - b.0[i]))
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| a.0[i] * b.0[i]))
    }
    #[inline(always)]
    unsafe fn div(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| a.0[i] / b.0[i]))
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| {
            if a.0[i] > b.0[i] {
                a.0[i]
            } else {
                b.0[i]
            }
        }))
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| {
            if a.0[i] < b.0[i] {
                a.0[i]
            } else {
                b.0[i]
            }
        }))
    }
    #[inline(always)]
    unsafe fn even(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| match i < 4 {
            true => a.0[2 * i],
            false => b.0[2 * i - 8],
        }))
    }
    #[inline(always)]
    unsafe fn select_negative(a: Self, neg: Self, pos: Self) -> Self {
        Portable(std::array::from_fn(|i| {
            if a.0[i] < 0.0 {
                neg.0[i]
            } else {
                pos.0[i]
            }
        }))
    }
    #[inline(always)]
    unsafe fn nan_of(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| {
            if b.0[i].is_nan() {
                b.0[i]
            } else {
                a.0[i]
            }
        }))
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        Portable(std::array::from_fn(|i| a.0[i].round()))
    }
    #[inline(always)]
    unsafe fn scale2(a: Self, n: Self) -> Self {
        Portable(std::array::from_fn(|i| scale2_lane(a.0[i], n.0[i])))
    }
    #[inline(always)]
    unsafe fn any_at_most(a: Self, x: f32) -> bool {
        a.0.iter().any(|&v| v <= x)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Vector;
    use std::arch::x86_64::*;

    #[derive(Clone, Copy)]
    pub struct Zmm(pub __m512);
    #[derive(Clone, Copy)]
    pub struct Ymm(pub __m256);

    impl Vector for Zmm {
        const LANES: usize = 16;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            Zmm(_mm512_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            Zmm(_mm512_set1_ps(x))
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            Zmm(_mm512_fmadd_ps(a.0, b.0, c.0))
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            Zmm(_mm512_add_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm512_storeu_ps(p, self.0)
        }
        #[inline(always)]
        unsafe fn sub(a: Self, b: Self) -> Self {
            Zmm(_mm512_sub_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn mul(a: Self, b: Self) -> Self {
            Zmm(_mm512_mul_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn div(a: Self, b: Self) -> Self {
            Zmm(_mm512_div_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn max(a: Self, b: Self) -> Self {
            Zmm(_mm512_max_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn min(a: Self, b: Self) -> Self {
            Zmm(_mm512_min_ps(a.0, b.0))
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
        unsafe fn round(a: Self) -> Self {
            Zmm(_mm512_roundscale_ps::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
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
    }

    impl Vector for Ymm {
        const LANES: usize = 8;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            Ymm(_mm256_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            Ymm(_mm256_set1_ps(x))
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            Ymm(_mm256_fmadd_ps(a.0, b.0, c.0))
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            Ymm(_mm256_add_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm256_storeu_ps(p, self.0)
        }
        #[inline(always)]
        unsafe fn sub(a: Self, b: Self) -> Self {
            Ymm(_mm256_sub_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn mul(a: Self, b: Self) -> Self {
            Ymm(_mm256_mul_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn div(a: Self, b: Self) -> Self {
            Ymm(_mm256_div_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn max(a: Self, b: Self) -> Self {
            Ymm(_mm256_max_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn min(a: Self, b: Self) -> Self {
            Ymm(_mm256_min_ps(a.0, b.0))
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
        unsafe fn round(a: Self) -> Self {
            Ymm(_mm256_round_ps::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(a.0))
        }
        #[inline(always)]
        unsafe fn scale2(a: Self, n: Self) -> Self {
            // 2^n as two factors from their exponent bits (as `scale2_lane`).
            let power = |k: __m256i| {
                _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                    k,
                    _mm256_set1_epi32(127),
                )))
            };
            let n = _mm256_cvtps_epi32(n.0);
            let half = _mm256_srai_epi32::<1>(n);
            let rest = _mm256_sub_epi32(n, half);
            Ymm(_mm256_mul_ps(_mm256_mul_ps(a.0, power(half)), power(rest)))
        }
        #[inline(always)]
        unsafe fn any_at_most(a: Self, x: f32) -> bool {
            _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(a.0, _mm256_set1_ps(x))) != 0
        }
    }
}

/// Where one tile's results go. `out` and `residual` point at pixel 0 of the
/// tile's first output channel; a pixel is `pixel` elements further. When the
/// output-channel block is a multiple of the lanes, a vector's channels are
/// contiguous (`chan_offsets` is None); otherwise each lane has its own offset.
#[derive(Clone, Copy)]
pub struct Store<'a> {
    /// Pixel 0 of the tile's first output channel.
    pub out: *mut f32,
    /// The residual added before the clamp, laid out like `out`.
    pub residual: Option<*const f32>,
    /// Elements between neighbouring pixels.
    pub pixel: isize,
    /// Offset of the second vector's channels from the first's.
    pub vector: isize,
    /// Lanes holding real channels (the others are not stored).
    pub lanes_used: usize,
    /// Per-lane channel offsets, when a vector's channels are not contiguous.
    pub chan_offsets: Option<&'a [isize]>,
}

/// Input channels ahead of the current one whose weights a tile prefetches:
/// a group's weights are read in order, and beyond a few hundred input
/// channels they come from L2 or memory for every tile (64 ahead, 8 KB of a
/// two-vector group, made the 1024- and 2048-channel 1x1 convs of ResNet50
/// 5-12% faster and its Winograd products 4-7%; 32 ahead half that, 128 no more).
const PF_AHEAD: usize = 64;

/// Asks for the cache line holding `p` to be brought into L1.
#[inline(always)]
fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// One tile of exactly `N` pixels times `M` vectors of output channels: constant
/// trip counts keep the `N * M` accumulators in registers. `XP`, when not 0, is
/// the input's pixel stride (`t.x_pixel`) known at compile time: the pixels'
/// loads then address from one register (12 pixel offsets held in registers
/// spilled three of them to the stack in the inner loop).
// Two-dimensional indexing of the accumulators reads clearest here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile_n<V: Vector, const N: usize, const M: usize, const XP: usize>(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    let off = |p: usize, m: usize| p as isize * st.pixel + m as isize * st.vector;
    if let (None, Some(r)) = (st.chan_offsets, st.residual) {
        // The residual is read only after the whole reduction: fetched now,
        // its lines arrive while the tile computes.
        for m in 0..M {
            for p in 0..N {
                prefetch(r.offset(off(p, m)));
            }
        }
    }
    let x_pixel = match XP {
        0 => t.x_pixel,
        _ => XP as isize,
    };
    let mut acc: [[V; N]; M] = std::array::from_fn(|m| [V::load(bias.add(m * V::LANES)); N]);
    for kh in t.kh.0..t.kh.1 {
        for kw in t.kw.0..t.kw.1 {
            let mut wp = w.add(((kh * t.kw_total + kw) * t.cin) * t.w_width);
            let base = x.offset(t.x_origin + kh as isize * t.x_kh + kw as isize * t.x_kw);
            let mut c = 0;
            while c < t.cin {
                let block = base.offset((c / t.x_cb) as isize * t.x_cblock);
                let inner = t.x_cb.min(t.cin - c);
                for ci in 0..inner {
                    let wv: [V; M] = std::array::from_fn(|m| V::load(wp.add(m * V::LANES)));
                    for m in 0..M {
                        prefetch(wp.add(PF_AHEAD * t.w_width + m * V::LANES));
                    }
                    let xp = block.add(ci);
                    for p in 0..N {
                        let xv = V::splat(*xp.offset(p as isize * x_pixel));
                        for m in 0..M {
                            acc[m][p] = V::fma(xv, wv[m], acc[m][p]);
                        }
                    }
                    wp = wp.add(t.w_width);
                }
                c += inner;
            }
        }
    }
    // Only loops of constant trip count and small bodies touch the
    // accumulators, so they unroll with the accumulators still in registers
    // (one loop over every case kept them on the stack and cost a tile of 64
    // input channels a fifth of its time).
    match st.chan_offsets {
        None => {
            let (lo, hi) = (V::splat(ep.min), V::splat(ep.max));
            for m in 0..M {
                for p in 0..N {
                    let mut v = acc[m][p];
                    if let Some(r) = st.residual {
                        v = V::add(v, V::load(r.offset(off(p, m))));
                    }
                    V::clamp(v, lo, hi).store(st.out.offset(off(p, m)));
                }
            }
            if let Some(a) = ep.act {
                // On the stored tile, still in L1.
                for i in 0..N * M {
                    let q = st.out.offset(off(i / M, i % M));
                    activate(a, V::load(q)).store(q);
                }
            }
        }
        Some(offs) => {
            let mut lanes = [[0f32; MAX_LANES]; 2 * TILE];
            for m in 0..M {
                for p in 0..N {
                    acc[m][p].store(lanes[m * N + p].as_mut_ptr());
                }
            }
            for (i, lanes) in lanes.iter().enumerate().take(N * M) {
                let at = off(i % N, i / N);
                for (l, &co) in offs.iter().enumerate().take(st.lanes_used) {
                    let mut y = lanes[l];
                    if let Some(r) = st.residual {
                        y += *r.offset(at + co);
                    }
                    *st.out.offset(at + co) = ep.apply(Scalar(y)).0;
                }
            }
        }
    }
}

#[inline(always)]
unsafe fn tile_generic<V: Vector>(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    macro_rules! by_pixels {
        ($($n:literal)*) => {
            match (t.pixels, t.vectors, t.x_pixel) {
                $(($n, 1, _) => tile_n::<V, $n, 1, 0>(x, w, bias, t, st, ep),)*
                $(($n, _, 16) => tile_n::<V, $n, 2, 16>(x, w, bias, t, st, ep),)*
                $(($n, _, _) => tile_n::<V, $n, 2, 0>(x, w, bias, t, st, ep),)*
                _ => unreachable!("a tile has 1..=TILE pixels"),
            }
        };
    }
    by_pixels!(1 2 3 4 5 6 7 8 9 10 11 12)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    tile_generic::<x86::Zmm>(x, w, bias, t, st, ep)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    tile_generic::<x86::Ymm>(x, w, bias, t, st, ep)
}

/// Runs one tile.
///
/// # Safety
/// `isa` must be available on this CPU, and every address the tile reads or
/// writes (from `t` and `st`) must lie inside live buffers; `w` holds
/// `kh_total * kw_total * cin * t.w_width` floats and `bias` `t.w_width`.
pub unsafe fn conv_tile(
    isa: Isa,
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => tile_avx512(x, w, bias, t, st, ep),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => tile_avx2(x, w, bias, t, st, ep),
        _ => tile_generic::<Portable>(x, w, bias, t, st, ep),
    }
}

/// A computation written once over the vector type, like the convolution tile
/// above; `run_vectorized` compiles it for each instruction set.
pub(super) trait VectorKernel {
    /// # Safety
    /// Only called by `run_vectorized`, with a vector type this CPU supports.
    unsafe fn run<V: Vector>(&self);
}

/// The vectors a kernel over channel blocks of `cb` runs with: the widest
/// instruction set up to `isa` whose lanes divide the block, else one lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lanes {
    Isa(Isa),
    One,
}

impl Lanes {
    pub(super) fn for_block(isa: Isa, cb: usize) -> Lanes {
        let widest_first = [Isa::Avx512, Isa::Avx2, Isa::Portable];
        widest_first
            .into_iter()
            .skip_while(|&i| i != isa)
            .filter(|i| i.available())
            .find(|i| cb.is_multiple_of(i.lanes()))
            .map_or(Lanes::One, Lanes::Isa)
    }

    pub(super) fn count(self) -> usize {
        match self {
            Lanes::Isa(i) => i.lanes(),
            Lanes::One => 1,
        }
    }
}

/// Runs `k` with the vector type of `lanes`, in code compiled for its instruction set.
///
/// # Safety
/// `lanes` must come from `Lanes::for_block` (its instruction set is available).
pub(super) unsafe fn run_vectorized<K: VectorKernel>(lanes: Lanes, k: &K) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn avx512<K: VectorKernel>(k: &K) {
            k.run::<x86::Zmm>()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<K: VectorKernel>(k: &K) {
            k.run::<x86::Ymm>()
        }
        match lanes {
            Lanes::Isa(Isa::Avx512) => return avx512(k),
            Lanes::Isa(Isa::Avx2) => return avx2(k),
            _ => {}
        }
    }
    match lanes {
        Lanes::One => k.run::<Scalar>(),
        _ => k.run::<Portable>(),
    }
}
