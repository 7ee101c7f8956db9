//! Why a node of the e-graph does not type-check, or a class is not what the
//! code reading it takes it for.

use crate::core::AlgebraError;

/// An ill-typed e-graph node, or a class read as something it is not.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A class of another kind than its reader takes it for.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What the reader takes it for ("a tensor", "a layout", ...).
        expected: &'static str,
        /// What the class is.
        found: String,
    },
    /// An atom names no entry of its side table.
    #[error("no {table} #{index}")]
    NoEntry {
        /// The table ("op", "source").
        table: &'static str,
        /// The index it names.
        index: usize,
    },
    /// The class does not type-check: what its node got wrong.
    #[error("{0}")]
    Invalid(String),
    /// The node's operands do not fit it (shapes, layouts, outputs).
    #[error("{0}")]
    Mismatch(String),
    /// A layout does not fit a shape.
    #[error(transparent)]
    Algebra(#[from] AlgebraError),
    /// Shape inference rejects the op.
    #[error("{0}")]
    Infer(String),
    /// Text that spells no atom.
    #[error("{0}")]
    Atom(String),
}
