//! Layout algebra and planning: layouts (`Layout`), what padding holds
//! (`PadValue`, `Assumption`, per-op pad-value flow), and the e-graph that
//! cancels and moves layout transforms using the rules in `rules/`.

pub mod egraph;
pub mod extract;
pub mod op_rules;
pub mod plan;
pub mod rules;
pub mod solver;

#[cfg(test)]
mod rewrite_tests;

pub use crate::core::{AlgebraError, Digit, Layout};
pub use crate::core::{Assumption, PadFlow, PadValue, Requirement};
pub use crate::ops::{binary_flow, pad_flow, unary_flow};

/// An error of the layout stage.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("layout '{text}': {message}")]
    Parse { text: String, message: String },
    #[error(transparent)]
    Algebra(#[from] AlgebraError),
    #[error("{0}")]
    Invalid(String),
    #[error("rewriting: {0}")]
    Graph(String),
    #[error(transparent)]
    Rules(#[from] rules::RuleError),
}
