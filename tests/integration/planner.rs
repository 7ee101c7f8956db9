//! Planning end to end on the bundled models: every planner, every target family.
//! The planned graph (transforms, blocked layouts with padding) must compute what
//! the source graph computes: checked with the reference executor against the
//! outputs onnxruntime recorded (max abs error at most 1e-4 times the max magnitude).

use crate::support::bundled;
use crate::support::bundled::load_test_data;
use crate::support::compare::assert_close;
use crate::support::plan::plan_by_name;
use layoutopt::frontend::onnx::{load_onnx, ImportOptions};
use layoutopt::graph::{Graph, Op, Tensor};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::planner_by_name;
use layoutopt::layout::report::PlanReport;
use layoutopt::layout::target::TargetFamily;
use std::path::Path;
use std::sync::Arc;

const FAMILIES: [TargetFamily; 3] = [
    TargetFamily::Nhwc,
    TargetFamily::Nchwc(16),
    TargetFamily::Nchwc(8),
];
const PLANNERS: [&str; 4] = ["keep", "local", "greedy", "global"];

#[test]
fn planned_models_compute_the_same_outputs() {
    for dir in bundled::bundled_onnx_dirs() {
        let g = load_onnx(&dir.join("model.onnx"), &ImportOptions::default()).unwrap();
        let (inputs, expected) = load_test_data(&dir);
        for family in FAMILIES {
            for name in PLANNERS {
                let planner = planner_by_name(name).unwrap();
                let p = plan(&g, planner.as_ref(), family, &CostModel::default())
                    .unwrap_or_else(|e| panic!("{} {name} {family}: {e}", dir.display()));
                let outputs = layoutopt::reference::run(&p.graph, &inputs)
                    .unwrap_or_else(|e| panic!("{} {name} {family}: {e}", dir.display()));
                for (out, exp) in outputs.iter().zip(&expected) {
                    assert_eq!(out.shape, exp.shape);
                    let what = format!("{} {name} {family}", dir.display());
                    assert_close(exp, out, 1e-4, &what);
                }
            }
        }
    }
}

/// A plan shares its weights with the source graph: a planned constant that
/// holds the same elements as the source constant of its name is the same
/// allocation (planning a 500 MB model must not hold its weights twice).
#[test]
fn planned_constants_share_the_source_weights() {
    for dir in bundled::bundled_onnx_dirs() {
        let g = load_onnx(&dir.join("model.onnx"), &ImportOptions::default()).unwrap();
        let constants = |g: &Graph| -> Vec<(String, Tensor)> {
            g.node_ids()
                .into_iter()
                .filter_map(|id| match &g.node(id).op {
                    Op::Constant(t) => Some((g.node(id).name.clone(), t.clone())),
                    _ => None,
                })
                .collect()
        };
        let source = constants(&g);
        let p = plan_by_name(&g, "global");
        let mut shared = 0;
        for (name, t) in constants(&p.graph) {
            let Some((_, s)) = source.iter().find(|(n, s)| *n == name && *s == t) else {
                continue;
            };
            assert!(
                Arc::ptr_eq(&s.data, &t.data),
                "{}: constant '{name}' was copied by planning",
                dir.display()
            );
            shared += 1;
        }
        assert!(shared > 0, "{}: no constant kept", dir.display());
    }
}

fn report(file: &Path, name: &str, family: TargetFamily) -> PlanReport {
    let g = layoutopt::api::load_model(file).unwrap();
    let planner = planner_by_name(name).unwrap();
    plan(&g, planner.as_ref(), family, &CostModel::default())
        .unwrap()
        .report
}

/// The committed real models (Keras applications through tf2onnx and TFLite).
const ZOO: [&str; 3] = [
    "models/zoo/MobileNetV3Small_onnx/model.onnx",
    "models/zoo/MobileNetV3Small_tflite/model.tflite",
    "models/zoo/BertEncoder_onnx/model.onnx",
];

/// The global plan is optimal under the cost model before rewriting (its lower
/// bound proves the gap it states), and it finishes the local and greedy
/// assignments too, so once rewritten no other planner may beat its cost.
#[test]
fn global_is_never_worse_than_the_baselines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = bundled::bundled_models(true);
    files.extend(ZOO.iter().map(|f| root.join(f)));
    for file in files {
        for family in FAMILIES {
            let global = report(&file, "global", family);
            let solver = global.solver.as_ref().expect("global reports its solver");
            assert!(solver.lower_bound <= solver.objective + 1e-6);
            assert!(global.estimated_cost >= solver.objective - 1e-6 * solver.objective.max(1.0));
            for other in ["keep", "local", "greedy"] {
                let r = report(&file, other, family);
                assert!(
                    global.rewritten_cost <= r.rewritten_cost + 1e-6 * r.rewritten_cost.max(1.0),
                    "{} {family}: global {} > {other} {} after rewriting",
                    file.display(),
                    global.rewritten_cost,
                    r.rewritten_cost
                );
            }
        }
    }
}

/// The same model gives the same plan report, byte for byte (timings aside).
#[test]
fn plan_reports_are_deterministic() {
    for dir in bundled::bundled_onnx_dirs() {
        let strip = |r: PlanReport| r.without_timings().to_json();
        let file = dir.join("model.onnx");
        let first = strip(report(&file, "global", TargetFamily::Nchwc(16)));
        for _ in 0..3 {
            assert_eq!(
                first,
                strip(report(&file, "global", TargetFamily::Nchwc(16)))
            );
        }
    }
}
