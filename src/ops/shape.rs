//! Shape and dtype inference for every op. Errors are plain messages; the graph
//! wraps them with the span of the layer at fault.

use super::*;
use crate::core::ValueType;
pub(super) use crate::core::{checked_numel, DType};

pub(super) type Res<T> = Result<T, OpError>;

/// Numpy-style broadcast of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Res<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(OpError::Shape(format!(
                    "shapes {a:?} and {b:?} do not broadcast"
                )))
            }
        };
    }
    Ok(out)
}

pub(super) fn expect_inputs(inputs: &[&ValueType], min: usize, max: usize) -> Res<()> {
    if inputs.len() < min || inputs.len() > max {
        let want = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(OpError::Arity(format!(
            "expects {want} inputs, got {}",
            inputs.len()
        )));
    }
    Ok(())
}

/// The one input of a single-input op, after checking there is exactly one.
pub(super) fn sole_input<'a>(inputs: &[&'a ValueType]) -> Res<&'a ValueType> {
    expect_inputs(inputs, 1, 1)?;
    Ok(inputs[0])
}

pub(super) fn expect_float(t: &ValueType, what: &str) -> Res<()> {
    if !t.dtype.is_float() {
        return Err(OpError::DType(format!(
            "{what} must be a float tensor, got {}",
            t.dtype
        )));
    }
    Ok(())
}

/// Output extent of one spatial axis of a sliding window.
pub fn window_output_extent(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
    ceil_mode: bool,
) -> Res<usize> {
    if stride == 0 || dilation == 0 || kernel == 0 {
        return Err(OpError::Attribute(
            "kernel, stride and dilation must be positive".into(),
        ));
    }
    // Attributes come from user files: overflow is an error, not a wrapped extent.
    let too_big = || {
        OpError::TooLarge(format!("window extents overflow (kernel {kernel}, dilation {dilation}, pads {pad_begin}/{pad_end})"))
    };
    let eff = dilation
        .checked_mul(kernel - 1)
        .and_then(|e| e.checked_add(1))
        .ok_or_else(too_big)?;
    let padded = input
        .checked_add(pad_begin)
        .and_then(|p| p.checked_add(pad_end))
        .ok_or_else(too_big)?;
    if padded < eff {
        return Err(OpError::Shape(format!(
            "kernel extent {eff} is larger than the padded input extent {padded}"
        )));
    }
    let span = padded - eff;
    let mut out = if ceil_mode {
        span.div_ceil(stride) + 1
    } else {
        span / stride + 1
    };
    // With ceil_mode, the last window must start inside the input or the begin padding.
    if ceil_mode && out > 1 && (out - 1) * stride >= input + pad_begin {
        out -= 1;
    }
    Ok(out)
}

pub(super) fn check_window(w: &Window, spatial: &[usize]) -> Res<()> {
    let r = spatial.len();
    if w.kernel.len() != r
        || w.strides.len() != r
        || w.dilations.len() != r
        || w.pads.len() != 2 * r
    {
        return Err(OpError::Attribute(format!(
            "window attributes do not match {r} spatial axes (kernel {:?}, strides {:?}, dilations {:?}, pads {:?})",
            w.kernel, w.strides, w.dilations, w.pads
        )));
    }
    Ok(())
}

pub(super) fn window_outputs(w: &Window, spatial: &[usize], ceil_mode: bool) -> Res<Vec<usize>> {
    check_window(w, spatial)?;
    (0..spatial.len())
        .map(|i| {
            window_output_extent(
                spatial[i],
                w.kernel[i],
                w.strides[i],
                w.dilations[i],
                w.pad_begin(i),
                w.pad_end(i),
                ceil_mode,
            )
        })
        .collect()
}

pub(super) fn check_rank_at_least(t: &ValueType, r: usize, what: &str) -> Res<()> {
    if t.shape.len() < r {
        return Err(OpError::Shape(format!(
            "{what} must have rank at least {r}, got shape {:?}",
            t.shape
        )));
    }
    Ok(())
}

/// Infers the output types of `op` applied to inputs of the given types.
pub fn infer_outputs(op: &Op, inputs: &[&ValueType]) -> Res<Vec<ValueType>> {
    let out = op.def().infer(inputs)?;
    for t in &out {
        if checked_numel(&t.shape).is_none_or(|n| n.checked_mul(t.dtype.size_bytes()).is_none()) {
            return Err(OpError::TooLarge(format!(
                "output shape {:?} overflows",
                t.shape
            )));
        }
    }
    Ok(out)
}

/// Number of elements a clamped slice selects.
pub fn slice_extent(a: &SliceAxis) -> usize {
    if a.step > 0 {
        if a.end > a.start {
            ((a.end - a.start + a.step - 1) / a.step) as usize
        } else {
            0
        }
    } else if a.start > a.end {
        ((a.start - a.end - a.step - 1) / -a.step) as usize
    } else {
        0
    }
}
