//! Resampling: Resize, Upsample (its older form), and GridSample.

use super::context::{dims, NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{
    CoordTransform, GridPadding, GridSample, NearestMode, Op, Resize, ResizeFilter, ResizeMode,
    Sampling, ValueRef,
};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Resize", |c| resize(c, false));
    reg.add(AI_ONNX, "Upsample", |c| resize(c, true));
    reg.add(AI_ONNX, "GridSample", grid_sample);
}

/// GridSample: opset 16's mode names (bilinear, bicubic) and opset 20's
/// (linear, cubic) are both taken, whatever the opset.
fn grid_sample(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let default_mode = if c.opset >= 20 { "linear" } else { "bilinear" };
    let mode = match c.string("mode", default_mode)?.as_str() {
        "nearest" => Sampling::Nearest,
        "linear" | "bilinear" => Sampling::Linear,
        "cubic" | "bicubic" => Sampling::Cubic,
        other => return Err(c.err(format!("GridSample mode '{other}' is not known"))),
    };
    let padding = match c.string("padding_mode", "zeros")?.as_str() {
        "zeros" => GridPadding::Zeros,
        "border" => GridPadding::Border,
        "reflection" => GridPadding::Reflection,
        other => return Err(c.err(format!("GridSample padding_mode '{other}' is not known"))),
    };
    let op = Op::GridSample(GridSample {
        mode,
        padding,
        align_corners: c.bool_attr("align_corners", false)?,
        spatial: rank.saturating_sub(2),
    });
    c.emit_all(op)
}

/// Resize, and Upsample (`upsample`), its older form.
fn resize(c: &mut NodeCtx, upsample: bool) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let r = s.len();
    // Upsample, and Resize before opset 11, map output to input coordinates by
    // dividing by the scale (asymmetric) and round down for nearest; their scales
    // are an attribute (Upsample 7) or input 1, and they have no sizes.
    let legacy = upsample || c.opset < 11;
    let mode = match c.string("mode", "nearest")?.as_str() {
        "nearest" => ResizeMode::Nearest,
        "linear" => ResizeMode::Linear,
        "bilinear" if legacy => ResizeMode::Linear,
        "cubic" if !legacy => ResizeMode::Cubic,
        other => {
            return Err(c.err(format!(
                "{} mode '{other}' is not supported",
                c.node.op_type
            )))
        }
    };
    let default_coord = if legacy { "asymmetric" } else { "half_pixel" };
    let coord = match c
        .string("coordinate_transformation_mode", default_coord)?
        .as_str()
    {
        "half_pixel" => CoordTransform::HalfPixel,
        "pytorch_half_pixel" => CoordTransform::PytorchHalfPixel,
        "align_corners" => CoordTransform::AlignCorners,
        "asymmetric" => CoordTransform::Asymmetric,
        "half_pixel_symmetric" => CoordTransform::HalfPixelSymmetric,
        "tf_crop_and_resize" => CoordTransform::TfCropAndResize,
        other => {
            return Err(c.err(format!(
                "Resize coordinate_transformation_mode '{other}' is not supported"
            )))
        }
    };
    let default_nearest = if legacy {
        "floor"
    } else {
        "round_prefer_floor"
    };
    let nearest = match c.string("nearest_mode", default_nearest)?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(c.err(format!("Resize nearest_mode '{other}' is not known"))),
    };
    let filter = ResizeFilter {
        cubic_a: c.float("cubic_coeff_a", -0.75)?,
        exclude_outside: c.bool_attr("exclude_outside", false)?,
        antialias: c.bool_attr("antialias", false)?,
    };
    let axes = match c.ints("axes")? {
        Some(a) => c.axes(&a, r)?,
        None => (0..r).collect(),
    };
    // The region of interest: starts, then ends, of the resized axes.
    let crop = match coord {
        CoordTransform::TfCropAndResize => {
            let roi = c
                .const_input(1)?
                .map(|t| t.data.to_f64())
                .filter(|v| v.len() == 2 * axes.len())
                .ok_or_else(|| {
                    c.err(format!(
                        "tf_crop_and_resize needs a roi of {} values (starts, then ends)",
                        2 * axes.len()
                    ))
                })?;
            let mut per_axis = vec![(0.0, 1.0); r];
            for (k, &a) in axes.iter().enumerate() {
                per_axis[a] = (roi[k] as f32, roi[k + axes.len()] as f32);
            }
            Some((per_axis, c.float("extrapolation_value", 0.0)?))
        }
        _ => None,
    };
    let (scales_in, sizes_in) = if !legacy {
        let scales = c.const_input(2)?.map(|t| t.data.to_f64());
        (scales, c.const_ints(3)?)
    } else if upsample && c.opset < 9 {
        let scales = c.typed_attr("scales", 6, "a list of floats")?;
        (
            scales.map(|a| a.floats.iter().map(|&v| v as f64).collect()),
            None,
        )
    } else {
        (c.const_input(1)?.map(|t| t.data.to_f64()), None)
    };
    let scales_in = scales_in.filter(|v| !v.is_empty());
    let sizes_in = sizes_in.filter(|v| !v.is_empty());
    let (mut scales, mut sizes): (Vec<f32>, Vec<usize>) = (vec![1.0; r], s.clone());
    match (scales_in, sizes_in) {
        (Some(sc), None) => {
            if sc.len() != axes.len() {
                return Err(c.err(format!("scales {sc:?} do not fit {} axes", axes.len())));
            }
            for (k, &a) in axes.iter().enumerate() {
                if sc[k] <= 0.0 {
                    return Err(c.err(format!("scale {} must be positive", sc[k])));
                }
                scales[a] = sc[k] as f32;
                sizes[a] = (s[a] as f64 * sc[k] as f32 as f64).floor() as usize;
            }
        }
        (None, Some(sz)) => {
            if sz.len() != axes.len() {
                return Err(c.err(format!("sizes {sz:?} do not fit {} axes", axes.len())));
            }
            let sz = dims(c, &sz, "sizes")?;
            let ratios: Vec<f32> = axes
                .iter()
                .zip(&sz)
                .map(|(&a, &n)| n as f32 / s[a] as f32)
                .collect();
            let policy = c.string("keep_aspect_ratio_policy", "stretch")?;
            let uniform = match policy.as_str() {
                "stretch" => None,
                "not_larger" => Some(ratios.iter().copied().fold(f32::INFINITY, f32::min)),
                "not_smaller" => Some(ratios.iter().copied().fold(0.0, f32::max)),
                other => {
                    return Err(c.err(format!("keep_aspect_ratio_policy '{other}' is not known")))
                }
            };
            for (k, &a) in axes.iter().enumerate() {
                match uniform {
                    None => {
                        scales[a] = ratios[k];
                        sizes[a] = sz[k];
                    }
                    Some(u) => {
                        scales[a] = u;
                        sizes[a] = (s[a] as f32 * u).round() as usize;
                    }
                }
            }
        }
        _ => return Err(c.err("Resize needs exactly one of scales and sizes")),
    }
    c.emit(
        Op::Resize(Resize {
            mode,
            coord,
            nearest,
            scales,
            sizes,
            filter,
            crop,
        }),
        &[x],
    )
}
