//! Evaluation of scalar expressions: the meaning of `Expr` on concrete values,
//! shared by the compute-graph evaluator and the statement interpreter.

use super::error::TirError;
use super::expr::{floor_div, floor_mod, BinOp, Expr, Intrinsic, TensorId, Var};
use crate::core::scalar::Scalar;

/// Why a scalar expression has no value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A variable with no value.
    #[error("variable `{0}` is not bound")]
    Unbound(String),
    /// An integer division or modulo by zero.
    #[error("integer division by zero")]
    DivisionByZero,
    /// A call with fewer arguments than its function takes (the 1-based position).
    #[error("{0:?} needs argument {1}")]
    MissingArgument(Intrinsic, usize),
    /// A tensor read, which storage flattening should have turned into a load.
    #[error("a multi-dimensional read survived storage flattening")]
    Unflattened,
    /// A load outside its buffer (or of no buffer).
    #[error("load of buffer t{} at {index} is out of bounds", buffer.0)]
    #[allow(missing_docs)]
    OutOfBounds { buffer: TensorId, index: i64 },
}

impl From<EvalError> for TirError {
    fn from(e: EvalError) -> TirError {
        TirError::Eval(e.to_string())
    }
}

/// A scalar value: an index or a float.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// An integer (index arithmetic).
    Int(i64),
    /// A float (tensor values).
    Float(f64),
}

impl Value {
    /// The value as a float.
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::Float(v) => v,
        }
    }
    /// The value as an integer (a float truncated).
    pub fn as_i64(self) -> i64 {
        match self {
            Value::Int(v) => v,
            Value::Float(v) => v as i64,
        }
    }
}

/// Evaluates a scalar expression. `var` gives loop variable values, `load` flat buffer
/// elements (None: out of bounds or unknown buffer).
pub fn eval_scalar(
    e: &Expr,
    var: &dyn Fn(&Var) -> Option<i64>,
    load: &dyn Fn(TensorId, i64) -> Option<f64>,
) -> Result<Value, EvalError> {
    let ev = |x: &Expr| eval_scalar(x, var, load);
    Ok(match e {
        Expr::Int(v) => Value::Int(*v),
        Expr::Float(v) => Value::Float(*v),
        Expr::Var(v) => Value::Int(var(v).ok_or_else(|| EvalError::Unbound(v.name.to_string()))?),
        Expr::Bin(op, a, b) => {
            let (x, y) = (ev(a)?, ev(b)?);
            match (x, y) {
                (Value::Int(x), Value::Int(y)) if *op != BinOp::Div => Value::Int(match op {
                    BinOp::Add => x.wrapping_add(y),
                    BinOp::Sub => x.wrapping_sub(y),
                    BinOp::Mul => x.wrapping_mul(y),
                    BinOp::FloorDiv | BinOp::FloorMod if y == 0 => {
                        return Err(EvalError::DivisionByZero)
                    }
                    BinOp::FloorDiv => floor_div(x, y),
                    BinOp::FloorMod => floor_mod(x, y),
                    BinOp::Min => x.min(y),
                    BinOp::Max => x.max(y),
                    BinOp::Lt => (x < y) as i64,
                    BinOp::Le => (x <= y) as i64,
                    BinOp::Eq => (x == y) as i64,
                    BinOp::Ne => (x != y) as i64,
                    BinOp::And => (x != 0 && y != 0) as i64,
                    BinOp::Or => (x != 0 || y != 0) as i64,
                    BinOp::Div => unreachable!("excluded by the match guard"),
                }),
                _ => {
                    let (x, y) = (x.as_f64(), y.as_f64());
                    match op {
                        BinOp::Add => Value::Float(x + y),
                        BinOp::Sub => Value::Float(x - y),
                        BinOp::Mul => Value::Float(x * y),
                        BinOp::Div => Value::Float(x / y),
                        BinOp::FloorDiv => Value::Float((x / y).floor()),
                        BinOp::FloorMod => Value::Float(x - y * (x / y).floor()),
                        // NaN propagates, as Cranelift's fmin/fmax do.
                        BinOp::Min => Value::Float(Scalar::min(x, y)),
                        BinOp::Max => Value::Float(Scalar::max(x, y)),
                        BinOp::Lt => Value::Int((x < y) as i64),
                        BinOp::Le => Value::Int((x <= y) as i64),
                        BinOp::Eq => Value::Int((x == y) as i64),
                        BinOp::Ne => Value::Int((x != y) as i64),
                        BinOp::And => Value::Int((x != 0.0 && y != 0.0) as i64),
                        BinOp::Or => Value::Int((x != 0.0 || y != 0.0) as i64),
                    }
                }
            }
        }
        Expr::Not(a) => Value::Int((ev(a)?.as_f64() == 0.0) as i64),
        Expr::Select(c, a, b) => {
            if ev(c)?.as_f64() != 0.0 {
                ev(a)?
            } else {
                ev(b)?
            }
        }
        Expr::Call(f, args) => {
            let arg = |k: usize| -> Result<f64, EvalError> {
                let a = args.get(k).ok_or(EvalError::MissingArgument(*f, k + 1))?;
                Ok(ev(a)?.as_f64())
            };
            let x = arg(0)?;
            Value::Float(match f {
                Intrinsic::Exp => x.exp(),
                Intrinsic::Log => x.ln(),
                Intrinsic::Sqrt => x.sqrt(),
                Intrinsic::Tanh => x.tanh(),
                Intrinsic::Erf => crate::core::scalar::erf(x),
                Intrinsic::Sigmoid => crate::core::scalar::sigmoid(x),
                Intrinsic::Pow => x.powf(arg(1)?),
                Intrinsic::Round => x.round_ties_even(),
                Intrinsic::Floor => x.floor(),
                Intrinsic::Ceil => x.ceil(),
                Intrinsic::Math(f) => f.f64(x),
            })
        }
        Expr::Read { .. } => return Err(EvalError::Unflattened),
        Expr::Load { buffer, index } => {
            let i = ev(index)?.as_i64();
            Value::Float(load(*buffer, i).ok_or(EvalError::OutOfBounds {
                buffer: *buffer,
                index: i,
            })?)
        }
    })
}
