//! Export of every op: each ONNX backend node case (tests/onnx_node/) that
//! imports as it is is exported, unplanned and as planned by the global planner
//! for NCHW8c (which wraps conv, pool and elementwise ops in layouts), read back
//! by the importer and run by the reference executor. The oracle is the
//! reference executor on the imported source graph (itself checked against the
//! ONNX outputs by tests/onnx_conformance.rs): outputs must agree within
//! 1e-5 * max(1, max |expected|), and exactly for integer outputs.

use crate::support::bundled::load_test_data;
use crate::support::compare::max_abs_err;
use layoutopt::api::{Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::export::{export_bytes, ExportOptions};
use layoutopt::frontend::onnx::{import_onnx, load_onnx, ImportOptions};
use layoutopt::graph::{Graph, Tensor};
use std::path::Path;

fn round_trip(g: &Graph, inputs: &[Tensor], expected: &[Tensor]) -> Result<(), String> {
    let names = g
        .outputs()
        .iter()
        .map(|&v| g.value(v).name.clone())
        .collect();
    let opts = ExportOptions {
        output_names: Some(names),
        symbolic_batch: None,
    };
    let bytes = export_bytes(g, &opts).map_err(|e| format!("export: {e}"))?;
    let back = import_onnx(&bytes, "exported.onnx", None, &ImportOptions::default())
        .map_err(|e| format!("re-import: {e}"))?;
    let got = layoutopt::reference::run(&back, inputs).map_err(|e| format!("run: {e}"))?;
    for (k, (a, e)) in got.iter().zip(expected).enumerate() {
        if a.shape != e.shape || a.dtype() != e.dtype() {
            return Err(format!("output {k}: {:?} vs {:?}", a.shape, e.shape));
        }
        let (err, mag) = max_abs_err(e, a);
        let tol = if e.dtype().is_float() {
            1e-5 * mag.max(1.0)
        } else {
            0.0
        };
        if err > tol {
            return Err(format!("output {k}: error {err} > {tol}"));
        }
    }
    Ok(())
}

#[test]
fn every_op_exports_and_reimports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/onnx_node");
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    cases.sort();
    let (mut checked, mut planned) = (0, 0);
    let mut failures = Vec::new();
    let plan =
        PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8)).with_costs(Costs::BuiltIn);
    for dir in &cases {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        // Cases that need inputs frozen, or that the stages refuse, are
        // covered by tests/onnx_conformance.rs; here only what runs as it is.
        let Ok(g) = load_onnx(&dir.join("model.onnx"), &ImportOptions::default()) else {
            continue;
        };
        // The exporter writes no subgraphs yet: control flow (If, Loop, Scan) stays out.
        let control = |id| matches!(g.node(id).op, layoutopt::graph::Op::Control(_));
        if g.node_ids().into_iter().any(control) {
            continue;
        }
        let (inputs, _) = load_test_data(dir);
        let Ok(expected) = layoutopt::reference::run(&g, &inputs) else {
            continue;
        };
        checked += 1;
        if let Err(m) = round_trip(&g, &inputs, &expected) {
            failures.push(format!("{name}: {m}"));
        }
        if let Ok(p) = plan.plan(&g) {
            planned += 1;
            if let Err(m) = round_trip(&p.graph, &inputs, &expected) {
                failures.push(format!("{name} (planned): {m}"));
            }
        }
    }
    println!("exported {checked} cases, {planned} of them also planned");
    assert!(checked >= 280, "only {checked} cases ran");
    assert!(planned >= 280, "only {planned} cases planned");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
