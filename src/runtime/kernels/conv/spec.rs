//! What a dense convolution's kernel is built from: shared by the
//! algorithm choice and the kernels it builds.

use super::direct::ConvGeom;
use super::tile::{ChannelParams, Epilogue};
use crate::runtime::kernels::simd::Isa;

/// What a dense convolution is built from.
pub struct ConvSpec<'a> {
    /// Shapes and window.
    pub geom: ConvGeom,
    /// The instruction set of the kernels.
    pub isa: Isa,
    /// Logical OIHW weights, batch norm folded in.
    pub w: &'a [f32],
    /// Per-channel bias (batch norm folded in) and PRelu slopes.
    pub params: ChannelParams<'a>,
    /// The clamp and activation of every output.
    pub epilogue: Epilogue,
    /// What the output's padding channels must hold, if anything.
    pub pad_fill: Option<f32>,
    /// Worker threads the model runs on.
    pub threads: usize,
    /// The quantization grid every input value lies on, if known.
    pub grid: Option<InputGrid>,
    /// Whether a residual is added to every output before the epilogue.
    pub residual: bool,
}

/// The quantization grid a convolution's input lies on: every value is
/// `(q - zero_point) * scale` for an integer `q` in `min..=max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InputGrid {
    /// The grid's step.
    pub scale: f32,
    /// The integer that stands for 0.
    pub zero_point: f32,
    /// The least integer of the quantized type.
    pub min: f32,
    /// The greatest integer of the quantized type.
    pub max: f32,
}

impl InputGrid {
    /// Whether the grid's integers, shifted by `min`, are bytes: a positive
    /// finite step, integral bounds at most 255 apart and the zero point
    /// between them (8-bit types, signed or not).
    pub(in crate::runtime) fn fits_a_byte(&self) -> bool {
        let integral = |v: f32| v.is_finite() && v.fract() == 0.0;
        self.scale.is_finite()
            && self.scale > 0.0
            && [self.zero_point, self.min, self.max]
                .into_iter()
                .all(integral)
            && self.max - self.min <= 255.0
            && (self.min..=self.max).contains(&self.zero_point)
    }

    /// The byte that stands for 0 (the zero point shifted by `-min`).
    pub(super) fn zero_byte(&self) -> u8 {
        (self.zero_point - self.min) as u8
    }
}
