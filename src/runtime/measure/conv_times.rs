//! The measured side of the convolution algorithm choice (`kernels/conv/algo.rs`
//! says what the candidates are): each candidate runs a few times at the
//! layer's shape on the calling pool's threads, and its milliseconds are
//! cached in the machine's kernel times under the layer's geometry.

use super::kernel_times::{KernelTimes, Neighbour, Priced, Runs, TimedRuns, SAME_TIME};
use crate::graph::Span;
use crate::runtime::kernels::conv::algo::ConvAlgo;
use crate::runtime::kernels::conv::algo::{
    candidates, ConvAlgoOptions, ConvDecision, ConvKernel, ConvSpec, SharedWeights,
};
use crate::runtime::kernels::conv::direct::ConvGeom;
use std::sync::Arc;

/// Builds the kernel of the dense convolution step of source layers `layer`
/// (weights of fingerprint `print`) with the algorithm `options` asks for:
/// one decided for the layer before, when still a candidate, else (under
/// auto) the fastest measured, on the calling thread pool's threads, and
/// recorded in `times`. Also returns what was made from the weights, which
/// a compile at another shape takes when its weights are the same.
pub(in crate::runtime) fn build(
    spec: &ConvSpec,
    options: &ConvAlgoOptions,
    times: &mut KernelTimes,
    layer: &[Span],
    print: u64,
) -> (ConvKernel, ConvDecision, Arc<SharedWeights>) {
    let decided = options.decided.as_ref();
    let shared = (decided.and_then(|d| d.shared(layer, print))).unwrap_or_default();
    let (candidates, errors) = candidates(spec, options, &shared, times);
    let decided = (decided.and_then(|d| d.get(layer))).filter(|a| candidates.contains(a));
    let decision = match (decided, candidates.as_slice()) {
        (Some(algo), _) | (None, &[algo]) => ConvDecision {
            errors,
            ..ConvDecision::from(algo)
        },
        _ => {
            let (millis, _) = millis_in(times, spec, &candidates, &shared, Pricing::Choosing);
            let best = first_within_margin(&millis);
            ConvDecision {
                algo: candidates[best],
                millis: candidates.iter().copied().zip(millis).collect(),
                errors,
            }
        }
    };
    // The times measured and the errors computed, for the next process.
    times.save();
    let kernel = spec.kernel(decision.algo, &shared);
    shared.keep_for(decision.algo);
    (kernel, decision, shared)
}

/// The first of `millis` within [`SAME_TIME`] of the fastest: candidates
/// come in a fixed order (direct first), so two that measure alike are
/// decided the same way in every process, whichever was a hair faster there.
fn first_within_margin(millis: &[f64]) -> usize {
    let fastest = millis.iter().copied().fold(f64::INFINITY, f64::min);
    millis
        .iter()
        .position(|&ms| ms <= fastest * (1.0 + SAME_TIME))
        .unwrap_or(0)
}

/// Whether a convolution's time may be priced from a measured neighbour
/// ([`neighbour`]): the planner's may, as it compares a layer's layout pairs
/// that all come from one neighbour alike; a compile choosing the algorithm
/// a layer runs times the candidates at the layer's own shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) enum Pricing {
    Planning,
    Choosing,
}

/// Candidates whose first timed run is within this fraction of the fastest
/// first run (or of a candidate's known time) are timed until settled; one
/// run tells the others, far enough behind that none could win (a first run
/// finds the kernel's code and tables cold, a few percent slower). A 3x3
/// layer has up to three candidates, of which one usually wins by more.
/// The planner also holds a layout pair's runs against the layer's fastest
/// known time in other channel blockings ([`rival_blocking`]): a depthwise
/// layer between a blocked and a plain layout ran 4-9x the time of one
/// blocked alike, and settling those was most of a plan's depthwise timing.
const CONTENDER: f64 = 0.25;

/// The fastest time `times` has of `kernel` on the convolution band `band`
/// with its input or output channels blocked otherwise (every algorithm):
/// what a layout pair of the layer is up against in the plan.
fn rival_blocking(times: &KernelTimes, kernel: &str, band: &ConvGeom) -> Option<f64> {
    times.fastest_at(kernel, |key| {
        ConvGeom::from_key(key).is_some_and(|m| {
            let blocked_otherwise = (m.x_cb, m.y_cb) != (band.x_cb, band.y_cb);
            blocked_otherwise
                && ConvGeom {
                    x_cb: band.x_cb,
                    y_cb: band.y_cb,
                    ..m
                } == *band
        })
    })
}

/// Whether `runs` of `algo` on the planner's band `band` go on until
/// settled: unless the machine was quiet and their first is far behind
/// (beyond [`CONTENDER`]) the layer's fastest in another blocking.
pub(in crate::runtime) fn contends(
    times: &KernelTimes,
    band: &ConvGeom,
    algo: ConvAlgo,
    runs: &TimedRuns,
) -> bool {
    settles(runs, rival_blocking(times, algo.kernel(), band))
}

/// Whether `runs` go on until settled against `fastest`, the fastest time
/// they are up against, if any: unless the machine was quiet and their
/// first is beyond [`CONTENDER`] behind it.
fn settles(runs: &TimedRuns, fastest: Option<f64>) -> bool {
    !runs.quiet() || fastest.is_none_or(|f| runs.fastest() <= f * (1.0 + CONTENDER))
}

/// Each candidate's milliseconds at the spec's shape, as `pricing` allows,
/// those `times` lacks measured now (on the spec's [`band`]: each once, and
/// again until settled where it contends for the fastest, planning: of the
/// layer in any blocking) and recorded there; and whether any was priced
/// from a neighbour.
fn millis_in(
    times: &mut KernelTimes,
    spec: &ConvSpec,
    candidates: &[ConvAlgo],
    shared: &SharedWeights,
    pricing: Pricing,
) -> (Vec<f64>, Priced) {
    let (geom, scale) = band(&spec.geom, spec.threads);
    let measured = ConvSpec {
        geom,
        ..spec.clone()
    };
    let geom = &measured.geom;
    let mut priced = Priced::Measured;
    let mut millis = vec![f64::INFINITY; candidates.len()];
    let mut timed = vec![];
    for (i, &a) in candidates.iter().enumerate() {
        match known_millis(times, geom, a, pricing) {
            Some((ms, how)) => {
                priced = if how == Priced::Estimated {
                    how
                } else {
                    priced
                };
                millis[i] = ms;
            }
            None => {
                let kernel = measured.kernel(a, shared);
                let mut runs = TimedRuns::default();
                time_runs(times, geom, &kernel, &mut runs, Runs::First);
                timed.push((i, kernel, runs));
            }
        }
    }
    let first = timed.iter().map(|(_, _, runs)| runs.fastest());
    let rival = match (pricing, timed.first()) {
        (Pricing::Planning, Some(&(i, ..))) => rival_blocking(times, candidates[i].kernel(), geom),
        _ => None,
    };
    let fastest = (millis.iter().copied())
        .chain(first)
        .chain(rival)
        .fold(f64::INFINITY, f64::min);
    for (i, kernel, mut runs) in timed {
        if settles(&runs, Some(fastest)) {
            time_runs(times, geom, &kernel, &mut runs, Runs::Settled);
        }
        let a = candidates[i];
        millis[i] = runs.fastest();
        times.record(a.kernel(), &geom.key(), &a.to_string(), millis[i]);
    }
    (millis.into_iter().map(|ms| ms * scale).collect(), priced)
}

/// The milliseconds of `algo` on the convolution band `band` that `times`
/// has, as `pricing` allows (a planner's from a measured neighbour too),
/// and how they were come by.
fn known_millis(
    times: &mut KernelTimes,
    band: &ConvGeom,
    algo: ConvAlgo,
    pricing: Pricing,
) -> Option<(f64, Priced)> {
    let (kernel, key, name) = (algo.kernel(), band.key(), algo.to_string());
    match pricing {
        Pricing::Planning => times.priced(kernel, &key, &name).or_else(|| {
            let ms = times.estimate(kernel, &key, &name, |m| neighbour(band, m))?;
            Some((ms, Priced::Estimated))
        }),
        Pricing::Choosing => (times.get(kernel, &key, &name)).map(|ms| (ms, Priced::Measured)),
    }
}

/// The milliseconds of `algo` on a layer of geometry `geom` on `threads`
/// threads: its [`band`]'s time, cached, else (as `pricing` allows) priced
/// from a measured neighbour, else measured now by `time` and recorded;
/// scaled by the layer's rows. Also how it was come by.
pub(in crate::runtime) fn banded_millis(
    times: &mut KernelTimes,
    (geom, threads): (&ConvGeom, usize),
    algo: ConvAlgo,
    pricing: Pricing,
    time: impl FnOnce(&mut KernelTimes, &ConvGeom) -> f64,
) -> (f64, Priced) {
    let (band, scale) = band(geom, threads);
    let (ms, priced) = known_millis(times, &band, algo, pricing).unwrap_or_else(|| {
        let ms = time(times, &band);
        times.record(algo.kernel(), &band.key(), &algo.to_string(), ms);
        (ms, Priced::Measured)
    });
    (ms * scale, priced)
}

/// The convolution band of cache key `measured` seen from the band `wanted`
/// ([`KernelTimes::estimate`]): a neighbour where the two differ in their
/// input or their output channels and in nothing else but the band's rows,
/// with the channels blocked alike; its time scales by the rows and by the
/// channels both operands store (padded to their blocks), as the work of a
/// row does.
fn neighbour(wanted: &ConvGeom, measured: &[usize]) -> Option<Neighbour> {
    let m = ConvGeom::from_key(measured)?;
    let rows_and_channels_apart = ConvGeom {
        cin: wanted.cin,
        cout: wanted.cout,
        h: wanted.h,
        oh: wanted.oh,
        x_cb: wanted.x_cb,
        y_cb: wanted.y_cb,
        ..m.clone()
    };
    // Blocks of all the channels are channels-last, whatever their count.
    let blocking = |c: usize, cb: usize| if cb == c { 0 } else { cb };
    let blocked_alike = blocking(m.cin, m.x_cb) == blocking(wanted.cin, wanted.x_cb)
        && blocking(m.cout, m.y_cb) == blocking(wanted.cout, wanted.y_cb);
    if rows_and_channels_apart != *wanted || !blocked_alike {
        return None;
    }
    let ratio = |a: usize, b: usize| a.max(b) as f64 / a.min(b).max(1) as f64;
    let ratio = match (m.cin == wanted.cin, m.cout == wanted.cout) {
        (true, false) => ratio(m.cout, wanted.cout),
        (false, true) => ratio(m.cin, wanted.cin),
        _ => return None,
    };
    let work = |g: &ConvGeom| {
        let stored = |c: usize, cb: usize| c.next_multiple_of(cb.max(1));
        (g.oh * stored(g.cin, g.x_cb) * stored(g.cout, g.y_cb)) as f64
    };
    Some(Neighbour {
        ratio,
        scale: work(wanted) / work(&m),
    })
}

/// Flops of one measured run per worker thread, at most: a convolution with
/// more is timed on a band of its output rows (a VGG or Inception layer at
/// full size took seconds to measure in all its layouts and algorithms).
/// Half of the 50 MFLOP first taken cut a cold InceptionV3 plan by a
/// quarter, with the same costs within noise: a band's time is its rows'
/// work, not the fixed cost of a run.
const BAND_FLOPS_PER_THREAD: f64 = 25e6;
/// A band's rows come in multiples of this, the rows of the tallest Winograd tile.
const BAND_ROWS: usize = 4;

/// The convolution a layer of geometry `g` is measured as, on `threads`
/// threads, and what its time is multiplied by: the layer itself, or a band
/// of its output rows from the middle of the image (every row's window
/// inside the input, as most rows of a large layer are), its time scaled by
/// the layer's rows. The band keeps every channel, the weights and the row
/// width, so each row does the layer's work; what it leaves out is the cost
/// of the padded top and bottom rows and any cost that does not grow with
/// the rows, the same for every layout and algorithm the band is timed in.
pub(in crate::runtime) fn band(g: &ConvGeom, threads: usize) -> (ConvGeom, f64) {
    let row_flops =
        2.0 * (g.n * g.cout * g.ow * (g.cin / g.groups.max(1)).max(1) * g.k.0 * g.k.1) as f64;
    let wanted = (BAND_FLOPS_PER_THREAD * threads.max(1) as f64 / row_flops).ceil() as usize;
    let rows = wanted.max(1).next_multiple_of(BAND_ROWS);
    if rows >= g.oh {
        return (g.clone(), 1.0);
    }
    let window = (g.k.0 - 1) * g.dilation.0 + 1;
    let band = ConvGeom {
        h: (rows - 1) * g.stride.0 + window,
        oh: rows,
        pad: (0, g.pad.1),
        ..g.clone()
    };
    (band, g.oh as f64 / rows as f64)
}

/// The milliseconds of the algorithm `build` would run the spec with (under
/// auto the fastest accurate candidate, priced for planning), on the calling
/// thread pool's threads, and whether a candidate was priced from a
/// neighbour. The planner compares layouts by it, with one `shared` per
/// weight tensor.
pub(in crate::runtime) fn expected_millis(
    spec: &ConvSpec,
    options: &ConvAlgoOptions,
    times: &mut KernelTimes,
    shared: &SharedWeights,
) -> (f64, Priced) {
    let (candidates, _) = candidates(spec, options, shared, times);
    let (millis, priced) = millis_in(times, spec, &candidates, shared, Pricing::Planning);
    (millis.into_iter().fold(f64::INFINITY, f64::min), priced)
}

/// Adds to `decision` the cached time of the algorithm it took, when it was
/// not measured for it but the planner measured it (a convolution without a
/// choice is timed only to be planned): the profile predicts the step by it.
pub(in crate::runtime) fn add_cached_time(
    decision: &mut ConvDecision,
    (geom, threads): (&ConvGeom, usize),
    options: &ConvAlgoOptions,
    times: &KernelTimes,
) {
    let algo = decision.algo;
    if options.cache.is_none() || decision.millis.iter().any(|(a, _)| *a == algo) {
        return;
    }
    let (band, scale) = band(geom, threads);
    if let Some(ms) = times.get(algo.kernel(), &band.key(), &algo.to_string()) {
        decision.millis.push((algo, ms * scale));
    }
}

/// Takes the timed `runs` of `k` on zeros at geometry `g`
/// (`KernelTimes::time`).
fn time_runs(
    times: &mut KernelTimes,
    g: &ConvGeom,
    k: &ConvKernel,
    runs: &mut TimedRuns,
    how: Runs,
) {
    let written = [g.y_len(), k.scratch_len()];
    times.time(
        runs,
        how,
        (k.weights(), g.x_len(), &written),
        |x, written| {
            if let [y, scratch] = written {
                k.run(x, None, y, scratch)
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{
        band, banded_millis, contends, first_within_margin, millis_in, Pricing, BAND_ROWS,
    };
    use crate::runtime::kernels::conv::algo::{
        candidates, ConvAlgo, ConvAlgoOptions, ConvSpec, SharedWeights,
    };
    use crate::runtime::kernels::conv::direct::ConvGeom;
    use crate::runtime::kernels::simd::Isa;
    use crate::runtime::measure::kernel_times::{KernelTimes, Priced, TimedRuns};
    use crate::runtime::test_support::square_conv;

    #[test]
    fn a_large_convolution_is_measured_on_a_band_of_whole_rows() {
        // VGG16's second layer: 3.7 GFLOP, measured on a few rows.
        for (g, threads) in [
            (square_conv(64, 224, (3, 1), 16), 1),
            (square_conv(64, 224, (3, 2), 16), 4),
        ] {
            let (b, scale) = band(&g, threads);
            assert!(b.oh < g.oh && b.oh % BAND_ROWS == 0, "{b:?}");
            assert_eq!(scale, g.oh as f64 / b.oh as f64);
            // Every row's window inside the band's input, no padding above or below.
            assert_eq!(b.pad.0, 0);
            assert_eq!((b.h - b.k.0) / b.stride.0 + 1, b.oh);
            // The rest is the layer's.
            let same = |g: &ConvGeom| (g.n, g.cin, g.cout, g.w, g.ow, g.k, g.stride, g.pad.1);
            assert_eq!(same(&b), same(&g));
        }
        // More threads, a taller band.
        assert!(
            band(&square_conv(64, 224, (3, 1), 16), 4).0.oh
                > band(&square_conv(64, 224, (3, 1), 16), 1).0.oh
        );
        // A small layer is measured whole.
        let small = square_conv(64, 14, (3, 1), 16);
        assert_eq!(band(&small, 1), (small, 1.0));
    }

    #[test]
    fn a_candidate_within_the_margin_of_the_fastest_keeps_its_place() {
        assert_eq!(first_within_margin(&[1.0, 0.5, 0.52]), 1);
        assert_eq!(first_within_margin(&[1.0, 0.98, 0.5]), 2);
        // Within 5%: the earlier one, in every process.
        assert_eq!(first_within_margin(&[1.0, 0.97]), 0);
        assert_eq!(first_within_margin(&[0.97, 1.0]), 0);
        assert_eq!(first_within_margin(&[1.0, 0.9]), 1);
    }

    #[test]
    fn a_convolution_is_priced_from_a_measured_neighbour_only_when_planning() {
        use Priced::{Estimated, Measured};
        use Pricing::{Choosing, Planning};
        let mut times = KernelTimes::open(None, Isa::Portable, 1);
        // 1x1 convolutions of 28x28 into 64 channels, small enough to be
        // measured whole: `time` below stands for a measurement of `ms`.
        let layer = |cin: usize, cout: usize, x_cb: usize| ConvGeom {
            cin,
            cout,
            x_cb,
            ..square_conv(64, 28, (1, 1), 8)
        };
        let mut price = |g: &ConvGeom, pricing: Pricing, ms: f64| {
            assert_eq!(band(g, 1).1, 1.0);
            let (ms, how) =
                banded_millis(&mut times, (g, 1), ConvAlgo::Pointwise, pricing, |_, _| ms);
            // Scaled by rows times channels: the ratio, up to its rounding.
            ((ms * 1e9).round(), how)
        };
        let ms = |ms: f64, how: Priced| ((ms * 1e9).round(), how);
        assert_eq!(price(&layer(64, 64, 8), Planning, 2.0), ms(2.0, Measured));
        // 80 input channels are 1.25x 64: priced by the channels, not measured.
        let near = ms(2.0 * 80.0 / 64.0, Estimated);
        assert_eq!(price(&layer(80, 64, 8), Planning, 9.0), near);
        // Choosing an algorithm, a compile times the layer itself...
        assert_eq!(price(&layer(80, 64, 8), Choosing, 3.0), ms(3.0, Measured));
        // ...and a later plan still prices it as the first did.
        assert_eq!(price(&layer(80, 64, 8), Planning, 9.0), near);
        // 100 channels, stored as 104, are nearest the 80 measured.
        let padded = ms(3.0 * 104.0 / 80.0, Estimated);
        assert_eq!(price(&layer(100, 64, 8), Planning, 9.0), padded);
        // Output channels too.
        assert_eq!(price(&layer(64, 48, 8), Planning, 9.0), ms(1.5, Estimated));
        // Not neighbours: channels last against blocks of 8, two counts
        // apart, 1.75x apart.
        for (g, t) in [
            (layer(72, 64, 72), 4.0),
            (layer(72, 72, 8), 5.0),
            (layer(64, 112, 8), 6.0),
        ] {
            assert_eq!(price(&g, Planning, t), ms(t, Measured), "{g:?}");
        }
        // Channels last prices channels last, whatever its block's extent.
        let last = ms(4.0 * 88.0 / 72.0, Estimated);
        assert_eq!(price(&layer(88, 64, 88), Planning, 9.0), last);
    }

    #[test]
    fn a_layout_pair_far_behind_another_blocking_of_its_layer_is_timed_once() {
        let mut times = KernelTimes::open(None, Isa::Portable, 1);
        let blocked = |x_cb: usize, y_cb: usize, g: ConvGeom| ConvGeom { x_cb, y_cb, ..g };
        let layer = square_conv(64, 28, (3, 1), 64);
        let key = |x_cb, y_cb| blocked(x_cb, y_cb, layer.clone()).key();
        // Blocks of 16 on both sides: 1 ms; another layer, and another
        // kernel's entry of this one, are faster still but no rivals.
        times.record("depthwise", &key(16, 16), "depthwise", 1.0);
        let other_layer = blocked(16, 16, square_conv(64, 14, (3, 1), 64));
        times.record("depthwise", &other_layer.key(), "depthwise", 0.1);
        times.record("conv", &key(1, 16), "direct", 0.1);
        let plain_to_blocked = blocked(1, 16, layer.clone());
        let dw = ConvAlgo::Depthwise;
        let runs = |ms: f64, quiet: bool| TimedRuns::taken(&[ms], quiet);
        assert!(!contends(&times, &plain_to_blocked, dw, &runs(4.0, true)));
        // Within 25% of the rival, or timed while the machine was busy:
        // settled.
        assert!(contends(&times, &plain_to_blocked, dw, &runs(1.2, true)));
        assert!(contends(&times, &plain_to_blocked, dw, &runs(4.0, false)));
        // A pair's own entry is no rival, nor is a layer never measured.
        assert!(contends(
            &times,
            &blocked(16, 16, layer),
            dw,
            &runs(4.0, true)
        ));
        let unmeasured = blocked(1, 16, square_conv(32, 28, (3, 1), 32));
        assert!(contends(&times, &unmeasured, dw, &runs(4.0, true)));
    }

    #[test]
    fn every_candidate_is_timed_recorded_and_then_read_back() {
        // A 3x3 stride-1 layer small enough to be timed whole: direct and
        // the Winograd sizes accurate on its weights, some of them timed
        // once (far behind the fastest), the others until settled.
        let g = square_conv(16, 12, (3, 1), 8);
        let w: Vec<f32> = (0..16 * 16 * 9)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 13.0)
            .collect();
        let bias = vec![0f32; 16];
        let isa = Isa::detect();
        let spec = ConvSpec::biased(g.clone(), isa, &w, &bias, 1);
        let mut times = KernelTimes::open(None, isa, 1);
        let shared = SharedWeights::default();
        let (algos, _) = candidates(&spec, &ConvAlgoOptions::default(), &shared, &mut times);
        assert!(algos.len() >= 2, "{algos:?}");
        let (millis, how) = millis_in(&mut times, &spec, &algos, &shared, Pricing::Planning);
        assert_eq!(how, Priced::Measured);
        for (a, ms) in algos.iter().zip(&millis) {
            assert!(ms.is_finite() && *ms > 0.0, "{a}: {ms}");
            assert_eq!(times.get(a.kernel(), &g.key(), &a.to_string()), Some(*ms));
        }
        // Known now: a compile choosing among them reads the same times.
        let chosen = millis_in(&mut times, &spec, &algos, &shared, Pricing::Choosing);
        assert_eq!(chosen, (millis, Priced::Measured));
    }
}
