//! Resize (ONNX opset 13+ semantics, through opset 19's antialias and
//! half_pixel_symmetric). Each output coordinate maps back to an input coordinate
//! through the coordinate transformation; nearest picks one input element per
//! axis (any dtype), linear and cubic filter axis by axis in f64, which equals the
//! n-dimensional filter because its weights are a product of per-axis weights.
//! Taps outside the input repeat its border (or weigh nothing with
//! exclude_outside); tf_crop_and_resize writes its extrapolation value where the
//! source coordinate leaves the input.

use super::index::gather_axes;
use super::onnx::*;
use super::pad_flow::*;
use super::shape::*;
use super::*;
use crate::core::{Tensor, TensorData, ValueType};
use crate::ops::{CoordTransform, NearestMode, Resize, ResizeMode};

impl OpDef for Resize {
    fn name(&self) -> &'static str {
        "Resize"
    }

    /// Antialiasing came with opset 18, half_pixel_symmetric with 19.
    fn min_onnx_opset(&self) -> i64 {
        match (self.coord, self.filter.antialias) {
            (CoordTransform::HalfPixelSymmetric, _) => 19,
            (_, true) => 18,
            _ => 17,
        }
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let r = self;

        let x = sole_input(inputs)?;
        if r.scales.len() != x.shape.len() || r.sizes.len() != x.shape.len() {
            return Err(OpError::Shape(format!(
                "scales {:?} / sizes {:?} do not match shape {:?}",
                r.scales, r.sizes, x.shape
            )));
        }
        Ok(vec![ValueType::new(x.dtype, r.sizes.clone())])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let r = self;
        Ok(vec![resize(r, x[0], out)?])
    }

    /// Nearest picks input elements; the other modes weigh several, and
    /// tf_crop_and_resize writes a value of its own outside the input.
    fn moves_data(&self) -> bool {
        self.mode == ResizeMode::Nearest && self.crop.is_none()
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    /// Axes it filters must be unblocked; a blocked axis must be left as it
    /// is, each position read from itself, so its padding stays apart.
    fn runs_in(&self, l: &Layout, ins: &[&ValueType]) -> bool {
        let r = self;
        let kept = |a: usize| {
            let n = ins[0].shape[a];
            r.sizes[a] == n && r.axis_taps(a, n, n).is_ok_and(|t| is_identity(&t, n))
        };
        (0..r.scales.len()).all(|a| unblocked(l, &[a]) || kept(a))
    }

    /// Padding sits only on axes left as they are (`runs_in`), so each padding
    /// element is computed from padding elements alone: nearest copies them,
    /// a weighted sum of zeros is 0, and tf_crop_and_resize writes its
    /// extrapolation value there too where it leaves the input.
    fn pad_flow(&self, inputs: &[PadValue], _padded: &[usize]) -> PadFlow {
        let mut flow = pass_through(inputs);
        let kept = self.mode == ResizeMode::Nearest || flow.output.is(0.0);
        let extrapolated = self.crop.as_ref().map(|c| PadValue::Known(c.1));
        if !kept || extrapolated.is_some_and(|e| e != flow.output) {
            flow.output = PadValue::Undef;
        }
        flow
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let r = self;

        let shape = &cx.in_types[0].shape;
        // Scales reproduce the sizes exactly when floor(extent * scale)
        // gives them (as the importer computes them); otherwise sizes.
        let by_scales = shape
            .iter()
            .zip(&r.scales)
            .zip(&r.sizes)
            .all(|((&d, &s), &n)| (d as f64 * s as f64).floor() as usize == n);
        let roi = match &r.crop {
            Some((per_axis, _)) => {
                let starts = per_axis.iter().map(|p| p.0);
                let ends = per_axis.iter().map(|p| p.1);
                let t = Tensor::from_f32(vec![2 * per_axis.len()], starts.chain(ends).collect());
                cx.b.constant("roi", &t)
            }
            None => String::new(),
        };
        let mut ins = vec![cx.input(0), roi];
        if by_scales {
            let t = Tensor::from_f32(vec![r.scales.len()], r.scales.clone());
            ins.push(cx.b.constant("scales", &t));
        } else {
            ins.push(String::new());
            ins.push(cx.b.ints("sizes", &i64s(&r.sizes)));
        }
        let mode = match r.mode {
            ResizeMode::Nearest => "nearest",
            ResizeMode::Linear => "linear",
            ResizeMode::Cubic => "cubic",
        };
        let coord = match r.coord {
            CoordTransform::HalfPixel => "half_pixel",
            CoordTransform::PytorchHalfPixel => "pytorch_half_pixel",
            CoordTransform::AlignCorners => "align_corners",
            CoordTransform::Asymmetric => "asymmetric",
            CoordTransform::HalfPixelSymmetric => "half_pixel_symmetric",
            CoordTransform::TfCropAndResize => "tf_crop_and_resize",
        };
        let nearest = match r.nearest {
            NearestMode::RoundPreferFloor => "round_prefer_floor",
            NearestMode::RoundPreferCeil => "round_prefer_ceil",
            NearestMode::Floor => "floor",
            NearestMode::Ceil => "ceil",
        };
        let mut attrs = vec![
            ("mode", Attr::Str(mode)),
            ("coordinate_transformation_mode", Attr::Str(coord)),
            ("nearest_mode", Attr::Str(nearest)),
            ("cubic_coeff_a", Attr::Float(r.filter.cubic_a)),
            (
                "exclude_outside",
                Attr::Int(r.filter.exclude_outside as i64),
            ),
            (
                "extrapolation_value",
                Attr::Float(r.crop.as_ref().map_or(0.0, |c| c.1)),
            ),
        ];
        // Opset 17 has no antialias attribute: runtimes refuse it there.
        if r.filter.antialias {
            attrs.push(("antialias", Attr::Int(1)));
        }
        cx.single("Resize", &ins, attrs)
    }
}

/// The input coordinate of output coordinate `o` along axis `ax`.
fn source_coord(r: &Resize, ax: usize, o: usize, in_len: usize, out_len: usize) -> f64 {
    let (o, n, scale) = (o as f64, in_len as f64, r.scales[ax] as f64);
    match r.coord {
        CoordTransform::HalfPixel => (o + 0.5) / scale - 0.5,
        CoordTransform::PytorchHalfPixel if out_len > 1 => (o + 0.5) / scale - 0.5,
        CoordTransform::PytorchHalfPixel => 0.0,
        // The resized length is in_len * scale, which need not be whole (the
        // spec's reference implementation divides by it, not by the floored size).
        CoordTransform::AlignCorners if out_len > 1 => o * (n - 1.0) / (n * scale - 1.0),
        CoordTransform::AlignCorners => 0.0,
        CoordTransform::Asymmetric => o / scale,
        CoordTransform::HalfPixelSymmetric => {
            let adjustment = out_len as f64 / (scale * n);
            n / 2.0 * (1.0 - adjustment) + (o + 0.5) / scale - 0.5
        }
        CoordTransform::TfCropAndResize => {
            let (start, end) = r.crop.as_ref().map_or((0.0, 1.0), |c| c.0[ax]);
            let (start, end) = (start as f64, end as f64);
            match out_len > 1 {
                true => start * (n - 1.0) + o * (end - start) * (n - 1.0) / (out_len as f64 - 1.0),
                false => 0.5 * (start + end) * (n - 1.0),
            }
        }
    }
}

fn round_nearest(mode: NearestMode, x: f64) -> f64 {
    let half = x - x.floor() == 0.5;
    match mode {
        NearestMode::RoundPreferFloor if half => x.floor(),
        NearestMode::RoundPreferCeil if half => x.ceil(),
        NearestMode::RoundPreferFloor | NearestMode::RoundPreferCeil => x.round(),
        NearestMode::Floor => x.floor(),
        NearestMode::Ceil => x.ceil(),
    }
}

/// The keys cubic kernel with coefficient `a` at distance `d` ≥ 0.
pub(super) fn cubic(a: f64, d: f64) -> f64 {
    if d < 1.0 {
        ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    } else if d < 2.0 {
        ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    } else {
        0.0
    }
}

/// The weighted input elements of source coordinate `x` on an axis of
/// `n` elements: the filter's taps around x, normalised to sum 1. The tap
/// left of x is the element below it (the one at x itself when x is whole
/// counts as the right one, as in the spec's reference implementation);
/// with anti-aliasing a downscale by `scale` widens the support by 1 / scale.
fn taps(r: &Resize, x: f64, n: usize, scale: f64) -> Vec<(usize, f64)> {
    let f = r.filter;
    let s = if f.antialias { scale.min(1.0) } else { 1.0 };
    let base = x.ceil() - 1.0;
    let ratio = x - base;
    let (reach, kernel): (f64, &dyn Fn(f64) -> f64) = match r.mode {
        ResizeMode::Cubic => (2.0, &|d| cubic(f.cubic_a as f64, d)),
        _ => (1.0, &|d: f64| (1.0 - d).max(0.0)),
    };
    // Taps base + i for i in start..end: the support, symmetric about x.
    let start = (-reach / s).floor() as i64 + 1;
    let end = 2 - start;
    let mut taps: Vec<(usize, f64)> = Vec::with_capacity((end - start) as usize);
    for i in start..end {
        let w = kernel(((i as f64 - ratio) * s).abs());
        let at = base as i64 + i;
        if f.exclude_outside && !(0..n as i64).contains(&at) {
            continue;
        }
        taps.push((at.clamp(0, n as i64 - 1) as usize, w));
    }
    let sum: f64 = taps.iter().map(|t| t.1).sum();
    if sum != 0.0 {
        taps.iter_mut().for_each(|t| t.1 /= sum);
    }
    taps
}

/// Where the output positions along one axis read from: per position, its
/// input positions with their non-zero weights (in nearest mode one of weight
/// 1), or `None` where tf_crop_and_resize maps it outside the input (the output
/// is then the extrapolation value). The reference and the compiled kernel
/// share these tables, so both skip the same zero-weight taps (a NaN or an
/// infinity there does not reach the output).
pub type AxisTaps = Vec<Option<Vec<(usize, f64)>>>;

impl Resize {
    /// The taps of axis `ax`, resized from `n` to `m` positions.
    pub fn axis_taps(&self, ax: usize, n: usize, m: usize) -> Result<AxisTaps, OpError> {
        let r = self;
        let scale = *r
            .scales
            .get(ax)
            .ok_or_else(|| OpError::Attribute(format!("Resize has no scale for axis {ax}")))?;
        if !(scale > 0.0 && scale.is_finite()) {
            return Err(OpError::Attribute(format!(
                "scale {scale} of axis {ax} is not a positive number"
            )));
        }
        if n == 0 && m > 0 {
            return Err(OpError::Shape(format!(
                "cannot resize the empty axis {ax} to {m}"
            )));
        }
        let last = n.saturating_sub(1);
        // Only tf_crop_and_resize extrapolates; the others clamp to the border.
        let outside = |c: f64| r.crop.is_some() && (c < 0.0 || c > last as f64);
        let taps_at = |o: usize| {
            let c = source_coord(r, ax, o, n, m);
            if outside(c) {
                return None;
            }
            Some(match r.mode {
                ResizeMode::Nearest => {
                    let c = c.clamp(0.0, last as f64);
                    vec![((round_nearest(r.nearest, c) as usize).min(last), 1.0)]
                }
                // An axis left as it is reads its own position.
                _ if scale == 1.0 && n == m && r.crop.is_none() => vec![(o, 1.0)],
                _ => {
                    let mut t = taps(r, c, n, scale as f64);
                    t.retain(|&(_, w)| w != 0.0);
                    t
                }
            })
        };
        Ok((0..m).map(taps_at).collect())
    }
}

/// Whether taps of an axis of `n` positions keep it: as many positions, each
/// read from itself alone, unweighted.
pub fn is_identity(taps: &AxisTaps, n: usize) -> bool {
    taps.len() == n
        && taps
            .iter()
            .enumerate()
            .all(|(o, t)| t.as_deref() == Some(&[(o, 1.0)]))
}

pub(super) fn resize(r: &Resize, x: &Tensor, out: &ValueType) -> Result<Tensor, OpError> {
    let axes: Vec<AxisTaps> = (0..x.rank())
        .map(|ax| r.axis_taps(ax, x.shape[ax], out.shape[ax]))
        .collect::<Result<_, _>>()?;
    let resized = match r.mode {
        ResizeMode::Nearest => {
            let maps: Vec<Vec<Option<usize>>> = axes
                .iter()
                .map(|a| a.iter().map(|t| t.as_ref().map(|t| t[0].0)).collect())
                .collect();
            gather_axes(x, &maps, 0.0)?
        }
        ResizeMode::Linear | ResizeMode::Cubic => {
            let mut shape = x.shape.clone();
            let mut v = x.data.to_f64();
            for (ax, axis_taps) in axes.iter().enumerate() {
                if is_identity(axis_taps, shape[ax]) {
                    continue;
                }
                v = interpolate_axis(&v, &shape, ax, axis_taps);
                shape[ax] = axis_taps.len();
            }
            Tensor::new(out.shape.clone(), TensorData::from_f64(out.dtype, v))
        }
    };
    let Some((_, value)) = &r.crop else {
        return Ok(resized);
    };
    // Outputs whose position on any axis maps outside the input take the
    // extrapolation value.
    let mut v = resized.data.to_f64();
    let strides = crate::core::strides(&out.shape);
    for (i, e) in v.iter_mut().enumerate() {
        let out_of_range =
            (0..x.rank()).any(|ax| axes[ax][(i / strides[ax]) % out.shape[ax]].is_none());
        if out_of_range {
            *e = *value as f64;
        }
    }
    Ok(Tensor::new(
        out.shape.clone(),
        TensorData::from_f64(out.dtype, v),
    ))
}

/// Filtering along `ax`: output position j along that axis is the weighted
/// sum `Σ w · x[i]` over `taps[j]` (0 where it has none: the extrapolation
/// value is written afterwards).
fn interpolate_axis(v: &[f64], shape: &[usize], ax: usize, taps: &AxisTaps) -> Vec<f64> {
    let outer: usize = shape[..ax].iter().product();
    let inner: usize = shape[ax + 1..].iter().product();
    let n = shape[ax];
    let mut out = Vec::with_capacity(outer * taps.len() * inner);
    for o in 0..outer {
        for tap in taps {
            let row = out.len();
            out.resize(row + inner, 0.0);
            for &(i, w) in tap.iter().flatten() {
                let src = &v[(o * n + i) * inner..][..inner];
                for (d, &s) in out[row..].iter_mut().zip(src) {
                    *d += w * s;
                }
            }
        }
    }
    out
}
