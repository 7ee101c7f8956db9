//! How a model is compiled: its worker threads, convolution algorithms and
//! instruction set.

use super::kernels::conv::algo::ConvAlgoOptions;
use super::kernels::simd::Isa;
use super::measure::roofline;

/// How to compile a model.
#[derive(Clone, Debug, Default)]
pub struct RuntimeOptions {
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// How each convolution's algorithm is chosen.
    pub conv_algo: ConvAlgoOptions,
    /// The instruction set of the hand-written kernels; `None`, the widest
    /// this CPU has. A narrower one runs the same model on the AVX2 or
    /// portable paths (to compare them, or to test them on a wider CPU).
    pub isa: Option<Isa>,
}

impl RuntimeOptions {
    /// `threads` workers (0: one per core), each convolution's algorithm
    /// chosen by measurement and cached per machine beside the roofline peaks,
    /// as the command line does by default.
    pub fn with_threads(threads: usize) -> RuntimeOptions {
        RuntimeOptions {
            threads,
            conv_algo: ConvAlgoOptions {
                choice: Default::default(),
                cache: roofline::cache_dir(),
            },
            isa: None,
        }
    }
}
