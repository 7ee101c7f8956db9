//! How a model is compiled: its worker threads, convolution algorithms and
//! instruction set.

use super::kernels::conv::algo::ConvAlgoOptions;
use super::kernels::simd::Isa;
use super::measure::roofline;
use crate::core::{parse_choice, UnknownChoice};

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
    /// Which kernels the steps compile to.
    pub kernels: KernelPath,
}

/// Which kernels a model's steps compile to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelPath {
    /// A hand-written kernel wherever one fits, a TIR loop nest (generated
    /// code) for every other op.
    #[default]
    Native,
    /// A TIR loop nest for every op and elementwise chain that lowers to
    /// one, hand-written kernels only for what TIR cannot express (ops on
    /// integers or booleans, ops without a lowering): to measure and test the
    /// generated code on its own.
    Generic,
}

impl KernelPath {
    /// Both paths.
    pub const ALL: [KernelPath; 2] = [KernelPath::Native, KernelPath::Generic];

    /// The path as `--kernels` spells it.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Native => "native",
            KernelPath::Generic => "generic",
        }
    }
}

impl std::str::FromStr for KernelPath {
    type Err = UnknownChoice;

    fn from_str(s: &str) -> Result<KernelPath, UnknownChoice> {
        parse_choice(s, "a kernel path", &KernelPath::ALL, KernelPath::name)
    }
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
                decided: None,
            },
            isa: None,
            kernels: KernelPath::Native,
        }
    }
}
