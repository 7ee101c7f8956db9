//! Determinism and solver limits: the same model gives a byte-identical plan report
//! over repeated runs and on rayon pools of 1 and 2 threads (timing fields aside),
//! and the planner's time limit leads to a reported fallback, never a failure.

use crate::support::bundled;
use crate::support::bundled::load_test_data;
use crate::support::compare;
use layoutopt::frontend::onnx::{load_onnx, ImportOptions};
use layoutopt::frontend::tflite::load_tflite;
use layoutopt::graph::{Graph, Tensor, TensorData};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::{planner_by_name, Global};
use layoutopt::layout::report::PlanReport;
use layoutopt::layout::solver::{solve, Method, Pair, Problem, SolveOptions};
use layoutopt::layout::target::TargetFamily;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn bundled_models() -> Vec<PathBuf> {
    bundled::bundled_models(true)
}

fn load(path: &Path) -> Graph {
    let g = if path.extension().is_some_and(|e| e == "tflite") {
        load_tflite(path).map_err(|e| e.to_string())
    } else {
        load_onnx(path, &ImportOptions::default()).map_err(|e| e.to_string())
    };
    g.unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The report as JSON with the wall-clock fields zeroed: they are measurements,
/// not decisions.
fn report_json(r: PlanReport) -> String {
    r.without_timings().to_json()
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool builds")
}

/// Seeded inputs in [-1, 1) of each graph input's type.
fn inputs(g: &Graph) -> Vec<Tensor> {
    let mut state = 0x243f_6a88_85a3_08d3u64;
    g.inputs()
        .iter()
        .map(|&id| {
            let ty = &g.node(id).outputs[0].ty;
            let vals = (0..ty.numel())
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 11) as f64 / (1u64 << 52) as f64 - 1.0
                })
                .collect();
            Tensor::new(ty.shape.clone(), TensorData::from_f64(ty.dtype, vals))
        })
        .collect()
}

fn bits(ts: &[Tensor]) -> Vec<Vec<u64>> {
    ts.iter()
        .map(|t| t.data.to_f64().iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// Five plans on each of a 1-thread and a 2-thread pool: one report, byte for byte;
/// the planned graph computes bit-identical outputs on both pools.
#[test]
fn plan_reports_and_outputs_are_identical_across_runs_and_thread_counts() {
    let models = bundled_models();
    assert!(models.len() >= 6, "bundled models: {models:?}");
    for path in models {
        let g = load(&path);
        let mut reports = Vec::new();
        let mut outputs = Vec::new();
        for threads in [1, 2] {
            pool(threads).install(|| {
                let global = planner_by_name("global").unwrap();
                for run in 0..5 {
                    let p = plan(
                        &g,
                        global.as_ref(),
                        TargetFamily::Nchwc(16),
                        &CostModel::default(),
                    )
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    reports.push(report_json(p.report));
                    if run == 0 {
                        let ins = inputs(&p.graph);
                        outputs.push(bits(&layoutopt::reference::run(&p.graph, &ins).unwrap()));
                    }
                }
            });
        }
        assert_eq!(reports.len(), 10);
        for (i, r) in reports.iter().enumerate() {
            assert!(
                r == &reports[0],
                "{}: report {i} differs from report 0",
                path.display()
            );
        }
        assert_eq!(
            outputs[0],
            outputs[1],
            "{}: 1 and 2 threads differ",
            path.display()
        );
    }
}

/// An odd cycle of "differ" terms: three binary variables that each pay 1 when equal
/// to a neighbour. Every integer assignment pays at least 1, but the marginal LP
/// reaches 0 with all marginals at 1/2, so the LP is fractional and the integer
/// program is needed.
fn frustrated_triangle() -> Problem {
    let differ = |a, b| Pair {
        a,
        b,
        cost: vec![1.0, 0.0, 0.0, 1.0],
    };
    Problem {
        unary: vec![vec![0.0, 0.0]; 3],
        pairs: vec![differ(0, 1), differ(1, 2), differ(0, 2)],
    }
}

#[test]
fn exhausted_time_limit_falls_back_and_says_so() {
    let p = frustrated_triangle();
    // Elimination is forbidden, so the LP path is taken; no time is left for the MIP.
    let opts = SolveOptions {
        time_limit: Duration::ZERO,
        max_elimination_table: 0,
    };
    let s = solve(&p, &opts).expect("a fallback plan, not an error");
    assert_eq!(s.regions.len(), 1);
    assert!(
        matches!(&s.regions[0].method, Method::Fallback { reason } if reason.contains("time limit")),
        "{:?}",
        s.regions[0].method
    );
    assert!(s.used_fallback());
    // Local search from the rounded LP reaches a local optimum; here every local
    // optimum leaves exactly one equal pair: cost 1. The LP bound is 0.
    assert_eq!(s.objective, 1.0);
    assert_eq!(s.lower_bound, 0.0);
    assert_eq!(s.gap(), 1.0);
    // With time, the integer program proves the same optimum.
    let exact = solve(
        &p,
        &SolveOptions {
            max_elimination_table: 0,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    assert_eq!(exact.regions[0].method, Method::Integer);
    assert_eq!(exact.objective, 1.0);
}

/// Through the planner: a zero time limit with elimination forbidden still plans the
/// bundled models, the report's method counts match `fallback_used`, and the planned
/// graph computes the recorded outputs.
#[test]
fn planner_with_zero_time_limit_still_plans_correctly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let rushed = Global {
        options: SolveOptions {
            time_limit: Duration::ZERO,
            max_elimination_table: 0,
        },
    };
    for name in ["mobilenet_small", "resnet_small"] {
        let dir = root.join(name);
        let g = load(&dir.join("model.onnx"));
        let p = plan(&g, &rushed, TargetFamily::Nchwc(16), &CostModel::default()).unwrap();
        let solver = p.report.solver.as_ref().expect("global reports its solver");
        assert!(
            !solver.methods.contains_key("elimination"),
            "{:?}",
            solver.methods
        );
        assert_eq!(
            solver.fallback_used,
            solver.methods.contains_key("fallback")
        );
        assert_eq!(
            solver.methods.values().sum::<usize>(),
            solver.regions,
            "{:?}",
            solver.methods
        );
        let (ins, expected) = load_test_data(&dir);
        let outs = layoutopt::reference::run(&p.graph, &ins).unwrap();
        for (o, e) in outs.iter().zip(&expected) {
            let (err, mag) = compare::max_abs_err(e, o);
            assert!(err <= 1e-4 * mag, "{name}: error {err} > 1e-4 * {mag}");
        }
    }
}
