//! Ops whose values are known at import and become constants: Constant,
//! ConstantOfShape (an Expand of its value when too large to hold), Range,
//! Shape, Size, EyeLike (which reads only its input's shape), and the window
//! functions HannWindow, HammingWindow and BlackmanWindow.

use super::context::{dims, NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::frontend::compose::range_values;
use crate::frontend::onnx::{dtype_from_onnx, tensor_from_proto};
use crate::graph::{numel, DType, Op, Tensor, TensorData, ValueRef};
use crate::ops::Expand;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Constant", constant_node);
    reg.add(AI_ONNX, "ConstantOfShape", constant_of_shape);
    reg.add(AI_ONNX, "Range", range);
    reg.add(AI_ONNX, "Shape", shape_node);
    reg.add(AI_ONNX, "Size", size_node);
    reg.add(AI_ONNX, "EyeLike", eye_like);
    reg.add(AI_ONNX, "HannWindow", |c| window(c, &[0.5, -0.5]));
    // The specification's Hamming coefficients are 25/46 and 21/46, not 0.54 and 0.46.
    reg.add(AI_ONNX, "HammingWindow", |c| {
        window(c, &[25.0 / 46.0, -21.0 / 46.0])
    });
    reg.add(AI_ONNX, "BlackmanWindow", |c| {
        window(c, &[0.42, -0.5, 0.08])
    });
}

/// A generalized cosine window of `size` points (input 0, a constant):
/// `sum_k a[k] cos(2 pi k n / N)`, where N is the size when `periodic` (the
/// default) and the size - 1 when symmetric; in `output_datatype` (float by
/// default).
fn window(c: &mut NodeCtx, a: &[f64]) -> Res<Vec<Option<ValueRef>>> {
    let size = match c.const_ints(0)?.as_deref() {
        Some(&[n]) => n,
        _ => return Err(c.err("size must be one integer")),
    };
    let size = usize::try_from(size).map_err(|_| c.err(format!("size {size} is negative")))?;
    let dtype = dtype_from_onnx(c.int("output_datatype", 1)? as i32)
        .map_err(|m| c.err(format!("output_datatype: {m}")))?;
    c.check_size(dtype, &[size])?;
    let period = match c.bool_attr("periodic", true)? {
        true => size as f64,
        false => size as f64 - 1.0,
    };
    let values = (0..size)
        .map(|n| {
            let phase = 2.0 * std::f64::consts::PI * n as f64 / period;
            a.iter()
                .enumerate()
                .map(|(k, ak)| ak * (k as f64 * phase).cos())
                .sum()
        })
        .collect();
    Ok(c.constant(Tensor::new(vec![size], TensorData::from_f64(dtype, values))))
}

fn constant_node(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let a = c
        .node
        .attribute
        .first()
        .ok_or_else(|| c.err("Constant has no value attribute"))?;
    let t = match a.name.as_str() {
        "value" => {
            let tp =
                a.t.as_ref()
                    .ok_or_else(|| c.err("Constant 'value' holds no tensor"))?;
            tensor_from_proto(tp, None).map_err(|m| c.err(format!("Constant value {m}")))?
        }
        "value_float" => Tensor::scalar_f32(a.f),
        "value_floats" => Tensor::from_f32(vec![a.floats.len()], a.floats.clone()),
        "value_int" => Tensor::from_i64(vec![], vec![a.i]),
        "value_ints" => Tensor::from_i64(vec![a.ints.len()], a.ints.clone()),
        other => return Err(c.err(format!("Constant attribute '{other}' is not supported"))),
    };
    Ok(c.constant(t))
}

fn shape_node(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let s = c.ty(c.input(0)?).shape;
    let r = s.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(c.int("start", 0)?);
    let end = clamp(c.int("end", r)?);
    let dims: Vec<i64> = s[start..end.max(start)].iter().map(|&d| d as i64).collect();
    Ok(c.constant(Tensor::from_i64(vec![dims.len()], dims)))
}

fn size_node(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let n = numel(&c.ty(c.input(0)?).shape);
    Ok(c.constant(Tensor::from_i64(vec![], vec![n as i64])))
}

/// EyeLike: ones on the `k`-th diagonal of a matrix shaped like the input
/// (above the main one for positive `k`), zeros elsewhere, of type `dtype`
/// (the input's when absent).
fn eye_like(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let ty = c.ty(c.input(0)?);
    let &[rows, cols] = &ty.shape[..] else {
        return Err(c.err(format!(
            "EyeLike input must be 2-D, got shape {:?}",
            ty.shape
        )));
    };
    let dtype = match c.attr("dtype") {
        Some(_) => dtype_from_onnx(c.int("dtype", 0)? as i32)
            .map_err(|m| c.err(format!("EyeLike dtype: {m}")))?,
        None => ty.dtype,
    };
    let k = c.int("k", 0)?;
    c.check_size(dtype, &ty.shape)?;
    let on_diagonal = |i: usize| (i % cols) as i64 - (i / cols) as i64 == k;
    let values = (0..rows * cols)
        .map(|i| f64::from(u8::from(on_diagonal(i))))
        .collect();
    let t = Tensor::new(ty.shape, TensorData::from_f64(dtype, values));
    Ok(c.constant(t))
}

fn constant_of_shape(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let shape = c
        .const_ints(0)?
        .ok_or_else(|| c.err("ConstantOfShape needs its shape input"))?;
    let shape = dims(c, &shape, "shape")?;
    let value = match c.attr("value").and_then(|a| a.t.as_ref()) {
        Some(tp) => tensor_from_proto(tp, None).map_err(|m| c.err(format!("value {m}")))?,
        None => Tensor::scalar_f32(0.0),
    };
    if value.numel() != 1 {
        return Err(c.err("ConstantOfShape value must hold one element"));
    }
    c.check_size(value.dtype(), &shape)?;
    let bytes = (numel(&shape) as u64).saturating_mul(value.dtype().size_bytes() as u64);
    if bytes > crate::core::budget::fold_limit() {
        // Too big to hold as a constant: the value expanded when the model runs.
        let one = value.reshaped(vec![1; shape.len()]);
        let one = c.inner_constant("value", one);
        return c.emit(Op::Expand(Expand { shape }), &[one]);
    }
    let data = value.data.gather(std::iter::repeat_n(0, numel(&shape)));
    Ok(c.constant(Tensor::new(shape, data)))
}

fn range(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let get = |i| -> Res<Tensor> {
        c.const_input(i)?
            .filter(|t| t.numel() == 1)
            .ok_or_else(|| c.err(format!("Range input {i} must be a constant scalar")))
    };
    let (start, limit, delta) = (get(0)?, get(1)?, get(2)?);
    let dtype = start.dtype();
    // Opset 27 admits float16 and bfloat16, accumulated in float (`stash_type`
    // 1, the default), which the f64 positions rounded once to the type match
    // up to float rounding; accumulating in the narrow type is not supported.
    if matches!(dtype, DType::F16 | DType::BF16) && c.int("stash_type", 1)? != 1 {
        return Err(c.err(format!(
            "Range of {} with stash_type {} (accumulating in the narrow type) is not supported",
            dtype.name(),
            c.int("stash_type", 1)?
        )));
    }
    let t = range_values(&*c, &start, &limit, &delta)?;
    Ok(c.constant(t))
}
