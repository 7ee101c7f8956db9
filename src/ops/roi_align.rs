//! RoiAlign (ONNX opset 10; opset 16 adds `coordinate_transformation_mode`),
//! the region pooling of Mask R-CNN: region `r` (x1, y1, x2, y2 in input
//! pixels times `spatial_scale`) of image `batch_indices[r]` is cut into
//! output_height × output_width bins, and each bin is the average (or the
//! largest) of bilinear samples on a regular grid of `sampling_ratio`² points
//! in it; with `sampling_ratio` 0 each axis takes ceil(bin extent) points.
//!
//! The arithmetic is the specification reference's and onnxruntime's, in f32:
//! a sample more than one pixel outside the image reads zero, one less far
//! out is clamped to the edge; the max mode takes, per sample, the largest of
//! its four weighted corners rather than their sum; a bin divides by its grid
//! size even where that grid has no points (a region with x2 < x1).

use super::onnx::*;
use super::shape::expect_inputs;
use super::*;
use crate::core::TensorData;

/// How RoiAlign pools a bin's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoiPool {
    /// Their mean.
    Avg,
    /// The largest weighted corner of any sample.
    Max,
}

/// RoiAlign: x (N, C, H, W), rois (R, 4), batch_indices (R) -> (R, C,
/// output_height, output_width).
#[derive(Clone, Debug, PartialEq)]
pub struct RoiAlign {
    /// How a bin's samples are pooled.
    pub mode: RoiPool,
    /// Bins per region: (height, width).
    pub output: (usize, usize),
    /// Sample points per bin along each axis; 0 for ceil(bin extent).
    pub sampling_ratio: usize,
    /// What region coordinates are multiplied by to give input pixels.
    pub spatial_scale: f32,
    /// Whether pixel centres lie at half-integers (opset 16's `half_pixel`):
    /// the region is shifted by −0.5 and not widened to one pixel.
    pub half_pixel: bool,
}

/// One bilinear sample: the offsets of its four corners in an image plane
/// and their weights (all zero for a sample outside the image).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Corners {
    /// Offsets: (low y, low x), (low y, high x), (high y, low x), (high y, high x).
    pub at: [usize; 4],
    /// The corners' weights, in the same order.
    pub w: [f32; 4],
}

/// The most bilinear samples one region may take (a bin grid this large
/// means coordinates far outside any feature map).
const MAX_REGION_SAMPLES: i64 = 1 << 22;

/// The samples of one region, bin by bin in output order.
#[derive(Clone, Debug, Default)]
pub struct RegionSamples {
    /// Every bin's samples, `per_bin` each.
    pub samples: Vec<Corners>,
    /// Samples in each bin.
    pub per_bin: usize,
    /// What a bin's sum is divided by in the average mode.
    pub count: f32,
}

impl RoiAlign {
    /// The samples of region `roi` (x1, y1, x2, y2) over an image of
    /// `height` × `width` pixels into `into`; an error where the region
    /// cannot be sampled (a coordinate that is not finite, a grid past
    /// [`MAX_REGION_SAMPLES`]).
    pub fn region_samples(
        &self,
        roi: &[f32],
        height: usize,
        width: usize,
        into: &mut RegionSamples,
    ) -> Result<(), OpError> {
        if let Some(v) = roi.iter().find(|v| !v.is_finite()) {
            return Err(OpError::Value(format!(
                "region {roi:?} has a coordinate {v} that is not finite"
            )));
        }
        let (out_h, out_w) = self.output;
        let offset = if self.half_pixel { 0.5 } else { 0.0 };
        let [x1, y1, x2, y2] = [0, 1, 2, 3].map(|k| roi[k] * self.spatial_scale - offset);
        let (mut extent_h, mut extent_w) = (y2 - y1, x2 - x1);
        if !self.half_pixel {
            extent_h = extent_h.max(1.0);
            extent_w = extent_w.max(1.0);
        }
        let (bin_h, bin_w) = (extent_h / out_h as f32, extent_w / out_w as f32);
        // The grid as the specification computes it: a negative extent gives
        // a negative grid, no points and yet a positive divisor.
        let grid = |bin: f32| match self.sampling_ratio {
            0 => bin.ceil() as i64,
            s => s as i64,
        };
        let (grid_h, grid_w) = (grid(bin_h), grid(bin_w));
        let (points_h, points_w) = (grid_h.max(0), grid_w.max(0));
        let bins = (out_h * out_w) as i64;
        let total = points_h.saturating_mul(points_w).saturating_mul(bins);
        if total > MAX_REGION_SAMPLES {
            return Err(OpError::TooLarge(format!(
                "region {roi:?} takes more than {MAX_REGION_SAMPLES} bilinear samples \
                 ({out_h}x{out_w} bins of {bin_h} x {bin_w} pixels)"
            )));
        }
        into.samples.clear();
        into.per_bin = (points_h * points_w) as usize;
        into.count = grid_h.saturating_mul(grid_w).max(1) as f32;
        let (h, w) = (height as f32, width as f32);
        for ph in 0..out_h {
            for pw in 0..out_w {
                for iy in 0..points_h {
                    let y = y1 + ph as f32 * bin_h + (iy as f32 + 0.5) * bin_h / grid_h as f32;
                    for ix in 0..points_w {
                        let x = x1 + pw as f32 * bin_w + (ix as f32 + 0.5) * bin_w / grid_w as f32;
                        let outside = y < -1.0 || y > h || x < -1.0 || x > w;
                        into.samples.push(match outside {
                            true => Corners::default(),
                            false => corners(y, x, height, width),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// One bin's value from its samples over an image plane read by `at`.
    #[inline]
    pub fn pool<T>(&self, samples: &[Corners], count: f32, at: impl Fn(usize) -> T) -> T
    where
        T: Copy + PartialOrd + From<f32> + std::ops::Add<Output = T> + std::ops::Mul<Output = T>,
        T: std::ops::Div<Output = T>,
    {
        let weighted = |s: &Corners, k: usize| T::from(s.w[k]) * at(s.at[k]);
        // x86's and C++'s max: the first operand unless the second is larger.
        let max = |a: T, b: T| if a < b { b } else { a };
        match self.mode {
            RoiPool::Avg => {
                let sum = samples.iter().fold(T::from(0.0), |acc, s| {
                    acc + weighted(s, 0) + weighted(s, 1) + weighted(s, 2) + weighted(s, 3)
                });
                sum / T::from(count)
            }
            RoiPool::Max => {
                let largest = |s: &Corners| {
                    let low = max(weighted(s, 0), weighted(s, 1));
                    max(low, max(weighted(s, 2), weighted(s, 3)))
                };
                let mut it = samples.iter();
                let first = it.next().map_or(T::from(0.0), largest);
                it.fold(first, |m, s| max(m, largest(s)))
            }
        }
    }

    /// The image each region reads, checked against the batch of `images`.
    pub fn image_of(region: usize, index: i64, images: usize) -> Result<usize, OpError> {
        usize::try_from(index)
            .ok()
            .filter(|&n| n < images)
            .ok_or_else(|| {
                OpError::Value(format!(
                    "region {region} names image {index}, outside the batch of {images}"
                ))
            })
    }
}

/// The bilinear corners of point (y, x), at most one pixel outside an image
/// of `height` × `width`: clamped to the edge as the specification does.
fn corners(y: f32, x: f32, height: usize, width: usize) -> Corners {
    // (low, high, the point) along one axis.
    let axis = |v: f32, extent: usize| {
        let v = v.max(0.0);
        let low = v as usize;
        match low >= extent - 1 {
            true => (extent - 1, extent - 1, (extent - 1) as f32),
            false => (low, low + 1, v),
        }
    };
    let (y_low, y_high, y) = axis(y, height);
    let (x_low, x_high, x) = axis(x, width);
    let (ly, lx) = (y - y_low as f32, x - x_low as f32);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Corners {
        at: [
            y_low * width + x_low,
            y_low * width + x_high,
            y_high * width + x_low,
            y_high * width + x_high,
        ],
        w: [hy * hx, hy * lx, ly * hx, ly * lx],
    }
}

impl OpDef for RoiAlign {
    fn name(&self) -> &'static str {
        "RoiAlign"
    }

    /// Opset 16 added the coordinate mode (half_pixel by default).
    fn min_onnx_opset(&self) -> i64 {
        match self.half_pixel {
            true => 16,
            false => 10,
        }
    }

    fn operand_names(&self) -> &'static [&'static str] {
        &["X", "rois", "batch_indices"]
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 3, 3)?;
        let (x, rois, batch) = (inputs[0], inputs[1], inputs[2]);
        if !x.dtype.is_float() || rois.dtype != x.dtype || batch.dtype.integer_range().is_none() {
            return Err(OpError::DType(format!(
                "X and rois must be floats of one type and batch_indices integers, got {}, {} and {}",
                x.dtype, rois.dtype, batch.dtype
            )));
        }
        if x.shape.len() != 4 {
            return Err(OpError::Shape(format!(
                "X {:?} is not (N, C, H, W)",
                x.shape
            )));
        }
        let regions = rois.shape.first().copied().unwrap_or(0);
        if rois.shape.len() != 2 || rois.shape[1] != 4 || batch.shape != [regions] {
            return Err(OpError::Shape(format!(
                "rois {:?} and batch_indices {:?} are not (R, 4) and (R)",
                rois.shape, batch.shape
            )));
        }
        if x.shape[2] == 0 || x.shape[3] == 0 {
            return Err(OpError::Shape(format!(
                "X {:?} has no pixels to sample",
                x.shape
            )));
        }
        let (out_h, out_w) = self.output;
        if out_h == 0 || out_w == 0 {
            return Err(OpError::Attribute(format!(
                "output_height and output_width must be positive, got {out_h} and {out_w}"
            )));
        }
        let out = vec![regions, x.shape[1], out_h, out_w];
        Ok(vec![ValueType::new(x.dtype, out)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let (data, rois, batch) = (x[0], x[1].data.to_f64(), x[2].data.to_i64());
        let [images, channels, height, width] = data.shape[..] else {
            unreachable!("checked by infer")
        };
        let xs = data.data.to_f64();
        let bins = self.output.0 * self.output.1;
        let plane = height * width;
        let mut out = vec![0.0; outputs[0].numel()];
        let mut region = RegionSamples::default();
        for (r, &index) in batch.iter().enumerate() {
            let n = RoiAlign::image_of(r, index, images)?;
            let roi: Vec<f32> = rois[r * 4..][..4].iter().map(|&v| v as f32).collect();
            self.region_samples(&roi, height, width, &mut region)?;
            for c in 0..channels {
                let image = &xs[(n * channels + c) * plane..][..plane];
                for bin in 0..bins {
                    let samples = &region.samples[bin * region.per_bin..][..region.per_bin];
                    out[(r * channels + c) * bins + bin] =
                        self.pool(samples, region.count, |i| image[i]);
                }
            }
        }
        let data = TensorData::from_f64(outputs[0].dtype, out);
        Ok(vec![Tensor::new(outputs[0].shape.clone(), data)])
    }

    /// Four multiply-adds per sample; the adaptive grid is not known ahead,
    /// so one sample per bin is counted.
    fn flops(&self, _ins: &[&ValueType], outs: &[&ValueType]) -> f64 {
        let per_bin = self.sampling_ratio.max(1).pow(2) as f64;
        outs.first()
            .map_or(0.0, |o| 8.0 * per_bin * o.numel() as f64)
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let mode = match self.mode {
            RoiPool::Avg => "avg",
            RoiPool::Max => "max",
        };
        let mut attrs = vec![
            ("mode", Attr::Str(mode)),
            ("output_height", Attr::Int(self.output.0 as i64)),
            ("output_width", Attr::Int(self.output.1 as i64)),
            ("sampling_ratio", Attr::Int(self.sampling_ratio as i64)),
            ("spatial_scale", Attr::Float(self.spatial_scale)),
        ];
        if cx.b.opset() >= 16 {
            let transform = match self.half_pixel {
                true => "half_pixel",
                false => "output_half_pixel",
            };
            attrs.push(("coordinate_transformation_mode", Attr::Str(transform)));
        }
        cx.single("RoiAlign", cx.inputs, attrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(mode: RoiPool, sampling_ratio: usize, half_pixel: bool) -> RoiAlign {
        RoiAlign {
            mode,
            output: (2, 2),
            sampling_ratio,
            spatial_scale: 1.0,
            half_pixel,
        }
    }

    #[test]
    fn samples_are_clamped_at_the_edge_and_zero_beyond_it() {
        let mut s = RegionSamples::default();
        // One sample per bin of a 4x4 region over a 3x3 image: bin centres
        // at 1 and 3; 3 lies on the last pixel, clamped there.
        op(RoiPool::Avg, 1, false)
            .region_samples(&[0.0, 0.0, 4.0, 4.0], 3, 3, &mut s)
            .unwrap();
        assert_eq!((s.per_bin, s.count, s.samples.len()), (1, 1.0, 4));
        assert_eq!(s.samples[0].at, [4, 5, 7, 8]);
        assert_eq!(s.samples[0].w, [1.0, 0.0, 0.0, 0.0]);
        assert_eq!(s.samples[3].at, [8; 4]);
        // A region far to the left: every sample outside reads nothing.
        op(RoiPool::Avg, 2, true)
            .region_samples(&[-9.0, 0.0, -5.0, 2.0], 3, 3, &mut s)
            .unwrap();
        assert!(s.samples.iter().all(|c| c.w == [0.0; 4]));
    }

    #[test]
    fn the_adaptive_grid_follows_the_bin_extent_and_bad_regions_are_refused() {
        let mut s = RegionSamples::default();
        // Bins of 2.5 pixels take 3 points along each axis.
        let align = op(RoiPool::Max, 0, false);
        align
            .region_samples(&[0.0, 0.0, 5.0, 5.0], 8, 8, &mut s)
            .unwrap();
        assert_eq!((s.per_bin, s.samples.len()), (9, 36));
        // x2 < x1 with half_pixel: bins of −3 pixels, a grid of −3 by −3,
        // no points, and yet a divisor of 9.
        op(RoiPool::Avg, 0, true)
            .region_samples(&[7.0, 7.0, 1.0, 1.0], 8, 8, &mut s)
            .unwrap();
        assert_eq!((s.per_bin, s.count), (0, 9.0));
        let err = align.region_samples(&[0.0, 0.0, 1e30, 1.0], 8, 8, &mut s);
        assert!(err.unwrap_err().to_string().contains("samples"));
        let err = align.region_samples(&[f32::NAN, 0.0, 1.0, 1.0], 8, 8, &mut s);
        assert!(err.unwrap_err().to_string().contains("not finite"));
        let err = RoiAlign::image_of(3, 2, 2).unwrap_err();
        assert!(err.to_string().contains("region 3"));
    }

    #[test]
    fn max_takes_the_largest_weighted_corner() {
        let image = [1.0f32, 2.0, 3.0, 4.0];
        let s = Corners {
            at: [0, 1, 2, 3],
            w: [0.25; 4],
        };
        assert_eq!(
            op(RoiPool::Max, 1, false).pool(&[s], 1.0, |i| image[i]),
            1.0
        );
        assert_eq!(
            op(RoiPool::Avg, 1, false).pool(&[s, s], 2.0, |i| image[i]),
            2.5
        );
        // No samples: 0, in both modes.
        assert_eq!(op(RoiPool::Max, 1, false).pool(&[], 1.0, |i| image[i]), 0.0);
    }
}
