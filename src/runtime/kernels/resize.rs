//! Resize (nearest, linear and cubic, every coordinate transformation) over
//! two axes adjacent in storage, or one: the spatial axes of NCHW, NHWC and
//! NCHW{cb}c buffers, the axes before them planes, those after them channels.
//!
//! The op is separable: an output pixel is `Σ_j wx_j · Σ_i wy_i · x[i][j]`
//! over its row's taps `i` and its column's taps `j`, the reference's order
//! (rows, then columns). The taps and weights of every output row and column
//! are tabled at compile time from the reference's own tables
//! (`Resize::axis_taps`), zero weights already left out, so both skip the
//! same elements and propagate the same NaN and infinities. A tap count that
//! varies from one output to the next (anti-aliasing, exclude_outside) costs
//! nothing more, and an output tf_crop_and_resize maps outside the input
//! takes the extrapolation value.
//!
//! With channels innermost (NHWC, NCHW{cb}c) a vector holds channels and an
//! output pixel is its taps' loads; a pixel that copies one input pixel
//! (nearest, or a whole-number coordinate) is a plain copy. In NCHW an output
//! row first combines its input rows into a staged row (vectors along the
//! columns; an output row that copies one input row reads it in place), then
//! each output column combines its taps from it: where every column has 1 to
//! `MAX_SLOTS` taps, in a loop of that many taps with no branch (`Slots`).

use super::pool::starts;
use super::simd::{run_vectorized, Isa, Lanes, Scalar as One, Vector, VectorKernel, MAX_LANES};
use crate::core::par;
use crate::ops::AxisTaps;

/// The taps of every output position along one axis.
#[derive(Clone, Debug)]
pub struct TapTable {
    /// Output position `o` reads `index[bounds[o]..bounds[o + 1]]`.
    bounds: Vec<usize>,
    /// Input positions.
    index: Vec<usize>,
    /// Their weights.
    weight: Vec<f32>,
    /// Per output position, whether it maps outside the input (it then holds
    /// the extrapolation value).
    outside: Vec<bool>,
    /// The same taps in slots, when they fit (for the columns of NCHW).
    slots: Option<Slots>,
}

/// Outputs along an axis with at most this many taps each have them in slots.
const MAX_SLOTS: usize = 4;

/// Every output position's taps in `count` slots, when each has 1 to
/// `MAX_SLOTS` taps and none maps outside: a loop over the outputs then has
/// a fixed number of taps and no branch.
#[derive(Clone, Debug)]
struct Slots {
    count: usize,
    /// `count` input positions per output position.
    index: Vec<u32>,
    /// Their weights.
    weight: Vec<f32>,
}

impl Slots {
    fn of(t: &TapTable) -> Option<Slots> {
        let count = (0..t.len()).map(|o| t.taps(o).0.len()).max()?;
        if count > MAX_SLOTS || t.outside.contains(&true) {
            return None;
        }
        let mut s = Slots {
            count,
            index: vec![],
            weight: vec![],
        };
        for o in 0..t.len() {
            let (index, weight) = t.taps(o);
            let (&first, &w) = index.first().zip(weight.first())?;
            // An output with fewer taps spreads its first one's weight over
            // the spare slots in halves (w/2, w/4, ..., the last two equal):
            // each part's product is the tap's scaled by a power of two, so
            // the sum changes by rounding only and an infinity or NaN there
            // spreads as it did.
            let mut part = w;
            for _ in 0..count - index.len() {
                part /= 2.0;
                s.index.push(u32::try_from(first).ok()?);
                s.weight.push(part);
            }
            s.index.push(u32::try_from(first).ok()?);
            s.weight.push(part);
            for (&i, &w) in index.iter().zip(weight).skip(1) {
                s.index.push(u32::try_from(i).ok()?);
                s.weight.push(w);
            }
        }
        Some(s)
    }
}

impl TapTable {
    /// The table of `taps` over an axis of `n` input positions; `None` if a
    /// tap lies outside it.
    pub fn new(taps: &AxisTaps, n: usize) -> Option<TapTable> {
        let mut t = TapTable {
            bounds: vec![0],
            index: vec![],
            weight: vec![],
            outside: vec![],
            slots: None,
        };
        for o in taps {
            for &(i, w) in o.iter().flatten() {
                (i < n).then_some(())?;
                t.index.push(i);
                t.weight.push(w as f32);
            }
            t.bounds.push(t.index.len());
            t.outside.push(o.is_none());
        }
        Some(t)
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.outside.len()
    }

    /// The input positions and weights of output position `o`.
    #[inline(always)]
    fn taps(&self, o: usize) -> (&[usize], &[f32]) {
        let range = self.bounds[o]..self.bounds[o + 1];
        (&self.index[range.clone()], &self.weight[range])
    }

    /// The input position output `o` copies, if it reads one with weight 1.
    #[inline(always)]
    fn copies(&self, o: usize) -> Option<usize> {
        match self.taps(o) {
            (&[i], &[1.0]) => Some(i),
            _ => None,
        }
    }
}

/// A resize of `planes` planes of `h * w` pixels of `cb` channels each to
/// `oh * ow` pixels: NCHW (`cb` 1), NHWC (`cb` the channels) or NCHW{cb}c
/// (padding channels are filtered like the others, so zeros stay 0); `h` is 1
/// when one axis is resized.
#[derive(Clone, Debug)]
pub struct ResizeGeom {
    /// Batch times channel blocks.
    pub planes: usize,
    /// Channels per pixel of a plane.
    pub cb: usize,
    /// Input height and width.
    pub h: usize,
    pub w: usize,
    /// The taps of every output row and column.
    rows: TapTable,
    cols: TapTable,
    /// The value of outputs that map outside the input (tf_crop_and_resize).
    fill: f32,
    lanes: Lanes,
}

impl ResizeGeom {
    /// The kernel of `planes` planes of `h * w` pixels of `cb` channels, the
    /// rows resized by `rows` and the columns by `cols`, with vectors of an
    /// instruction set up to `isa`; `None` if the taps do not fit the input.
    pub fn new(
        (planes, cb, h, w): (usize, usize, usize, usize),
        rows: &AxisTaps,
        cols: &AxisTaps,
        fill: f32,
        isa: Isa,
    ) -> Option<ResizeGeom> {
        let mut cols = TapTable::new(cols, w)?;
        if cb == 1 {
            cols.slots = Slots::of(&cols);
        }
        Some(ResizeGeom {
            planes,
            cb,
            h,
            w,
            rows: TapTable::new(rows, h)?,
            cols,
            fill,
            lanes: Lanes::for_block(isa, MAX_LANES),
        })
    }

    #[inline(always)]
    fn oh(&self) -> usize {
        self.rows.len()
    }

    #[inline(always)]
    fn ow(&self) -> usize {
        self.cols.len()
    }
}

/// Resizes `x` into `y` with geometry `g`.
pub fn resize(g: &ResizeGeom, x: &[f32], y: &mut [f32]) {
    let (xs, ys) = (g.h * g.w * g.cb, g.oh() * g.ow() * g.cb);
    assert!(x.len() >= g.planes * xs && y.len() >= g.planes * ys);
    let rows = g.planes * g.oh();
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
        // SAFETY: `lanes` comes from `Lanes::for_block`; every tap lies
        // inside the input (`TapTable::new`), so a row reads and writes
        // inside the buffers checked above.
        unsafe { run_vectorized(g.lanes, &task) }
    });
}

/// Consecutive output rows (of all planes, in order).
struct Task<'a> {
    g: &'a ResizeGeom,
    rows: std::ops::Range<usize>,
    x: *const f32,
    y: *mut f32,
}

impl VectorKernel for Task<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let g = self.g;
        // Loops, not closures: a closure the compiler leaves out of line is
        // compiled without the instruction set's features.
        if g.cb > 1 {
            for r in self.rows.clone() {
                pixels::<V>(g, self.x, self.y, r);
            }
            return;
        }
        let mut staged = vec![0f32; g.w];
        for r in self.rows.clone() {
            columns::<V>(g, self.x, self.y, r, &mut staged);
        }
    }
}

/// Output row `r` (of all planes) with one channel per pixel: its input rows
/// combined into `staged` (unless it copies one), then each output column
/// from its taps there.
#[inline(always)]
unsafe fn columns<V: Vector>(
    g: &ResizeGeom,
    x: *const f32,
    y: *mut f32,
    r: usize,
    staged: &mut [f32],
) {
    let (plane, oh) = (r / g.oh(), r % g.oh());
    let y = std::slice::from_raw_parts_mut(y.add(r * g.ow()), g.ow());
    if g.rows.outside[oh] {
        return y.fill(g.fill);
    }
    let x = x.add(plane * g.h * g.w);
    let src = match g.rows.copies(oh) {
        Some(i) => x.add(i * g.w),
        None => {
            let (index, weight) = g.rows.taps(oh);
            vertical::<V>(x, g.w, index, weight, staged.as_mut_ptr());
            staged.as_ptr()
        }
    };
    if let Some(s) = &g.cols.slots {
        return match s.count {
            1 => slotted::<1>(src, s, y),
            2 => slotted::<2>(src, s, y),
            3 => slotted::<3>(src, s, y),
            _ => slotted::<MAX_SLOTS>(src, s, y),
        };
    }
    for (o, out) in y.iter_mut().enumerate() {
        *out = if g.cols.outside[o] {
            g.fill
        } else if let Some(j) = g.cols.copies(o) {
            *src.add(j)
        } else {
            let (index, weight) = g.cols.taps(o);
            let mut acc = 0.0;
            for (&j, &w) in index.iter().zip(weight) {
                acc += w * *src.add(j);
            }
            acc
        };
    }
}

/// The outputs `y` of a row from `src` (a staged or an input row), each the
/// weighted sum of its `T` slots.
#[inline(always)]
unsafe fn slotted<const T: usize>(src: *const f32, s: &Slots, y: &mut [f32]) {
    let (index, weight) = (s.index.as_chunks::<T>().0, s.weight.as_chunks::<T>().0);
    for ((out, index), weight) in y.iter_mut().zip(index).zip(weight) {
        let mut acc = weight[0] * *src.add(index[0] as usize);
        for t in 1..T {
            acc += weight[t] * *src.add(index[t] as usize);
        }
        *out = acc;
    }
}

/// The `w` columns of the input rows `index` of plane `x`, weighted by
/// `weight`, summed into `staged`.
#[inline(always)]
unsafe fn vertical<V: Vector>(
    x: *const f32,
    w: usize,
    index: &[usize],
    weight: &[f32],
    staged: *mut f32,
) {
    if w < V::LANES && V::LANES > 1 {
        return vertical::<One>(x, w, index, weight, staged);
    }
    for e in starts(w, V::LANES) {
        let mut acc = V::splat(0.0);
        for (&i, &wt) in index.iter().zip(weight) {
            acc = V::fma(V::splat(wt), V::load(x.add(i * w + e)), acc);
        }
        acc.store(staged.add(e));
    }
}

/// Output row `r` (of all planes) with channels innermost, vectors along the
/// channels: each pixel a copy of one input pixel, or the weighted sum of
/// its taps.
#[inline(always)]
unsafe fn pixels<V: Vector>(g: &ResizeGeom, x: *const f32, y: *mut f32, r: usize) {
    let (cb, lanes) = (g.cb, V::LANES);
    if cb < lanes {
        return pixels::<One>(g, x, y, r);
    }
    let (plane, oh) = (r / g.oh(), r % g.oh());
    let row_len = g.w * cb;
    let y = y.add(r * g.ow() * cb);
    if g.rows.outside[oh] {
        return std::slice::from_raw_parts_mut(y, g.ow() * cb).fill(g.fill);
    }
    let x = x.add(plane * g.h * row_len);
    let (rows, row_weights) = g.rows.taps(oh);
    let row_copied = g.rows.copies(oh);
    for o in 0..g.ow() {
        let yo = y.add(o * cb);
        if g.cols.outside[o] {
            std::slice::from_raw_parts_mut(yo, cb).fill(g.fill);
            continue;
        }
        if let (Some(i), Some(j)) = (row_copied, g.cols.copies(o)) {
            std::ptr::copy_nonoverlapping(x.add(i * row_len + j * cb), yo, cb);
            continue;
        }
        let (cols, col_weights) = g.cols.taps(o);
        for c in starts(cb, lanes) {
            let mut acc = V::splat(0.0);
            for (&j, &wx) in cols.iter().zip(col_weights) {
                let xc = x.add(j * cb + c);
                let mut column = V::splat(0.0);
                for (&i, &wy) in rows.iter().zip(row_weights) {
                    column = V::fma(V::splat(wy), V::load(xc.add(i * row_len)), column);
                }
                acc = V::fma(V::splat(wx), column, acc);
            }
            acc.store(yo.add(c));
        }
    }
}
