//! Layout algebra and planning: layouts (`Layout`), what padding holds
//! (`PadValue`, `Assumption`, per-op pad-value flow), and the e-graph that
//! cancels and moves layout transforms using the rules in `rules/`.

#[allow(clippy::module_inception)]
mod layout;
pub mod op_rules;
mod padvalue;
pub mod plan;
pub mod solver;

pub use layout::{Digit, Layout};
pub use padvalue::{
    binary_flow, binary_scalar, pad_flow, unary_flow, unary_scalar, Assumption, PadFlow, PadValue,
    Requirement,
};

/// An error of the layout stage.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("layout '{text}': {message}")]
    Parse { text: String, message: String },
    #[error("layout {layout} does not fit shape {shape:?}")]
    Rank { layout: String, shape: Vec<usize> },
    #[error("layout {first} then {then} is not a layout: {why}")]
    NotComposable {
        first: String,
        then: String,
        why: String,
    },
    #[error("{0}")]
    Invalid(String),
}
