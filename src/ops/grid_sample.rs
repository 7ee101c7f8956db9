//! GridSample (ONNX opset 16, and opset 20's form over any number of spatial
//! axes): output position `p` of image `(n, c)` samples input image `(n, c)`
//! at the point `grid[n, p]` names, each coordinate normalized to [-1, 1],
//! the innermost spatial axis first (x, then y, then z).
//!
//! The sample is separable: along each axis a coordinate gives 1 (nearest),
//! 2 (linear) or 4 (cubic) taps, and an output is `Σ w_0 · w_1 · … · x[i_0,
//! i_1, …]` over every combination. Taps that leave the input read zero
//! (`zeros`), the edge (`border`) or their mirror image (`reflection`), as the
//! specification's reference does: the coordinate is first clamped or
//! reflected into the sampling region, then each tap's index is. Weights of
//! zero are kept, so an infinity or NaN under a tap spreads as it does there.
//! A NaN coordinate samples NaN.

use super::onnx::*;
use super::resize::cubic;
use super::shape::expect_inputs;
use super::*;
use crate::core::TensorData;

/// How GridSample weighs the input around a sampled point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// The nearest input element.
    Nearest,
    /// Linear along each axis (bilinear, trilinear).
    Linear,
    /// Keys cubic along each axis, coefficient -0.75.
    Cubic,
}

/// What GridSample reads for taps outside the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridPadding {
    /// Zero.
    Zeros,
    /// The nearest element on the edge.
    Border,
    /// The element mirrored at the edge.
    Reflection,
}

/// GridSample: x (N, C, spatial…), grid (N, out spatial…, spatial) -> (N, C,
/// out spatial…).
#[derive(Clone, Debug, PartialEq)]
pub struct GridSample {
    /// How the input is weighed around each point.
    pub mode: Sampling,
    /// What taps outside the input read.
    pub padding: GridPadding,
    /// Whether -1 and 1 are the centres of the edge elements (true) or their
    /// outer edges (false).
    pub align_corners: bool,
    /// How many spatial axes are sampled: 2 for images, 3 for volumes.
    pub spatial: usize,
}

/// The cubic coefficient of GridSample (fixed by the specification).
const CUBIC_A: f64 = -0.75;

/// The taps along one axis: input position and weight, at most 4.
#[derive(Clone, Copy, Debug)]
pub struct AxisSample {
    taps: [(usize, f32); 4],
    len: usize,
}

impl AxisSample {
    /// The taps, in input order.
    pub fn taps(&self) -> &[(usize, f32)] {
        &self.taps[..self.len]
    }

    fn push(&mut self, tap: Option<usize>, weight: f32) {
        if let Some(i) = tap {
            self.taps[self.len] = (i, weight);
            self.len += 1;
        }
    }
}

impl GridSample {
    /// The taps for normalized coordinate `g` along an axis of `extent` ≥ 1
    /// input positions.
    pub fn axis_taps(&self, g: f32, extent: usize) -> AxisSample {
        let mut s = AxisSample {
            taps: [(0, 0.0); 4],
            len: 0,
        };
        let d = extent as f64;
        // The region whose samples stay inside: edge centres or outer edges.
        let (lo, hi) = match self.align_corners {
            true => (0.0, d - 1.0),
            false => (-0.5, d - 0.5),
        };
        let g = g as f64;
        let mut x = match self.align_corners {
            true => (g + 1.0) / 2.0 * (d - 1.0),
            false => ((g + 1.0) * d - 1.0) / 2.0,
        } as f32;
        if self.mode == Sampling::Nearest {
            // Ties to even along every axis, as PyTorch rounds.
            x = x.round_ties_even();
        }
        if x.is_nan() {
            s.push(Some(0), f32::NAN);
            return s;
        }
        let xf = x as f64;
        if xf < lo || xf > hi {
            x = match self.padding {
                GridPadding::Zeros => x,
                GridPadding::Border => xf.clamp(0.0, d - 1.0) as f32,
                GridPadding::Reflection => reflect(xf, lo, hi) as f32,
            };
        }
        // An input index resolved by the padding rule (None reads zero).
        let at = |i: i64| -> Option<usize> {
            let last = extent as i64 - 1;
            match self.padding {
                GridPadding::Zeros => (0..=last).contains(&i).then_some(i as usize),
                GridPadding::Border => Some(i.clamp(0, last) as usize),
                // Truncated as the reference does; the clamp only guards
                // rounding at the region's ends.
                GridPadding::Reflection => {
                    Some((reflect(i as f64, lo, hi) as i64).clamp(0, last) as usize)
                }
            }
        };
        if self.mode == Sampling::Nearest {
            s.push(at(x as i64), 1.0);
            return s;
        }
        let x0 = x.floor();
        let t = (x - x0) as f64;
        let x0 = x0 as i64;
        match self.mode {
            Sampling::Linear => {
                s.push(at(x0), (1.0 - t) as f32);
                s.push(at(x0.saturating_add(1)), t as f32);
            }
            _ => {
                let distances = [t + 1.0, t, 1.0 - t, 2.0 - t];
                for (k, dist) in distances.into_iter().enumerate() {
                    s.push(
                        at(x0.saturating_add(k as i64 - 1)),
                        cubic(CUBIC_A, dist) as f32,
                    );
                }
            }
        }
        s
    }

    /// The taps of one output position into `taps`, as (element offset in an
    /// input image of shape `extents`, weight): `point` is its grid entry,
    /// innermost axis first.
    pub fn position_taps(&self, point: &[f32], extents: &[usize], taps: &mut Vec<(usize, f32)>) {
        taps.clear();
        taps.push((0, 1.0));
        let r = extents.len();
        for (a, &extent) in extents.iter().enumerate() {
            let axis = self.axis_taps(point[r - 1 - a], extent);
            let before = taps.len();
            for k in 0..before {
                let (offset, w) = taps[k];
                for &(i, wa) in axis.taps() {
                    taps.push((offset * extent + i, w * wa));
                }
            }
            taps.drain(..before);
        }
    }
}

/// `x` mirrored at `lo` and `hi` until it lies between them.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (beyond, near, far) = match x < lo {
        true => (lo - x, lo, hi),
        false if x > hi => (x - hi, hi, lo),
        false => return x,
    };
    let flips = (beyond / range).trunc();
    let rest = beyond - flips * range;
    // An even number of whole flips lands back on the near side.
    let toward = |from: f64, to: f64| if to > from { from + rest } else { from - rest };
    match flips % 2.0 == 0.0 {
        true => toward(near, far),
        false => toward(far, near),
    }
}

impl OpDef for GridSample {
    fn name(&self) -> &'static str {
        "GridSample"
    }

    /// Opset 16 samples images only; 20 any number of axes.
    fn min_onnx_opset(&self) -> i64 {
        match self.spatial {
            2 => 16,
            _ => 20,
        }
    }

    fn operand_names(&self) -> &'static [&'static str] {
        &["X", "Grid"]
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 2, 2)?;
        let (x, grid) = (inputs[0], inputs[1]);
        let r = self.spatial;
        if !x.dtype.is_float() || !grid.dtype.is_float() {
            return Err(OpError::DType(format!(
                "X and grid must be floats, got {} and {}",
                x.dtype, grid.dtype
            )));
        }
        if r == 0 || x.shape.len() != r + 2 {
            return Err(OpError::Shape(format!(
                "X {:?} is not (N, C) and {r} spatial axes",
                x.shape
            )));
        }
        if grid.shape.len() != r + 2 || grid.shape[0] != x.shape[0] || grid.shape[r + 1] != r {
            return Err(OpError::Shape(format!(
                "grid {:?} is not (N = {}, {r} output axes, {r})",
                grid.shape, x.shape[0]
            )));
        }
        if let Some(a) = x.shape[2..].iter().position(|&e| e == 0) {
            return Err(OpError::Shape(format!(
                "X {:?} has no elements to sample on spatial axis {a}",
                x.shape
            )));
        }
        let out = [&x.shape[..2], &grid.shape[1..=r]].concat();
        Ok(vec![ValueType::new(x.dtype, out)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let (data, grid) = (x[0], x[1]);
        let (images, channels) = (data.shape[0], data.shape[1]);
        let extents = &data.shape[2..];
        let image: usize = extents.iter().product();
        let positions: usize = outputs[0].shape[2..].iter().product();
        let r = self.spatial;
        let xs = data.data.to_f64();
        let points: Vec<f32> = grid.data.to_f64().iter().map(|&v| v as f32).collect();
        let mut out = vec![0.0; images * channels * positions];
        let mut taps = vec![];
        for n in 0..images {
            for p in 0..positions {
                let at = (n * positions + p) * r;
                self.position_taps(&points[at..at + r], extents, &mut taps);
                for c in 0..channels {
                    let plane = &xs[(n * channels + c) * image..][..image];
                    out[(n * channels + c) * positions + p] =
                        taps.iter().map(|&(i, w)| w as f64 * plane[i]).sum();
                }
            }
        }
        let data = TensorData::from_f64(outputs[0].dtype, out);
        Ok(vec![Tensor::new(outputs[0].shape.clone(), data)])
    }

    /// Each tap is a multiply and an add.
    fn flops(&self, _ins: &[&ValueType], outs: &[&ValueType]) -> f64 {
        let per_axis: usize = match self.mode {
            Sampling::Nearest => 1,
            Sampling::Linear => 2,
            Sampling::Cubic => 4,
        };
        let taps = per_axis.pow(self.spatial as u32) as f64;
        outs.first().map_or(0.0, |o| 2.0 * taps * o.numel() as f64)
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        // Opset 20 renamed bilinear and bicubic.
        let renamed = cx.b.opset() >= 20;
        let mode = match (self.mode, renamed) {
            (Sampling::Nearest, _) => "nearest",
            (Sampling::Linear, true) => "linear",
            (Sampling::Linear, false) => "bilinear",
            (Sampling::Cubic, true) => "cubic",
            (Sampling::Cubic, false) => "bicubic",
        };
        let padding = match self.padding {
            GridPadding::Zeros => "zeros",
            GridPadding::Border => "border",
            GridPadding::Reflection => "reflection",
        };
        let attrs = vec![
            ("mode", Attr::Str(mode)),
            ("padding_mode", Attr::Str(padding)),
            ("align_corners", Attr::Int(self.align_corners as i64)),
        ];
        cx.single("GridSample", cx.inputs, attrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(mode: Sampling, padding: GridPadding, align_corners: bool) -> GridSample {
        GridSample {
            mode,
            padding,
            align_corners,
            spatial: 2,
        }
    }

    #[test]
    fn reflection_mirrors_at_both_ends_any_number_of_times() {
        assert_eq!(reflect(-1.0, 0.0, 3.0), 1.0);
        assert_eq!(reflect(4.0, 0.0, 3.0), 2.0);
        // Past one whole range: mirrored twice, back on the near side.
        assert_eq!(reflect(-4.0, 0.0, 3.0), 2.0);
        assert_eq!(reflect(7.5, 0.0, 3.0), 1.5);
        assert_eq!(reflect(1.25, 0.0, 3.0), 1.25);
        assert_eq!(reflect(-9.0, 0.0, 0.0), 0.0);
    }

    #[test]
    fn linear_taps_follow_the_padding_rule() {
        // Extent 4, not aligned: g = -1 is x = -0.5, between taps -1 and 0.
        let taps = |p, g| op(Sampling::Linear, p, false).axis_taps(g, 4);
        assert_eq!(taps(GridPadding::Zeros, -1.0).taps(), &[(0, 0.5)]);
        assert_eq!(
            taps(GridPadding::Border, -1.0).taps(),
            &[(0, 0.5), (0, 0.5)]
        );
        assert_eq!(
            taps(GridPadding::Reflection, -1.0).taps(),
            &[(0, 0.5), (0, 0.5)]
        );
        // g = -1.375 is x = -1.25, outside the region: no tap reads for
        // zeros, border clamps the point to 0, reflection mirrors it to 0.25.
        assert_eq!(taps(GridPadding::Zeros, -1.375).taps(), &[]);
        assert_eq!(
            taps(GridPadding::Border, -1.375).taps(),
            &[(0, 1.0), (1, 0.0)]
        );
        let mirrored = [(0, 0.75), (1, 0.25)];
        assert_eq!(taps(GridPadding::Reflection, -1.375).taps(), &mirrored);
    }

    #[test]
    fn cubic_weights_sum_to_one_and_nan_samples_nan() {
        let s = op(Sampling::Cubic, GridPadding::Border, true).axis_taps(0.3, 7);
        let sum: f32 = s.taps().iter().map(|t| t.1).sum();
        assert_eq!(s.taps().len(), 4);
        assert!((sum - 1.0).abs() < 1e-6, "{sum}");
        let s = op(Sampling::Linear, GridPadding::Zeros, false).axis_taps(f32::NAN, 3);
        assert!(s.taps()[0].1.is_nan());
        // Far outside: no tap reads, whatever the size of the coordinate.
        let far = op(Sampling::Cubic, GridPadding::Zeros, false).axis_taps(1e30, 3);
        assert!(far.taps().is_empty());
    }
}
