//! Timing a compiled model: latency percentiles over repeated runs, and an
//! optional per-step profile (which steps are native, which fall back).

use super::{CompiledModel, RuntimeError, StepProfile};
use crate::graph::Tensor;
use std::fmt;
use std::time::{Duration, Instant};

/// Latencies of `runs` timed runs after `warmup` untimed ones.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// Timed runs.
    pub runs: usize,
    /// The fastest run.
    pub min: Duration,
    /// The median run.
    pub p50: Duration,
    /// The 90th percentile.
    pub p90: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The mean.
    pub mean: Duration,
    /// Per-step times summed over the profiled runs (profiling runs are extra
    /// runs, so timers do not disturb the latencies above).
    pub profile: Option<(usize, Vec<StepProfile>)>,
}

/// Runs `model` `warmup + runs` times (and `runs` more, profiled, if `profile`).
pub fn bench(
    model: &CompiledModel,
    inputs: &[Tensor],
    warmup: usize,
    runs: usize,
    profile: bool,
) -> Result<BenchReport, RuntimeError> {
    let runs = runs.max(1);
    for _ in 0..warmup {
        model.run(inputs)?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        model.run(inputs)?;
        times.push(t.elapsed());
    }
    times.sort();
    // Nearest-rank percentile.
    let pct = |p: f64| times[((p / 100.0 * runs as f64).ceil() as usize).clamp(1, runs) - 1];
    let mean = times.iter().sum::<Duration>() / runs as u32;
    let profile = if profile {
        let mut steps = vec![];
        for _ in 0..runs {
            model.run_profiled(inputs, &mut steps)?;
        }
        Some((runs, steps))
    } else {
        None
    };
    Ok(BenchReport {
        runs,
        min: times[0],
        p50: pct(50.0),
        p90: pct(90.0),
        p99: pct(99.0),
        mean,
        profile,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "latency over {} runs: min {:.3} ms, p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, mean {:.3} ms",
            self.runs,
            ms(self.min),
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.mean)
        )?;
        if let Some((runs, steps)) = &self.profile {
            let total: Duration = steps.iter().map(|s| s.time).sum();
            let mut sorted: Vec<&StepProfile> = steps.iter().collect();
            sorted.sort_by_key(|s| std::cmp::Reverse(s.time));
            writeln!(
                f,
                "per-step profile (mean over {runs} runs, {} steps, {} fallbacks):",
                steps.len(),
                steps.iter().filter(|s| s.fallback).count()
            )?;
            writeln!(f, "{:>9} {:>6}  {:<40} step", "ms", "share", "kind")?;
            for s in sorted {
                writeln!(
                    f,
                    "{:>9.3} {:>5.1}%  {:<40} {}{}",
                    ms(s.time) / *runs as f64,
                    100.0 * s.time.as_secs_f64() / total.as_secs_f64().max(1e-12),
                    s.kind,
                    s.name,
                    if s.fallback {
                        "  [fallback: reference executor]"
                    } else {
                        ""
                    }
                )?;
            }
        }
        Ok(())
    }
}
