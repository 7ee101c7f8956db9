//! Layout algebra and planning: layouts (`Layout`), what padding holds
//! (`PadValue`, `Assumption`, per-op pad-value flow), and the e-graph that
//! cancels and moves layout transforms using the rules in `rules/`.

pub mod candidates;
pub mod cost;
pub mod egraph;
pub mod extract;
pub mod materialize;
pub mod plan;
pub mod planners;
pub mod report;
pub mod rules;
pub mod solver;
pub mod space;
pub mod target;

#[cfg(test)]
mod rewrite_tests;

pub use crate::core::{AlgebraError, Digit, Layout};
pub use crate::core::{Assumption, PadFlow, PadValue, Requirement};
pub use crate::ops::{binary_flow, pad_flow, unary_flow};

/// An error of the layout stage.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// A layout string did not parse.
    #[error("layout '{text}': {message}")]
    Parse {
        /// The text.
        text: String,
        /// What is wrong with it.
        message: String,
    },
    /// A layout does not fit a shape or an operation.
    #[error(transparent)]
    Algebra(#[from] AlgebraError),
    /// A layout that cannot be used here.
    #[error("{0}")]
    Invalid(String),
    /// The graph cannot be planned.
    #[error("rewriting: {0}")]
    Graph(String),
    /// The rewrite rules could not be loaded.
    #[error(transparent)]
    Rules(#[from] rules::RuleError),
}
