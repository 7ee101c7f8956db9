//! Timing a compiled model: latency percentiles over repeated runs, and an
//! optional per-step profile (which steps are native, which fall back, and how
//! close each comes to the machine's roofline).

use super::calibrate::predicted_step_seconds;
use crate::graph::Tensor;
use crate::runtime::measure::roofline::Roofline;
use crate::runtime::run::percentile;
use crate::runtime::{CompiledModel, RuntimeError, StepProfile};
use std::fmt;
use std::time::{Duration, Instant};

/// Latencies of `runs` timed runs after `warmup` untimed ones.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// Timed runs.
    pub runs: usize,
    /// Every timed run, in the order they ran.
    pub times: Vec<Duration>,
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
    /// The per-step profile, when asked for.
    pub profile: Option<Profile>,
}

/// The time of every step over the profiled runs, against the machine's roofline.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Profiled runs: extra runs, so timers do not disturb the latencies.
    pub runs: usize,
    /// Each step's work, and its time in every run.
    pub steps: Vec<StepProfile>,
    /// The peaks the steps are compared with.
    pub roofline: Roofline,
    /// Each step's time as the cost model predicts it (seconds per run,
    /// `calibrate::predicted_step_seconds`), in the order of `steps`.
    pub predicted: Vec<f64>,
}

/// Runs `model` `warmup + runs` times, and `runs` more profiled against
/// `roofline` when one is given.
pub fn bench(
    model: &CompiledModel,
    inputs: &[Tensor],
    warmup: usize,
    runs: usize,
    roofline: Option<Roofline>,
) -> Result<BenchReport, RuntimeError> {
    let runs = runs.max(1);
    for _ in 0..warmup {
        model.run(inputs)?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        times.push(time_run(model, inputs)?);
    }
    let mut report = BenchReport::of_times(times);
    if let Some(roofline) = roofline {
        let mut steps = vec![];
        for _ in 0..runs {
            model.run_profiled(inputs, &mut steps)?;
        }
        report.profile = Some(Profile {
            runs,
            steps,
            predicted: predicted_step_seconds(model, &roofline.peaks),
            roofline,
        });
    }
    Ok(report)
}

/// The time of one run of `model`.
pub fn time_run(model: &CompiledModel, inputs: &[Tensor]) -> Result<Duration, RuntimeError> {
    let t = Instant::now();
    model.run(inputs)?;
    Ok(t.elapsed())
}

impl BenchReport {
    /// The percentiles of timed runs (at least one), without a profile.
    pub fn of_times(times: Vec<Duration>) -> BenchReport {
        let mut sorted = times.clone();
        sorted.sort();
        let runs = sorted.len().max(1);
        let pct = |p: f64| percentile(&sorted, p);
        BenchReport {
            runs,
            min: pct(0.0),
            p50: pct(50.0),
            p90: pct(90.0),
            p99: pct(99.0),
            mean: times.iter().sum::<Duration>() / runs as u32,
            profile: None,
            times,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A figure with `decimals`, or "-" where there is none.
fn figure(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".into(), |x| format!("{x:.decimals$}"))
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
        if let Some(Profile {
            runs,
            steps,
            roofline,
            predicted,
        }) = &self.profile
        {
            let medians: Vec<Duration> = steps.iter().map(StepProfile::median).collect();
            let total: Duration = medians.iter().sum();
            let mut sorted: Vec<(&StepProfile, Duration, f64)> = steps
                .iter()
                .zip(medians.iter().copied())
                .zip(predicted.iter().copied())
                .map(|((s, m), p)| (s, m, p))
                .collect();
            sorted.sort_by_key(|&(_, median, _)| std::cmp::Reverse(median));
            writeln!(f, "{roofline}")?;
            writeln!(
                f,
                "per-step profile (median over {runs} runs, {} steps, {} fallbacks; \
                 predicted {:.3} ms in all, measured {:.3} ms, the sum of the medians):",
                steps.len(),
                steps.iter().filter(|s| s.fallback).count(),
                predicted.iter().sum::<f64>() * 1e3,
                total.as_secs_f64() * 1e3,
            )?;
            writeln!(
                f,
                "{:>9} {:>9} {:>6} {:>8} {:>8} {:>7} {:>7}  {:<40} step",
                "ms", "pred. ms", "share", "GB/s", "GFLOP/s", "flop/B", "% roof", "kind"
            )?;
            for (s, median, predicted) in sorted {
                let seconds = median.as_secs_f64();
                let per_second = |x: f64| (seconds > 0.0).then(|| x / seconds / 1e9);
                let gflops = per_second(s.work.flops).filter(|_| s.work.flops > 0.0);
                let roof = match roofline.peaks.fraction_of_roof(&s.work, seconds) {
                    Some(r) => format!("{:.1}%", 100.0 * r),
                    None => "-".into(),
                };
                writeln!(
                    f,
                    "{:>9.3} {:>9.3} {:>5.1}% {:>8} {:>8} {:>7} {:>7}  {:<40} {}{}",
                    seconds * 1e3,
                    predicted * 1e3,
                    100.0 * seconds / total.as_secs_f64().max(1e-12),
                    figure(per_second(s.work.bytes as f64), 2),
                    figure(gflops, 2),
                    figure(s.work.intensity(), 2),
                    roof,
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
