//! Convolutions: the direct kernel over the register-tiled micro-kernel,
//! Winograd, depthwise, pixels in the lanes for few output channels, exact
//! integer sums for quantized ones, and the choice among them per layer.

pub mod algo;
pub mod depthwise;
pub mod direct;
pub mod int8;
pub mod pixel_lanes;
pub mod spec;
pub mod tile;
pub mod winograd;

#[cfg(test)]
mod tests;

use crate::core::par;

/// Runs `piece(i, x, residual, y)` for every `i < pieces` on the worker
/// threads, a few pieces per task. The buffers travel as raw pointers so that
/// pieces can write `y` in parallel: each piece must write only its own
/// outputs, and read only inside the buffers.
pub(super) fn for_each_piece(
    pieces: usize,
    x: &[f32],
    residual: Option<&[f32]>,
    y: &mut [f32],
    piece: impl Fn(usize, *const f32, Option<*const f32>, *mut f32) + Sync,
) {
    // Addresses as integers: raw pointers are not `Sync`.
    let (xp, yp) = (x.as_ptr() as usize, y.as_mut_ptr() as usize);
    let rp = residual.map(|r| r.as_ptr() as usize);
    let chunk = (pieces / (par::threads() * 4)).max(1);
    par::for_each_grouped(pieces, chunk, |i| {
        piece(
            i,
            xp as *const f32,
            rp.map(|p| p as *const f32),
            yp as *mut f32,
        )
    });
}
