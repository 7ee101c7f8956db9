//! Pooling and layout transforms on physical buffers. Loops are written
//! plainly over the innermost channel block and compiled per instruction set
//! (`multiversion!`) so the compiler vectorizes them with the widest registers
//! the CPU has.

use super::simd::ELEMENTS_PER_TASK;
use crate::core::scalar::Scalar;
use crate::graph::PoolKind;
use crate::layout::Layout;
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

/// Pooling over the spatial axes of an NCHW{cb}c buffer (padding channels are
/// pooled like the others, so their value carries through).
#[derive(Clone, Debug)]
pub struct PoolGeom {
    /// Max or average.
    pub kind: PoolKind,
    /// Whether a maximum skips NaN (a MaxPool window) or propagates it
    /// (GlobalMaxPool); ARCHITECTURE.md, "NaN and infinities".
    pub skip_nan: bool,
    /// Batch times channel blocks.
    pub planes: usize,
    /// Channels per block.
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
    /// Padding at the top and the left.
    pub pad: (usize, usize),
    /// Whether an average divides by the whole window, padding included.
    pub count_include_pad: bool,
    /// For each window column, the output columns `[lo, hi)` it reads inside
    /// the row (from [`PoolGeom::with_columns`]; divisions kept out of the loops).
    pub columns: Vec<(usize, usize)>,
}

impl PoolGeom {
    /// The geometry with its `columns` computed.
    pub fn with_columns(mut self) -> PoolGeom {
        self.columns = (0..self.k.1)
            .map(|kw| columns(kw, self.stride.1, self.pad.1, self.w, self.ow))
            .collect();
        self
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

multiversion!(pool_plane(g: &PoolGeom, x: &[f32], y: &mut [f32]) {
    let cb = g.cb;
    if (g.oh, g.ow, g.k, g.pad) == (1, 1, (g.h, g.w), (0, 0)) {
        return global_pool(g, x, y);
    }
    let init = g.init();
    // Each output row accumulates in place: for every window row and column,
    // the output columns whose input column is inside the image take one
    // contiguous (stride 1) or strided run of the input row.
    for oh in 0..g.oh {
        let row = &mut y[oh * g.ow * cb..][..g.ow * cb];
        row.fill(init);
        let (kh_lo, kh_hi) = window(oh, g.stride.0, g.pad.0, g.k.0, g.h);
        for kh in kh_lo..kh_hi {
            let ih = oh * g.stride.0 + kh - g.pad.0;
            let xrow = &x[ih * g.w * cb..][..g.w * cb];
            for (kw, &(lo, hi)) in g.columns.iter().enumerate() {
                if lo >= hi {
                    continue;
                }
                let first = lo * g.stride.1 + kw - g.pad.1;
                let out = &mut row[lo * cb..hi * cb];
                let src = &xrow[first * cb..];
                match (cb, g.stride.1) {
                    // NCHW, stride 1: one contiguous run, in vector registers.
                    (1, 1) => accumulate(g, out, src.iter()),
                    (1, s) => accumulate(g, out, src.iter().step_by(s)),
                    _ => {
                        let pixels = src.chunks(cb).step_by(g.stride.1);
                        for (o, v) in out.chunks_mut(cb).zip(pixels) {
                            accumulate(g, o, v.iter());
                        }
                    }
                }
            }
        }
        if g.kind == PoolKind::Avg {
            let count = |ow: usize| match g.count_include_pad {
                true => g.k.0 * g.k.1,
                false => {
                    let (kw_lo, kw_hi) = window(ow, g.stride.1, g.pad.1, g.k.1, g.w);
                    (kh_hi - kh_lo) * (kw_hi - kw_lo)
                }
            };
            // Columns whose window lies inside the row share one divisor (one
            // vector loop); only the edge columns need their own.
            let full_lo = g.pad.1.div_ceil(g.stride.1).min(g.ow);
            let full_hi = ((g.w + g.pad.1 + 1).saturating_sub(g.k.1))
                .div_ceil(g.stride.1)
                .clamp(full_lo, g.ow);
            let scale = |o: &mut [f32], n: usize| {
                let inv = 1.0 / n.max(1) as f32;
                o.iter_mut().for_each(|a| *a *= inv);
            };
            scale(&mut row[full_lo * cb..full_hi * cb], count(full_lo));
            for ow in (0..full_lo).chain(full_hi..g.ow) {
                scale(&mut row[ow * cb..(ow + 1) * cb], count(ow));
            }
        }
    }
});

/// `out[i] = out[i] max src[i]` (or `+`), pairwise.
#[inline(always)]
fn accumulate<'a>(g: &PoolGeom, out: &mut [f32], src: impl Iterator<Item = &'a f32>) {
    with_combine!(g, |f| out
        .iter_mut()
        .zip(src)
        .for_each(|(a, &b)| *a = f(*a, b)))
}

/// The window offsets `[lo, hi)` of output position `o` that fall inside an
/// input axis of `extent` (the others are padding).
fn window(o: usize, stride: usize, pad: usize, k: usize, extent: usize) -> (usize, usize) {
    let start = o * stride;
    let lo = pad.saturating_sub(start).min(k);
    let hi = (extent + pad).saturating_sub(start).min(k);
    (lo, hi.max(lo))
}

/// The output columns `[lo, hi)` whose window column `kw` falls inside an
/// input row of `w` columns.
fn columns(kw: usize, stride: usize, pad: usize, w: usize, ow: usize) -> (usize, usize) {
    // o * stride + kw - pad in [0, w)  <=>  o >= (pad - kw) / stride, o * stride < w + pad - kw
    let lo = pad.saturating_sub(kw).div_ceil(stride);
    let hi = (w + pad).saturating_sub(kw).div_ceil(stride).min(ow);
    (lo.min(hi), hi)
}

/// A pool over the whole plane: a sum or maximum of every position, kept in
/// 16 independent lanes when a position is one channel so that it vectorizes.
#[inline(always)]
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
}

/// Pools `x` into `y` with geometry `g`, planes in parallel.
pub fn pool(g: &PoolGeom, x: &[f32], y: &mut [f32]) {
    let (xs, ys) = (g.h * g.w * g.cb, g.oh * g.ow * g.cb);
    y[..g.planes * ys]
        .par_chunks_mut(ys)
        .zip(x[..g.planes * xs].par_chunks(xs))
        .for_each(|(yp, xp)| pool_plane(g, xp, yp));
}

/// A data movement (layout transform, transpose, slice, pad, concat, ...) as
/// runs: each fills consecutive output elements from elements of one input a
/// fixed stride apart, or with the fill value (padding). Most movements are few
/// long runs, so the copy costs a loop per run, not a lookup per element; any
/// movement takes at most one run per two elements.
pub struct Gather {
    runs: Vec<Run>,
    /// The first run of each parallel task (tasks cover about
    /// `ELEMENTS_PER_TASK` elements; no run is longer).
    tasks: Vec<usize>,
    /// Output elements.
    len: usize,
    /// Per input, one past the last element read.
    src_ends: Vec<usize>,
    fill: f32,
}

/// Most inputs a gather reads (they are passed without allocating).
pub const MAX_GATHER_INPUTS: usize = 32;

/// Output elements `dst..dst + len` take elements `src + k * stride` of input
/// `input`, or the fill when `src` is `PAD`.
#[derive(Clone, Copy, Debug)]
struct Run {
    dst: u32,
    src: u32,
    len: u32,
    stride: i32,
    input: u32,
}

const PAD: u32 = u32::MAX;

/// Steps a row-major multi-index of `shape` to the next element.
fn next_index(idx: &mut [usize], shape: &[usize]) {
    for a in (0..idx.len()).rev() {
        idx[a] += 1;
        if idx[a] < shape[a] {
            return;
        }
        idx[a] = 0;
    }
}

impl Gather {
    /// The input offset `k` when output element `e` is input element `e + k`
    /// for every `e`: the movement is a contiguous piece of its input.
    pub fn view_offset(&self) -> Option<usize> {
        (self.src_ends.len() == 1).then_some(())?;
        let first = self.runs.first()?;
        let k = first.src.checked_sub(first.dst)?;
        let covered: usize = self.runs.iter().map(|r| r.len as usize).sum();
        let contiguous = self.runs.iter().all(|r| {
            r.src != PAD && r.src.checked_sub(r.dst) == Some(k) && (r.stride == 1 || r.len <= 1)
        });
        (contiguous && covered == self.len).then_some(k as usize)
    }

    /// The gather from `from` to `to` for a logical tensor of shape `logical`.
    pub fn new(from: &Layout, to: &Layout, logical: &[usize], fill: f32) -> Result<Gather, String> {
        Gather::reshape((from, logical), (to, logical), fill)
    }

    /// The gather of a reshape from logical shape `from.1` stored in layout
    /// `from.0` to shape `to.1` in `to.0`: the k-th element in row-major order
    /// of one is the k-th of the other.
    pub fn reshape(
        (from, from_shape): (&Layout, &[usize]),
        (to, to_shape): (&Layout, &[usize]),
        fill: f32,
    ) -> Result<Gather, String> {
        let numel = crate::graph::numel(from_shape);
        if numel != crate::graph::numel(to_shape) {
            return Err(format!("cannot reshape {from_shape:?} to {to_shape:?}"));
        }
        let phys_to = to.physical_shape(to_shape).map_err(|e| e.to_string())?;
        let phys_from = from.physical_shape(from_shape).map_err(|e| e.to_string())?;
        if phys_from.iter().product::<usize>() >= PAD as usize {
            return Err("tensor too large for a 32-bit gather".into());
        }
        let offset = |layout: &Layout, idx: &[usize], strides: &[usize]| -> Result<usize, String> {
            let p = layout.to_physical_index(idx).map_err(|e| e.to_string())?;
            Ok(p.iter().zip(strides).map(|(a, b)| a * b).sum())
        };
        let (from_strides, to_strides) = (
            crate::graph::strides(&phys_from),
            crate::graph::strides(&phys_to),
        );
        let mut src = vec![PAD; phys_to.iter().product()];
        let (mut i_from, mut i_to) = (vec![0usize; from_shape.len()], vec![0usize; to_shape.len()]);
        for _ in 0..numel {
            src[offset(to, &i_to, &to_strides)?] = offset(from, &i_from, &from_strides)? as u32;
            next_index(&mut i_from, from_shape);
            next_index(&mut i_to, to_shape);
        }
        Ok(Gather::from_sources(src, fill))
    }

    /// The gather taking output element `i` from input element `src[i]`, or
    /// `fill` where `src[i]` is `u32::MAX`.
    pub fn from_sources(src: Vec<u32>, fill: f32) -> Gather {
        Gather::from_inputs(src, &[0], fill)
    }

    /// The gather from several inputs: `src[i]` indexes their elements one
    /// input after another, input `k`'s first element at `starts[k]`
    /// (`starts[0]` is 0, at most [`MAX_GATHER_INPUTS`] of them).
    pub fn from_inputs(src: Vec<u32>, starts: &[usize], fill: f32) -> Gather {
        let input_of = |s: u32| match s {
            PAD => 0,
            _ => starts.partition_point(|&b| b <= s as usize) - 1,
        };
        // A stride joins two sources of one input that fit an i32 step;
        // padding joins padding.
        let step = |a: u32, b: u32| match (a, b) {
            (PAD, PAD) => Some(0),
            (PAD, _) | (_, PAD) => None,
            _ if input_of(a) != input_of(b) => None,
            _ => i32::try_from(b as i64 - a as i64).ok(),
        };
        let mut runs: Vec<Run> = vec![];
        let mut i = 0;
        while i < src.len() {
            let stride = src.get(i + 1).and_then(|&b| step(src[i], b)).unwrap_or(1);
            let mut end = i + 1;
            while end < src.len()
                && end - i < ELEMENTS_PER_TASK
                && step(src[end - 1], src[end]) == Some(stride)
            {
                end += 1;
            }
            let input = input_of(src[i]);
            runs.push(Run {
                dst: i as u32,
                src: match src[i] {
                    PAD => PAD,
                    s => s - starts[input] as u32,
                },
                len: (end - i) as u32,
                stride,
                input: input as u32,
            });
            i = end;
        }
        let mut tasks = vec![];
        let mut covered = 0;
        for (k, r) in runs.iter().enumerate() {
            if k == 0 || r.dst as usize >= covered + ELEMENTS_PER_TASK {
                tasks.push(k);
                covered = r.dst as usize;
            }
        }
        let mut src_ends = vec![0; starts.len()];
        for r in runs.iter().filter(|r| r.src != PAD) {
            let last = r.src as i64 + (r.len as i64 - 1) * r.stride as i64;
            let end = r.src.max(last as u32) as usize + 1;
            let input = &mut src_ends[r.input as usize];
            *input = end.max(*input);
        }
        Gather {
            runs,
            tasks,
            len: src.len(),
            src_ends,
            fill,
        }
    }

    /// Whether the gather moves nothing: the output is the input as it is.
    pub fn is_copy(&self, input_len: usize) -> bool {
        self.len == input_len
            && self.src_ends.len() == 1
            && self
                .runs
                .iter()
                .all(|r| r.src == r.dst && (r.stride == 1 || r.len == 1))
    }

    /// Copies the inputs `xs` into `y` run by run, filling padding; the runs
    /// are split over the threads.
    pub fn run(&self, xs: &[&[f32]], y: &mut [f32]) -> Result<(), String> {
        let fits = xs.len() == self.src_ends.len()
            && xs
                .iter()
                .zip(&self.src_ends)
                .all(|(x, &end)| x.len() >= end);
        if y.len() != self.len || !fits {
            return Err(format!(
                "a gather of {} elements from {:?} read {:?} and wrote {}",
                self.len,
                self.src_ends,
                xs.iter().map(|x| x.len()).collect::<Vec<_>>(),
                y.len()
            ));
        }
        let y_at = y.as_mut_ptr() as usize;
        (0..self.tasks.len()).into_par_iter().for_each(|t| {
            let end = self.tasks.get(t + 1).copied().unwrap_or(self.runs.len());
            for r in &self.runs[self.tasks[t]..end] {
                // SAFETY: the runs cover disjoint parts of `y` (checked to be
                // `len` long), so tasks never write the same element.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(
                        (y_at as *mut f32).add(r.dst as usize),
                        r.len as usize,
                    )
                };
                let (x, src) = (xs[r.input as usize], r.src as usize);
                match (r.src, r.stride) {
                    (PAD, _) => out.fill(self.fill),
                    (_, 1) => out.copy_from_slice(&x[src..src + out.len()]),
                    (_, 0) => out.fill(x[src]),
                    (_, stride) => {
                        for (k, o) in out.iter_mut().enumerate() {
                            *o = x[(src as isize + k as isize * stride as isize) as usize];
                        }
                    }
                }
            }
        });
        Ok(())
    }
}

/// Gather along one axis by run-time indices: data viewed as
/// `[outer][extent][inner]`, each index picks an `inner`-long row.
pub struct Rows {
    /// Product of the extents before the axis.
    pub outer: usize,
    /// Extent of the gathered axis.
    pub extent: usize,
    /// Product of the extents after the axis.
    pub inner: usize,
}

impl Rows {
    /// Copies the picked rows of `x` into `y`; an index outside the axis
    /// (after negative indices count from the end) is an error.
    pub fn run(&self, x: &[f32], indices: &[i64], y: &mut [f32]) -> Result<(), String> {
        let (extent, inner) = (self.extent as i64, self.inner);
        let mut out = y.chunks_exact_mut(inner.max(1));
        for o in 0..self.outer {
            for &i in indices {
                let row = if i < 0 { i + extent } else { i };
                if !(0..extent).contains(&row) {
                    return Err(format!(
                        "index {i} is out of range for an axis of extent {extent}"
                    ));
                }
                let at = (o * self.extent + row as usize) * inner;
                if let Some(dst) = out.next() {
                    dst.copy_from_slice(&x[at..at + inner]);
                }
            }
        }
        Ok(())
    }
}
