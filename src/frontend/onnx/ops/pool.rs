//! Pooling: MaxPool, AveragePool, LpPool, the global pools, RoiAlign, and
//! MaxUnpool as a scatter.

use super::context::dims;
use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use super::window::{kernel_attr, window};
use crate::frontend::onnx::add_and_fold;
use crate::graph::{BinaryOp, Op, Pool, PoolKind, Reshape, Tensor, TensorData, UnaryOp, ValueRef};
use crate::ops::{
    GlobalPool, MaxPoolIndices, Pad, PadMode, RoiAlign, RoiPool, ScatterElements, ScatterReduction,
};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "MaxPool", |c| pool(c, PoolKind::Max));
    reg.add(AI_ONNX, "AveragePool", |c| pool(c, PoolKind::Avg));
    reg.add(AI_ONNX, "LpPool", lp_pool);
    reg.add(AI_ONNX, "GlobalMaxPool", |c| global_pool(c, PoolKind::Max));
    reg.add(AI_ONNX, "GlobalAveragePool", |c| {
        global_pool(c, PoolKind::Avg)
    });
    reg.add(AI_ONNX, "MaxUnpool", max_unpool);
    reg.add(AI_ONNX, "RoiAlign", roi_align);
}

/// RoiAlign: before opset 16 pixel centres lie at integers (what opset 16
/// calls `output_half_pixel`); from 16 on `half_pixel` is the default.
fn roi_align(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let mode = match c.string("mode", "avg")?.as_str() {
        "avg" => RoiPool::Avg,
        "max" => RoiPool::Max,
        other => return Err(c.err(format!("RoiAlign mode '{other}' is not known"))),
    };
    let default_transform = if c.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = match c
        .string("coordinate_transformation_mode", default_transform)?
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(c.err(format!(
                "RoiAlign coordinate_transformation_mode '{other}' is not known"
            )))
        }
    };
    // Each attribute with the least value it may take.
    let at_least = |name: &str, default: i64, least: i64| -> Res<usize> {
        match c.int(name, default)? {
            v if v >= least => Ok(v as usize),
            v => Err(c.err(format!("RoiAlign {name} must be at least {least}, got {v}"))),
        }
    };
    let output = (
        at_least("output_height", 1, 1)?,
        at_least("output_width", 1, 1)?,
    );
    let sampling_ratio = at_least("sampling_ratio", 0, 0)?;
    let spatial_scale = c.float("spatial_scale", 1.0)?;
    if !spatial_scale.is_finite() {
        return Err(c.err(format!(
            "RoiAlign spatial_scale {spatial_scale} is not finite"
        )));
    }
    let op = Op::RoiAlign(RoiAlign {
        mode,
        output,
        sampling_ratio,
        spatial_scale,
        half_pixel,
    });
    c.emit_all(op)
}

/// MaxUnpool: the values X (input 0) placed at the positions I (input 1)
/// that MaxPool's Indices output gave them, flat over the whole tensor the
/// pool came from (N and C included), zeros elsewhere. That is a
/// ScatterElements of the flattened values into flattened zeros of that
/// tensor, whose extents are (in - 1) · stride - pads + kernel. An
/// output_shape (input 2, a constant) at least as large pads the result
/// with zeros at the end of each axis, as the specification's reference does.
fn max_unpool(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, indices) = (c.input(0)?, c.input(1)?);
    let xt = c.ty(x);
    let xs = xt.shape;
    if xs.len() < 3 || c.ty(indices).shape != xs {
        return Err(c.err(format!(
            "values {xs:?} and indices {:?} are not one pooled tensor",
            c.ty(indices).shape
        )));
    }
    let w = window(c, &xs[2..], kernel_attr(c, None)?, true)?;
    let r = xs.len() - 2;
    let mut unpooled = xs[..2].to_vec();
    for a in 0..r {
        let extent = xs[a + 2]
            .saturating_sub(1)
            .checked_mul(w.strides[a])
            .and_then(|e| e.checked_add(w.kernel[a]))
            .and_then(|e| e.checked_sub(w.pads[a].checked_add(w.pads[a + r])?));
        let unfit = || c.err(format!("{w:?} does not unpool values {xs:?}"));
        unpooled.push(extent.ok_or_else(unfit)?);
    }
    let out = match c.const_ints(2)? {
        Some(shape) => dims(c, &shape, "output_shape")?,
        None => unpooled.clone(),
    };
    let fits = out.len() == xs.len() && out.iter().zip(&unpooled).all(|(o, u)| o >= u);
    if !fits || out[..2] != xs[..2] {
        return Err(c.err(format!(
            "output_shape {out:?} does not hold the unpooled {unpooled:?}"
        )));
    }
    let total: usize = unpooled.iter().product();
    c.check_size(xt.dtype, &[total])?;
    c.check_size(xt.dtype, &out)?;
    let zeros = Tensor::new(
        vec![total],
        TensorData::from_f64(xt.dtype, vec![0.0; total]),
    );
    let zeros = c.inner_constant("zeros", zeros);
    let flat = |c: &mut NodeCtx, v: ValueRef, what: &str| {
        let shape = vec![xs.iter().product()];
        c.emit_inner(Op::Reshape(Reshape { shape }), &[v], what)
    };
    let (values, at) = (flat(c, x, "values")?, flat(c, indices, "positions")?);
    let scatter = Op::ScatterElements(ScatterElements {
        axis: 0,
        reduction: ScatterReduction::None,
    });
    let placed = c.emit_inner(scatter, &[zeros, at, values], "placed")?;
    if out == unpooled {
        return c.emit(Op::Reshape(Reshape { shape: out }), &[placed]);
    }
    let reshape = Op::Reshape(Reshape {
        shape: unpooled.clone(),
    });
    let placed = c.emit_inner(reshape, &[placed], "unpooled")?;
    let pad = Op::Pad(Pad {
        begins: vec![0; out.len()],
        ends: out
            .iter()
            .zip(&unpooled)
            .map(|(o, u)| (o - u) as i64)
            .collect(),
        mode: PadMode::Constant(0.0),
    });
    c.emit(pad, &[placed])
}

fn global_pool(c: &mut NodeCtx, kind: PoolKind) -> Res<Vec<Option<ValueRef>>> {
    c.emit_all(Op::GlobalPool(GlobalPool { kind }))
}

/// LpPool: (Σ |x|^p)^(1/p) over each window, the padding counting as zeros:
/// the sum is an AveragePool of |x|^p that counts the padding, times the
/// window's size.
fn lp_pool(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let xs = c.ty(x).shape;
    if xs.len() < 3 {
        return Err(c.err(format!("input shape {xs:?} has no spatial axes")));
    }
    // p is a float attribute in opset 1, an int from opset 2.
    let p = if c.opset < 2 {
        f64::from(c.float("p", 2.0)?)
    } else {
        c.int("p", 2)? as f64
    };
    if p.is_nan() || p <= 0.0 {
        return Err(c.err(format!("LpPool p must be positive, got {p}")));
    }
    let kernel = kernel_attr(c, None)?;
    let size: usize = kernel.iter().product();
    let window = window(c, &xs[2..], kernel, false)?;
    let dtype = c.ty(x).dtype;
    // The common p as exact arithmetic, any other as a power.
    let powered = if p == 1.0 {
        c.emit_inner(Op::Unary(UnaryOp::Abs), &[x], "abs")?
    } else if p == 2.0 {
        c.emit_inner(Op::Binary(BinaryOp::Mul), &[x, x], "squared")?
    } else {
        let abs = c.emit_inner(Op::Unary(UnaryOp::Abs), &[x], "abs")?;
        let p = c.scalar("p", dtype, p);
        c.emit_inner(Op::Binary(BinaryOp::Pow), &[abs, p], "powered")?
    };
    let pool = Pool {
        kind: PoolKind::Avg,
        window,
        ceil_mode: c.bool_attr("ceil_mode", false)?,
        count_include_pad: true,
    };
    let mean = c.emit_inner(Op::Pool(pool), &[powered], "mean")?;
    let size = c.scalar("window_size", dtype, size as f64);
    let sum = c.emit_inner(Op::Binary(BinaryOp::Mul), &[mean, size], "sum")?;
    if p == 1.0 {
        c.emit(Op::Identity, &[sum])
    } else if p == 2.0 {
        c.emit(Op::Unary(UnaryOp::Sqrt), &[sum])
    } else {
        let root = c.scalar("root", dtype, 1.0 / p);
        c.emit(Op::Binary(BinaryOp::Pow), &[sum, root])
    }
}

/// MaxPool (with its optional indices output) and AveragePool.
fn pool(c: &mut NodeCtx, kind: PoolKind) -> Res<Vec<Option<ValueRef>>> {
    let indices = c.node.output.get(1).filter(|o| !o.is_empty()).cloned();
    let column_major = match c.int("storage_order", 0)? {
        0 => false,
        1 => true,
        s => return Err(c.err(format!("storage_order {s} is neither 0 nor 1"))),
    };
    let x = c.input(0)?;
    let xs = c.ty(x).shape;
    if xs.len() < 3 {
        return Err(c.err(format!("input shape {xs:?} has no spatial axes")));
    }
    let kernel = kernel_attr(c, None)?;
    let window = window(c, &xs[2..], kernel, false)?;
    let pool = Pool {
        kind,
        window,
        ceil_mode: c.bool_attr("ceil_mode", false)?,
        count_include_pad: c.bool_attr("count_include_pad", false)?,
    };
    let mut outs = c.emit(Op::Pool(pool.clone()), &[x])?;
    outs.truncate(1);
    if let Some(name) = indices {
        if kind != PoolKind::Max {
            return Err(c.err("AveragePool has one output"));
        }
        let op = Op::MaxPoolIndices(MaxPoolIndices {
            window: pool.window,
            ceil_mode: pool.ceil_mode,
            column_major,
        });
        let layer = c.layer();
        outs.extend(
            add_and_fold(c.g, op, &layer, &[x], &[name], c.span)?
                .into_iter()
                .map(Some),
        );
    }
    Ok(outs)
}
