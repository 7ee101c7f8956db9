//! The worker threads a model runs on: how many it may have, and its pool.

use super::RuntimeError;
use crate::core::par;

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
