//! Reductions over axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin,
//! ReduceProd; the norms and log-sums defined by them (ReduceL1, ReduceL2,
//! ReduceSumSquare, ReduceLogSum, ReduceLogSumExp); and the running sums and products CumSum and CumProd.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{BinaryOp, Op, ReduceKind, UnaryOp, ValueRef};
use crate::ops::{Cumulative, Reduce, Reshape, Running};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "ReduceSum", |c| reduce(c, ReduceKind::Sum));
    reg.add(AI_ONNX, "ReduceMean", |c| reduce(c, ReduceKind::Mean));
    reg.add(AI_ONNX, "ReduceMax", |c| reduce(c, ReduceKind::Max));
    reg.add(AI_ONNX, "ReduceMin", |c| reduce(c, ReduceKind::Min));
    reg.add(AI_ONNX, "ReduceProd", |c| reduce(c, ReduceKind::Prod));
    reg.add(AI_ONNX, "ReduceL1", |c| summed(c, Term::Abs, None));
    reg.add(AI_ONNX, "ReduceL2", |c| {
        summed(c, Term::Square, Some(UnaryOp::Sqrt))
    });
    reg.add(AI_ONNX, "ReduceSumSquare", |c| {
        summed(c, Term::Square, None)
    });
    reg.add(AI_ONNX, "ReduceLogSum", |c| {
        summed(c, Term::Value, Some(UnaryOp::Log))
    });
    reg.add(AI_ONNX, "ReduceLogSumExp", log_sum_exp);
    reg.add(AI_ONNX, "CumSum", |c| cumulative(c, Running::Sum));
    reg.add(AI_ONNX, "CumProd", |c| cumulative(c, Running::Prod));
}

/// The axes a reduction node reduces, `None` when it reduces none
/// (`noop_with_empty_axes` with no axes given), and its `keepdims`. The axes
/// are an input from opset `axes_input_from` on, an attribute before.
fn reduced_axes(c: &NodeCtx, axes_input_from: i64) -> Res<(Option<Vec<usize>>, bool)> {
    let rank = c.ty(c.input(0)?).shape.len();
    let axes = if c.opset >= axes_input_from {
        c.const_ints(1)?
    } else {
        c.ints("axes")?
    };
    let keepdims = c.bool_attr("keepdims", true)?;
    let axes = match axes {
        Some(a) if !a.is_empty() => Some(c.axes(&a, rank)?),
        _ if c.bool_attr("noop_with_empty_axes", false)? => None,
        _ => Some((0..rank).collect()),
    };
    Ok((axes, keepdims))
}

fn reduce(c: &mut NodeCtx, kind: ReduceKind) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    // Axes moved from attribute to input at opset 13 for ReduceSum, 18 for the others.
    let axes_input_from = if kind == ReduceKind::Sum { 13 } else { 18 };
    match reduced_axes(c, axes_input_from)? {
        (Some(axes), keepdims) => c.emit(
            Op::Reduce(Reduce {
                kind,
                axes,
                keepdims,
            }),
            &[x],
        ),
        (None, _) => c.emit(Op::Identity, &[x]),
    }
}

impl NodeCtx<'_> {
    /// `kind` of `x` over `axes` (nothing when `None`: a reduction of no axes).
    fn reduce_over(
        &mut self,
        kind: ReduceKind,
        x: ValueRef,
        (axes, keepdims): (Option<Vec<usize>>, bool),
        what: &str,
    ) -> Res<ValueRef> {
        let Some(axes) = axes else {
            return Ok(x);
        };
        let op = Op::Reduce(Reduce {
            kind,
            axes,
            keepdims,
        });
        self.emit_inner(op, &[x], what)
    }
}

/// What a norm or log-sum adds up for each element x.
pub(super) enum Term {
    /// |x|.
    Abs,
    /// x·x.
    Square,
    /// x itself.
    Value,
}

impl NodeCtx<'_> {
    /// The sum of a `term` per element of `x` over `axes`.
    pub(super) fn sum_of(
        &mut self,
        term: Term,
        x: ValueRef,
        axes: (Option<Vec<usize>>, bool),
    ) -> Res<ValueRef> {
        let terms = match term {
            Term::Abs => self.emit_inner(Op::Unary(UnaryOp::Abs), &[x], "abs")?,
            Term::Square => self.emit_inner(Op::Binary(BinaryOp::Mul), &[x, x], "squared")?,
            Term::Value => x,
        };
        self.reduce_over(ReduceKind::Sum, terms, axes, "sum")
    }
}

/// The sum of a `term` per element, then `then` of it, as the specification's
/// function bodies define the norms and the log-sum.
fn summed(c: &mut NodeCtx, term: Term, then: Option<UnaryOp>) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let reduced = reduced_axes(c, 18)?;
    let sum = c.sum_of(term, x, reduced)?;
    match then {
        Some(u) => c.emit(Op::Unary(u), &[sum]),
        None => c.emit(Op::Identity, &[sum]),
    }
}

/// ReduceLogSumExp as m + log(sum(exp(x − m))) with m the maximum, so that no
/// exp overflows. m is clamped to the finite range: an infinite maximum would
/// make x − m NaN, and the clamped one still gives ±inf where the true answer is.
fn log_sum_exp(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let (axes, keepdims) = reduced_axes(c, 18)?;
    let max = c.reduce_over(ReduceKind::Max, x, (axes.clone(), true), "max")?;
    let finite = UnaryOp::Clip {
        min: f32::MIN,
        max: f32::MAX,
    };
    let shift = c.emit_inner(Op::Unary(finite), &[max], "shift")?;
    let shifted = c.emit_inner(Op::Binary(BinaryOp::Sub), &[x, shift], "shifted")?;
    let exp = c.emit_inner(Op::Unary(UnaryOp::Exp), &[shifted], "exp")?;
    let sum = c.reduce_over(ReduceKind::Sum, exp, (axes.clone(), keepdims), "sum")?;
    let log = c.emit_inner(Op::Unary(UnaryOp::Log), &[sum], "log")?;
    let shift = match c.ty(log).shape {
        s if s == c.ty(shift).shape => shift,
        shape => c.emit_inner(Op::Reshape(Reshape { shape }), &[shift], "shift_dropped")?,
    };
    c.emit(Op::Binary(BinaryOp::Add), &[log, shift])
}

fn cumulative(c: &mut NodeCtx, op: Running) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let axis = match c.const_ints(1)?.as_deref() {
        Some([a]) => c.axis(*a, rank)?,
        _ => return Err(c.err("the axis input must be one integer")),
    };
    let op = Op::Cumulative(Cumulative {
        op,
        axis,
        exclusive: c.bool_attr("exclusive", false)?,
        reverse: c.bool_attr("reverse", false)?,
    });
    c.emit(op, &[x])
}
