//! Boolean logic on bool tensors: And, Or, Xor (broadcasting) and Not.

use super::registry::{Registry, AI_ONNX};
use crate::graph::Op;
use crate::ops::Logical;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "And", |c| c.emit_all(Op::Logical(Logical::And)));
    reg.add(AI_ONNX, "Or", |c| c.emit_all(Op::Logical(Logical::Or)));
    reg.add(AI_ONNX, "Xor", |c| c.emit_all(Op::Logical(Logical::Xor)));
    reg.add(AI_ONNX, "Not", |c| c.emit_all(Op::Logical(Logical::Not)));
}
