//! Matrix products, MatMul and Gemm, and the determinant, Det.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{Op, ValueRef};
use crate::ops::Gemm;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "MatMul", |c| c.emit_all(Op::MatMul));
    reg.add(AI_ONNX, "Det", |c| c.emit_all(Op::Det));
    reg.add(AI_ONNX, "Gemm", gemm);
}

fn gemm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let op = Op::Gemm(Gemm {
        alpha: c.float("alpha", 1.0)?,
        beta: c.float("beta", 1.0)?,
        trans_a: c.bool_attr("transA", false)?,
        trans_b: c.bool_attr("transB", false)?,
    });
    c.emit_all(op)
}
