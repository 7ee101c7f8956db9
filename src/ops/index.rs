//! Index arithmetic shared by the ops: source indices for broadcasting, strided
//! views and per-axis maps, runs of sliding-window index maps, and joining data of
//! any dtype.

use crate::core::{numel, strides, Rearrange, Tensor, TensorData};
use crate::ops::{OpError, Window};
use std::ops::Range;

/// `base + Σ idx[i] * steps[i]` for every multi-index of `shape`, in row-major order.
/// Steps may be zero (broadcast) or negative (reversed slice). Computed as they
/// are read: a table of them would be a fresh `usize` per element, twice the
/// memory of the f32 tensor it indexes (the weights' transposes of a TFLite
/// import were mostly the page faults of that table).
pub(super) fn affine_indices(shape: &[usize], base: isize, steps: &[isize]) -> AffineIndices {
    let inner = shape.last().copied().unwrap_or(1);
    AffineIndices {
        shape: shape.to_vec(),
        steps: steps.to_vec(),
        idx: vec![0; shape.len()],
        cur: base,
        run_left: inner,
        left: numel(shape),
    }
}

/// The iterator of [`affine_indices`]: an odometer over the outer axes, a
/// plain step along the innermost.
pub(super) struct AffineIndices {
    shape: Vec<usize>,
    steps: Vec<isize>,
    /// The multi-index of the next element (its innermost entry unused).
    idx: Vec<usize>,
    /// The next element's index.
    cur: isize,
    /// Elements left in the current innermost run.
    run_left: usize,
    /// Elements left in all.
    left: usize,
}

impl Iterator for AffineIndices {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.cur as usize;
        let Some((&inner, outer)) = self.shape.split_last() else {
            return Some(at);
        };
        self.run_left -= 1;
        if self.run_left > 0 {
            self.cur += self.steps[outer.len()];
            return Some(at);
        }
        // The run is done: back to its start, then one step of the odometer.
        self.run_left = inner;
        self.cur -= self.steps[outer.len()] * (inner as isize - 1);
        for ax in (0..outer.len()).rev() {
            self.idx[ax] += 1;
            self.cur += self.steps[ax];
            if self.idx[ax] < outer[ax] {
                break;
            }
            self.cur -= self.steps[ax] * outer[ax] as isize;
            self.idx[ax] = 0;
        }
        Some(at)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for AffineIndices {}

/// A row-major tensor of `shape` with its axes permuted, output axis k being
/// input axis `perm[k]` (`perm` a permutation of the axes). Copied in runs
/// where the innermost axis stays innermost, else in square tiles of the two
/// innermost axes of input and output, so that both sides stream through the
/// caches (a per-element walk reads the weights of a TFLite conv, OHWI into
/// OIHW, a cache line per element).
pub(super) struct PermuteAxes<'a> {
    pub shape: &'a [usize],
    pub perm: &'a [usize],
}

impl Rearrange for PermuteAxes<'_> {
    fn apply<T: Copy>(self, v: &[T]) -> Vec<T> {
        let Some(&first) = v.first() else {
            return Vec::new();
        };
        let (shape, perm) = merge_axes(self.shape, self.perm);
        let rank = shape.len();
        let mut out = vec![first; v.len()];
        if rank < 2 {
            out.copy_from_slice(v);
            return out;
        }
        let in_strides = strides(&shape);
        let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let out_strides = strides(&out_shape);
        // Output axes `rows` (the input's innermost) and `cols` (the output's)
        // make the tile; the rest step as an odometer.
        let cols = rank - 1;
        let rows = perm
            .iter()
            .position(|&p| p == rank - 1)
            .expect("a permutation");
        let (n_rows, n_cols) = (out_shape[rows], out_shape[cols]);
        let (row_step, col_step) = (out_strides[rows], in_strides[perm[cols]]);
        let others: Vec<usize> = (0..rank).filter(|&k| k != rows && k != cols).collect();
        let mut idx = vec![0; others.len()];
        let (mut src, mut dst) = (0, 0);
        const TILE: usize = 16;
        let tile_len = if rows == cols {
            n_cols
        } else {
            n_rows * n_cols
        };
        for _ in 0..v.len() / tile_len {
            if rows == cols {
                out[dst..dst + n_cols].copy_from_slice(&v[src..src + n_cols]);
            } else {
                for r0 in (0..n_rows).step_by(TILE) {
                    for c0 in (0..n_cols).step_by(TILE) {
                        for r in r0..(r0 + TILE).min(n_rows) {
                            let (o, i) = (dst + r * row_step, src + r);
                            for c in c0..(c0 + TILE).min(n_cols) {
                                out[o + c] = v[i + c * col_step];
                            }
                        }
                    }
                }
            }
            for (d, &k) in others.iter().enumerate().rev() {
                idx[d] += 1;
                src += in_strides[perm[k]];
                dst += out_strides[k];
                if idx[d] < out_shape[k] {
                    break;
                }
                src -= in_strides[perm[k]] * out_shape[k];
                dst -= out_strides[k] * out_shape[k];
                idx[d] = 0;
            }
        }
        out
    }
}

/// `shape` and `perm` without axes of extent 1, and with input axes that stay
/// neighbours in the output merged into one: the same permutation of the same
/// elements, on the fewest axes.
fn merge_axes(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let kept: Vec<usize> = (0..shape.len()).filter(|&a| shape[a] != 1).collect();
    let renumbered: Vec<usize> = (perm.iter())
        .filter_map(|&a| kept.iter().position(|&k| k == a))
        .collect();
    // Runs of consecutive input axes, in output order.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &a in &renumbered {
        match groups.last_mut() {
            Some(g) if g.last() == Some(&(a.wrapping_sub(1))) => g.push(a),
            _ => groups.push(vec![a]),
        }
    }
    let mut by_input: Vec<usize> = (0..groups.len()).collect();
    by_input.sort_by_key(|&g| groups[g][0]);
    let merged_shape = (by_input.iter())
        .map(|&g| groups[g].iter().map(|&a| shape[kept[a]]).product())
        .collect();
    let merged_perm = (0..groups.len())
        .map(|g| by_input.iter().position(|&h| h == g).expect("every group"))
        .collect();
    (merged_shape, merged_perm)
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
    affine_indices(out_shape, 0, &steps).collect()
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
        let all = |shape: &[usize], base, steps: &[isize]| {
            affine_indices(shape, base, steps).collect::<Vec<_>>()
        };
        assert_eq!(all(&[3, 2], 0, &[1, 3]), vec![0, 3, 1, 4, 2, 5]);
        // Reversed vector of 4.
        assert_eq!(all(&[4], 3, &[-1]), vec![3, 2, 1, 0]);
        assert_eq!(all(&[], 7, &[]), vec![7]);
        assert!(all(&[2, 0], 0, &[1, 1]).is_empty());
        // Three axes, one broadcast and one reversed.
        let want: Vec<usize> = (0..2usize)
            .flat_map(|a| (0..3usize).flat_map(move |b| (0..4usize).map(move |c| (a, b, c))))
            .map(|(a, _, c)| 20 + a * 7 - c * 2)
            .collect();
        assert_eq!(all(&[2, 3, 4], 20, &[7, 0, -2]), want);
    }

    #[test]
    fn permuted_axes_match_the_walk_of_every_element() {
        let shapes: [&[usize]; 5] = [
            &[2, 3, 1, 4],
            &[3, 40, 1, 37],
            &[1, 1, 5, 1],
            &[17, 33],
            &[6],
        ];
        for shape in shapes {
            let v: Vec<u32> = (0..numel(shape) as u32).collect();
            let rank = shape.len();
            let mut perm: Vec<usize> = (0..rank).collect();
            // Every permutation, in lexicographic order.
            loop {
                let in_strides = strides(shape);
                let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
                let steps: Vec<isize> = perm.iter().map(|&p| in_strides[p] as isize).collect();
                let want: Vec<u32> = affine_indices(&out_shape, 0, &steps)
                    .map(|i| v[i])
                    .collect();
                let permute = PermuteAxes { shape, perm: &perm };
                assert_eq!(permute.apply(&v), want, "shape {shape:?} perm {perm:?}");
                let Some(k) = (0..rank.saturating_sub(1))
                    .rev()
                    .find(|&k| perm[k] < perm[k + 1])
                else {
                    break;
                };
                let l = (k + 1..rank)
                    .rev()
                    .find(|&l| perm[l] > perm[k])
                    .expect("a larger one");
                perm.swap(k, l);
                perm[k + 1..].reverse();
            }
        }
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
