//! Max and average pooling over the spatial axes of NCHW, NHWC and NCHW{cb}c
//! buffers.
//!
//! A windowed pool does one max or add per element it reads, so it runs at the
//! speed of memory only if every read is a vector load into an accumulator
//! kept in a register: the kernel vectorizes along the contiguous axis (the
//! channels of NHWC and NCHW{cb}c; the output columns of NCHW, where a stride
//! of 2 computes both column phases and keeps the even lanes), keeps several
//! independent accumulators for the latency of the max or add, and splits the
//! work by output rows. Written once over the vector type (`simd::Vector`) and
//! compiled per instruction set.

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
    /// The vectors of a windowed pool (from [`PoolGeom::for_isa`]).
    pub lanes: Lanes,
}

impl PoolGeom {
    /// The geometry with the vectors of its windowed kernel chosen, up to `isa`.
    pub fn for_isa(mut self, isa: Isa) -> PoolGeom {
        self.lanes = match (self.cb, self.stride.1) {
            (1, 1 | 2) => {
                // Output columns in vectors: the widest whose lanes the row's
                // inside columns fill at least once.
                let (lo, hi) = self.inside(self.stride.1 - 1);
                [MAX_LANES, 8]
                    .into_iter()
                    .map(|block| Lanes::for_block(isa, block))
                    .find(|l| l.count() <= hi - lo)
                    .unwrap_or(Lanes::One)
            }
            (1, _) => Lanes::One,
            (cb, _) => Lanes::for_block(isa, cb),
        };
        self
    }

    fn is_global(&self) -> bool {
        (self.oh, self.ow, self.k, self.pad, self.dilation)
            == (1, 1, (self.h, self.w), (0, 0), (1, 1))
    }

    /// The output columns `[lo, hi)` whose window columns all lie inside the
    /// row, with `extra` columns after the last.
    fn inside(&self, extra: usize) -> (usize, usize) {
        let lo = self.pad.1.div_ceil(self.stride.1).min(self.ow);
        let reach = (self.k.1 - 1) * self.dilation.1 + extra;
        let hi = match (self.w + self.pad.1).checked_sub(reach + 1) {
            Some(last) => (last / self.stride.1 + 1).min(self.ow),
            None => 0,
        };
        (lo, hi.max(lo))
    }

    /// The window taps an average counts along one axis for a window starting
    /// at `start`: those inside the input, or the padded input.
    fn counted(&self, start: isize, axis: usize) -> usize {
        let pick = |p: (usize, usize)| if axis == 0 { p.0 } else { p.1 };
        let (k, d, extent) = (pick(self.k), pick(self.dilation), pick((self.h, self.w)));
        let (before, after) = match self.count_include_pad {
            true => (pick(self.pad), pick(self.pad_end)),
            false => (0, 0),
        };
        let (lo, hi) = valid_taps(start + before as isize, d, k, extent + before + after);
        hi - lo
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
    // Raw addresses so that rows are written in parallel: each writes only
    // its own output pixels.
    let (xp, yp) = (x.as_ptr() as usize, y.as_mut_ptr() as usize);
    let chunk = (rows / (rayon::current_num_threads() * 4)).max(1);
    (0..rows)
        .into_par_iter()
        .with_min_len(chunk)
        .for_each(|row| {
            let task = Row {
                g,
                row,
                x: xp as *const f32,
                y: yp as *mut f32,
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; a row reads and
            // writes inside the buffers checked above.
            unsafe { run_vectorized(g.lanes, &task) }
        });
}

/// One output row of one plane.
struct Row<'a> {
    g: &'a PoolGeom,
    row: usize,
    x: *const f32,
    y: *mut f32,
}

/// What the windows of one output row share.
struct Rows {
    /// The plane's input at the first window row inside the image, column 0.
    x: *const f32,
    /// The output row.
    y: *mut f32,
    /// Window rows inside the image.
    n: usize,
    /// Input elements between window rows.
    step: usize,
    /// Window rows an average counts.
    counted: usize,
}

impl VectorKernel for Row<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let g = self.g;
        let (plane, oh) = (self.row / g.oh, self.row % g.oh);
        let ih0 = (oh * g.stride.0) as isize - g.pad.0 as isize;
        let (first, last) = valid_taps(ih0, g.dilation.0, g.k.0, g.h);
        let row_len = g.w * g.cb;
        // The first row inside: ih0 + first * dilation >= 0.
        let ih = (ih0 + (first * g.dilation.0) as isize).max(0) as usize;
        let rows = Rows {
            // Only read when a window row is inside.
            x: self.x.wrapping_add(plane * g.h * row_len + ih * row_len),
            y: self.y.add(self.row * g.ow * g.cb),
            n: last - first,
            step: g.dilation.0 * row_len,
            counted: g.counted(ih0, 0),
        };
        match (g.kind, g.cb) {
            (PoolKind::Max, 1) => columns::<V, true>(g, &rows),
            (PoolKind::Avg, 1) => columns::<V, false>(g, &rows),
            (PoolKind::Max, _) => pixels::<V, true>(g, &rows),
            (PoolKind::Avg, _) => pixels::<V, false>(g, &rows),
        }
    }
}

/// `N` accumulators over `rows` and the window columns `cols` (count, input
/// elements apart) from `x`, accumulator `i` reading `i * pitch` further.
#[inline(always)]
unsafe fn window<V: Vector, const MAX: bool, const N: usize>(
    x: *const f32,
    pitch: usize,
    rows: &Rows,
    (cols, col_step): (usize, usize),
) -> [V; N] {
    let mut acc = [V::splat(if MAX { f32::NAN } else { 0.0 }); N];
    for r in 0..rows.n {
        let xr = x.add(r * rows.step);
        for c in 0..cols {
            let xc = xr.add(c * col_step);
            for (i, a) in acc.iter_mut().enumerate() {
                let v = V::load(xc.add(i * pitch));
                // The accumulator first: a NaN read is skipped, and the NaN
                // start gives way to the first number.
                *a = if MAX {
                    V::max_number(*a, v)
                } else {
                    V::add(*a, v)
                };
            }
        }
    }
    acc
}

/// An accumulator's result: an average divides by the `count` positions.
#[inline(always)]
unsafe fn finish<V: Vector, const MAX: bool>(acc: V, count: usize) -> V {
    match MAX {
        true => acc,
        false => V::mul(acc, V::splat(1.0 / count as f32)),
    }
}

/// The window columns inside the row of output column `o` (first, count).
fn edge_cols(g: &PoolGeom, o: usize) -> (isize, usize, usize) {
    let iw = (o * g.stride.1) as isize - g.pad.1 as isize;
    let (lo, hi) = valid_taps(iw, g.dilation.1, g.k.1, g.w);
    (iw + (lo * g.dilation.1) as isize, hi - lo, g.counted(iw, 1))
}

/// An NCHW output row, vectors along the output columns: a vector of
/// `LANES` outputs at stride 1 is `LANES` consecutive window sums; at stride 2
/// the even lanes of `2 * LANES` of them. Columns whose window reaches the
/// padding (or that fill no vector) run one at a time.
#[inline(always)]
unsafe fn columns<V: Vector, const MAX: bool>(g: &PoolGeom, rows: &Rows) {
    let (lanes, s) = (V::LANES, g.stride.1);
    // Accumulators per output vector, and the input columns between
    // accumulators (a single lane takes any stride).
    let (phases, pitch) = if lanes == 1 { (1, s) } else { (s, lanes) };
    let (lo, hi) = g.inside(phases - 1);
    let (lo, hi) = if hi - lo >= lanes { (lo, hi) } else { (lo, lo) };
    let t = Columns {
        pitch,
        phases,
        cols: (g.k.1, g.dilation.1),
        count: rows.counted * g.k.1,
    };
    // Four accumulators while they fit, then one vector; the last vector ends
    // at `hi`, recomputing some columns before it.
    let wide = 4 / phases * lanes;
    let mut o = lo;
    while o < hi {
        o = o.min(hi - lanes);
        let x = rows.x.add(o * s - g.pad.1);
        match (phases, hi - o >= wide) {
            (1, true) => t.store::<V, MAX, 4>(x, rows, o),
            (1, false) => t.store::<V, MAX, 1>(x, rows, o),
            (_, true) => t.store::<V, MAX, 4>(x, rows, o),
            (_, false) => t.store::<V, MAX, 2>(x, rows, o),
        }
        o += if hi - o >= wide { wide } else { lanes };
    }
    for o in (0..lo).chain(hi..g.ow) {
        let (iw, cols, counted) = edge_cols(g, o);
        let x = rows.x.wrapping_offset(iw);
        let [acc] = window::<One, MAX, 1>(x, 0, rows, (cols, g.dilation.1));
        finish::<One, MAX>(acc, rows.counted * counted).store(rows.y.add(o));
    }
}

/// The vectors of an NCHW row's inside columns.
struct Columns {
    /// Input columns between accumulators.
    pitch: usize,
    /// Accumulators per output vector (the stride, or 1 for single lanes).
    phases: usize,
    /// Window columns and their spacing.
    cols: (usize, usize),
    /// An average's divisor.
    count: usize,
}

impl Columns {
    /// The `N / phases` output vectors from column `o`, whose window starts at `x`.
    #[inline(always)]
    unsafe fn store<V: Vector, const MAX: bool, const N: usize>(
        &self,
        x: *const f32,
        rows: &Rows,
        o: usize,
    ) {
        let acc = window::<V, MAX, N>(x, self.pitch, rows, self.cols);
        for j in 0..N / self.phases {
            let v = match self.phases {
                1 => acc[j],
                _ => V::even(acc[2 * j], acc[2 * j + 1]),
            };
            finish::<V, MAX>(v, self.count).store(rows.y.add(o + j * V::LANES));
        }
    }
}

/// An output row with channels innermost (NHWC, NCHW{cb}c), vectors along the
/// channels: four neighbouring pixels at a time inside the row, one at a time
/// at its edges.
#[inline(always)]
unsafe fn pixels<V: Vector, const MAX: bool>(g: &PoolGeom, rows: &Rows) {
    let (cb, s) = (g.cb, g.stride.1);
    let (lo, hi) = g.inside(0);
    let col = (g.k.1, g.dilation.1 * cb);
    let mut o = lo;
    while o < hi {
        let x = rows.x.add((o * s - g.pad.1) * cb);
        let n = if hi - o >= 4 { 4 } else { 1 };
        for c in (0..cb).step_by(V::LANES) {
            let y = rows.y.add(o * cb + c);
            let count = rows.counted * g.k.1;
            if n == 4 {
                let acc = window::<V, MAX, 4>(x.add(c), s * cb, rows, col);
                for (i, a) in acc.into_iter().enumerate() {
                    finish::<V, MAX>(a, count).store(y.add(i * cb));
                }
            } else {
                let [a] = window::<V, MAX, 1>(x.add(c), 0, rows, col);
                finish::<V, MAX>(a, count).store(y);
            }
        }
        o += n;
    }
    for o in (0..lo).chain(hi..g.ow) {
        let (iw, cols, counted) = edge_cols(g, o);
        let x = rows.x.wrapping_offset(iw * cb as isize);
        for c in (0..cb).step_by(V::LANES) {
            let [a] = window::<V, MAX, 1>(x.add(c), 0, rows, (cols, g.dilation.1 * cb));
            finish::<V, MAX>(a, rows.counted * counted).store(rows.y.add(o * cb + c));
        }
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
