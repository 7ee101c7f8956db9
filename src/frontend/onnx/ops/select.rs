//! Ops that pick elements along one axis: ArgMax and ArgMin, TopK, and
//! GatherElements.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{Op, ValueRef};
use crate::ops::{ArgKind, ArgReduce, GatherElements, TopK};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "ArgMax", |c| arg_reduce(c, ArgKind::Max));
    reg.add(AI_ONNX, "ArgMin", |c| arg_reduce(c, ArgKind::Min));
    reg.add(AI_ONNX, "TopK", top_k);
    reg.add(AI_ONNX, "GatherElements", gather_elements);
}

fn arg_reduce(c: &mut NodeCtx, kind: ArgKind) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let op = Op::ArgReduce(ArgReduce {
        kind,
        axis: c.axis(c.int("axis", 0)?, rank)?,
        keepdims: c.bool_attr("keepdims", true)?,
        select_last_index: c.bool_attr("select_last_index", false)?,
    });
    c.emit_all(op)
}

/// TopK: `k` is an attribute before opset 10, a constant input after.
fn top_k(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let k = if c.opset >= 10 {
        match c.const_ints(1)?.as_deref() {
            Some([k]) => *k,
            _ => return Err(c.err("TopK needs its k input: one integer")),
        }
    } else {
        c.int("k", -1)?
    };
    let k = usize::try_from(k).map_err(|_| c.err(format!("k = {k} is negative")))?;
    let op = Op::TopK(TopK {
        axis: c.axis(c.int("axis", -1)?, rank)?,
        k,
        largest: c.bool_attr("largest", true)?,
    });
    c.emit(op, &[x])
}

fn gather_elements(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let op = Op::GatherElements(GatherElements {
        axis: c.axis(c.int("axis", 0)?, rank)?,
    });
    c.emit_all(op)
}
