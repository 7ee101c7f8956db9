//! Tensor-level IR: compute definitions, schedules, InferBound, lowering.

pub mod bound;
pub mod compute;
pub mod error;
pub mod expr;
pub mod interp;
pub mod intset;
pub mod layout;
pub mod lower;
pub mod schedule;
pub mod simplify;
pub mod stmt;

pub use error::TirError;
