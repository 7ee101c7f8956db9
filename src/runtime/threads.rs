//! How many worker threads a model may have (the pools are the machine's:
//! `machine.rs`), and how many of them a step takes part on.

use super::measure::roofline::StepWork;

/// The most worker threads a model may use: 4 per core. More only add
/// contention, and a count read from a user (`--threads 100000`) must not
/// start that many threads.
pub fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Bytes moved and flops done that are worth one more thread on a step: a few
/// microseconds of one core's work (at 10-20 GB/s and 50-100 GFLOP/s), several
/// times what handing a loop to a spinning worker costs. Below that the
/// hand-off and the wait for the slowest thread outweigh the share of work,
/// and a small model ran slower on 16 threads than on one.
const BYTES_PER_THREAD: u64 = 32 << 10;
const FLOPS_PER_THREAD: f64 = 256e3;

/// The most threads a step doing `work` takes part on (at least one).
pub(super) fn threads_for(work: &StepWork) -> usize {
    let by_bytes = work.bytes.div_ceil(BYTES_PER_THREAD);
    let by_flops = (work.flops / FLOPS_PER_THREAD).ceil();
    // `as` saturates a float too large for u64.
    let wanted = by_bytes.max(by_flops as u64);
    usize::try_from(wanted).unwrap_or(usize::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_steps_take_fewer_threads_and_large_ones_all() {
        let work = |bytes, flops| StepWork { bytes, flops };
        assert_eq!(threads_for(&work(0, 0.0)), 1);
        assert_eq!(threads_for(&work(16 << 10, 0.0)), 1);
        assert_eq!(threads_for(&work(100 << 10, 0.0)), 4);
        assert_eq!(threads_for(&work(1 << 10, 1e6)), 4);
        assert!(threads_for(&work(u64::MAX, f64::INFINITY)) >= 64);
    }
}
