//! Max and average pooling over the spatial axes of NCHW, NHWC and NCHW{cb}c
//! buffers.
//!
//! A windowed pool does one max or add per element it reads, so it runs at the
//! speed of memory only if every read is a vector load into a register
//! accumulator and nothing else is done per element. With channels innermost
//! (NHWC, NCHW{cb}c) a vector holds channels and a window is its taps' loads;
//! four neighbouring pixels accumulate at once for the latency of the max or
//! add. In NCHW a vector holds neighbouring output columns whose windows lie
//! inside the input, its taps loaded straight from the input rows (stride 2:
//! two vectors of consecutive columns, the even lanes kept); the few columns
//! whose windows reach into the padding are computed one by one. Window
//! bounds and divisors are tabled at compile time, work is split by output
//! rows, and the code is written once over the vector type (`simd::Vector`)
//! and compiled per instruction set.

use super::conv::valid_taps;
use super::simd::{run_vectorized, Isa, Lanes, Scalar as One, Vector, VectorKernel, MAX_LANES};
use crate::core::scalar::Scalar;
use crate::graph::PoolKind;
use rayon::prelude::*;

/// Compiles `$body` (a generic `#[inline(always)]` function call) three times:
/// with AVX-512, with AVX2+FMA, and for the baseline, and runs the best one.
macro_rules! multiversion {
    ($name:ident ( $($arg:ident : $ty:ty),* ) $body:block) => {
        fn $name($($arg: $ty),*) {
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

/// A pool over the spatial axes of `planes` planes of `h * w` pixels of `cb`
/// channels each: NCHW (`cb` 1), NHWC (`cb` the channels) or NCHW{cb}c
/// (padding channels are pooled like the others, so their value carries
/// through).
#[derive(Clone, Debug)]
pub struct PoolGeom {
    /// Max or average.
    pub kind: PoolKind,
    /// Whether a maximum skips NaN (a MaxPool window) or propagates it
    /// (GlobalMaxPool); ARCHITECTURE.md, "NaN and infinities".
    pub skip_nan: bool,
    /// Batch times channel blocks.
    pub planes: usize,
    /// Channels per pixel of a plane.
    pub cb: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Window height and width.
    pub k: (usize, usize),
    /// Vertical and horizontal stride.
    pub stride: (usize, usize),
    /// Vertical and horizontal dilation.
    pub dilation: (usize, usize),
    /// Padding at the top and the left.
    pub pad: (usize, usize),
    /// Padding at the bottom and the right (only an average counting the
    /// padding reads it: the output extents already hold it).
    pub pad_end: (usize, usize),
    /// Whether an average divides by the window positions in the padded input
    /// rather than in the input.
    pub count_include_pad: bool,
    /// The vectors of a windowed pool (this and the fields below from
    /// [`PoolGeom::for_isa`]).
    pub lanes: Lanes,
    /// Per output row, its window rows inside the input.
    pub rows: Vec<Taps>,
    /// Per output column, its window columns inside the input.
    pub cols: Vec<Taps>,
    /// Per output row and per output column, 1 / the window positions an
    /// average counts along that axis.
    pub inv: (Vec<f32>, Vec<f32>),
    /// The output columns whose window columns all lie inside the input.
    pub inside: (usize, usize),
}

/// The taps of one output position's window along one axis that lie inside
/// the input.
#[derive(Clone, Copy, Debug)]
pub struct Taps {
    /// The input position of the first (meaningless when there are none).
    first: usize,
    /// How many.
    n: usize,
}

impl PoolGeom {
    /// The geometry with the vectors and tables of its windowed kernel, the
    /// vectors of an instruction set up to `isa`.
    pub fn for_isa(mut self, isa: Isa) -> PoolGeom {
        let taps = |o: usize, axis: usize| {
            let pick = |p: (usize, usize)| if axis == 0 { p.0 } else { p.1 };
            let (k, d, extent) = (pick(self.k), pick(self.dilation), pick((self.h, self.w)));
            let start = (o * pick(self.stride)) as isize - pick(self.pad) as isize;
            let (lo, hi) = valid_taps(start, d, k, extent);
            // An average counts the taps inside the input, or the padded input.
            let (before, after) = match self.count_include_pad {
                true => (pick(self.pad), pick(self.pad_end)),
                false => (0, 0),
            };
            let (c_lo, c_hi) = valid_taps(start + before as isize, d, k, extent + before + after);
            let taps = Taps {
                first: (start + (lo * d) as isize).max(0) as usize,
                n: hi - lo,
            };
            (taps, 1.0 / (c_hi - c_lo) as f32)
        };
        (self.rows, self.inv.0) = (0..self.oh).map(|o| taps(o, 0)).unzip();
        (self.cols, self.inv.1) = (0..self.ow).map(|o| taps(o, 1)).unzip();
        let lo = self.pad.1.div_ceil(self.stride.1).min(self.ow);
        let reach = (self.k.1 - 1) * self.dilation.1;
        let hi = match (self.w + self.pad.1).checked_sub(reach + 1) {
            Some(last) => (last / self.stride.1 + 1).min(self.ow),
            None => 0,
        };
        self.inside = (lo, hi.max(lo));
        self.lanes = match (self.cb, self.stride.1) {
            (1, 1 | 2) => {
                // Output columns in vectors: the widest that the columns
                // read straight from the input fill at least once.
                let fits = self.vector_end(self.stride.1) - lo;
                [MAX_LANES, 8]
                    .into_iter()
                    .map(|block| Lanes::for_block(isa, block))
                    .find(|l| l.count() <= fits)
                    .unwrap_or(Lanes::One)
            }
            (1, _) => Lanes::One,
            (cb, _) => Lanes::for_block(isa, cb),
        };
        self
    }

    /// The end of the NCHW output columns computed in vectors of `phases`
    /// accumulators: inside the input, and at stride 2 also the odd column
    /// after the last window (read by the second accumulator, then dropped).
    fn vector_end(&self, phases: usize) -> usize {
        let (lo, hi) = self.inside;
        if phases == 1 {
            return hi;
        }
        let reach = (self.k.1 - 1) * self.dilation.1 + 1;
        match (self.w + self.pad.1).checked_sub(reach + 1) {
            Some(last) => (last / self.stride.1 + 1).clamp(lo, hi),
            None => lo,
        }
    }

    fn is_global(&self) -> bool {
        (self.oh, self.ow, self.k, self.pad, self.dilation)
            == (1, 1, (self.h, self.w), (0, 0), (1, 1))
    }

    /// The accumulator's start: NaN for a maximum that skips NaN, so that a
    /// window of NaN only stays NaN; else the identity of the reduction.
    fn init(&self) -> f32 {
        match (self.kind, self.skip_nan) {
            (PoolKind::Max, true) => f32::NAN,
            (PoolKind::Max, false) => f32::NEG_INFINITY,
            (PoolKind::Avg, _) => 0.0,
        }
    }
}

/// Pools `x` into `y` with geometry `g`.
pub fn pool(g: &PoolGeom, x: &[f32], y: &mut [f32]) {
    let (xs, ys) = (g.h * g.w * g.cb, g.oh * g.ow * g.cb);
    assert!(x.len() >= g.planes * xs && y.len() >= g.planes * ys);
    if g.is_global() {
        return y[..g.planes * ys]
            .par_chunks_mut(ys)
            .zip(x[..g.planes * xs].par_chunks(xs))
            .for_each(|(yp, xp)| global_pool(g, xp, yp));
    }
    // A window skips NaN; only the global maximum propagates it.
    assert!(g.skip_nan || g.kind == PoolKind::Avg);
    let rows = g.planes * g.oh;
    let tasks = (rayon::current_num_threads() * 4).min(rows);
    // Raw addresses so that rows are written in parallel: each writes only
    // its own output pixels.
    let (xp, yp) = (x.as_ptr() as usize, y.as_mut_ptr() as usize);
    (0..tasks).into_par_iter().for_each(|t| {
        let task = Task {
            g,
            rows: rows * t / tasks..rows * (t + 1) / tasks,
            x: xp as *const f32,
            y: yp as *mut f32,
        };
        // SAFETY: `lanes` comes from `Lanes::for_block`; a row reads and
        // writes inside the buffers checked above.
        unsafe { run_vectorized(g.lanes, &task) }
    });
}

/// Consecutive output rows (of all planes, in order).
struct Task<'a> {
    g: &'a PoolGeom,
    rows: std::ops::Range<usize>,
    x: *const f32,
    y: *mut f32,
}

/// What the windows of one output row share.
struct Row {
    /// The plane's input at the first window row inside the image, column 0
    /// (only read when there is such a row).
    x: *const f32,
    /// The output row.
    y: *mut f32,
    /// Window rows inside the image, and the input elements between them.
    taps: (usize, usize),
    /// 1 / the window rows an average counts.
    inv: f32,
}

impl VectorKernel for Task<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let g = self.g;
        let row_len = g.w * g.cb;
        for r in self.rows.clone() {
            let (plane, oh) = (r / g.oh, r % g.oh);
            let t = g.rows[oh];
            let row = Row {
                x: self.x.wrapping_add((plane * g.h + t.first) * row_len),
                y: self.y.add(r * g.ow * g.cb),
                taps: (t.n, g.dilation.0 * row_len),
                inv: g.inv.0[oh],
            };
            match (g.kind, g.cb) {
                (PoolKind::Max, 1) => columns::<V, true>(g, &row),
                (PoolKind::Avg, 1) => columns::<V, false>(g, &row),
                (PoolKind::Max, _) => pixels::<V, true>(g, &row),
                (PoolKind::Avg, _) => pixels::<V, false>(g, &row),
            }
        }
    }
}

/// `N` accumulators over `rows` window rows (count, input elements apart)
/// and `cols` window columns from `x`, accumulator `i` reading `at[i]`
/// further: window maxima skipping NaN (NaN for a window of NaN only), or
/// sums.
#[inline(always)]
unsafe fn window<V: Vector, const MAX: bool, const N: usize>(
    x: *const f32,
    at: [usize; N],
    rows: (usize, usize),
    cols: (usize, usize),
) -> [V; N] {
    if !MAX {
        return fold(x, at, rows, cols, 0.0, |a, v| V::add(a, v));
    }
    // vmaxps gives its second operand where either is NaN: from -inf, the
    // accumulator as second operand skips NaN reads in one instruction.
    let acc = fold(x, at, rows, cols, f32::NEG_INFINITY, |a, v| V::max(v, a));
    if !acc.iter().any(|&a| V::any_at_most(a, f32::NEG_INFINITY)) {
        return acc;
    }
    // A lane still at -inf read only NaN and -inf (rare): again as IEEE
    // maximumNumber from NaN, the accumulator first, so that a window of NaN
    // only stays NaN and the NaN start gives way to the first number.
    fold(x, at, rows, cols, f32::NAN, |a, v| V::max_number(a, v))
}

/// `N` accumulators from `start`, each window value combined in by `f`.
#[inline(always)]
unsafe fn fold<V: Vector, const N: usize>(
    x: *const f32,
    at: [usize; N],
    rows: (usize, usize),
    cols: (usize, usize),
    start: f32,
    f: impl Fn(V, V) -> V,
) -> [V; N] {
    let mut acc = [V::splat(start); N];
    for r in 0..rows.0 {
        let xr = x.add(r * rows.1);
        for c in 0..cols.0 {
            let xc = xr.add(c * cols.1);
            for (i, a) in acc.iter_mut().enumerate() {
                *a = f(*a, V::load(xc.add(at[i])));
            }
        }
    }
    acc
}

/// An NCHW output row, vectors along the columns. The output columns whose
/// windows lie inside the input read their taps straight from the input rows
/// (no staging buffer: reading back a row just stored would stall on store
/// forwarding), four accumulators at a time so that the maxima or sums of
/// different vectors overlap their latency; the few columns whose windows
/// reach into the padding are computed one at a time over their inside taps.
/// A vector of outputs at stride 1 is `LANES` consecutive window results; at
/// stride 2 the even lanes of two accumulators of consecutive columns. The
/// last vector overlaps the one before.
#[inline(always)]
unsafe fn columns<V: Vector, const MAX: bool>(g: &PoolGeom, row: &Row) {
    let lanes = V::LANES;
    // Accumulators per output vector.
    let phases = if lanes == 1 { 1 } else { g.stride.1 };
    let (lo, hi) = (g.inside.0, g.vector_end(phases));
    let edges = (0..lo).chain(hi..g.ow);
    let singles = match hi - lo >= lanes {
        true => {
            // Output vectors per group of four accumulators; a short last
            // group repeats its last vector.
            let per = 4 / phases;
            let vectors = (hi - lo).div_ceil(lanes);
            let start = |v: usize| (lo + v.min(vectors - 1) * lanes).min(hi - lanes);
            for group in (0..vectors).step_by(per) {
                match phases {
                    1 => outputs::<V, MAX, 4, 4>(g, row, std::array::from_fn(|j| start(group + j))),
                    _ => outputs::<V, MAX, 4, 2>(g, row, std::array::from_fn(|j| start(group + j))),
                }
            }
            0..0
        }
        false => lo..hi,
    };
    for o in edges.chain(singles) {
        let t = g.cols[o];
        let x = row.x.wrapping_add(t.first);
        let [v] = window::<One, MAX, 1>(x, [0], row.taps, (t.n, g.dilation.1));
        scaled::<One, MAX>(v, row.inv, g.inv.1.as_ptr().add(o)).store(row.y.add(o));
    }
}

/// The `M` output vectors starting at output columns `first` (their windows
/// inside the input), from `N` accumulators: at stride 1 one each, at
/// stride 2 two of consecutive input columns each.
#[inline(always)]
unsafe fn outputs<V: Vector, const MAX: bool, const N: usize, const M: usize>(
    g: &PoolGeom,
    row: &Row,
    first: [usize; M],
) {
    let (lanes, s, phases) = (V::LANES, g.stride.1, N / M);
    let at = std::array::from_fn(|i| first[i / phases] * s - g.pad.1 + i % phases * lanes);
    let acc = window::<V, MAX, N>(row.x, at, row.taps, (g.k.1, g.dilation.1));
    for (j, &o) in first.iter().enumerate() {
        let v = match phases {
            1 => acc[j],
            _ => V::even(acc[2 * j], acc[2 * j + 1]),
        };
        scaled::<V, MAX>(v, row.inv, g.inv.1.as_ptr().add(o)).store(row.y.add(o));
    }
}

/// An average's window sums `v` divided by their counts: `row_inv` the
/// row's share, `col_inv` the columns'; a maximum unchanged.
#[inline(always)]
unsafe fn scaled<V: Vector, const MAX: bool>(v: V, row_inv: f32, col_inv: *const f32) -> V {
    match MAX {
        true => v,
        false => V::mul(V::mul(v, V::splat(row_inv)), V::load(col_inv)),
    }
}

/// An output row with channels innermost (NHWC, NCHW{cb}c), vectors along the
/// channels: four neighbouring pixels at a time inside the row, one at a time
/// at its edges.
#[inline(always)]
unsafe fn pixels<V: Vector, const MAX: bool>(g: &PoolGeom, row: &Row) {
    let (cb, s) = (g.cb, g.stride.1);
    let (lo, hi) = g.inside;
    let full = (g.k.1, g.dilation.1 * cb);
    let mut o = 0;
    while o < g.ow {
        let t = g.cols[o];
        let x = row.x.add(t.first * cb);
        let inv = row.inv * g.inv.1[o];
        let y = row.y.add(o * cb);
        if o >= lo && o + 4 <= hi {
            for c in (0..cb).step_by(V::LANES) {
                let at = std::array::from_fn(|i| i * s * cb);
                let acc = window::<V, MAX, 4>(x.add(c), at, row.taps, full);
                for (i, a) in acc.into_iter().enumerate() {
                    finish::<V, MAX>(a, inv).store(y.add(i * cb + c));
                }
            }
            o += 4;
        } else {
            for c in (0..cb).step_by(V::LANES) {
                let [a] = window::<V, MAX, 1>(x.add(c), [0], row.taps, (t.n, g.dilation.1 * cb));
                finish::<V, MAX>(a, inv).store(y.add(c));
            }
            o += 1;
        }
    }
}

/// An accumulator's result: an average times 1 / its count.
#[inline(always)]
unsafe fn finish<V: Vector, const MAX: bool>(acc: V, inv: f32) -> V {
    match MAX {
        true => acc,
        false => V::mul(acc, V::splat(inv)),
    }
}

/// Evaluates `$body` with `$f` the function that combines an accumulator of
/// pool `$g` with one more value, chosen once outside the loops of `$body`.
macro_rules! with_combine {
    ($g:expr, |$f:ident| $body:expr) => {
        match ($g.kind, $g.skip_nan) {
            // f32::max is IEEE maximumNumber: a NaN operand gives the other.
            (PoolKind::Max, true) => {
                let $f = f32::max;
                $body
            }
            (PoolKind::Max, false) => {
                let $f = <f32 as Scalar>::max;
                $body
            }
            (PoolKind::Avg, _) => {
                let $f = |a: f32, b: f32| a + b;
                $body
            }
        }
    };
}

// A pool over the whole plane: a sum or maximum of every position, kept in 16
// independent lanes when a position is one channel so that it vectorizes.
multiversion!(global_pool(g: &PoolGeom, x: &[f32], y: &mut [f32]) {
    const LANES: usize = 16;
    let (cb, n) = (g.cb, g.h * g.w);
    let x = &x[..n * cb];
    let init = g.init();
    let out = &mut y[..cb];
    with_combine!(g, |combine| {
        if cb == 1 {
            let mut acc = [init; LANES];
            let mut chunks = x.chunks_exact(LANES);
            for c in &mut chunks {
                acc.iter_mut()
                    .zip(c)
                    .for_each(|(a, &b)| *a = combine(*a, b));
            }
            let tail = chunks.remainder().iter().fold(init, |a, &b| combine(a, b));
            out[0] = acc.iter().fold(tail, |a, &b| combine(a, b));
        } else {
            out.fill(init);
            for px in x.chunks_exact(cb) {
                out.iter_mut()
                    .zip(px)
                    .for_each(|(a, &b)| *a = combine(*a, b));
            }
        }
    });
    if g.kind == PoolKind::Avg {
        let inv = 1.0 / n.max(1) as f32;
        out.iter_mut().for_each(|a| *a *= inv);
    }
});
