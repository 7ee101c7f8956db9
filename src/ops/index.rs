//! Index arithmetic shared by the ops: source indices for broadcasting, strided
//! views and per-axis maps, runs of sliding-window index maps, and joining data of
//! any dtype.

use crate::core::{numel, strides, Tensor, TensorData};
use crate::ops::{OpError, Window};
use std::ops::Range;

/// `base + Σ idx[i] * steps[i]` for every multi-index of `shape`, in row-major order.
/// Steps may be zero (broadcast) or negative (reversed slice).
pub(super) fn affine_indices(shape: &[usize], base: isize, steps: &[isize]) -> Vec<usize> {
    let n = numel(shape);
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let Some((&inner, outer_shape)) = shape.split_last() else {
        out.push(base as usize);
        return out;
    };
    let step = steps[outer_shape.len()];
    // The innermost axis is a tight loop; the outer axes step as an odometer.
    let mut idx = vec![0usize; outer_shape.len()];
    let mut cur = base;
    for _ in 0..n / inner {
        out.extend((0..inner as isize).map(|j| (cur + j * step) as usize));
        // Odometer increment, keeping `cur` in step with `idx`.
        for ax in (0..outer_shape.len()).rev() {
            idx[ax] += 1;
            cur += steps[ax];
            if idx[ax] < outer_shape[ax] {
                break;
            }
            cur -= steps[ax] * outer_shape[ax] as isize;
            idx[ax] = 0;
        }
    }
    out
}

/// For every element of `out_shape`, the flat index of the element of a tensor of
/// shape `in_shape` that numpy broadcasting maps to it. `in_shape` must broadcast.
pub(super) fn broadcast_indices(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let lead = out_shape.len() - in_shape.len();
    let in_strides = strides(in_shape);
    let steps: Vec<isize> = (0..out_shape.len())
        .map(|i| {
            if i < lead || in_shape[i - lead] == 1 {
                0
            } else {
                in_strides[i - lead] as isize
            }
        })
        .collect();
    affine_indices(out_shape, 0, &steps)
}

/// Builds a tensor whose element at multi-index `o` is `x` at
/// `(maps[0][o_0], maps[1][o_1], ...)`; `None` in any map selects `fill`
/// (converted to x's dtype). The output shape is the map lengths.
pub(super) fn gather_axes(
    x: &Tensor,
    maps: &[Vec<Option<usize>>],
    fill: f64,
) -> Result<Tensor, OpError> {
    let shape: Vec<usize> = maps.iter().map(Vec::len).collect();
    let in_strides = strides(&x.shape);
    // Per axis and output coordinate: the contribution to the source index.
    let parts: Vec<Vec<Option<usize>>> = maps
        .iter()
        .zip(&in_strides)
        .map(|(m, &s)| m.iter().map(|c| c.map(|c| c * s)).collect())
        .collect();
    let fill_index = x.numel();
    let mut uses_fill = false;
    let mut src = Vec::with_capacity(numel(&shape));
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..numel(&shape) {
        let s = idx
            .iter()
            .zip(&parts)
            .try_fold(0, |acc, (&i, p)| p[i].map(|c| acc + c));
        src.push(s.unwrap_or_else(|| {
            uses_fill = true;
            fill_index
        }));
        for ax in (0..shape.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < shape[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    let data = if uses_fill {
        let fill = TensorData::from_f64(x.dtype(), vec![fill]);
        TensorData::concat(&[&x.data, &fill])?.gather(src.into_iter())
    } else {
        x.data.gather(src.into_iter())
    };
    Ok(Tensor::new(shape, data))
}

/// The positions `p` in `0..p_len` whose image `p * stride + offset` lies in `0..q_len`.
fn valid_range(p_len: usize, q_len: usize, stride: usize, offset: isize) -> Range<usize> {
    let s = stride as isize;
    let lo = if offset >= 0 {
        0
    } else {
        (-offset + s - 1) / s
    };
    let room = q_len as isize - offset;
    let hi = if room <= 0 { 0 } else { (room + s - 1) / s };
    let hi = (hi as usize).min(p_len);
    (lo as usize).min(hi)..hi
}

/// Walks the in-bounds part of the per-axis index map `q_i = p_i * strides[i] +
/// offsets[i]` from a grid of shape `p_shape` into one of shape `q_shape`, one run
/// along the last axis at a time: `f(p, q, len)` means the flat positions
/// `p, p+1, .., p+len-1` map to `q, q+s, .., q+(len-1)*s` with `s` the last stride.
/// This is the core of convolution, transposed convolution and pooling.
pub(super) fn for_each_run(
    p_shape: &[usize],
    q_shape: &[usize],
    steps: &[usize],
    offsets: &[isize],
    mut f: impl FnMut(usize, usize, usize),
) {
    let r = p_shape.len();
    let ranges: Vec<Range<usize>> = (0..r)
        .map(|i| valid_range(p_shape[i], q_shape[i], steps[i], offsets[i]))
        .collect();
    if r == 0 || ranges.iter().any(|rg| rg.is_empty()) {
        return;
    }
    let (p_strides, q_strides) = (strides(p_shape), strides(q_shape));
    let last = &ranges[r - 1];
    let mut idx: Vec<usize> = ranges[..r - 1].iter().map(|rg| rg.start).collect();
    loop {
        let (mut p, mut q) = (last.start * p_strides[r - 1], 0isize);
        for (i, &pi) in idx.iter().enumerate() {
            p += pi * p_strides[i];
            q += (pi * steps[i]) as isize * q_strides[i] as isize
                + offsets[i] * q_strides[i] as isize;
        }
        q += (last.start * steps[r - 1]) as isize + offsets[r - 1];
        f(p, q as usize, last.len());
        // Next outer position, within the valid ranges.
        let mut ax = r - 1;
        loop {
            if ax == 0 {
                return;
            }
            ax -= 1;
            idx[ax] += 1;
            if idx[ax] < ranges[ax].end {
                break;
            }
            idx[ax] = ranges[ax].start;
        }
    }
}

/// Per kernel position (row-major over the kernel), the offset
/// `k * dilation - pad_begin` of every spatial axis.
pub(super) fn kernel_offsets(w: &Window) -> Vec<Vec<isize>> {
    let r = w.spatial_rank();
    let mut all = vec![vec![]];
    for ax in 0..r {
        all = all
            .into_iter()
            .flat_map(|prefix: Vec<isize>| {
                (0..w.kernel[ax]).map(move |k| {
                    let mut v = prefix.clone();
                    v.push((k * w.dilations[ax]) as isize - w.pad_begin(ax) as isize);
                    v
                })
            })
            .collect();
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_indices_transpose_and_reverse() {
        // Transpose of a 2x3 matrix: steps (1, 3) over shape (3, 2).
        assert_eq!(affine_indices(&[3, 2], 0, &[1, 3]), vec![0, 3, 1, 4, 2, 5]);
        // Reversed vector of 4.
        assert_eq!(affine_indices(&[4], 3, &[-1]), vec![3, 2, 1, 0]);
        assert_eq!(affine_indices(&[], 7, &[]), vec![7]);
        assert!(affine_indices(&[2, 0], 0, &[1, 1]).is_empty());
    }

    #[test]
    fn broadcast_indices_follow_numpy() {
        // [3,1] against [2,3,2]: element (a,b,c) reads row b.
        assert_eq!(
            broadcast_indices(&[3, 1], &[2, 3, 2]),
            vec![0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]
        );
    }

    #[test]
    fn runs_cover_exactly_the_in_bounds_pairs() {
        // 1-D: p in 0..4, q = 2p - 1 in 0..6 → p = 1, 2, 3 (q = 1, 3, 5).
        let mut seen = vec![];
        for_each_run(&[4], &[6], &[2], &[-1], |p, q, len| seen.push((p, q, len)));
        assert_eq!(seen, vec![(1, 1, 3)]);
        // 2-D brute force comparison.
        let (ps, qs, st, off) = (
            [3usize, 4usize],
            [5usize, 5usize],
            [2usize, 1usize],
            [-1isize, 2isize],
        );
        let mut got = vec![];
        for_each_run(&ps, &qs, &st, &off, |p, q, len| {
            got.extend((0..len).map(|t| (p + t, q + t * st[1])))
        });
        let mut want = vec![];
        for a in 0..ps[0] {
            for b in 0..ps[1] {
                let (qa, qb) = ((a * st[0]) as isize + off[0], (b * st[1]) as isize + off[1]);
                if (0..5).contains(&qa) && (0..5).contains(&qb) {
                    want.push((a * ps[1] + b, (qa * 5 + qb) as usize));
                }
            }
        }
        assert_eq!(got, want);
    }
}
