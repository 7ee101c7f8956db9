//! Planning an exported plan again: the export spells every layout out as
//! Pad, Reshape, Transpose and Slice chains; re-imported, those chains merge
//! away and the planner absorbs what is left as relabellings, so the second
//! plan moves no more data than the first: plan(export(plan(M))) <= plan(M) in
//! data-moving transforms and bytes. The re-planned model, compiled and run,
//! gives the outputs onnxruntime recorded for the source (max abs error at
//! most 1e-3 times the max magnitude, as in tests/runtime_models.rs).
//! Run on every bundled model and on the committed tf2onnx MobileNetV3Small.

use crate::support::bundled;
use crate::support::bundled::load_test_data;
use crate::support::compare::assert_close;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::export::{export_bytes, ExportOptions};
use layoutopt::frontend::onnx::{import_onnx, ImportOptions};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::{Path, PathBuf};

/// The folders holding a model and its recorded outputs.
fn model_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let mut dirs: Vec<PathBuf> = bundled::bundled_models(true)
        .iter()
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .filter(|d| d.join("test_data_set_0").exists())
        .collect();
    dirs.dedup();
    let tf2onnx = root.join("zoo/MobileNetV3Small_onnx");
    assert!(
        tf2onnx.join("model.onnx").exists(),
        "{tf2onnx:?} is committed"
    );
    dirs.push(tf2onnx);
    dirs
}

fn model_file(dir: &Path) -> PathBuf {
    match dir.join("model.onnx").exists() {
        true => dir.join("model.onnx"),
        false => dir.join("model.tflite"),
    }
}

#[test]
fn a_replanned_export_moves_no_more_data_and_computes_the_same() {
    let dirs = model_dirs();
    assert!(dirs.len() >= 6, "models: {dirs:?}");
    for dir in dirs {
        let g = load_model(&model_file(&dir)).unwrap();
        let names: Vec<String> = g
            .outputs()
            .iter()
            .map(|&v| g.value(v).name.clone())
            .collect();
        let (inputs, expected) = load_test_data(&dir);
        for target in [TargetFamily::Nchwc(16), TargetFamily::Nhwc] {
            let what = format!("{} {target}", dir.display());
            let planner = PlanLayouts::new(PlannerKind::Global, target).with_costs(Costs::BuiltIn);
            let first = planner.plan(&g).unwrap();
            let opts = ExportOptions {
                output_names: Some(names.clone()),
                symbolic_batch: None,
            };
            let bytes = export_bytes(&first.graph, &opts).unwrap();
            let back = import_onnx(&bytes, "exported.onnx", None, &ImportOptions::default())
                .unwrap_or_else(|e| panic!("{what}: re-import: {e}"));
            let second = planner.plan(&back).unwrap();
            let (a, b) = (&first.report, &second.report);
            assert!(
                b.transform_count <= a.transform_count && b.transform_bytes <= a.transform_bytes,
                "{what}: re-planned export keeps {} transforms ({} bytes), the plan {} ({} bytes)\n{}",
                b.transform_count,
                b.transform_bytes,
                a.transform_count,
                a.transform_bytes,
                b.to_text()
            );
            let m = CompiledModel::compile(&second.graph, &RuntimeOptions::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let outputs = m.run(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(outputs.len(), expected.len(), "{what}");
            for (out, exp) in outputs.iter().zip(&expected) {
                assert_eq!(out.shape, exp.shape, "{what}");
                assert_close(exp, out, 1e-3, &what);
            }
        }
    }
}
