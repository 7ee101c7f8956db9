//! The error type of the tensor-level IR stage.

use thiserror::Error;

/// Errors of compute definitions, scheduling, bound inference, lowering and interpretation.
/// Each message names the tensor (stage) or variable involved.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TirError {
    /// A compute definition is malformed.
    #[error("tir compute definition: {0}")]
    Definition(String),
    /// A schedule primitive cannot apply.
    #[error("tir schedule: {0}")]
    Schedule(String),
    /// Bound inference failed.
    #[error("tir bound inference: {0}")]
    Bound(String),
    /// Lowering to statements failed.
    #[error("tir lowering: {0}")]
    Lower(String),
    /// The op has no TIR form here (a caller may run it another way).
    #[error("no tir lowering: {0}")]
    Unsupported(String),
    /// The interpreter failed (an access outside a buffer, a failed assumption).
    #[error("tir evaluation: {0}")]
    Eval(String),
}

/// A micro-kernel's failure (an access outside its region, regions it does not
/// take), for the interpreter and the JIT alike; the caller adds the kernel's name.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct KernelError(pub String);
