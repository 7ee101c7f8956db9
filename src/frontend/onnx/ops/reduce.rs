//! Reductions over axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin,
//! ReduceProd, and the running sum CumSum.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{Op, ReduceKind, ValueRef};
use crate::ops::{CumSum, Reduce};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "ReduceSum", |c| reduce(c, ReduceKind::Sum));
    reg.add(AI_ONNX, "ReduceMean", |c| reduce(c, ReduceKind::Mean));
    reg.add(AI_ONNX, "ReduceMax", |c| reduce(c, ReduceKind::Max));
    reg.add(AI_ONNX, "ReduceMin", |c| reduce(c, ReduceKind::Min));
    reg.add(AI_ONNX, "ReduceProd", |c| reduce(c, ReduceKind::Prod));
    reg.add(AI_ONNX, "CumSum", cum_sum);
}

fn reduce(c: &mut NodeCtx, kind: ReduceKind) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    // Axes moved from attribute to input at opset 13 for ReduceSum, 18 for the others.
    let axes_as_input = c.opset >= if kind == ReduceKind::Sum { 13 } else { 18 };
    let axes = if axes_as_input {
        c.const_ints(1)?
    } else {
        c.ints("axes")?
    };
    let keepdims = c.bool_attr("keepdims", true)?;
    let axes = match axes {
        Some(a) if !a.is_empty() => c.axes(&a, s.len())?,
        _ if c.bool_attr("noop_with_empty_axes", false)? => return c.emit(Op::Identity, &[x]),
        _ => (0..s.len()).collect(),
    };
    c.emit(
        Op::Reduce(Reduce {
            kind,
            axes,
            keepdims,
        }),
        &[x],
    )
}

fn cum_sum(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let axis = match c.const_ints(1)?.as_deref() {
        Some([a]) => c.axis(*a, rank)?,
        _ => return Err(c.err("CumSum needs its axis input: one integer")),
    };
    let op = Op::CumSum(CumSum {
        axis,
        exclusive: c.bool_attr("exclusive", false)?,
        reverse: c.bool_attr("reverse", false)?,
    });
    c.emit(op, &[x])
}
