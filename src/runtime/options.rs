//! How a model is compiled: its worker threads, convolution algorithms and
//! instruction set.

use super::kernels::conv::algo::ConvAlgoOptions;
use super::kernels::simd::Isa;
use super::measure::roofline;
use super::RuntimeError;
use crate::core::par;

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

    /// The kernels' instruction set: the one asked for, if this CPU has it.
    pub fn kernel_isa(&self) -> Result<Isa, RuntimeError> {
        match self.isa {
            None => Ok(Isa::detect()),
            Some(isa) if isa.available() => Ok(isa),
            Some(isa) => Err(RuntimeError::Isa(isa)),
        }
    }
}

/// The most worker threads a model may use: 4 per core. More only add
/// contention, and a count read from a user (`--threads 100000`) must not
/// start that many threads.
pub fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A pool of `threads` worker threads (0: one per core; at most [`max_threads`]).
pub(super) fn worker_pool(threads: usize) -> Result<par::Pool, RuntimeError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = match threads {
        0 => cores,
        n if n > max_threads() => {
            return Err(RuntimeError::Threads {
                threads: n,
                message: format!(
                    "more than {} (4 per core) would only compete for {cores} cores",
                    max_threads()
                ),
            })
        }
        n => n,
    };
    par::Pool::new(threads).map_err(|e| RuntimeError::Threads {
        threads,
        message: e.to_string(),
    })
}
