//! What a machine learns from running whole models, above the compiled model:
//! the cost model the planner calibrates with (`calibrate`), and the
//! benchmark and per-step profile of a compiled model (`bench`).

pub mod bench;
pub mod calibrate;

#[cfg(test)]
mod tests;
