//! Elementwise functions: the unary activations and maths, the broadcasting
//! binary ops and comparisons, Where, and the variadic Max, Min, Sum and Mean.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{BinaryOp, MathFn, Op, Tensor, TensorData, UnaryOp, ValueRef};
use crate::ops::Logical;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Relu", |c| unary(c, UnaryOp::Relu));
    reg.add(AI_ONNX, "LeakyRelu", leaky_relu);
    reg.add(AI_ONNX, "Sigmoid", |c| unary(c, UnaryOp::Sigmoid));
    reg.add(AI_ONNX, "HardSigmoid", hard_sigmoid);
    reg.add(AI_ONNX, "HardSwish", |c| unary(c, UnaryOp::HardSwish));
    reg.add(AI_ONNX, "Elu", elu);
    reg.add(AI_ONNX, "Selu", selu);
    reg.add(AI_ONNX, "Celu", celu);
    reg.add(AI_ONNX, "ThresholdedRelu", thresholded_relu);
    reg.add(AI_ONNX, "Softplus", |c| unary(c, UnaryOp::Softplus));
    reg.add(AI_ONNX, "Softsign", |c| unary(c, UnaryOp::Softsign));
    reg.add(AI_ONNX, "Mish", |c| unary(c, UnaryOp::Mish));
    reg.add(AI_ONNX, "Swish", |c| swish(c, false));
    reg.add(AI_ONNX, "SwiGLU", |c| swish(c, true));
    reg.add(AI_ONNX, "Shrink", shrink);
    reg.add(AI_ONNX, "Tanh", |c| unary(c, UnaryOp::Tanh));
    reg.add(AI_ONNX, "Erf", |c| unary(c, UnaryOp::Erf));
    reg.add(AI_ONNX, "Gelu", gelu);
    reg.add(AI_ONNX, "Exp", |c| unary(c, UnaryOp::Exp));
    reg.add(AI_ONNX, "Log", |c| unary(c, UnaryOp::Log));
    reg.add(AI_ONNX, "Sqrt", |c| unary(c, UnaryOp::Sqrt));
    reg.add(AI_ONNX, "Reciprocal", |c| unary(c, UnaryOp::Reciprocal));
    reg.add(AI_ONNX, "Neg", |c| unary(c, UnaryOp::Neg));
    reg.add(AI_ONNX, "Abs", |c| unary(c, UnaryOp::Abs));
    reg.add(AI_ONNX, "Round", |c| unary(c, UnaryOp::Round));
    reg.add(AI_ONNX, "Floor", |c| unary(c, UnaryOp::Floor));
    reg.add(AI_ONNX, "Ceil", |c| unary(c, UnaryOp::Ceil));
    reg.add(AI_ONNX, "Sign", |c| unary(c, UnaryOp::Sign));
    reg.add(AI_ONNX, "IsNaN", is_nan);
    reg.add(AI_ONNX, "IsInf", is_inf);
    reg.add(AI_ONNX, "Sin", |c| unary(c, UnaryOp::Math(MathFn::Sin)));
    reg.add(AI_ONNX, "Cos", |c| unary(c, UnaryOp::Math(MathFn::Cos)));
    reg.add(AI_ONNX, "Tan", |c| unary(c, UnaryOp::Math(MathFn::Tan)));
    reg.add(AI_ONNX, "Asin", |c| unary(c, UnaryOp::Math(MathFn::Asin)));
    reg.add(AI_ONNX, "Acos", |c| unary(c, UnaryOp::Math(MathFn::Acos)));
    reg.add(AI_ONNX, "Atan", |c| unary(c, UnaryOp::Math(MathFn::Atan)));
    reg.add(AI_ONNX, "Sinh", |c| unary(c, UnaryOp::Math(MathFn::Sinh)));
    reg.add(AI_ONNX, "Cosh", |c| unary(c, UnaryOp::Math(MathFn::Cosh)));
    reg.add(AI_ONNX, "Asinh", |c| unary(c, UnaryOp::Math(MathFn::Asinh)));
    reg.add(AI_ONNX, "Acosh", |c| unary(c, UnaryOp::Math(MathFn::Acosh)));
    reg.add(AI_ONNX, "Atanh", |c| unary(c, UnaryOp::Math(MathFn::Atanh)));
    reg.add(AI_ONNX, "Clip", clip);
    reg.add(AI_ONNX, "Add", |c| binary(c, BinaryOp::Add));
    reg.add(AI_ONNX, "Sub", |c| binary(c, BinaryOp::Sub));
    reg.add(AI_ONNX, "Mul", |c| binary(c, BinaryOp::Mul));
    reg.add(AI_ONNX, "Div", |c| binary(c, BinaryOp::Div));
    reg.add(AI_ONNX, "Pow", |c| binary(c, BinaryOp::Pow));
    reg.add(AI_ONNX, "PRelu", |c| binary(c, BinaryOp::PRelu));
    reg.add(AI_ONNX, "Equal", |c| binary(c, BinaryOp::Equal));
    reg.add(AI_ONNX, "Less", |c| binary(c, BinaryOp::Less));
    reg.add(AI_ONNX, "Greater", |c| binary(c, BinaryOp::Greater));
    reg.add(AI_ONNX, "LessOrEqual", |c| binary(c, BinaryOp::LessOrEqual));
    reg.add(AI_ONNX, "GreaterOrEqual", |c| {
        binary(c, BinaryOp::GreaterOrEqual)
    });
    reg.add(AI_ONNX, "Where", |c| c.emit_all(Op::Where));
    reg.add(AI_ONNX, "Max", |c| variadic(c, BinaryOp::Max, false));
    reg.add(AI_ONNX, "Min", |c| variadic(c, BinaryOp::Min, false));
    reg.add(AI_ONNX, "Sum", |c| variadic(c, BinaryOp::Add, false));
    reg.add(AI_ONNX, "Mean", |c| variadic(c, BinaryOp::Add, true));
}

fn unary(c: &mut NodeCtx, u: UnaryOp) -> Res<Vec<Option<ValueRef>>> {
    c.emit_all(Op::Unary(u))
}

fn binary(c: &mut NodeCtx, b: BinaryOp) -> Res<Vec<Option<ValueRef>>> {
    c.emit_all(Op::Binary(b))
}

/// IsNaN: x ≠ x, which holds for NaN only.
fn is_nan(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let same = c.emit_inner(Op::Binary(BinaryOp::Equal), &[x, x], "is_number")?;
    c.emit(Op::Logical(Logical::Not), &[same])
}

/// IsInf: x, −x or |x| (by which infinities are detected) equal to +inf.
fn is_inf(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let dtype = c.ty(x).dtype;
    if !dtype.is_float() {
        return Err(c.err(format!("IsInf is defined on floats, got {dtype}")));
    }
    let detect = (
        c.bool_attr("detect_positive", true)?,
        c.bool_attr("detect_negative", true)?,
    );
    let compared = match detect {
        (true, true) => c.emit_inner(Op::Unary(UnaryOp::Abs), &[x], "abs")?,
        (true, false) => x,
        (false, true) => c.emit_inner(Op::Unary(UnaryOp::Neg), &[x], "negated")?,
        // Nothing is detected: x < −inf, false for every x.
        (false, false) => {
            let below = c.scalar("negative_infinity", dtype, f64::NEG_INFINITY);
            return c.emit(Op::Binary(BinaryOp::Less), &[x, below]);
        }
    };
    let inf = c.scalar("infinity", dtype, f64::INFINITY);
    c.emit(Op::Binary(BinaryOp::Equal), &[compared, inf])
}

fn leaky_relu(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let alpha = c.float("alpha", 0.01)?;
    unary(c, UnaryOp::LeakyRelu { alpha })
}

fn hard_sigmoid(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (alpha, beta) = (c.float("alpha", 0.2)?, c.float("beta", 0.5)?);
    unary(c, UnaryOp::HardSigmoid { alpha, beta })
}

fn elu(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let alpha = c.float("alpha", 1.0)?;
    unary(c, UnaryOp::Elu { alpha })
}

fn selu(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let alpha = c.float("alpha", 1.673_263_2)?;
    let gamma = c.float("gamma", 1.050_701)?;
    unary(c, UnaryOp::Selu { alpha, gamma })
}

fn celu(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let alpha = c.float("alpha", 1.0)?;
    unary(c, UnaryOp::Celu { alpha })
}

fn thresholded_relu(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let alpha = c.float("alpha", 1.0)?;
    unary(c, UnaryOp::ThresholdedRelu { alpha })
}

/// Shrink: `x + bias` where `x < -lambd`, `x - bias` where `x > lambd`, else
/// 0: two comparisons and two selections, as the specification's own
/// function body (opset 18) defines it (`NodeCtx::scalar` in `composite.rs`).
fn shrink(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (bias, lambd) = (c.float("bias", 0.0)?, c.float("lambd", 0.5)?);
    let x = c.input(0)?;
    let dtype = c.ty(x).dtype;
    let [low, high, bias, zero] = [
        ("low", -lambd),
        ("high", lambd),
        ("bias", bias),
        ("zero", 0.0),
    ]
    .map(|(what, v)| c.scalar(what, dtype, f64::from(v)));
    let below = c.emit_inner(Op::Binary(BinaryOp::Less), &[x, low], "below")?;
    let above = c.emit_inner(Op::Binary(BinaryOp::Greater), &[x, high], "above")?;
    let raised = c.emit_inner(Op::Binary(BinaryOp::Add), &[x, bias], "raised")?;
    let lowered = c.emit_inner(Op::Binary(BinaryOp::Sub), &[x, bias], "lowered")?;
    let upper = c.emit_inner(Op::Where, &[above, lowered, zero], "upper")?;
    c.emit(Op::Where, &[below, raised, upper])
}

fn gelu(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let tanh_approx = match c.string("approximate", "none")?.as_str() {
        "none" => false,
        "tanh" => true,
        other => return Err(c.err(format!("Gelu approximate '{other}' is not known"))),
    };
    unary(c, UnaryOp::Gelu { tanh_approx })
}

/// Swish, `x * sigmoid(alpha * x)`, and SwiGLU, `swish(a) * b` with `a` and
/// `b` of one shape, as their specifications define them.
fn swish(c: &mut NodeCtx, gated: bool) -> Res<Vec<Option<ValueRef>>> {
    let alpha = c.float("alpha", 1.0)?;
    let x = c.input(0)?;
    let dtype = c.ty(x).dtype;
    let scaled = if alpha == 1.0 {
        x
    } else {
        let alpha = c.scalar("alpha", dtype, f64::from(alpha));
        c.emit_inner(Op::Binary(BinaryOp::Mul), &[x, alpha], "scaled")?
    };
    let gate = c.emit_inner(Op::Unary(UnaryOp::Sigmoid), &[scaled], "sigmoid")?;
    if !gated {
        return c.emit(Op::Binary(BinaryOp::Mul), &[x, gate]);
    }
    let value = c.input(1)?;
    let (a, b) = (c.ty(x).shape, c.ty(value).shape);
    if a != b {
        return Err(c.err(format!(
            "the gate's shape {a:?} differs from the value's {b:?}; SwiGLU does not broadcast"
        )));
    }
    let swished = c.emit_inner(Op::Binary(BinaryOp::Mul), &[x, gate], "swish")?;
    c.emit(Op::Binary(BinaryOp::Mul), &[swished, value])
}

/// Clip's bounds are attributes before opset 11 and constant inputs from it.
fn clip(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let bound = |t: Option<Tensor>, default: f32| -> Res<f32> {
        match t {
            None => Ok(default),
            Some(t) if t.numel() == 1 => Ok(t.data.to_f64()[0] as f32),
            Some(t) => Err(c.err(format!(
                "Clip bound must be a scalar, got shape {:?}",
                t.shape
            ))),
        }
    };
    let (min, max) = if c.opset >= 11 {
        (
            bound(c.const_input(1)?, f32::NEG_INFINITY)?,
            bound(c.const_input(2)?, f32::INFINITY)?,
        )
    } else {
        (
            c.float("min", f32::NEG_INFINITY)?,
            c.float("max", f32::INFINITY)?,
        )
    };
    let x = c.input(0)?;
    c.emit(Op::Unary(UnaryOp::Clip { min, max }), &[x])
}

/// Max, Min, Sum and Mean take any number of (broadcasting) inputs: a chain of
/// binary ops `b`, and for Mean a division by their count.
fn variadic(c: &mut NodeCtx, b: BinaryOp, mean: bool) -> Res<Vec<Option<ValueRef>>> {
    let inputs: Vec<ValueRef> = (0..c.inputs.len())
        .map(|i| c.input(i))
        .collect::<Res<_>>()?;
    let Some((&first, rest)) = inputs.split_first() else {
        return Err(c.err("needs at least one input"));
    };
    if rest.is_empty() {
        return c.emit(Op::Identity, &[first]);
    }
    let mut acc = first;
    for (k, &v) in rest[..rest.len() - 1].iter().enumerate() {
        acc = c.emit_inner(Op::Binary(b), &[acc, v], &k.to_string())?;
    }
    let last = rest[rest.len() - 1];
    if !mean {
        return c.emit(Op::Binary(b), &[acc, last]);
    }
    let sum = c.emit_inner(Op::Binary(b), &[acc, last], "sum")?;
    let dtype = c.ty(sum).dtype;
    let n = Tensor::new(
        vec![],
        TensorData::from_f64(dtype, vec![inputs.len() as f64]),
    );
    let n = c.inner_constant("count", n);
    c.emit(Op::Binary(BinaryOp::Div), &[sum, n])
}
