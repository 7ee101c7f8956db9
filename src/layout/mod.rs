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
pub mod relabel;
pub mod replay;
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

use crate::graph::{format_spans, GraphError, Span};

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

/// Why a graph could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A layout error.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A layout does not fit a shape.
    #[error(transparent)]
    Algebra(#[from] AlgebraError),
    /// The graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The solver failed.
    #[error(transparent)]
    Solve(#[from] solver::SolveError),
    /// A pinned layout names no graph input or output, or does not fit it.
    #[error("pinned layout: {0}")]
    Pin(String),
    /// No planner has this name.
    #[error("unknown planner '{0}' (expected keep, local, greedy or global)")]
    UnknownPlanner(String),
    /// Something is wrong at these layers.
    #[error("{}: {message}", format_spans(spans))]
    AtLayer {
        /// The layers at fault.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
}

impl PlanError {
    /// The layers at fault, none for the graph as a whole.
    pub fn spans(&self) -> Vec<Span> {
        match self {
            PlanError::AtLayer { spans, .. } => spans.clone(),
            PlanError::Graph(e) => e.spans(),
            _ => vec![],
        }
    }
}
