//! ONNX If, Loop and Scan (issue 43): the small models of
//! scripts/gen_control_flow.py reproduce what onnxruntime recorded within 1e-5
//! of max(1, largest magnitude), on the reference executor and compiled. An If
//! whose condition import-time folding computes is inlined and a small Loop of
//! known trip count unrolled (no control-flow op remains, their layers named
//! under theirs); the other control-flow ops run natively, one step each whose
//! subgraphs are compiled models.

use crate::support::bundled::load_test_data;
use crate::support::compare::max_abs_err;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::graph::{Graph, Op, Tensor};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;

fn assert_matches(what: &str, outputs: &[Tensor], expected: &[Tensor]) {
    assert_eq!(outputs.len(), expected.len(), "{what}");
    for (i, (out, exp)) in outputs.iter().zip(expected).enumerate() {
        assert_eq!(out.shape, exp.shape, "{what} output {i}");
        assert_eq!(out.dtype(), exp.dtype(), "{what} output {i}");
        let (err, mag) = max_abs_err(exp, out);
        assert!(
            err <= 1e-5 * mag.max(1.0),
            "{what} output {i}: error {err} against magnitude {mag}"
        );
    }
}

fn control_ops(g: &Graph) -> Vec<&'static str> {
    (g.node_ids().into_iter())
        .filter(|&id| matches!(g.node(id).op, Op::Control(_)))
        .map(|id| g.node(id).op.kind_name())
        .collect()
}

#[test]
fn recorded_control_flow_models_match_onnxruntime() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/control_flow");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .expect("tests/control_flow exists")
        .map(|e| e.expect("a readable entry").path())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 8, "the cases of scripts/gen_control_flow.py");
    for dir in dirs {
        let what = dir.file_name().unwrap().to_string_lossy().into_owned();
        let g = load_model(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (inputs, expected) = load_test_data(&dir);
        let reference = layoutopt::reference::run(&g, &inputs)
            .unwrap_or_else(|e| panic!("{what} (reference): {e}"));
        assert_matches(&format!("{what} (reference)"), &reference, &expected);

        let want: &[&str] = match what.as_str() {
            "if_constant_condition" | "loop_unrolled" => &[],
            w if w.starts_with("if_") => &["If"],
            w if w.starts_with("loop_") => &["Loop"],
            _ => &["Scan"],
        };
        assert_eq!(control_ops(&g), want, "{what}");

        let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8))
            .with_costs(Costs::BuiltIn)
            .plan(&g)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let m = CompiledModel::compile(
            &planned.graph,
            &RuntimeOptions {
                threads: 1,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let native: Vec<String> = (m.describe().into_iter())
            .filter(|d| ["[If]", "[Loop]", "[Scan]"].iter().any(|k| d.contains(k)))
            .collect();
        assert_eq!(native.len(), want.len(), "{what}: {native:?}");
        assert!(native.iter().all(|d| d.ends_with(" native")), "{native:?}");
        let outputs = m.run(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_matches(&format!("{what} (compiled)"), &outputs, &expected);
    }
}

/// The source layers of a case's imported graph.
fn layers(case: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/control_flow").join(case);
    let g = load_model(&dir.join("model.onnx")).unwrap();
    (g.node_ids().into_iter())
        .flat_map(|id| g.node(id).spans.iter().map(|s| s.layer.to_string()))
        .collect()
}

#[test]
fn an_if_on_a_folded_condition_is_inlined_under_its_name() {
    let layers = layers("if_constant_condition");
    for layer in ["pick/then_branch/scale", "pick/then_branch/relu"] {
        assert!(layers.iter().any(|l| l == layer), "{layer} in {layers:?}");
    }
    assert!(!layers.iter().any(|l| l.contains("else_branch")), "{layers:?}");
}

#[test]
fn a_small_loop_of_known_trip_count_is_unrolled_under_its_name() {
    let layers = layers("loop_unrolled");
    for i in 0..3 {
        let layer = format!("rows/iteration{i}/add");
        assert!(layers.iter().any(|l| *l == layer), "{layer} in {layers:?}");
    }
    assert!(!layers.iter().any(|l| l.contains("iteration3")), "{layers:?}");
}
