//! The hand-written kernels a compiled model's steps call, over the vector
//! types of `simd`, and the TIR steps compiled through codegen.

pub(super) mod activation;
pub mod contract;
pub mod conv;
pub(super) mod elementwise;
mod error;
pub mod gather;
pub(super) mod grid_sample;
pub(super) mod matmul;
pub(super) mod normalize;
pub(super) mod pool;
pub mod quantized;
pub(super) mod resize;
pub(super) mod roi_align;
pub(super) mod scatter;
pub mod simd;
pub mod tir_step;
pub(super) mod typed;
pub(super) mod where_select;

pub use error::KernelError;

#[cfg(test)]
mod tests;
