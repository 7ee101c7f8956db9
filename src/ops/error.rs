//! The error of an op's shape inference, reference semantics and ONNX export.
//! Each variant says what kind of wrong it is and carries the message, which is
//! all its text: the graph adds the layer's span, `eval_op` the op's name.

use crate::core::{AlgebraError, TensorError};
use crate::tir::TirError;

/// What is wrong with applying an op to its inputs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// The op got a number of inputs it does not take.
    #[error("{0}")]
    Arity(String),
    /// An input's element type is not one the op is defined on.
    #[error("{0}")]
    DType(String),
    /// Input shapes or ranks do not fit each other or the attributes.
    #[error("{0}")]
    Shape(String),
    /// An attribute holds a value the op cannot take.
    #[error("{0}")]
    Attribute(String),
    /// An element has no defined result (an integer division by zero, an index
    /// out of range).
    #[error("{0}")]
    Value(String),
    /// A size or extent that overflows its integer type.
    #[error("{0}")]
    TooLarge(String),
    /// The op, or this use of it, is not supported (no ONNX form, a graph
    /// input evaluated).
    #[error("{0}")]
    Unsupported(String),
    /// A layout does not apply to a shape.
    #[error("{0}")]
    Layout(String),
    /// An op implementation disagrees with its own shape inference (a bug).
    #[error("{0}")]
    Internal(String),
}

impl OpError {
    /// The same kind of error, its message prefixed with `op: `.
    pub fn in_op(self, op: &str) -> OpError {
        let prefix = |m: String| format!("{op}: {m}");
        match self {
            OpError::Arity(m) => OpError::Arity(prefix(m)),
            OpError::DType(m) => OpError::DType(prefix(m)),
            OpError::Shape(m) => OpError::Shape(prefix(m)),
            OpError::Attribute(m) => OpError::Attribute(prefix(m)),
            OpError::Value(m) => OpError::Value(prefix(m)),
            OpError::TooLarge(m) => OpError::TooLarge(prefix(m)),
            OpError::Unsupported(m) => OpError::Unsupported(prefix(m)),
            OpError::Layout(m) => OpError::Layout(prefix(m)),
            OpError::Internal(m) => OpError::Internal(prefix(m)),
        }
    }
}

impl From<AlgebraError> for OpError {
    fn from(e: AlgebraError) -> OpError {
        OpError::Layout(e.to_string())
    }
}

impl From<TensorError> for OpError {
    fn from(e: TensorError) -> OpError {
        match e {
            TensorError::Mismatch(..) => OpError::DType(e.to_string()),
            TensorError::Empty | TensorError::PartialElement { .. } => {
                OpError::Internal(e.to_string())
            }
        }
    }
}

/// For callers that still carry errors as text (the layout planner's e-graph).
impl From<OpError> for String {
    fn from(e: OpError) -> String {
        e.to_string()
    }
}

/// An op's own inference failing inside its compute definition.
impl From<OpError> for TirError {
    fn from(e: OpError) -> TirError {
        TirError::Definition(e.to_string())
    }
}
