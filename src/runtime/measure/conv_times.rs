//! The measured side of the convolution algorithm choice (`kernels/conv/algo.rs`
//! says what the candidates are): each candidate runs a few times at the
//! layer's shape on the calling pool's threads, and its milliseconds are
//! cached in the machine's kernel times under the layer's geometry.

use super::kernel_times::KernelTimes;
use crate::runtime::kernels::conv::algo::ConvAlgo;
use crate::runtime::kernels::conv::algo::{
    candidates, ConvAlgoOptions, ConvDecision, ConvKernel, ConvSpec, SharedWeights,
};
use crate::runtime::kernels::conv::direct::ConvGeom;

/// Builds the kernel of a dense convolution with the algorithm `options`
/// asks for (measured under auto, on the calling thread pool's threads, and
/// recorded in `times`).
pub(in crate::runtime) fn build(
    spec: &ConvSpec,
    options: &ConvAlgoOptions,
    times: &mut KernelTimes,
) -> (ConvKernel, ConvDecision) {
    let shared = SharedWeights::default();
    let (candidates, errors) = candidates(spec, options, &shared);
    let decision = match candidates.as_slice() {
        [only] => ConvDecision {
            errors,
            ..ConvDecision::from(*only)
        },
        _ => {
            let millis = millis_in(times, spec, &candidates, &shared);
            times.save();
            let best = (0..candidates.len())
                .min_by(|&a, &b| millis[a].total_cmp(&millis[b]))
                .unwrap_or(0);
            ConvDecision {
                algo: candidates[best],
                millis: candidates.iter().copied().zip(millis).collect(),
                errors,
            }
        }
    };
    (spec.kernel(decision.algo, &shared), decision)
}

/// Each candidate's milliseconds at the spec's shape, those `times` lacks
/// measured now and recorded there.
fn millis_in(
    times: &mut KernelTimes,
    spec: &ConvSpec,
    candidates: &[ConvAlgo],
    shared: &SharedWeights,
) -> Vec<f64> {
    let g = &spec.geom;
    let key = g.key();
    candidates
        .iter()
        .map(|&a| {
            let name = a.to_string();
            times.get(a.kernel(), &key, &name).unwrap_or_else(|| {
                let ms = time_once(times, g, &spec.kernel(a, shared));
                times.record(a.kernel(), &key, &name, ms);
                ms
            })
        })
        .collect()
}

/// The milliseconds of the algorithm `build` would run the spec with (under
/// auto the fastest accurate candidate, measured unless `times` holds it), on
/// the calling thread pool's threads. The planner compares layouts by it,
/// with one `shared` per weight tensor.
pub(in crate::runtime) fn expected_millis(
    spec: &ConvSpec,
    options: &ConvAlgoOptions,
    times: &mut KernelTimes,
    shared: &SharedWeights,
) -> f64 {
    let (candidates, _) = candidates(spec, options, shared);
    millis_in(times, spec, &candidates, shared)
        .into_iter()
        .fold(f64::INFINITY, f64::min)
}

/// Adds to `decision` the cached time of the algorithm it took, when it was
/// not measured for it but the planner measured it (a convolution without a
/// choice is timed only to be planned): the profile predicts the step by it.
pub(in crate::runtime) fn add_cached_time(
    decision: &mut ConvDecision,
    geom: &ConvGeom,
    options: &ConvAlgoOptions,
    times: &KernelTimes,
) {
    let algo = decision.algo;
    if options.cache.is_none() || decision.millis.iter().any(|(a, _)| *a == algo) {
        return;
    }
    if let Some(ms) = times.get(algo.kernel(), &geom.key(), &algo.to_string()) {
        decision.millis.push((algo, ms));
    }
}

/// The fastest of a few runs of `k` on zeros (`KernelTimes::measure`).
fn time_once(times: &mut KernelTimes, g: &ConvGeom, k: &ConvKernel) -> f64 {
    let x = vec![0f32; g.x_len()];
    let mut y = vec![0f32; g.y_len()];
    let mut scratch = vec![0f32; k.scratch_len()];
    times.measure(k.weights(), &mut [&mut y, &mut scratch], |written| {
        if let [y, scratch] = written {
            k.run(&x, None, y, scratch)
        }
    })
}
