//! What a dense convolution's kernel is built from: shared by the
//! algorithm choice and the kernels it builds.

use super::direct::ConvGeom;
use super::tile::{ChannelParams, Epilogue};
use crate::ops::DynamicQuantize;
use crate::runtime::kernels::quantized::Grid;
use crate::runtime::kernels::simd::Isa;

/// What a dense convolution is built from.
#[derive(Clone)]
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
    pub grid: Option<Grid>,
    /// Whether a residual is added to every output before the epilogue.
    pub residual: bool,
    /// The input is rounded at every run onto one grid fitted to its values
    /// (`ops::DynamicQuantize`), which the integer kernel may do itself.
    pub dynamic: Option<DynamicQuantize>,
}

impl<'a> ConvSpec<'a> {
    /// The convolution of weights `w` at `geom` adding `bias` and nothing
    /// else, its input on no known grid: what a layer is timed as when its
    /// layouts or algorithm are chosen (its epilogue costs alike in each).
    pub fn biased(geom: ConvGeom, isa: Isa, w: &'a [f32], bias: &'a [f32], threads: usize) -> Self {
        ConvSpec {
            geom,
            isa,
            w,
            params: ChannelParams::bias_only(bias),
            epilogue: Epilogue::of(None),
            pad_fill: None,
            threads,
            grid: None,
            residual: false,
            dynamic: None,
        }
    }
}
