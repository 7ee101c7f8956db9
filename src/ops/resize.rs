//! Resize (ONNX opset 13+ semantics). Each output coordinate maps back to an input
//! coordinate through the coordinate transformation; nearest picks one input
//! element per axis (any dtype), linear interpolates axis by axis in f64, which
//! equals n-linear interpolation because the n-linear weights are a product of
//! per-axis weights. Source coordinates outside the input clamp to its border.

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

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, String> {
        let r = self;

        expect_inputs(inputs, 1, 1)?;
        let x = inputs[0];
        if r.scales.len() != x.shape.len() || r.sizes.len() != x.shape.len() {
            return Err(format!(
                "scales {:?} / sizes {:?} do not match shape {:?}",
                r.scales, r.sizes, x.shape
            ));
        }
        Ok(vec![ValueType::new(x.dtype, r.sizes.clone())])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, String> {
        let out = &outputs[0];
        let r = self;
        Ok(vec![resize(r, x[0], out)?])
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn runs_in(&self, l: &Layout, ins: &[&ValueType]) -> bool {
        let r = self;

        (0..r.scales.len()).all(|a| r.sizes[a] == ins[0].shape[a] || unblocked(l, &[a]))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, String> {
        let r = self;

        let shape = &cx.in_types[0].shape;
        // Scales reproduce the sizes exactly when floor(extent * scale)
        // gives them (as the importer computes them); otherwise sizes.
        let by_scales = shape
            .iter()
            .zip(&r.scales)
            .zip(&r.sizes)
            .all(|((&d, &s), &n)| (d as f64 * s as f64).floor() as usize == n);
        let mut ins = vec![cx.input(0), String::new()];
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
        };
        let coord = match r.coord {
            CoordTransform::HalfPixel => "half_pixel",
            CoordTransform::PytorchHalfPixel => "pytorch_half_pixel",
            CoordTransform::AlignCorners => "align_corners",
            CoordTransform::Asymmetric => "asymmetric",
        };
        let nearest = match r.nearest {
            NearestMode::RoundPreferFloor => "round_prefer_floor",
            NearestMode::RoundPreferCeil => "round_prefer_ceil",
            NearestMode::Floor => "floor",
            NearestMode::Ceil => "ceil",
        };
        cx.single(
            "Resize",
            &ins,
            vec![
                ("mode", Attr::Str(mode)),
                ("coordinate_transformation_mode", Attr::Str(coord)),
                ("nearest_mode", Attr::Str(nearest)),
            ],
        )
    }
}

/// The input coordinate of output coordinate `o` along one axis.
fn source_coord(coord: CoordTransform, o: usize, scale: f64, in_len: usize, out_len: usize) -> f64 {
    let o = o as f64;
    match coord {
        CoordTransform::HalfPixel => (o + 0.5) / scale - 0.5,
        CoordTransform::PytorchHalfPixel if out_len > 1 => (o + 0.5) / scale - 0.5,
        CoordTransform::PytorchHalfPixel => 0.0,
        // The resized length is in_len * scale, which need not be whole (the
        // spec's reference implementation divides by it, not by the floored size).
        CoordTransform::AlignCorners if out_len > 1 => {
            o * (in_len as f64 - 1.0) / (in_len as f64 * scale - 1.0)
        }
        CoordTransform::AlignCorners => 0.0,
        CoordTransform::Asymmetric => o / scale,
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

pub(super) fn resize(r: &Resize, x: &Tensor, out: &ValueType) -> Result<Tensor, String> {
    for (ax, (&n, &scale)) in x.shape.iter().zip(&r.scales).enumerate() {
        if !(scale > 0.0 && scale.is_finite()) {
            return Err(format!(
                "scale {scale} of axis {ax} is not a positive number"
            ));
        }
        if n == 0 && out.shape[ax] > 0 {
            return Err(format!(
                "cannot resize the empty axis {ax} to {}",
                out.shape[ax]
            ));
        }
    }
    // Source coordinates per axis, clamped to the input.
    let coords = |ax: usize| {
        let (n, m) = (x.shape[ax], out.shape[ax]);
        (0..m).map(move |o| {
            let c = source_coord(r.coord, o, r.scales[ax] as f64, n, m);
            c.clamp(0.0, n as f64 - 1.0)
        })
    };
    match r.mode {
        ResizeMode::Nearest => {
            let maps: Vec<Vec<Option<usize>>> = (0..x.rank())
                .map(|ax| {
                    let last = x.shape[ax].saturating_sub(1);
                    coords(ax)
                        .map(|c| Some((round_nearest(r.nearest, c) as usize).min(last)))
                        .collect()
                })
                .collect();
            gather_axes(x, &maps, 0.0)
        }
        ResizeMode::Linear => {
            let mut shape = x.shape.clone();
            let mut v = x.data.to_f64();
            for ax in 0..x.rank() {
                let (n, m) = (x.shape[ax], out.shape[ax]);
                if r.scales[ax] == 1.0 && n == m {
                    continue;
                }
                let taps: Vec<(usize, usize, f64)> = coords(ax)
                    .map(|c| {
                        let lo = c.floor();
                        let i0 = lo as usize;
                        ((i0), (i0 + 1).min(n - 1), c - lo)
                    })
                    .collect();
                v = interpolate_axis(&v, &shape, ax, &taps);
                shape[ax] = m;
            }
            Ok(Tensor::new(
                out.shape.clone(),
                TensorData::from_f64(out.dtype, v),
            ))
        }
    }
}

/// Linear interpolation along `ax`: output coordinate j along that axis is
/// `(1 - w) * x[i0] + w * x[i1]` for `taps[j] = (i0, i1, w)`.
fn interpolate_axis(
    v: &[f64],
    shape: &[usize],
    ax: usize,
    taps: &[(usize, usize, f64)],
) -> Vec<f64> {
    let outer: usize = shape[..ax].iter().product();
    let inner: usize = shape[ax + 1..].iter().product();
    let n = shape[ax];
    let mut out = Vec::with_capacity(outer * taps.len() * inner);
    for o in 0..outer {
        for &(i0, i1, w) in taps {
            let (a, b) = (
                &v[(o * n + i0) * inner..][..inner],
                &v[(o * n + i1) * inner..][..inner],
            );
            out.extend(
                a.iter()
                    .zip(b)
                    .map(|(&a, &b)| if w == 0.0 { a } else { (1.0 - w) * a + w * b }),
            );
        }
    }
    out
}
