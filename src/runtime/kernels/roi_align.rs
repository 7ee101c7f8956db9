//! RoiAlign over a row-major f32 feature map: each region's samples (corner
//! offsets and weights) come from the op's own rule
//! (`RoiAlign::region_samples`), tabled once per region and applied to every
//! channel, so the coordinate arithmetic is paid once per sample, not once per
//! sample and channel. Regions run in parallel.

use super::KernelError;
use crate::core::par;
use crate::ops::{RegionSamples, RoiAlign};

/// A RoiAlign of fixed shapes.
#[derive(Debug)]
pub struct RoiAligner {
    op: RoiAlign,
    images: usize,
    channels: usize,
    height: usize,
    width: usize,
    regions: usize,
}

impl RoiAligner {
    /// The kernel for feature map `x` (N, C, H, W) and `regions` regions.
    pub fn new(op: &RoiAlign, x: &[usize], regions: usize) -> RoiAligner {
        RoiAligner {
            op: op.clone(),
            images: x[0],
            channels: x[1],
            height: x[2],
            width: x[3],
            regions,
        }
    }

    /// Pools the regions `rois` (R, 4) of the images `batch` names from `x`
    /// into `out` (R, C, output height, output width).
    pub fn run(
        &self,
        x: &[f32],
        rois: &[f32],
        batch: &[i64],
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        let (channels, plane) = (self.channels, self.height * self.width);
        let bins = self.op.output.0 * self.op.output.1;
        let expected = [
            self.images * channels * plane,
            self.regions * 4,
            self.regions,
            self.regions * channels * bins,
        ];
        if [x.len(), rois.len(), batch.len(), out.len()] != expected {
            return Err(KernelError::Buffers {
                kernel: "roi align",
                given: vec![x.len(), rois.len(), batch.len(), out.len()],
                expected: expected.to_vec(),
            });
        }
        // Every region is checked before any runs, so a bad one fails the step
        // whole and the parallel loop cannot fail.
        let images = batch
            .iter()
            .enumerate()
            .map(|(r, &index)| RoiAlign::image_of(r, index, self.images))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| KernelError::Value(e.to_string()))?;
        let mut tables = vec![RegionSamples::default(); self.regions];
        for (r, table) in tables.iter_mut().enumerate() {
            let roi = &rois[r * 4..][..4];
            self.op
                .region_samples(roi, self.height, self.width, table)
                .map_err(|e| KernelError::Value(e.to_string()))?;
        }
        let at = out.as_mut_ptr() as usize;
        par::for_each(self.regions, |r| {
            let table = &tables[r];
            let n = images[r];
            let start = r * channels * bins;
            // SAFETY: each task writes its own region's run of `out`, whose
            // length is checked above and which the loop borrows mutably
            // until every task has finished.
            let dst = unsafe {
                std::slice::from_raw_parts_mut((at as *mut f32).add(start), channels * bins)
            };
            for (c, dst) in dst.chunks_exact_mut(bins).enumerate() {
                let image = &x[(n * channels + c) * plane..][..plane];
                for (bin, d) in dst.iter_mut().enumerate() {
                    let samples = &table.samples[bin * table.per_bin..][..table.per_bin];
                    *d = self.op.pool(samples, table.count, |i| image[i]);
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Tensor, TensorData, ValueType};
    use crate::ops::{OpDef, RoiPool};
    use crate::runtime::test_support::Rng;

    /// Both modes and coordinate rules, fixed and adaptive grids, regions
    /// inside, across and beyond the edges, reversed and of another image:
    /// the kernel as the reference computes.
    #[test]
    fn pools_as_the_reference_does() {
        let mut rng = Rng(11);
        let x_shape = vec![2, 3, 6, 5];
        let x = Tensor::from_f32(x_shape.clone(), rng.f32s(180));
        let regions: [[f32; 4]; 5] = [
            [0.5, 0.5, 3.5, 4.0],
            [-2.0, -1.5, 7.0, 8.0],
            [4.0, 3.0, 1.0, 0.5],
            [9.0, 9.0, 12.0, 13.0],
            [1.0, 2.0, 1.2, 2.1],
        ];
        let rois = Tensor::from_f32(vec![5, 4], regions.concat());
        let batch = Tensor::new(vec![5], TensorData::I64(vec![0, 1, 1, 0, 1]));
        for mode in [RoiPool::Avg, RoiPool::Max] {
            for half_pixel in [false, true] {
                for sampling_ratio in [0, 2] {
                    let op = RoiAlign {
                        mode,
                        output: (3, 2),
                        sampling_ratio,
                        spatial_scale: 0.75,
                        half_pixel,
                    };
                    let types =
                        [&x, &rois, &batch].map(|t| ValueType::new(t.dtype(), t.shape.clone()));
                    let out_ty = op.infer(&[&types[0], &types[1], &types[2]]).unwrap();
                    let want = op.eval(&[&x, &rois, &batch], &out_ty).unwrap()[0].to_f32();
                    let mut got = vec![f32::NAN; want.len()];
                    RoiAligner::new(&op, &x_shape, 5)
                        .run(&x.f32s(), &rois.f32s(), &[0, 1, 1, 0, 1], &mut got)
                        .unwrap();
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                            "{op:?} at {i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_region_of_an_image_outside_the_batch_is_refused() {
        let op = RoiAlign {
            mode: RoiPool::Avg,
            output: (1, 1),
            sampling_ratio: 1,
            spatial_scale: 1.0,
            half_pixel: true,
        };
        let mut out = [0.0; 2];
        let err = RoiAligner::new(&op, &[1, 1, 2, 2], 2)
            .run(&[0.0; 4], &[0.0; 8], &[0, 1], &mut out)
            .unwrap_err();
        assert!(err.to_string().contains("region 1 names image 1"), "{err}");
    }
}
