//! The machine's peaks and their cache, and the profile table against
//! figures worked by hand.

use crate::runtime::measure::roofline::StepWork;

#[test]
fn peaks_are_probed_once_then_read_from_the_cache() {
    use crate::runtime::measure::load::Load;
    use crate::runtime::measure::roofline::{peaks_cached_in, PeaksSource, Roofline};
    use std::path::Path;
    // Probed for real, the machine's load given: the test does not depend on it.
    let probed_under = |threads: usize, dir: &Path, reprobe: bool, load: Load| -> Roofline {
        let pool = crate::runtime::Machine::with_cache(None)
            .pool(threads)
            .unwrap();
        peaks_cached_in(&pool, Some(dir), (reprobe, false), |pool| {
            (crate::runtime::measure::roofline::probe(pool), load)
        })
    };
    let machine_peaks = |threads: usize, dir: Option<&Path>, reprobe: bool| -> Option<Roofline> {
        Some(probed_under(threads, dir?, reprobe, Load::default()))
    };
    let dir = std::env::temp_dir().join(format!("layoutopt-peaks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let file = dir.join("peaks.json");
    let probed = Some(file.clone());
    let first = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(first.source, PeaksSource::Probed(probed.clone()));
    let p = first.peaks;
    assert_eq!(p.threads, 2);
    for figure in [p.copy_gbps, p.fma_gflops] {
        assert!(figure.is_finite() && figure > 0.0, "{p:?}");
    }
    let again = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(again.source, PeaksSource::Cached(file.clone()));
    assert_eq!(again.peaks, p);
    // A corrupt file is passed over and rewritten.
    std::fs::write(&file, "{\"peaks\": [").unwrap();
    let rewritten = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(rewritten.source, PeaksSource::Probed(probed.clone()));
    let read = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(read.peaks, rewritten.peaks);
    // Another thread count is another entry.
    let one = machine_peaks(1, Some(&dir), false).unwrap();
    assert_eq!(one.peaks.threads, 1);
    assert_eq!(one.source, PeaksSource::Probed(probed.clone()));
    assert_eq!(machine_peaks(2, Some(&dir), false).unwrap(), read);
    // A re-probe replaces its own entry only.
    let reprobed = machine_peaks(2, Some(&dir), true).unwrap();
    assert_eq!(reprobed.source, PeaksSource::Probed(probed));
    assert_eq!(
        machine_peaks(2, Some(&dir), false).unwrap().peaks,
        reprobed.peaks
    );
    assert_eq!(
        machine_peaks(1, Some(&dir), false).unwrap().peaks,
        one.peaks
    );
    // Probed while other processes kept both cores busy: used, not cached.
    let busy = Load {
        others: 150.0,
        elapsed: 100.0,
        cpus: 2,
        span: None,
    };
    let loaded = probed_under(2, &dir, true, busy);
    assert_eq!(loaded.source, PeaksSource::Busy(busy));
    assert_eq!(
        machine_peaks(2, Some(&dir), false).unwrap().peaks,
        reprobed.peaks
    );
    // A folder that cannot be made (a file is in the way): probed, not cached.
    let blocked = machine_peaks(1, Some(&file), false).unwrap();
    assert_eq!(blocked.source, PeaksSource::Probed(None));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_profile_shows_rates_and_the_fraction_of_the_roof() {
    use crate::runtime::measure::bench::{BenchReport, Profile};
    use crate::runtime::measure::roofline::{MachinePeaks, PeaksSource, Roofline};
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
