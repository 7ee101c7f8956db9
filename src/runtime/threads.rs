//! How many worker threads a model may have (the pools are the machine's:
//! `machine.rs`).

/// The most worker threads a model may use: 4 per core. More only add
/// contention, and a count read from a user (`--threads 100000`) must not
/// start that many threads.
pub fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}
