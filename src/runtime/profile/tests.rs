//! The profile table against figures worked by hand.

use crate::runtime::measure::roofline::StepWork;

#[test]
fn the_profile_shows_rates_and_the_fraction_of_the_roof() {
    use crate::runtime::measure::roofline::{MachinePeaks, PeaksSource, Roofline};
    use crate::runtime::profile::bench::{BenchReport, Profile};
    use crate::runtime::StepProfile;
    use std::time::Duration;
    let step = |name: &str, bytes: u64, flops: f64, ms_per_run: [u64; 3]| StepProfile {
        name: name.into(),
        kind: "Kind".into(),
        fallback: false,
        work: StepWork { bytes, flops },
        times: ms_per_run.map(Duration::from_millis).to_vec(),
    };
    let ms = Duration::from_millis(1);
    let report = BenchReport {
        runs: 3,
        times: vec![ms, ms, ms],
        min: ms,
        p50: ms,
        p90: ms,
        p99: ms,
        mean: ms,
        profile: Some(Profile {
            runs: 3,
            steps: vec![
                // A median of 1 ms a run (one preempted run of 30 ms does not
                // count): 2 GB/s and 400 GFLOP/s; the roof is the 0.5 ms its
                // flops take at 800 GFLOP/s (its bytes take 0.2 ms at 10 GB/s).
                step("conv", 2_000_000, 4e8, [1, 30, 1]),
                // 2 ms a run for 3 MB: 1.5 GB/s, 15% of 10 GB/s.
                step("pool", 3_000_000, 0.0, [2, 2, 2]),
            ],
            roofline: Roofline {
                peaks: MachinePeaks {
                    copy_gbps: 10.0,
                    fma_gflops: 800.0,
                    threads: 2,
                },
                source: PeaksSource::Cached("/cache/peaks.json".into()),
            },
            // The conv predicted by a measured kernel time, the pool by its
            // bytes at 10 GB/s.
            predicted: vec![0.8e-3, 0.3e-3],
        }),
    };
    let text = report.to_string();
    let line = |name: &str| {
        let line = text.lines().find(|l| l.ends_with(name));
        line.unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    assert!(text.contains(
        "machine: copy 10.0 GB/s, FMA 800.0 GFLOP/s (threads 2, cached in /cache/peaks.json)"
    ));
    assert!(text.contains("predicted 1.100 ms in all, measured 3.000 ms"));
    let columns = |l: &str| l.split_whitespace().take(8).collect::<Vec<_>>().join(" ");
    assert_eq!(
        columns(line("step")),
        "ms pred. ms share GB/s GFLOP/s flop/B %"
    );
    assert_eq!(
        columns(line("conv")),
        "1.000 0.800 33.3% 2.00 400.00 200.00 50.0% Kind"
    );
    assert_eq!(
        columns(line("pool")),
        "2.000 0.300 66.7% 1.50 - - 15.0% Kind"
    );
}
