//! GridSample over row-major f32 tensors: every output position's taps
//! (offset in an input image, weight) come from the op's own tap rule
//! (`GridSample::position_taps`), tabled once per block of positions and
//! applied to every channel of the image, so the coordinate arithmetic is
//! paid once per position, not once per output element. Blocks of one image
//! run in parallel.

use super::KernelError;
use crate::core::par;
use crate::ops::GridSample;

/// Output positions whose taps are tabled together.
const BLOCK: usize = 256;

/// A GridSample of fixed shapes.
#[derive(Debug)]
pub struct GridSampler {
    op: GridSample,
    images: usize,
    channels: usize,
    /// The input's spatial extents.
    extents: Vec<usize>,
    /// Output positions per image.
    positions: usize,
}

impl GridSampler {
    /// The sampler of input `x` (N, C, spatial…) into output `out` (N, C,
    /// output spatial…).
    pub fn new(op: &GridSample, x: &[usize], out: &[usize]) -> GridSampler {
        GridSampler {
            op: op.clone(),
            images: x[0],
            channels: x[1],
            extents: x[2..].to_vec(),
            positions: out[2..].iter().product(),
        }
    }

    /// Samples `x` at the points of `grid` (N, output spatial…, spatial) into `out`.
    pub fn run(&self, x: &[f32], grid: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
        let (r, positions, channels) = (self.extents.len(), self.positions, self.channels);
        let image: usize = self.extents.iter().product();
        let blocks = positions.div_ceil(BLOCK);
        let expected =
            [image * channels, positions * r, positions * channels].map(|n| n * self.images);
        if [x.len(), grid.len(), out.len()] != expected {
            return Err(KernelError::Buffers {
                kernel: "grid sample",
                given: vec![x.len(), grid.len(), out.len()],
                expected: expected.to_vec(),
            });
        }
        let at = out.as_mut_ptr() as usize;
        par::for_each(self.images * blocks, |task| {
            let (n, block) = (task / blocks, task % blocks);
            let start = block * BLOCK;
            let len = BLOCK.min(positions - start);
            let (mut bounds, mut taps, mut one) = (vec![0], vec![], vec![]);
            for p in start..start + len {
                let point = &grid[(n * positions + p) * r..][..r];
                self.op.position_taps(point, &self.extents, &mut one);
                taps.extend_from_slice(&one);
                bounds.push(taps.len());
            }
            for c in 0..channels {
                let plane = &x[(n * channels + c) * image..][..image];
                let row = (n * channels + c) * positions + start;
                // SAFETY: the tasks write disjoint runs (one image's block of
                // positions per channel) inside `out`, whose length is checked above, which
                // the loop borrows mutably until every task has finished.
                let dst = unsafe { std::slice::from_raw_parts_mut((at as *mut f32).add(row), len) };
                for (k, d) in dst.iter_mut().enumerate() {
                    let taps = &taps[bounds[k]..bounds[k + 1]];
                    *d = taps.iter().fold(0.0, |s, &(i, w)| s + w * plane[i]);
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Tensor, ValueType};
    use crate::ops::{GridPadding, OpDef, Sampling};
    use crate::runtime::test_support::Rng;

    /// Every mode and padding, images and volumes, aligned or not, points
    /// inside and beyond the input: the kernel as the reference computes.
    #[test]
    fn samples_as_the_reference_does() {
        let mut rng = Rng(7);
        for (spatial, x_shape, out) in [
            (2, vec![2, 3, 5, 4], vec![3, 7]),
            (3, vec![1, 2, 3, 4, 2], vec![2, 2, 3]),
        ] {
            for mode in [Sampling::Nearest, Sampling::Linear, Sampling::Cubic] {
                for padding in [
                    GridPadding::Zeros,
                    GridPadding::Border,
                    GridPadding::Reflection,
                ] {
                    for align_corners in [false, true] {
                        let op = GridSample {
                            mode,
                            padding,
                            align_corners,
                            spatial,
                        };
                        let grid_shape = [&[x_shape[0]][..], &out, &[spatial]].concat();
                        let x =
                            Tensor::from_f32(x_shape.clone(), rng.f32s(x_shape.iter().product()));
                        let g = Tensor::from_f32(
                            grid_shape.clone(),
                            rng.f32s(grid_shape.iter().product())
                                .iter()
                                .map(|v| v * 1.6)
                                .collect(),
                        );
                        let types = [&x, &g].map(|t| ValueType::new(t.dtype(), t.shape.clone()));
                        let out_ty = op.infer(&[&types[0], &types[1]]).unwrap();
                        let want = op.eval(&[&x, &g], &out_ty).unwrap()[0].to_f32();
                        let mut got = vec![f32::NAN; want.len()];
                        GridSampler::new(&op, &x_shape, &out_ty[0].shape)
                            .run(&x.f32s(), &g.f32s(), &mut got)
                            .unwrap();
                        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                                "{op:?} at {i}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}
