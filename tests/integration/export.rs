//! ONNX export of planned graphs: for every bundled model, planner and target
//! family, the exported model, read back by our own ONNX importer and run by the
//! reference executor, gives the outputs onnxruntime recorded for the source
//! model (max abs error at most 1e-4 times the max magnitude, 2e-3 for float16, as in
//! tests/planner.rs). `scripts/check_export.py` runs onnxruntime itself on the
//! exported models.

use crate::support::bundled;
use crate::support::bundled::load_test_data;
use crate::support::compare::assert_close;
use crate::support::plan::plan_builtin;
use layoutopt::api::{load_model, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::export::{export_bytes, export_model, ExportOptions};
use layoutopt::frontend::onnx::{import_onnx, ImportOptions};
use layoutopt::graph::Op;
use layoutopt::ops::LayoutTransform;
use std::path::PathBuf;

/// Every bundled model file, ONNX and TFLite.
fn bundled_models() -> Vec<PathBuf> {
    bundled::bundled_models(true)
}

#[test]
fn exported_plans_compute_the_recorded_outputs() {
    let models = bundled_models();
    assert!(models.len() >= 7, "bundled models: {models:?}");
    for path in models {
        let dir = path.parent().unwrap();
        let g = load_model(&path).unwrap();
        let (inputs, expected) = load_test_data(dir);
        let names: Vec<String> = g
            .outputs()
            .iter()
            .map(|&v| g.value(v).name.clone())
            .collect();
        for target in [TargetFamily::Nchwc(16), TargetFamily::Nhwc] {
            for name in PlannerKind::ALL {
                let what = format!("{} {name} {target}", path.display());
                let planned = plan_builtin(&g, name, target);
                let opts = ExportOptions {
                    output_names: Some(names.clone()),
                    symbolic_batch: None,
                };
                let bytes =
                    export_bytes(&planned.graph, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
                let back = import_onnx(&bytes, "exported.onnx", None, &ImportOptions::default())
                    .unwrap_or_else(|e| panic!("{what}: re-import: {e}"));
                // The interface is the source's: same input and output names and types.
                for (a, b) in g.inputs().iter().zip(back.inputs()) {
                    assert_eq!(g.node(*a).outputs, back.node(*b).outputs, "{what}");
                }
                for (k, &v) in back.outputs().iter().enumerate() {
                    assert_eq!(back.value(v).name, names[k], "{what}");
                }
                let outputs = layoutopt::reference::run(&back, &inputs)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(outputs.len(), expected.len(), "{what}");
                for (out, exp) in outputs.iter().zip(&expected) {
                    assert_eq!(out.shape, exp.shape, "{what}");
                    assert_close(exp, out, 1e-4, &what);
                }
            }
        }
    }
}

/// The worked example: a 17-channel tensor in NCHW16c is Pad (channels to 32),
/// Reshape [N, 2, 16, H, W], Transpose [0, 1, 3, 4, 2]; back is the inverse
/// Transpose, Reshape [N, 32, H, W], Slice of channels 0..17.
#[test]
fn blocked_layouts_are_pad_reshape_transpose_and_back() {
    use layoutopt::graph::{DType, Graph, ValueRef, ValueType};
    use layoutopt::layout::{Layout, PadValue};
    let mut g = Graph::new("t");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![1, 17, 2, 3]), vec![]);
    // A transform of `x` from layout `from` to `to`, padding with `pad`.
    let mut transform = |x: ValueRef, from: &str, to: &str, pad: PadValue, name: &str| {
        let op = Op::LayoutTransform(LayoutTransform {
            from: Layout::parse(from).unwrap(),
            to: Layout::parse(to).unwrap(),
            logical: vec![1, 17, 2, 3],
            pad,
        });
        ValueRef::new(g.add_node(op, name, &[x], &[], vec![]).unwrap(), 0)
    };
    let to = transform(x, "NCHW", "NCHW16c", PadValue::Known(0.0), "to");
    let back = transform(to, "NCHW16c", "NCHW", PadValue::Undef, "back");
    g.set_outputs(vec![back]);
    let m = export_model(&g, &ExportOptions::default()).unwrap();
    let graph = m.graph.as_ref().unwrap();
    let ops: Vec<&str> = graph.node.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(
        ops,
        [
            "Pad",
            "Reshape",
            "Transpose",
            "Transpose",
            "Reshape",
            "Slice",
            "Identity"
        ]
    );
    let init = |name: &str| -> Vec<i64> {
        let t = graph.initializer.iter().find(|t| t.name == name).unwrap();
        layoutopt::frontend::onnx::tensor_from_proto(t, None)
            .unwrap()
            .data
            .to_i64()
    };
    let input = |k: usize, i: usize| graph.node[k].input[i].clone();
    assert_eq!(init(&input(0, 1)), vec![0, 0, 0, 0, 0, 15, 0, 0]);
    assert_eq!(init(&input(1, 1)), vec![1, 2, 16, 2, 3]);
    assert_eq!(graph.node[2].attribute[0].ints, vec![0, 1, 3, 4, 2]);
    assert_eq!(graph.node[3].attribute[0].ints, vec![0, 1, 4, 2, 3]);
    assert_eq!(init(&input(4, 1)), vec![1, 32, 2, 3]);
    assert_eq!(init(&input(5, 1)), vec![0]); // starts
    assert_eq!(init(&input(5, 2)), vec![17]); // ends
    assert_eq!(init(&input(5, 3)), vec![1]); // axes
}

/// `export --for onnxruntime`'s model of every bundled model: no layout
/// machinery (no layout transform, pad, crop or op in a storage layout in the
/// graph, so every exported Transpose is one of the graph's own, and no tensor of
/// a higher rank than the source's, as blocked layouts would add), no batch norm left after a
/// float32 convolution (float16 weights are not refolded), and, read back by our importer and run by the reference
/// executor, the outputs onnxruntime recorded for the source within the
/// tolerance of the verification exports (1e-4 of the largest magnitude, 2e-3
/// for float16).
#[test]
fn onnxruntime_exports_keep_the_source_layouts_and_outputs() {
    use layoutopt::graph::Graph;
    let transposes = |g: &Graph| {
        (g.node_ids().iter())
            .filter(|&&id| matches!(g.node(id).op, Op::Transpose(_)))
            .count()
    };
    let max_rank = |g: &Graph| {
        (g.node_ids().iter())
            .flat_map(|&id| g.node(id).outputs.iter().map(|v| v.ty.shape.len()))
            .max()
            .unwrap_or(0)
    };
    for path in bundled_models() {
        let what = path.display().to_string();
        let g = load_model(&path).unwrap();
        let (inputs, expected) = load_test_data(path.parent().unwrap());
        let planned = PlanLayouts::for_onnxruntime().plan(&g).unwrap();
        for id in planned.graph.node_ids() {
            let op = &planned.graph.node(id).op;
            let layout = matches!(
                op,
                Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_) | Op::InLayout(_)
            );
            assert!(!layout, "{what}: {}", op.kind_name());
        }
        let opts = ExportOptions {
            output_names: Some(
                g.outputs()
                    .iter()
                    .map(|&v| g.value(v).name.clone())
                    .collect(),
            ),
            symbolic_batch: None,
        };
        let m = export_model(&planned.graph, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
        let nodes = &m.graph.as_ref().unwrap().node;
        let exported_transposes = nodes.iter().filter(|n| n.op_type == "Transpose").count();
        assert_eq!(exported_transposes, transposes(&planned.graph), "{what}");
        let bytes = export_bytes(&planned.graph, &opts).unwrap();
        let back = import_onnx(&bytes, "exported.onnx", None, &ImportOptions::default())
            .unwrap_or_else(|e| panic!("{what}: re-import: {e}"));
        assert!(max_rank(&back) <= max_rank(&g), "{what}");
        for id in back.node_ids() {
            if matches!(back.node(id).op, Op::BatchNorm(_)) {
                let x = back.node_inputs(id)[0];
                let f32_conv = matches!(back.node(x.node).op, Op::Conv(_))
                    && back.value_type(x).dtype == layoutopt::graph::DType::F32;
                assert!(!f32_conv, "{what}");
            }
        }
        let outputs =
            layoutopt::reference::run(&back, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(outputs.len(), expected.len(), "{what}");
        for (out, exp) in outputs.iter().zip(&expected) {
            assert_eq!(out.shape, exp.shape, "{what}");
            assert_close(exp, out, 1e-4, &what);
        }
    }
    // resnet_small's 8 batch norms all follow a conv: none is left.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small/model.onnx");
    let planned = PlanLayouts::for_onnxruntime()
        .plan(&load_model(&path).unwrap())
        .unwrap();
    let ops: Vec<&str> = (planned.graph.node_ids().into_iter())
        .map(|id| planned.graph.node(id).op.kind_name())
        .collect();
    assert!(!ops.contains(&"BatchNormalization"), "{ops:?}");
    assert_eq!(ops.iter().filter(|&&k| k == "Conv").count(), 8);
}
