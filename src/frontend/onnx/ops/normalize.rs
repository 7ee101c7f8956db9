//! Normalizations: BatchNormalization, LayerNormalization, LRN, Softmax and
//! LogSoftmax.

use super::composite::{batch_norm_training, layer_norm_with_statistics};
use super::context::{NodeCtx, Out, Res};
use super::reduce::Term;
use super::registry::{Registry, AI_ONNX};
use crate::graph::{numel, BinaryOp, Op, UnaryOp, ValueRef};
use crate::ops::{BatchNorm, LayerNorm, LogSoftmax, Lrn, Reshape, Softmax};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "BatchNormalization", batch_norm);
    reg.add(AI_ONNX, "LayerNormalization", layer_norm);
    reg.add(AI_ONNX, "LRN", lrn);
    reg.add(AI_ONNX, "Softmax", |c| softmax(c, false));
    reg.add(AI_ONNX, "LogSoftmax", |c| softmax(c, true));
    reg.add(AI_ONNX, "LpNormalization", lp_normalization);
    reg.add(
        AI_ONNX,
        "MeanVarianceNormalization",
        mean_variance_normalization,
    );
}

/// LpNormalization: x divided by its L1 or L2 norm along `axis`. A zero norm
/// (x all zeros there) divides by the least positive float instead, giving 0
/// where the reference implementation gives 0, not 0 / 0.
fn lp_normalization(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let axis = c.axis(c.int("axis", -1)?, c.ty(x).shape.len())?;
    let over = (Some(vec![axis]), true);
    let norm = match c.int("p", 2)? {
        1 => c.sum_of(Term::Abs, x, over)?,
        2 => {
            let sum = c.sum_of(Term::Square, x, over)?;
            c.emit_inner(Op::Unary(UnaryOp::Sqrt), &[sum], "l2")?
        }
        p => return Err(c.err(format!("LpNormalization p must be 1 or 2, got {p}"))),
    };
    let nonzero = UnaryOp::Clip {
        min: f32::from_bits(1),
        max: f32::INFINITY,
    };
    let norm = c.emit_inner(Op::Unary(nonzero), &[norm], "norm")?;
    c.emit(Op::Binary(BinaryOp::Div), &[x, norm])
}

/// MeanVarianceNormalization: (x − mean) / (std + 1e-9) over `axes` (by
/// default the batch and spatial axes of an NCHW tensor), as the
/// specification's function body.
fn mean_variance_normalization(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let axes = c.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let axes = c.axes(&axes, rank)?;
    let st = c.statistics(x, axes, 0.0)?;
    let eps = c.scalar("epsilon", c.ty(x).dtype, 1e-9);
    let std = c.emit_inner(Op::Binary(BinaryOp::Add), &[st.std, eps], "std_eps")?;
    c.emit(Op::Binary(BinaryOp::Div), &[st.centered, std])
}

fn batch_norm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    if c.bool_attr("training_mode", false)? {
        return batch_norm_training(c);
    }
    if c.node.output.iter().skip(1).any(|o| !o.is_empty()) {
        return Err(c.err(
            "BatchNormalization's running mean and variance outputs are supported in training_mode=1 (opset 14 on)",
        ));
    }
    // Opsets 7 and 8: `spatial` 0 normalises every element with its own statistics.
    if c.opset < 9 && !c.bool_attr("spatial", true)? {
        return Err(
            c.err("BatchNormalization with spatial=0 (statistics per element) is not supported")
        );
    }
    let epsilon = c.float("epsilon", 1e-5)?;
    c.emit_all(Op::BatchNorm(BatchNorm { epsilon }))
}

/// LayerNormalization: one op, unless its Mean and InvStdDev outputs are asked for.
fn layer_norm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    if c.node.output.iter().skip(1).any(|o| !o.is_empty()) {
        return layer_norm_with_statistics(c);
    }
    let x = c.input(0)?;
    let op = Op::LayerNorm(LayerNorm {
        axis: c.axis(c.int("axis", -1)?, c.ty(x).shape.len())?,
        epsilon: c.float("epsilon", 1e-5)?,
        centered: true,
    });
    c.emit_all(op)
}

fn lrn(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let op = Op::Lrn(Lrn {
        alpha: c.float("alpha", 1e-4)?,
        beta: c.float("beta", 0.75)?,
        bias: c.float("bias", 1.0)?,
        size: usize::try_from(c.int("size", 0)?).map_err(|_| c.err("size must be positive"))?,
    });
    c.emit_all(op)
}

/// Softmax, or LogSoftmax when `log`.
fn softmax(c: &mut NodeCtx, log: bool) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    Ok(vec![Some(softmax_of(c, x, c.opset, log, Out::Node)?)])
}

/// Softmax (LogSoftmax when `log`) of `x` along the node's `axis`, as the
/// operator of `opset` defines it, added as `out`.
pub(super) fn softmax_of(
    c: &mut NodeCtx,
    x: ValueRef,
    opset: i64,
    log: bool,
    out: Out,
) -> Res<ValueRef> {
    let s = c.ty(x).shape;
    let make = |axis| {
        if log {
            Op::LogSoftmax(LogSoftmax { axis })
        } else {
            Op::Softmax(Softmax { axis })
        }
    };
    if opset >= 13 {
        let axis = c.axis(c.int("axis", -1)?, s.len())?;
        return c.add(make(axis), &[x], out);
    }
    // Before opset 13 the input is coerced to 2-D at `axis` and normalised per row.
    let axis = c.axis(c.int("axis", 1)?, s.len())?;
    if axis + 1 == s.len() {
        return c.add(make(axis), &[x], out);
    }
    let flat = vec![numel(&s[..axis]), numel(&s[axis..])];
    let x2 = c.emit_inner(Op::Reshape(Reshape { shape: flat }), &[x], "flatten")?;
    let y2 = c.emit_inner(make(1), &[x2], "rows")?;
    c.add(Op::Reshape(Reshape { shape: s }), &[y2], out)
}
