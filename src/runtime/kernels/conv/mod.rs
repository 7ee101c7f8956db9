//! Convolutions: the direct kernel over the register-tiled micro-kernel,
//! Winograd, depthwise, and the choice among them per layer.

pub mod algo;
pub mod depthwise;
pub mod direct;
pub mod tile;
pub mod winograd;

#[cfg(test)]
mod tests;
