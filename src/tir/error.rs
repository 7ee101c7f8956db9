//! The error type of the tensor-level IR stage.

use thiserror::Error;

/// Errors of compute definitions, scheduling, bound inference, lowering and interpretation.
/// Each message names the tensor (stage) or variable involved.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum TirError {
    #[error("tir compute definition: {0}")]
    Definition(String),
    #[error("tir schedule: {0}")]
    Schedule(String),
    #[error("tir bound inference: {0}")]
    Bound(String),
    #[error("tir lowering: {0}")]
    Lower(String),
    /// The op has no TIR form here (a caller may run it another way).
    #[error("no tir lowering: {0}")]
    Unsupported(String),
    #[error("tir evaluation: {0}")]
    Eval(String),
}
