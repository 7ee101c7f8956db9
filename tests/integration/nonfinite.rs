//! NaN and infinities (ARCHITECTURE.md, "NaN and infinities", states the rule per
//! op). The recorded cases of `tests/nonfinite/` (single-op models fed NaN, ±inf
//! and ±0 in the vector body, the scalar tail, the last channels of a partial
//! block and the image border, with onnxruntime's or the ONNX reference
//! evaluator's outputs; `scripts/gen_nonfinite_cases.py`) run through the
//! reference executor, through the graphs planned for every layout family (pad-
//! value flow and padded channel blocks) and through the native kernels. Besides:
//! IEEE 754 arithmetic hand-derived for the elementwise ops, and the bundled
//! models, planned and compiled, give NaN exactly where their source graph does.
//! NaN and infinities must match exactly; finite values within a tolerance.

use crate::support::bundled::load_test_data;
use crate::support::onnx::*;
use crate::support::plan::plan_by_name;
use layoutopt::frontend::onnx::{load_onnx, ImportOptions};
use layoutopt::graph::{DType, Tensor, TensorData};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::planner_by_name;
use layoutopt::layout::target::TargetFamily;
use layoutopt::runtime::Isa;
use layoutopt::runtime::{KernelPath, RuntimeOptions};
use std::path::Path;

const F32: i32 = 1;
const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

/// Elementwise comparison: same NaN positions, same infinities, close finite values.
fn same_nonfinite(expected: &Tensor, actual: &Tensor, tol: f64, what: &str) {
    assert_eq!(expected.shape, actual.shape, "{what}");
    let (e, a) = (expected.data.to_f64(), actual.data.to_f64());
    let mag = e
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    for (i, (x, y)) in e.iter().zip(&a).enumerate() {
        let ok = if x.is_nan() {
            y.is_nan()
        } else if x.is_infinite() {
            x == y
        } else {
            y.is_finite() && (x - y).abs() <= tol * mag.max(1.0)
        };
        assert!(ok, "{what}: element {i} expected {x}, got {y}");
    }
}

/// The recorded cases, each as its directory name and path.
fn recorded_cases() -> Vec<(String, std::path::PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nonfinite");
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .expect("tests/nonfinite exists")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.join("model.onnx").exists())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    cases.sort();
    cases
}

/// Runtime options for each instruction set this CPU can run (AVX-512, AVX2,
/// portable), and for the generic path (generated code for every op that
/// lowers to TIR): every kernel path, not only the widest.
fn kernel_paths() -> Vec<(String, RuntimeOptions)> {
    let mut paths: Vec<_> = Isa::ALL
        .into_iter()
        .filter(|isa| isa.available())
        .map(|isa| {
            let options = RuntimeOptions {
                threads: 2,
                isa: Some(isa),
                ..Default::default()
            };
            (isa.to_string(), options)
        })
        .collect();
    assert!(paths.iter().any(|(isa, _)| isa == "portable"));
    let generic = RuntimeOptions {
        threads: 2,
        kernels: KernelPath::Generic,
        ..Default::default()
    };
    paths.push(("generic".into(), generic));
    paths
}

#[test]
fn recorded_cases_match_the_oracles_in_every_layout_family() {
    let cases = recorded_cases();
    assert!(cases.len() >= 50, "only {} recorded cases", cases.len());
    let families = [
        TargetFamily::Nchw,
        TargetFamily::Nhwc,
        TargetFamily::Nchwc(8),
        TargetFamily::Nchwc(16),
    ];
    let global = planner_by_name("global").unwrap();
    for (name, dir) in &cases {
        let g = load_onnx(&dir.join("model.onnx"), &ImportOptions::default()).unwrap();
        let (inputs, expected) = load_test_data(dir);
        // A non-finite value reaches an output, or an index output points at one.
        let reaches = expected.iter().any(|t| match t.dtype() {
            DType::I64 => true,
            _ => t.data.to_f64().iter().any(|x| !x.is_finite()),
        });
        assert!(reaches, "{name}: the case should reach the output");
        let same_outputs = |actual: &[Tensor], what: &str| {
            assert_eq!(actual.len(), expected.len(), "{what}");
            for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
                assert_eq!(e.dtype(), a.dtype(), "{what} output {i}");
                same_nonfinite(e, a, 1e-4, &format!("{what} output {i}"));
            }
        };
        let source = layoutopt::reference::run(&g, &inputs).unwrap();
        same_outputs(&source, &format!("{name} reference"));
        for family in families {
            let what = format!("{name} {family:?}");
            let p = plan(&g, global.as_ref(), family, &CostModel::default()).unwrap();
            let planned = layoutopt::reference::run(&p.graph, &inputs).unwrap();
            same_outputs(&planned, &format!("{what} planned"));
            for (isa, opts) in kernel_paths() {
                let model = layoutopt::runtime::CompiledModel::compile(&p.graph, &opts).unwrap();
                let native = model.run(&inputs).unwrap();
                same_outputs(&native, &format!("{what} {isa}"));
            }
        }
    }
}

#[test]
fn elementwise_ops_follow_ieee_754() {
    let ops = ["Relu", "Add", "Mul", "Div", "Exp", "Sigmoid", "Sqrt"];
    let nodes = ops
        .iter()
        .map(|&op| {
            let ins: &[&str] = if matches!(op, "Add" | "Mul" | "Div") {
                &["x", "y"]
            } else {
                &["x"]
            };
            node(op, op, ins, &[op])
        })
        .collect();
    let m = model(
        nodes,
        vec![value_info("x", F32, &[8]), value_info("y", F32, &[8])],
        ops.iter().map(|&o| value_info(o, F32, &[8])).collect(),
        vec![],
        13,
    );
    let g = import_model(&m, "ieee.onnx").unwrap();
    let x = [NAN, INF, -INF, 0.0, 1.0, -1.0, INF, 0.0];
    let y = [1.0, -INF, -INF, 0.0, 0.0, 0.0, 0.0, INF];
    let outs = layoutopt::reference::run(
        &g,
        &[
            Tensor::from_f32(vec![8], x.to_vec()),
            Tensor::from_f32(vec![8], y.to_vec()),
        ],
    )
    .unwrap();
    let (e, s1, sm1) = (
        1f32.exp(),
        1.0 / (1.0 + (-1f32).exp()),
        1.0 / (1.0 + 1f32.exp()),
    );
    // IEEE 754: NaN propagates through every op; inf - inf, inf * 0, 0 / 0 and
    // inf / inf are NaN; x / 0 is a signed infinity; sqrt of a negative is NaN.
    let expected: [[f32; 8]; 7] = [
        [NAN, INF, 0.0, 0.0, 1.0, 0.0, INF, 0.0],
        [NAN, NAN, -INF, 0.0, 1.0, -1.0, INF, INF],
        [NAN, -INF, INF, 0.0, 0.0, -0.0, NAN, NAN],
        [NAN, NAN, NAN, NAN, INF, -INF, INF, 0.0],
        [NAN, INF, 0.0, 1.0, e, 1.0 / e, INF, 1.0],
        [NAN, 1.0, 0.0, 0.5, s1, sm1, 1.0, 0.5],
        [NAN, INF, NAN, 0.0, 1.0, NAN, INF, 0.0],
    ];
    for ((op, out), want) in ops.iter().zip(&outs).zip(expected) {
        same_nonfinite(&Tensor::from_f32(vec![8], want.to_vec()), out, 1e-6, op);
    }
}

/// Overwrites some input elements with NaN, +inf, -inf and values near f32::MAX.
fn with_extremes(t: &Tensor) -> Tensor {
    let mut v = t.to_f32();
    let specials = [NAN, INF, -INF, f32::MAX, -f32::MAX, f32::MIN_POSITIVE];
    // A prime stride spreads them over channels and positions.
    for (k, i) in (0..v.len()).step_by(37).enumerate() {
        v[i] = specials[k % specials.len()];
    }
    Tensor::new(t.shape.clone(), TensorData::F32(v))
}

#[test]
fn planned_models_propagate_extremes_like_the_source_graph() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    for name in ["mobilenet_small", "resnet_small", "transformer_block"] {
        let dir = root.join(name);
        let g = load_onnx(&dir.join("model.onnx"), &ImportOptions::default()).unwrap();
        let (inputs, _) = load_test_data(&dir);
        let inputs: Vec<Tensor> = inputs.iter().map(with_extremes).collect();
        let source = layoutopt::reference::run(&g, &inputs).unwrap();
        let nan_count: usize = source
            .iter()
            .map(|t| t.data.to_f64().iter().filter(|x| x.is_nan()).count())
            .sum();
        assert!(
            nan_count > 0,
            "{name}: the extremes should reach the outputs"
        );
        let p = plan_by_name(&g, "global");
        let planned = layoutopt::reference::run(&p.graph, &inputs).unwrap();
        for (i, (s, q)) in source.iter().zip(&planned).enumerate() {
            same_nonfinite(s, q, 1e-4, &format!("{name} output {i}"));
        }
        // The native kernels (fused conv epilogues, SIMD clamps, TIR steps) too,
        // on every instruction set this CPU has.
        for (isa, opts) in kernel_paths() {
            let model = layoutopt::runtime::CompiledModel::compile(&p.graph, &opts).unwrap();
            let native = model.run(&inputs).unwrap();
            for (i, (s, q)) in source.iter().zip(&native).enumerate() {
                same_nonfinite(s, q, 1e-3, &format!("{name} {isa} output {i}"));
            }
        }
    }
}
