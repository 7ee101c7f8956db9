//! The machine's peaks and their cache, and the convolution algorithm
//! measured once then read from the cache.

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
        peaks_cached_in(&pool, Some(dir), reprobe, |pool| {
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
    // Probed while other processes kept both cores busy: said so, and
    // cached all the same (every later process reads the same peaks).
    let busy = Load {
        others: 150.0,
        elapsed: 100.0,
        cpus: 2,
        span: None,
    };
    let loaded = probed_under(2, &dir, true, busy);
    assert_eq!(
        loaded.source,
        PeaksSource::ProbedUnderLoad(Some(file.clone()), busy)
    );
    let cached = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(
        (cached.peaks, cached.source),
        (loaded.peaks, PeaksSource::Cached(file.clone()))
    );
    // A folder that cannot be made (a file is in the way): probed, not cached.
    let blocked = machine_peaks(1, Some(&file), false).unwrap();
    assert_eq!(blocked.source, PeaksSource::Probed(None));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Winograd errors kept in the kernel times are read back by the next
/// process that opens them, under the same key only.
#[test]
fn winograd_errors_are_kept_with_the_kernel_times() {
    use crate::runtime::kernels::conv::algo::{ConvAlgo, ErrorsStore};
    use crate::runtime::kernels::conv::winograd::WinogradTile;
    use crate::runtime::kernels::simd::Isa;
    use crate::runtime::measure::kernel_times::KernelTimes;
    let dir = std::env::temp_dir().join(format!("layoutopt-errors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (f4, f2) = (
        ConvAlgo::Winograd(WinogradTile::F4),
        ConvAlgo::Winograd(WinogradTile::F2),
    );
    let mut times = KernelTimes::open(Some(&dir), Isa::detect(), 1);
    times.keep_error(&[7, 8, 9], f4, 3.25e-6);
    times.keep_error(&[7, 8, 9], f2, 0.0);
    times.save();
    let next = KernelTimes::open(Some(&dir), Isa::detect(), 1);
    assert_eq!(next.error(&[7, 8, 9], f4), Some(3.25e-6));
    assert_eq!(next.error(&[7, 8, 9], f2), Some(0.0));
    assert_eq!(next.error(&[7, 8, 10], f4), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `auto` measures direct and each accurate Winograd size once per machine
/// and shape: a second build reads the times from `conv_algos.json` (edited
/// times decide the next choice, so nothing is measured again); `direct` and
/// `winograd` measure nothing; every Winograd size chosen or timed is within
/// the tolerance on the layer.
#[test]
fn conv_algorithms_are_measured_once_then_read_from_the_cache() {
    use crate::runtime::kernels::conv::algo::{
        ConvAlgo, ConvAlgoChoice, ConvAlgoOptions, ConvSpec, WINOGRAD_TOLERANCE,
    };
    use crate::runtime::kernels::conv::direct::ConvGeom;
    use crate::runtime::kernels::conv::winograd::WinogradTile;
    use crate::runtime::kernels::simd::Isa;
    use crate::runtime::measure::conv_times::build;
    use crate::runtime::measure::kernel_times::KernelTimes;
    use crate::runtime::test_support::{square_conv, Rng};
    let dir = std::env::temp_dir().join(format!("layoutopt-convalgo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(23);
    let geom = square_conv(32, 12, (3, 1), 16);
    let (w, bias) = (rng.f32s(32 * 32 * 9), rng.f32s(32));
    let spec = ConvSpec::biased(geom, Isa::detect(), &w, &bias, 1);
    let options = |choice| ConvAlgoOptions {
        choice,
        cache: Some(dir.clone()),
        decided: None,
    };
    let auto = options(ConvAlgoChoice::Auto);
    // Each build reads the cache file afresh, as a new process would.
    let times = || KernelTimes::open(Some(&dir), spec.isa, 1);
    let (_, first, _) = build(&spec, &auto, &mut times(), &[], 0);
    let names: Vec<ConvAlgo> = first.millis.iter().map(|m| m.0).collect();
    assert_eq!(names[0], ConvAlgo::Direct, "{first}");
    for (algo, e) in &first.errors {
        assert!(e.is_finite(), "{first}");
        assert_eq!(names.contains(algo), *e <= WINOGRAD_TOLERANCE, "{first}");
    }
    // The first within 5% of the fastest, in the candidates' order.
    let fastest = first
        .millis
        .iter()
        .map(|m| m.1)
        .fold(f64::INFINITY, f64::min);
    let taken = first.millis.iter().find(|m| m.1 <= fastest * 1.05);
    assert_eq!(first.algo, taken.unwrap().0, "{first}");
    let (_, second, _) = build(&spec, &auto, &mut times(), &[], 0);
    assert_eq!(second, first);
    // Make F(2x2) the fastest in the file: the next build takes it.
    assert!(
        names.contains(&ConvAlgo::Winograd(WinogradTile::F2)),
        "{first}"
    );
    let file = dir.join("kernel_times.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let entries = json.as_array_mut().unwrap();
    // The Winograd errors are kept beside the times, for the next process.
    let kept = |e: &&mut serde_json::Value| e["kernel"] == "winograd-errors";
    let errors = entries.iter_mut().find(kept).expect("the errors' entry");
    let kept_errors: Vec<(String, f64)> = serde_json::from_value(errors["millis"].clone()).unwrap();
    let computed: Vec<(String, f64)> = (first.errors.iter())
        .map(|(a, e)| (a.to_string(), *e))
        .collect();
    assert_eq!(kept_errors, computed);
    let conv = entries.iter_mut().find(|e| e["kernel"] == "conv").unwrap();
    for m in conv["millis"].as_array_mut().unwrap() {
        m[1] = serde_json::json!(if m[0] == "winograd-f2" { 0.5 } else { 1.0 });
    }
    std::fs::write(&file, json.to_string()).unwrap();
    let (kernel, edited, shared) = build(&spec, &auto, &mut times(), &[], 0);
    assert_eq!(
        edited.algo,
        ConvAlgo::Winograd(WinogradTile::F2),
        "{edited}"
    );
    assert!(matches!(
        kernel,
        crate::runtime::kernels::conv::algo::ConvKernel::Winograd(_)
    ));
    // The forced choices measure nothing.
    let (_, direct, _) = build(
        &spec,
        &options(ConvAlgoChoice::Direct),
        &mut times(),
        &[],
        0,
    );
    assert_eq!((direct.algo, direct.millis.len()), (ConvAlgo::Direct, 0));
    let (_, wino, _) = build(
        &spec,
        &options(ConvAlgoChoice::Winograd),
        &mut times(),
        &[],
        0,
    );
    assert_eq!(wino.millis.len(), 0);
    assert_eq!(wino.algo, ConvAlgo::Winograd(WinogradTile::F4), "{wino}");

    // A compile at another shape runs the algorithm decided for the layer
    // without measuring, and takes what was made from its weights when they
    // are the same weights.
    use crate::graph::Span;
    use crate::runtime::kernels::conv::algo::{
        weights_print, ConvKernel, DecidedAlgos, KeptWeights, LayerAlgo,
    };
    let layer = vec![Span::new("m.onnx", "conv", "Conv", 3)];
    let transformed = |k: &ConvKernel| match k {
        ConvKernel::Winograd(k) => k.transformed(),
        _ => panic!("not Winograd"),
    };
    let print = weights_print(&w);
    let decided = DecidedAlgos::new(
        &[LayerAlgo {
            name: "conv".into(),
            spans: layer.clone(),
            decision: edited.clone(),
        }],
        &[KeptWeights {
            layer: layer.clone(),
            print,
            shared,
        }],
    );
    let replaying = ConvAlgoOptions {
        decided: Some(std::sync::Arc::new(decided)),
        ..options(ConvAlgoChoice::Auto)
    };
    let taller = ConvSpec {
        geom: ConvGeom {
            h: 20,
            oh: 20,
            ..spec.geom.clone()
        },
        ..spec.clone()
    };
    let (again, d, _) = build(&taller, &replaying, &mut times(), &layer, print);
    assert_eq!((d.algo, d.millis.len()), (edited.algo, 0), "{d}");
    assert!(transformed(&again).shares_with(&transformed(&kernel)));
    let w2: Vec<f32> = w.iter().map(|v| v * 0.5).collect();
    let other = ConvSpec {
        w: &w2,
        ..taller.clone()
    };
    let (fresh, d, _) = build(&other, &replaying, &mut times(), &layer, weights_print(&w2));
    assert_eq!(d.algo, edited.algo, "{d}");
    assert!(
        !transformed(&fresh).shares_with(&transformed(&kernel)),
        "other weights are transformed anew"
    );
    let (_, d, _) = build(&taller, &replaying, &mut times(), &[], print);
    assert!(!d.millis.is_empty(), "another layer is measured: {d}");
    std::fs::remove_dir_all(&dir).unwrap();
}
