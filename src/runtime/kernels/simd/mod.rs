//! The instruction sets the kernels run with, chosen at run time
//! (`Isa::detect`), and their vector types: a computation written once over
//! `Vector` runs as AVX-512 (16 lanes), AVX2+FMA (8 lanes), a portable 8 lanes
//! of plain f32 the compiler may vectorize, or one lane (`run_vectorized`).

pub(in crate::runtime) mod amx;
mod pair;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::core::{parse_choice, UnknownChoice};

pub(in crate::runtime) use pair::Pair;
pub(in crate::runtime) use portable::{Portable, Scalar};
#[cfg(target_arch = "x86_64")]
pub(in crate::runtime) use x86::{Ymm, Zmm};

/// The instruction set a kernel runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Isa {
    type Err = UnknownChoice;

    fn from_str(s: &str) -> Result<Isa, UnknownChoice> {
        parse_choice(s, "an instruction set", &Isa::ALL, Isa::name)
    }
}

impl Isa {
    /// Every instruction set, widest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Portable];

    /// The instruction set as `--isa` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Portable => "portable",
        }
    }

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

    /// Vector registers the instruction set has.
    pub fn registers(self) -> usize {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 | Isa::Portable => 16,
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

/// The widest vector type has 16 lanes; partial vectors are staged in
/// buffers this long.
pub(in crate::runtime) const MAX_LANES: usize = 16;

/// `[f(0), …, f(K - 1)]`, built in the calling kernel. `std::array::from_fn`
/// can stay an out-of-line call compiled without the kernel's instruction
/// set, which then moves every vector through memory in 128-bit pieces
/// (initialising a 1x1 convolution's accumulators so took a fifth of its time).
#[inline(always)]
pub(in crate::runtime) fn array_of<T: Copy, const K: usize>(
    unset: T,
    mut f: impl FnMut(usize) -> T,
) -> [T; K] {
    let mut out = [unset; K];
    for (i, o) in out.iter_mut().enumerate() {
        *o = f(i);
    }
    out
}

/// Elements per parallel task of the memory-bound kernels (elementwise,
/// rows, gathers): enough to amortize a task, few enough to spread a 1 MB
/// tensor over the cores.
pub(in crate::runtime) const ELEMENTS_PER_TASK: usize = 16 * 1024;

/// The `k` floats at `p` (the whole vector when `k` is `V::LANES`), `fill` in
/// the lanes after them; nothing past them is read.
#[inline(always)]
pub(in crate::runtime) unsafe fn load_part<V: Vector>(p: *const f32, k: usize, fill: f32) -> V {
    if k == V::LANES {
        return V::load(p);
    }
    V::load_first(p, k, fill)
}

/// Stores the first `k` lanes of `v` at `p` (the whole vector when `k` is
/// `V::LANES`); nothing past them is written.
#[inline(always)]
pub(in crate::runtime) unsafe fn store_part<V: Vector>(v: V, p: *mut f32, k: usize) {
    if k == V::LANES {
        return v.store(p);
    }
    v.store_first(p, k)
}

/// Stores the first `k` lanes of `v`, integers in `0..=255`, as bytes at `p`
/// (the whole vector when `k` is `V::LANES`); nothing past them is written.
#[inline(always)]
pub(in crate::runtime) unsafe fn store_bytes_part<V: Vector>(v: V, p: *mut u8, k: usize) {
    if k == V::LANES {
        return v.store_bytes(p);
    }
    let mut staged = [0u8; MAX_LANES];
    v.store_bytes(staged.as_mut_ptr());
    std::ptr::copy_nonoverlapping(staged.as_ptr(), p, k);
}

/// The `k` bytes at `p` as integers (the whole vector when `k` is
/// `V::LANES`), 0 in the lanes after them; nothing past them is read.
#[inline(always)]
pub(in crate::runtime) unsafe fn load_bytes_part<V: Vector>(p: *const u8, k: usize) -> V {
    if k == V::LANES {
        return V::load_bytes(p);
    }
    let mut staged = [0u8; MAX_LANES];
    std::ptr::copy_nonoverlapping(p, staged.as_mut_ptr(), k);
    V::load_bytes(staged.as_ptr())
}

/// Results looked up at whole-number indices, and, where every result but
/// the last is `(byte - zero) * step` for a byte, those bytes packed four to
/// a 32-bit word: 256 of them fit four AVX-512 registers, which two
/// permutes, a blend and a shift read (2.3 ns per 16 lanes on Zen 4, where
/// a gather of the floats takes 9 ns). The last result (a chain's at NaN)
/// is looked up apart.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::runtime) struct LookUpTable {
    results: Box<[f32]>,
    bytes: Option<Box<PackedBytes>>,
}

/// `LookUpTable`'s results before the last as bytes: result `i` is
/// `(byte i - zero) * step`, byte `i` at bits `8 * (i % 4)` of word `i / 4`.
#[derive(Clone, Debug, PartialEq)]
struct PackedBytes {
    words: [u32; 64],
    zero: f32,
    step: f32,
}

impl LookUpTable {
    /// A table of `results`, whose entries before the last may lie on the
    /// grid of `step` whose byte `zero` stands for 0: they are packed as
    /// bytes where each is, bit for bit, `(byte - zero) * step`.
    pub(in crate::runtime) fn new(results: Vec<f32>, grid: Option<(f32, f32)>) -> LookUpTable {
        let fits = results.len() <= 257;
        let bytes = grid.filter(|_| fits).and_then(|(zero, step)| {
            let mut words = [0u32; 64];
            for (i, &r) in results[..results.len() - 1].iter().enumerate() {
                let byte = (r / step).round_ties_even() + zero;
                let exact = (0.0..=255.0).contains(&byte)
                    && ((byte - zero) * step).to_bits() == r.to_bits();
                if !exact {
                    return None;
                }
                words[i / 4] |= (byte as u32) << (8 * (i % 4));
            }
            Some(Box::new(PackedBytes { words, zero, step }))
        });
        LookUpTable {
            results: results.into(),
            bytes,
        }
    }

    pub(in crate::runtime) fn results(&self) -> &[f32] {
        &self.results
    }

    /// Whether the results are packed as bytes.
    #[cfg(test)]
    pub(in crate::runtime) fn packs_bytes(&self) -> bool {
        self.bytes.is_some()
    }
}

/// `Vector::hold` and `look_up_held` for vectors without a faster form:
/// the held table is its results, read by `lookup`.
macro_rules! held_as_results {
    () => {
        type Held = *const f32;
        #[inline(always)]
        unsafe fn hold(table: &LookUpTable) -> *const f32 {
            table.results().as_ptr()
        }
        #[inline(always)]
        unsafe fn look_up_held(held: *const f32, index: Self) -> Self {
            Self::lookup(held, index)
        }
    };
}
use held_as_results;

/// Operations of one vector of `LANES` f32.
pub(in crate::runtime) trait Vector: Copy {
    const LANES: usize;
    /// The lanes `run_vectorized` runs a kernel with this vector type for.
    const KIND: Lanes;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn splat(x: f32) -> Self;
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// `a * b + c` rounded once, on every instruction set (`fma` may round
    /// twice where the vectors have no fused multiply-add): what arithmetic
    /// that must match another engine's bit for bit needs.
    #[inline(always)]
    unsafe fn fused_mul_add(a: Self, b: Self, c: Self) -> Self {
        let mut lanes = [[0f32; MAX_LANES]; 3];
        for (v, to) in [a, b, c].into_iter().zip(&mut lanes) {
            v.store(to.as_mut_ptr());
        }
        let [mut x, y, z] = lanes;
        for i in 0..Self::LANES {
            x[i] = x[i].mul_add(y[i], z[i]);
        }
        Self::load(x.as_ptr())
    }
    unsafe fn add(a: Self, b: Self) -> Self;
    /// `a` clamped into `[lo, hi]`; NaN passes through (`max` and `min` return
    /// their second operand for it), as ONNX Relu and Clip want.
    #[inline(always)]
    unsafe fn clamp(a: Self, lo: Self, hi: Self) -> Self {
        Self::min(hi, Self::max(lo, a))
    }
    unsafe fn store(self, p: *mut f32);
    /// The first `k < LANES` floats at `p`, `fill` in the other lanes; nothing
    /// past them is read (staged through the stack unless the vectors have masks).
    #[inline(always)]
    unsafe fn load_first(p: *const f32, k: usize, fill: f32) -> Self {
        let mut staged = [fill; MAX_LANES];
        std::ptr::copy_nonoverlapping(p, staged.as_mut_ptr(), k);
        Self::load(staged.as_ptr())
    }
    /// Stores the first `k < LANES` lanes at `p`; nothing past them is written.
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, k: usize) {
        let mut staged = [0f32; MAX_LANES];
        self.store(staged.as_mut_ptr());
        std::ptr::copy_nonoverlapping(staged.as_ptr(), p, k);
    }
    /// Stores the lanes, integers in `0..=255`, as `LANES` bytes.
    #[inline(always)]
    unsafe fn store_bytes(self, p: *mut u8) {
        let mut lanes = [0f32; MAX_LANES];
        self.store(lanes.as_mut_ptr());
        for (i, &v) in lanes[..Self::LANES].iter().enumerate() {
            *p.add(i) = v as u8;
        }
    }
    /// The `LANES` bytes at `p` as integers in `0..=255`.
    #[inline(always)]
    unsafe fn load_bytes(p: *const u8) -> Self {
        let mut lanes = [0f32; MAX_LANES];
        for (i, v) in lanes[..Self::LANES].iter_mut().enumerate() {
            *v = f32::from(*p.add(i));
        }
        Self::load(lanes.as_ptr())
    }
    /// `table[i]` in each lane, for the lanes of `index` holding whole
    /// numbers `i` at which `table` can be read (a gather where the vectors
    /// have one).
    #[inline(always)]
    unsafe fn lookup(table: *const f32, index: Self) -> Self {
        let mut lanes = [0f32; MAX_LANES];
        index.store(lanes.as_mut_ptr());
        for v in &mut lanes[..Self::LANES] {
            *v = *table.add(*v as usize);
        }
        Self::load(lanes.as_ptr())
    }
    /// A `LookUpTable` made ready for a loop of lookups (`hold`).
    type Held: Copy;
    /// `table` ready for `look_up_held`, made once before a loop of lookups.
    unsafe fn hold(table: &LookUpTable) -> Self::Held;
    /// `lookup` of a held table's results: the lanes of `index` hold whole
    /// numbers up to the table's last index.
    unsafe fn look_up_held(held: Self::Held, index: Self) -> Self;
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
    /// Rounded to the nearest integer, halves to even.
    unsafe fn round(a: Self) -> Self;
    /// The largest integer not above `a`.
    unsafe fn floor(a: Self) -> Self;
    /// The square root, correctly rounded as IEEE 754 asks (so bit for bit
    /// `f32::sqrt`): NaN for a negative lane, −0 for −0.
    unsafe fn sqrt(a: Self) -> Self;
    /// `a · 2^n` for integral `n` in [-150, 128] and `a` in [0.5, 2] (rounded
    /// once, so it over- or underflows only where the exact product does).
    unsafe fn scale2(a: Self, n: Self) -> Self;
    /// `scale2` (the same result) for `n` in [-125, 128] only, where it can
    /// be (2a) · 2^(n-1), one normal power of two.
    #[inline(always)]
    unsafe fn scale2_normal(a: Self, n: Self) -> Self {
        Self::scale2(a, n)
    }
    /// Whether some lane of `a` is at most `x` (NaN is not).
    unsafe fn any_at_most(a: Self, x: f32) -> bool;
    /// Lane `j` of each group of `G` consecutive lanes, copied to all lanes of
    /// its group: lane `l` of the result is lane `l - l % G + j` of `a`. `G` is
    /// a power of two dividing `LANES`, `j < G`.
    unsafe fn spread<const G: usize>(a: Self, j: usize) -> Self;
}

/// A computation written once over the vector type, like the convolution tile
/// (`conv/tile.rs`); `run_vectorized` compiles it for each instruction set.
pub(in crate::runtime) trait VectorKernel {
    /// # Safety
    /// Only called by `run_vectorized`, with a vector type this CPU supports.
    unsafe fn run<V: Vector>(&self);
}

/// The vectors a kernel over channel blocks of `cb` runs with: the widest
/// instruction set up to `isa` whose lanes divide the block, else one lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) enum Lanes {
    Isa(Isa),
    One,
}

impl Lanes {
    pub(in crate::runtime) fn for_block(isa: Isa, cb: usize) -> Lanes {
        let widest_first = [Isa::Avx512, Isa::Avx2, Isa::Portable];
        widest_first
            .into_iter()
            .skip_while(|&i| i != isa)
            .filter(|i| i.available())
            .find(|i| cb.is_multiple_of(i.lanes()))
            .map_or(Lanes::One, Lanes::Isa)
    }

    pub(in crate::runtime) fn count(self) -> usize {
        match self {
            Lanes::Isa(i) => i.lanes(),
            Lanes::One => 1,
        }
    }
}

/// Compiles `$body` three times: with AVX-512, with AVX2+FMA, and for the
/// baseline, and runs the best one, so that its loops vectorize for the CPU.
/// `fn name(args) { body }`, or `unsafe fn` for a body with a contract.
macro_rules! multiversion {
    (fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block) => {
        multiversion!(@ [] $name ($($arg: $ty),*) $body);
    };
    (unsafe fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block) => {
        multiversion!(@ [unsafe] $name ($($arg: $ty),*) $body);
    };
    (@ [$($unsafety:tt)?] $name:ident ( $($arg:ident : $ty:ty),* ) $body:block) => {
        $($unsafety)? fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn wide($($arg: $ty),*) $body
                #[target_feature(enable = "avx2,fma")]
                unsafe fn narrow($($arg: $ty),*) $body
                if std::arch::is_x86_feature_detected!("avx512f") {
                    return unsafe { wide($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    return unsafe { narrow($($arg),*) };
                }
            }
            $body
        }
    };
}
pub(in crate::runtime) use multiversion;

/// Runs `k` with the vector type of `lanes`, in code compiled for its instruction set.
///
/// # Safety
/// `lanes` must come from `Lanes::for_block` (its instruction set is available).
pub(in crate::runtime) unsafe fn run_vectorized<K: VectorKernel>(lanes: Lanes, k: &K) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads and stores of the first `k` lanes, in every instruction set this CPU
    /// runs: the vector holds the `k` values then the fill, and a store writes the
    /// `k` values and nothing after them.
    #[test]
    fn partial_loads_and_stores_touch_only_their_lanes() {
        struct Parts;
        impl VectorKernel for Parts {
            unsafe fn run<V: Vector>(&self) {
                for k in 1..=V::LANES {
                    let src: Vec<f32> = (0..k).map(|l| l as f32 + 1.0).collect();
                    let v: V = load_part(src.as_ptr(), k, -7.0);
                    let mut all = [0f32; MAX_LANES];
                    v.store(all.as_mut_ptr());
                    let want = |l: usize| if l < k { src[l] } else { -7.0 };
                    for (l, &x) in all[..V::LANES].iter().enumerate() {
                        assert_eq!(x, want(l), "{} lanes, load of {k}, lane {l}", V::LANES);
                    }
                    let mut dst = vec![99f32; V::LANES];
                    store_part(v, dst.as_mut_ptr(), k);
                    for (l, &x) in dst.iter().enumerate() {
                        let want = if l < k { src[l] } else { 99.0 };
                        assert_eq!(x, want, "{} lanes, store of {k}, lane {l}", V::LANES);
                    }
                }
            }
        }
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            // SAFETY: the instruction set is available.
            unsafe { run_vectorized(Lanes::Isa(isa), &Parts) };
        }
        unsafe { run_vectorized(Lanes::One, &Parts) };
    }

    /// A held table reads each lane's entry, in every instruction set this
    /// CPU runs, whether its results are packed as bytes (all on a grid of
    /// bytes, the last apart) or not (one off the grid), at every index.
    #[test]
    fn held_tables_read_each_lanes_entry() {
        struct Held(LookUpTable);
        impl VectorKernel for Held {
            unsafe fn run<V: Vector>(&self) {
                let results = self.0.results();
                let held = V::hold(&self.0);
                for first in (0..results.len()).step_by(V::LANES) {
                    // Descending from the last index, wrapping to the first.
                    let index: Vec<f32> = (0..V::LANES)
                        .map(|l| ((first + results.len() - l) % results.len()) as f32)
                        .collect();
                    let mut got = [0f32; MAX_LANES];
                    V::look_up_held(held, V::load(index.as_ptr())).store(got.as_mut_ptr());
                    for (l, &i) in index.iter().enumerate() {
                        let want = results[i as usize];
                        assert_eq!(
                            got[l].to_bits(),
                            want.to_bits(),
                            "{} lanes, index {i}",
                            V::LANES
                        );
                    }
                }
            }
        }
        let (zero, step) = (37.0, 0.0173f32);
        for count in [256, 16] {
            let mut results: Vec<f32> = (0..count)
                .map(|i| ((i * 7 + 3) % 256) as f32)
                .map(|byte| (byte - zero) * step)
                .collect();
            results.push(-1.5);
            let on_grid = LookUpTable::new(results.clone(), Some((zero, step)));
            assert!(on_grid.packs_bytes(), "{count} results on the grid");
            results[count / 2] += step / 3.0;
            let off_grid = LookUpTable::new(results, Some((zero, step)));
            assert!(!off_grid.packs_bytes(), "{count} results, one off the grid");
            for table in [on_grid, off_grid] {
                for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                    // SAFETY: the instruction set is available.
                    unsafe { run_vectorized(Lanes::Isa(isa), &Held(table.clone())) };
                }
                unsafe { run_vectorized(Lanes::One, &Held(table)) };
            }
        }
    }

    /// A lookup reads each lane's table entry, in every instruction set this
    /// CPU runs (the gathers included), at both ends of the table.
    #[test]
    fn lookups_read_each_lanes_entry() {
        struct Lookups;
        impl VectorKernel for Lookups {
            unsafe fn run<V: Vector>(&self) {
                let table: Vec<f32> = (0..256).map(|i| (i * i) as f32 - 0.5).collect();
                for first in [0, 7, 256 - V::LANES] {
                    let index: Vec<f32> = (0..V::LANES).rev().map(|l| (first + l) as f32).collect();
                    let mut got = [0f32; MAX_LANES];
                    V::lookup(table.as_ptr(), V::load(index.as_ptr())).store(got.as_mut_ptr());
                    for (l, &i) in index.iter().enumerate() {
                        assert_eq!(got[l], table[i as usize], "{} lanes, lane {l}", V::LANES);
                    }
                }
            }
        }
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            // SAFETY: the instruction set is available.
            unsafe { run_vectorized(Lanes::Isa(isa), &Lookups) };
        }
        unsafe { run_vectorized(Lanes::One, &Lookups) };
    }
}
