//! The roofline view of a model: what each step does (its bytes and flops),
//! for comparing its speed with this machine's peaks.

/// What one step does in one run, counted at compile time from its graph nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepWork {
    /// Bytes of every value the step reads or writes, each once at its stored
    /// size (padding of its layout included): activations, weights and other
    /// constants, and non-f32 tensors at their element size.
    pub bytes: u64,
    /// Floating-point operations of its ops (`OpDef::flops`): 2 per multiply-add
    /// of convolutions and matrix products, on the logical tensors. Elementwise
    /// ops, batch norms, pools and data movement count none: they are taken as
    /// memory-bound.
    pub flops: f64,
}

impl StepWork {
    /// Flops per byte moved, for a step that computes.
    pub fn intensity(&self) -> Option<f64> {
        (self.flops > 0.0 && self.bytes > 0).then(|| self.flops / self.bytes as f64)
    }
}
