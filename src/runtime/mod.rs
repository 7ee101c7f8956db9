//! The native runtime: a planned graph compiled once into a list of kernels over
//! one memory arena, then run as often as wanted.
//!
//! Compilation (`compile/`) fuses each convolution with the batch norm,
//! residual add and relu/clip that follow it (batch norm folded into the packed
//! weights), packs weights for the micro-kernels (`kernels/`), and gives every
//! intermediate f32 value an offset in a single arena, reusing space once a
//! value's last reader has run. Ops without a native kernel run through the
//! reference executor's `eval_op` on the same buffers; the profile names them
//! as fallbacks. `measure/` holds what the runtime measures of this machine.

mod check;
mod compile;
mod error;
mod exec;
pub mod kernels;
mod machine;
pub mod measure;
mod model;
mod options;
pub mod profile;
mod run;
mod scratch;
mod storage;
mod threads;

pub use check::NonFinite;
pub use error::RuntimeError;
pub use kernels::conv::algo::{ConvAlgo, ConvAlgoChoice, ConvAlgoOptions, DecidedAlgos, LayerAlgo};
pub use kernels::simd::Isa;
pub use machine::Machine;
pub use model::CompiledModel;
pub use options::{KernelPath, RuntimeOptions};
pub use run::{ModelInput, StepProfile};
pub use threads::max_threads;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
