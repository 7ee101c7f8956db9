//! Max and average pooling over the spatial axes of NCHW, NHWC and NCHW{cb}c
//! buffers.
//!
//! A windowed pool does one max or add per element it reads, so it runs at the
//! speed of memory only if every read is a vector load into a register
//! accumulator and nothing else is done per element. With channels innermost
//! (NHWC, NCHW{cb}c) a vector holds channels and a window is its taps' loads;
//! four neighbouring pixels accumulate at once for the latency of the max or
//! add. In NCHW a vector holds neighbouring output columns, and the window is
//! separated: an output row first combines its window rows column by column
//! into a staged row (the vertical pass), then each vector of outputs
//! combines its window columns from the staged row (the horizontal pass; at
//! stride 2 the even lanes of two vectors of staged columns). The staged row
//! carries the horizontal padding as the reduction's identity (-inf or 0), so
//! neither pass tests a border, and a few output rows are staged before
//! their horizontal passes, so that their reads do not wait on the stores
//! just made. Window bounds and divisors are tabled at compile time, windows
//! of 2 and 3 taps along an axis are unrolled (`unrolled`), work is split by
//! output rows, and the code is written once over the vector type
//! (`simd::Vector`) and compiled per instruction set: every loop and helper
//! around the vectors is inlined into that code (a closure left out of line
//! would lose the instruction set and call each vector instruction).

use super::quantized::Grid;
use super::simd::{
    multiversion, run_vectorized, Isa, Lanes, Scalar as One, Vector, VectorKernel, MAX_LANES,
};
use crate::core::par;
use crate::core::scalar::Scalar;
use crate::graph::PoolKind;
use crate::runtime::kernels::conv::direct::valid_taps;

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
    /// Per output row and per output column, the window positions an
    /// average counts along that axis.
    pub counts: (Vec<f32>, Vec<f32>),
    /// An average of values on a grid rounded back onto it from their
    /// integers (TFLite's integer kernel); `None` for a float average.
    pub integer_average: Option<IntegerAverage>,
}

/// TFLite's integer average pool on values of a byte grid, rounded onto the
/// same grid: the window's integers `q` summed, divided by the positions
/// counted, halves away from zero (its reference kernel's
/// `(sum ± count / 2) / count`; a float mean rounded halves to even puts a
/// tie a step away).
///
/// The window's integers are recovered from the float sum of its values:
/// `sum / scale` is within `n² · max|q - zero_point| · 2^-24` of their
/// integer sum over `n` positions, under a quarter step while `n ≤ 128`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntegerAverage {
    grid: Grid,
}

impl IntegerAverage {
    /// The most window positions whose integers the float sum recovers.
    const MAX_POSITIONS: usize = 128;

    /// The average over windows of at most `positions` of values on `grid`,
    /// rounded onto `grid`; `None` when the grid is no byte grid or the
    /// windows too large to recover their integers.
    pub fn new(grid: Grid, positions: usize) -> Option<IntegerAverage> {
        (grid.fits_a_byte() && positions <= Self::MAX_POSITIONS).then_some(IntegerAverage { grid })
    }

    /// The window averages of sums `sum` over `count` positions, as values
    /// of the grid.
    #[inline(always)]
    unsafe fn of<V: Vector>(&self, sum: V, count: V) -> V {
        let Grid {
            scale,
            zero_point,
            min,
            max,
        } = self.grid;
        let centered = V::round(V::div(sum, V::splat(scale)));
        let raw = V::fma(count, V::splat(zero_point), centered);
        let t = V::div(raw, count);
        let half = V::splat(0.5);
        let away = V::select_negative(
            t,
            V::sub(V::splat(0.0), V::floor(V::sub(half, t))),
            V::floor(V::add(t, half)),
        );
        let q = V::clamp(away, V::splat(min), V::splat(max));
        V::mul(V::sub(q, V::splat(zero_point)), V::splat(scale))
    }
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
            (taps, (c_hi - c_lo) as f32)
        };
        (self.rows, self.counts.0) = (0..self.oh).map(|o| taps(o, 0)).unzip();
        (self.cols, self.counts.1) = (0..self.ow).map(|o| taps(o, 1)).unzip();
        self.lanes = Lanes::for_block(isa, MAX_LANES);
        self
    }

    /// Columns of a staged row: the left padding, the input, and beyond it
    /// as far as the horizontal pass reads (at stride 2 in vectors, up to
    /// the odd column after the last window).
    fn staged_cols(&self) -> usize {
        let reach = (self.k.1 - 1) * self.dilation.1;
        (self.pad.1 + self.w).max(self.ow * self.stride.1 + reach + 1)
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
        return par::for_each_chunk_mut(&mut y[..g.planes * ys], ys, |i, yp| {
            global_pool(g, &x[i * xs..(i + 1) * xs], yp)
        });
    }
    // A window skips NaN; only the global maximum propagates it.
    assert!(g.skip_nan || g.kind == PoolKind::Avg);
    let rows = g.planes * g.oh;
    let tasks = (par::threads() * 4).min(rows);
    // Raw addresses so that rows are written in parallel: each writes only
    // its own output pixels.
    let (xp, yp) = (x.as_ptr() as usize, y.as_mut_ptr() as usize);
    par::for_each(tasks, |t| {
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

/// Bytes of staged rows a task fills before their horizontal passes: well
/// inside the level-1 cache beside the input rows they are read from.
const STAGED_BYTES: usize = 8 << 10;

/// What the windows of one output row share.
struct Row {
    /// The plane's input at the first window row inside the image, column 0
    /// (only read when there is such a row).
    x: *const f32,
    /// The output row.
    y: *mut f32,
    /// Window rows inside the image, and the input elements between them.
    taps: (usize, usize),
    /// The window rows an average counts.
    count: f32,
}

impl Task<'_> {
    /// Output row `r` of all planes.
    unsafe fn row(&self, r: usize) -> Row {
        let g = self.g;
        let row_len = g.w * g.cb;
        let (plane, oh) = (r / g.oh, r % g.oh);
        let t = g.rows[oh];
        Row {
            x: self.x.wrapping_add((plane * g.h + t.first) * row_len),
            y: self.y.add(r * g.ow * g.cb),
            taps: (t.n, g.dilation.0 * row_len),
            count: g.counts.0[oh],
        }
    }

    /// The task's rows: with channels innermost read straight from the
    /// input, else in groups staged together, each output row a vertical
    /// then a horizontal pass.
    #[inline(always)]
    unsafe fn rows<V: Vector, const MAX: bool>(&self) {
        let g = self.g;
        if g.cb > 1 {
            // A loop, not a closure: a closure the compiler leaves out of
            // line is compiled without the instruction set's features.
            for r in self.rows.clone() {
                pixels::<V, MAX>(g, &self.row(r));
            }
            return;
        }
        let width = g.staged_cols();
        let group = (STAGED_BYTES / 4 / width).clamp(1, 16);
        let identity = if MAX { f32::NEG_INFINITY } else { 0.0 };
        // The padding columns keep the identity: only the input's are written.
        let mut staged = vec![identity; group * width];
        for first in self.rows.clone().step_by(group) {
            let rows = first..(first + group).min(self.rows.end);
            for (r, s) in rows.clone().zip(staged.chunks_exact_mut(width)) {
                vertical::<V, MAX>(&self.row(r), g.w, s[g.pad.1..].as_mut_ptr());
            }
            for (r, s) in rows.zip(staged.chunks_exact(width)) {
                horizontal::<V, MAX>(g, &self.row(r), s.as_ptr());
            }
        }
    }
}

impl VectorKernel for Task<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        match self.g.kind {
            PoolKind::Max => self.rows::<V, true>(),
            PoolKind::Avg => self.rows::<V, false>(),
        }
    }
}

/// The starts of vectors of `lanes` covering `n` elements (at least
/// `lanes`): one after the other, the last overlapping the one before.
pub(super) fn starts(n: usize, lanes: usize) -> impl Iterator<Item = usize> {
    (0..n / lanes)
        .map(move |i| i * lanes)
        .chain((!n.is_multiple_of(lanes)).then(|| n - lanes))
}

/// `N` accumulators over `rows` rows (count, elements apart) and `cols`
/// columns from `x`, accumulator `i` reading `at[i]` further: maxima
/// skipping NaN from -inf (a lane of NaN and -inf only ends at -inf), or sums.
#[inline(always)]
unsafe fn reduce<V: Vector, const MAX: bool, const N: usize>(
    x: *const f32,
    at: [usize; N],
    rows: (usize, usize),
    cols: (usize, usize),
) -> [V; N] {
    match MAX {
        // vmaxps gives its second operand where either is NaN: from -inf,
        // the accumulator as second operand skips NaN reads in one
        // instruction.
        true => fold(
            x,
            at,
            rows,
            cols,
            f32::NEG_INFINITY,
            #[inline(always)]
            |a, v| V::max(v, a),
        ),
        false => fold(
            x,
            at,
            rows,
            cols,
            0.0,
            #[inline(always)]
            |a, v| V::add(a, v),
        ),
    }
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

/// The vertical pass: the `n` columns of `row`'s input rows combined column
/// by column into `staged`.
#[inline(always)]
unsafe fn vertical<V: Vector, const MAX: bool>(row: &Row, n: usize, staged: *mut f32) {
    if n < V::LANES && V::LANES > 1 {
        return vertical::<One, MAX>(row, n, staged);
    }
    unrolled(
        row.taps.0,
        #[inline(always)]
        |taps| {
            for e in starts(n, V::LANES) {
                let rows = (taps, row.taps.1);
                let [v] = reduce::<V, MAX, 1>(row.x.wrapping_add(e), [0], rows, (1, 0));
                v.store(staged.add(e));
            }
        },
    )
}

/// The horizontal pass: `row`'s outputs from its staged row (at the left
/// padding's first column), one channel per pixel: vectors of output
/// columns, at stride 2 the even lanes of two vectors of staged columns.
#[inline(always)]
unsafe fn horizontal<V: Vector, const MAX: bool>(g: &PoolGeom, row: &Row, staged: *const f32) {
    let (s, lanes) = (g.stride.1, V::LANES);
    if lanes > 1 && (s > 2 || g.ow < lanes) {
        return horizontal::<One, MAX>(g, row, staged);
    }
    let count = |o: usize| move || V::load(g.counts.1.as_ptr().add(o));
    unrolled(
        g.k.1,
        #[inline(always)]
        |k| {
            // Window columns and the staged elements between them.
            let taps = (k, g.dilation.1);
            match s {
                1 => {
                    for o in starts(g.ow, lanes) {
                        let [v] = reduce::<V, MAX, 1>(staged.add(o), [0], taps, (1, 0));
                        emit::<V, MAX>(g, row, o, v, count(o));
                    }
                }
                2 if lanes > 1 => {
                    for o in starts(g.ow, lanes) {
                        let at = [0, lanes];
                        let [a, b] = reduce::<V, MAX, 2>(staged.add(2 * o), at, taps, (1, 0));
                        emit::<V, MAX>(g, row, o, V::even(a, b), count(o));
                    }
                }
                _ => {
                    for o in 0..g.ow {
                        let [v] = reduce::<V, MAX, 1>(staged.add(o * s), [0], taps, (1, 0));
                        emit::<V, MAX>(g, row, o, v, count(o));
                    }
                }
            }
        },
    )
}

/// An output row with channels innermost (NHWC, NCHW{cb}c) read straight
/// from the input, vectors along the channels: four neighbouring pixels at a
/// time inside the row, one at a time over its inside taps at its edges.
#[inline(always)]
unsafe fn pixels<V: Vector, const MAX: bool>(g: &PoolGeom, row: &Row) {
    if g.cb < V::LANES {
        return pixels::<One, MAX>(g, row);
    }
    unrolled(
        row.taps.0,
        #[inline(always)]
        |rows| {
            unrolled(
                g.k.1,
                #[inline(always)]
                |cols| pixel_windows::<V, MAX>(g, row, rows, cols),
            )
        },
    )
}

/// [`pixels`] with the row's window rows inside the image, `rows`, and the
/// window's columns, `cols`, given (as constants where [`unrolled`] can).
#[inline(always)]
unsafe fn pixel_windows<V: Vector, const MAX: bool>(
    g: &PoolGeom,
    row: &Row,
    rows: usize,
    cols: usize,
) {
    let (cb, s, lanes) = (g.cb, g.stride.1, V::LANES);
    let rows = (rows, row.taps.1);
    // Window columns and the input elements between them.
    let apart = g.dilation.1 * cb;
    let whole = |o: usize| g.cols[o].n == cols;
    let count = |o: usize| move || V::splat(g.counts.1[o]);
    let mut o = 0;
    while o < g.ow {
        let t = g.cols[o];
        let x = row.x.wrapping_add(t.first * cb);
        // The windows inside the row are consecutive.
        let four = o + 4 <= g.ow && whole(o) && whole(o + 3);
        for c in starts(cb, lanes) {
            if four {
                let at = std::array::from_fn(|i| i * s * cb);
                let acc = reduce::<V, MAX, 4>(x.add(c), at, rows, (cols, apart));
                for (i, v) in acc.into_iter().enumerate() {
                    emit::<V, MAX>(g, row, (o + i) * cb + c, v, count(o + i));
                }
            } else {
                let [v] = reduce::<V, MAX, 1>(x.wrapping_add(c), [0], rows, (t.n, apart));
                emit::<V, MAX>(g, row, o * cb + c, v, count(o));
            }
        }
        o += if four { 4 } else { 1 };
    }
}

/// Calls `f` with `n`, a constant where it is a common window extent (2 or
/// 3): the loops over a window that `f` inlines are then unrolled, where a
/// loop counted at run time costs more instructions than its loads and
/// maxima or sums.
#[inline(always)]
fn unrolled<R>(n: usize, f: impl Fn(usize) -> R) -> R {
    match n {
        2 => f(2),
        3 => f(3),
        _ => f(n),
    }
}

/// Stores the output vector `v` at element `e` of `row`: an average's sums
/// divided by the positions it counts, the row's times `col_count`'s (one
/// division, as onnxruntime's pools divide: their quantized average pools
/// then round the same quotients onto the grid; two products by inverses
/// moved one quantized output in 300 a step); a maximum whose lanes ended
/// at -inf (windows of NaN and -inf only, or none inside the input)
/// computed again exactly.
#[inline(always)]
unsafe fn emit<V: Vector, const MAX: bool>(
    g: &PoolGeom,
    row: &Row,
    e: usize,
    v: V,
    col_count: impl FnOnce() -> V,
) {
    let y = row.y.add(e);
    if !MAX {
        let count = V::mul(V::splat(row.count), col_count());
        return match &g.integer_average {
            Some(average) => average.of(v, count),
            None => V::div(v, count),
        }
        .store(y);
    }
    v.store(y);
    if V::any_at_most(v, f32::NEG_INFINITY) {
        for i in 0..V::LANES {
            if *y.add(i) == f32::NEG_INFINITY {
                exact_max(g, row, e + i);
            }
        }
    }
}

/// Output element `e` of `row` as IEEE maximumNumber over its window from
/// NaN, read from the input: a window of NaN only (or with no taps inside)
/// stays NaN, NaN gives way to the first number.
#[inline(always)]
unsafe fn exact_max(g: &PoolGeom, row: &Row, e: usize) {
    let (o, c) = (e / g.cb, e % g.cb);
    let t = g.cols[o];
    let x = row.x.wrapping_add(t.first * g.cb + c);
    let cols = (t.n, g.dilation.1 * g.cb);
    let [v] = fold::<One, 1>(x, [0], row.taps, cols, f32::NAN, One::max_number);
    v.store(row.y.add(e));
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
multiversion!(
    fn global_pool(g: &PoolGeom, x: &[f32], y: &mut [f32]) {
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
                // Four pixels combined in a tree per pass over `out`: one chain
                // per channel made the adds wait on each other (7.5 GB/s on the
                // 7x7 and 14x14 planes of MobileNetV3).
                out.fill(init);
                let mut quads = x.chunks_exact(4 * cb);
                for q in &mut quads {
                    let (p01, p23) = q.split_at(2 * cb);
                    let ((p0, p1), (p2, p3)) = (p01.split_at(cb), p23.split_at(cb));
                    let pixels = p0.iter().zip(p1).zip(p2.iter().zip(p3));
                    for (a, ((&v0, &v1), (&v2, &v3))) in out.iter_mut().zip(pixels) {
                        *a = combine(*a, combine(combine(v0, v1), combine(v2, v3)));
                    }
                }
                for px in quads.remainder().chunks_exact(cb) {
                    out.iter_mut()
                        .zip(px)
                        .for_each(|(a, &b)| *a = combine(*a, b));
                }
            }
        });
        match (g.kind, &g.integer_average) {
            // SAFETY: a one-lane vector touches no memory.
            (PoolKind::Avg, Some(average)) => out.iter_mut().for_each(|a| {
                *a = unsafe { average.of(One(*a), One(n as f32)) }.0;
            }),
            (PoolKind::Avg, None) => {
                let inv = 1.0 / n.max(1) as f32;
                out.iter_mut().for_each(|a| *a *= inv);
            }
            (PoolKind::Max, _) => {}
        }
    }
);
