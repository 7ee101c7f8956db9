//! Integer index arithmetic: Mod (floats too, with fmod) and BitShift.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{Op, ValueRef};
use crate::ops::IntegerArith;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Mod", modulo);
    reg.add(AI_ONNX, "BitShift", bit_shift);
}

fn modulo(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let fmod = match c.int("fmod", 0)? {
        0 => false,
        1 => true,
        other => return Err(c.err(format!("Mod fmod must be 0 or 1, got {other}"))),
    };
    c.emit_all(Op::IntegerArith(IntegerArith::Mod { fmod }))
}

fn bit_shift(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let left = match c.string("direction", "")?.as_str() {
        "LEFT" => true,
        "RIGHT" => false,
        other => {
            return Err(c.err(format!(
                "BitShift direction must be LEFT or RIGHT, got '{other}'"
            )))
        }
    };
    c.emit_all(Op::IntegerArith(IntegerArith::BitShift { left }))
}
