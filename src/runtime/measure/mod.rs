//! What the runtime measures on this machine: its roofline peaks, the times
//! of its kernels (cached per machine), how loaded it was meanwhile, the cost
//! model the planner calibrates with, and the benchmark of a whole model.

pub mod bench;
pub mod calibrate;
pub(super) mod kernel_times;
pub mod load;
pub mod roofline;

#[cfg(test)]
mod tests;
