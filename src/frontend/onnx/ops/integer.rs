//! Integer index arithmetic: Mod (floats too, with fmod), BitShift, and the
//! bitwise BitwiseAnd, BitwiseOr, BitwiseXor and BitwiseNot.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{DType, Op, ValueRef};
use crate::ops::IntegerArith;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Mod", modulo);
    reg.add(AI_ONNX, "BitShift", bit_shift);
    reg.add(AI_ONNX, "BitwiseAnd", |c| {
        c.emit_all(Op::IntegerArith(IntegerArith::BitwiseAnd))
    });
    reg.add(AI_ONNX, "BitwiseOr", |c| {
        c.emit_all(Op::IntegerArith(IntegerArith::BitwiseOr))
    });
    reg.add(AI_ONNX, "BitwiseXor", |c| {
        c.emit_all(Op::IntegerArith(IntegerArith::BitwiseXor))
    });
    reg.add(AI_ONNX, "BitwiseNot", bitwise_not);
}

/// BitwiseNot: x xor all ones (−1 of a signed type, the maximum of an
/// unsigned one: −1 wrapped to the type).
fn bitwise_not(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let dtype = c.ty(x).dtype;
    if dtype.is_float() || dtype == DType::Bool {
        return Err(c.err(format!("BitwiseNot is defined on integers, got {dtype}")));
    }
    let ones = c.scalar("all_ones", dtype, -1.0);
    c.emit(Op::IntegerArith(IntegerArith::BitwiseXor), &[x, ones])
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
