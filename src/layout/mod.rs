//! Layout algebra and planning.
pub mod solver;
