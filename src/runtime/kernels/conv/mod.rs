//! Convolutions: the direct kernel over the register-tiled micro-kernel,
//! Winograd, depthwise, pixels in the lanes for few output channels, and the
//! choice among them per layer.

pub mod algo;
pub mod depthwise;
pub mod direct;
pub mod pixel_lanes;
pub mod tile;
pub mod winograd;

#[cfg(test)]
mod tests;
