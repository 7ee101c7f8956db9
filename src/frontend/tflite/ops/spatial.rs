//! TensorFlow's rearrangements of space, depth and batch (DEPTH_TO_SPACE,
//! SPACE_TO_DEPTH, SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND), each a reshape, a
//! transpose and a reshape, and MIRROR_PAD.

use super::{schema, Cx, Res};
use crate::graph::{Op, PadMode, SliceAxis, ValueRef};
use crate::ops::{Concat, Pad, Reshape, Slice, Transpose};

impl Cx<'_, '_> {
    /// DEPTH_TO_SPACE of NHWC x with block b: channel (i * b + j) * C + c of
    /// pixel (h, w) moves to channel c of pixel (h * b + i, w * b + j), i.e.
    /// [N, H, W, b, b, C] → [N, H, b, W, b, C]; SPACE_TO_DEPTH (`to_space`
    /// false) is its inverse.
    pub(super) fn depth_space(&mut self, to_space: bool) -> Res<ValueRef> {
        let what = match to_space {
            true => "DepthToSpaceOptions",
            false => "SpaceToDepthOptions",
        };
        let o: schema::DepthToSpaceOptions = self.required_options(what)?;
        let x = self.input(0)?;
        let [n, h, w, c] = self.ty(x).shape[..] else {
            return Err(self.err(format!("input must be NHWC (rank 4), got {}", self.ty(x))));
        };
        let b = usize::try_from(o.block_size()).unwrap_or(0);
        let fits = match to_space {
            true => b > 0 && c.is_multiple_of(b * b),
            false => b > 0 && h.is_multiple_of(b) && w.is_multiple_of(b),
        };
        if !fits {
            return Err(self.err(format!(
                "block size {} must be positive and divide {}",
                o.block_size(),
                match to_space {
                    true => format!("the depth {c} by its square"),
                    false => format!("the height {h} and width {w}"),
                }
            )));
        }
        let (split, merged) = match to_space {
            true => (
                [n, h, w, b, b, c / (b * b)],
                vec![n, h * b, w * b, c / (b * b)],
            ),
            false => ([n, h / b, b, w / b, b, c], vec![n, h / b, w / b, b * b * c]),
        };
        // Swapping axes 2 and 3 is its own inverse.
        self.rearrange(x, split.to_vec(), vec![0, 1, 3, 2, 4, 5], merged)
    }

    /// SPACE_TO_BATCH_ND: the M spatial axes after the batch are padded, each
    /// split into (extent / block, block), and the block offsets moved in
    /// front of the batch: [B, s1/b1, b1, …, sM/bM, bM, rest…] →
    /// [b1, …, bM, B, s1/b1, …, sM/bM, rest…], merged to
    /// [b1·…·bM·B, s1/b1, …, rest…].
    pub(super) fn space_to_batch(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let rank = self.rank(x);
        let block = self.block_shape(rank)?;
        let m = block.len();
        let pads = self.const_extents(2, "paddings")?;
        if pads.len() != 2 * m {
            return Err(self.err(format!("paddings {pads:?} must be [{m}, 2] values")));
        }
        let (mut begins, mut ends) = (vec![0; rank], vec![0; rank]);
        for k in 0..m {
            (begins[k + 1], ends[k + 1]) = (pads[2 * k] as i64, pads[2 * k + 1] as i64);
        }
        let x = match pads.iter().any(|&p| p > 0) {
            true => {
                let pad = Op::Pad(Pad {
                    begins,
                    ends,
                    mode: PadMode::Constant(0.0),
                });
                self.emit(pad, "pad", &[x])?
            }
            false => x,
        };
        let padded = self.ty(x).shape.clone();
        let mut split = vec![padded[0]];
        for (k, &b) in block.iter().enumerate() {
            let e = padded[k + 1];
            if !e.is_multiple_of(b) {
                return Err(self.err(format!(
                    "padded extent {e} of axis {} is not a multiple of its block {b}",
                    k + 1
                )));
            }
            split.extend([e / b, b]);
        }
        split.extend(&padded[m + 1..]);
        let perm: Vec<usize> = ((0..m).map(|k| 2 + 2 * k))
            .chain([0])
            .chain((0..m).map(|k| 1 + 2 * k))
            .chain(1 + 2 * m..split.len())
            .collect();
        let merged: Vec<usize> = [padded[0] * block.iter().product::<usize>()]
            .into_iter()
            .chain((0..m).map(|k| padded[k + 1] / block[k]))
            .chain(padded[m + 1..].iter().copied())
            .collect();
        self.rearrange(x, split, perm, merged)
    }

    /// BATCH_TO_SPACE_ND, the inverse of SPACE_TO_BATCH_ND: the batch split
    /// into [b1, …, bM, B'], each block offset moved behind its spatial axis,
    /// merged, and the spatial axes cropped.
    pub(super) fn batch_to_space(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let shape = self.ty(x).shape.clone();
        let block = self.block_shape(shape.len())?;
        let m = block.len();
        let crops = self.const_extents(2, "crops")?;
        let blocks: usize = block.iter().product();
        if crops.len() != 2 * m || !shape[0].is_multiple_of(blocks) {
            return Err(self.err(format!(
                "crops {crops:?} must be [{m}, 2] values and the batch {} a multiple of {blocks}",
                shape[0]
            )));
        }
        let batch = shape[0] / blocks;
        let split: Vec<usize> = (block.iter().copied())
            .chain([batch])
            .chain(shape[1..].iter().copied())
            .collect();
        let perm: Vec<usize> = [m]
            .into_iter()
            .chain((0..m).flat_map(|k| [m + 1 + k, k]))
            .chain(2 * m + 1..split.len())
            .collect();
        let merged: Vec<usize> = [batch]
            .into_iter()
            .chain((0..m).map(|k| shape[k + 1] * block[k]))
            .chain(shape[m + 1..].iter().copied())
            .collect();
        let mut axes = vec![];
        for k in 0..m {
            let (extent, begin, end) = (merged[k + 1], crops[2 * k], crops[2 * k + 1]);
            if begin + end > extent {
                return Err(self.err(format!(
                    "crops {begin} and {end} exceed the extent {extent} of axis {}",
                    k + 1
                )));
            }
            if begin + end > 0 {
                axes.push(SliceAxis {
                    axis: k + 1,
                    start: begin as i64,
                    end: (extent - end) as i64,
                    step: 1,
                });
            }
        }
        let y = self.rearrange(x, split, perm, merged)?;
        match axes.is_empty() {
            true => Ok(y),
            false => self.emit(Op::Slice(Slice { axes }), "crop", &[y]),
        }
    }

    /// The block shape (input 1) of a space/batch rearrangement of a tensor of
    /// rank `rank`: positive, one extent per spatial axis after the batch.
    fn block_shape(&mut self, rank: usize) -> Res<Vec<usize>> {
        let block = self.const_extents(1, "block_shape")?;
        if block.is_empty() || block.len() >= rank || block.contains(&0) {
            return Err(self.err(format!(
                "block_shape {block:?} must be positive extents of 1 to {} spatial axes",
                rank.saturating_sub(1)
            )));
        }
        Ok(block)
    }

    /// x reshaped to `split`, transposed by `perm` and reshaped to `merged`.
    fn rearrange(
        &mut self,
        x: ValueRef,
        split: Vec<usize>,
        perm: Vec<usize>,
        merged: Vec<usize>,
    ) -> Res<ValueRef> {
        let y = self.emit(Op::Reshape(Reshape { shape: split }), "split", &[x])?;
        let y = self.emit(Op::Transpose(Transpose { perm }), "interleave", &[y])?;
        self.emit(Op::Reshape(Reshape { shape: merged }), "merge", &[y])
    }

    /// MIRROR_PAD: REFLECT mirrors without the edge (a reflecting Pad),
    /// SYMMETRIC with it: per padded axis, the first `before` and the last
    /// `after` elements reversed, concatenated on either side.
    pub(super) fn mirror_pad(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let shape = self.ty(x).shape.clone();
        let p = self.const_extents(1, "paddings")?;
        let symmetric = (self.options::<schema::MirrorPadOptions>()).is_some_and(|o| o.mode() == 1);
        // A reflection leaves the edge out, so it reaches one element less.
        let reach = |n: usize| if symmetric { n } else { n.saturating_sub(1) };
        let fits = shape.iter().enumerate().all(|(a, &n)| {
            (p.get(2 * a..2 * a + 2)).is_some_and(|b| b[0] <= reach(n) && b[1] <= reach(n))
        });
        if p.len() != 2 * shape.len() || !fits {
            return Err(self.err(format!(
                "paddings {p:?} must be [{}, 2] values, each at most {} the extent of its axis (shape {shape:?})",
                shape.len(),
                if symmetric { "" } else { "one less than" }
            )));
        }
        let (begins, ends): (Vec<i64>, Vec<i64>) =
            (p.chunks(2)).map(|b| (b[0] as i64, b[1] as i64)).unzip();
        if !symmetric || p.iter().all(|&v| v == 0) {
            let pad = Op::Pad(Pad {
                begins,
                ends,
                mode: PadMode::Reflect,
            });
            return self.emit(pad, "mirror_pad", &[x]);
        }
        let mut y = x;
        for (axis, (&before, &after)) in begins.iter().zip(&ends).enumerate() {
            if before == 0 && after == 0 {
                continue;
            }
            let n = shape[axis] as i64;
            let reversed = |start: i64, end: i64| {
                Op::Slice(Slice {
                    axes: vec![SliceAxis {
                        axis,
                        start,
                        end,
                        step: -1,
                    }],
                })
            };
            let mut parts = vec![];
            if before > 0 {
                parts.push(self.emit(reversed(before - 1, -1), "mirror_before", &[y])?);
            }
            parts.push(y);
            if after > 0 {
                parts.push(self.emit(reversed(n - 1, n - 1 - after), "mirror_after", &[y])?);
            }
            y = self.emit(Op::Concat(Concat { axis }), "mirror", &parts)?;
        }
        Ok(y)
    }
}
