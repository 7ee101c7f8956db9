//! ONNX If, Loop and Scan (issue 43): the small models of
//! scripts/gen_control_flow.py reproduce what onnxruntime recorded within 1e-5
//! of max(1, largest magnitude), on the reference executor and compiled. An If
//! whose condition import-time folding computes is inlined and a small Loop of
//! known trip count unrolled (no control-flow op remains, their layers named
//! under theirs); the other control-flow ops run natively, one step each whose
//! subgraphs are compiled models.

use crate::support::bundled::{load_test_data, recorded_cases};
use crate::support::compare::assert_outputs_match;
use crate::support::onnx::*;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::graph::{Graph, Op, Tensor};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use onnx_protobuf::{GraphProto, NodeProto};
use std::path::Path;

fn control_ops(g: &Graph) -> Vec<&'static str> {
    (g.node_ids().into_iter())
        .filter(|&id| matches!(g.node(id).op, Op::Control(_)))
        .map(|id| g.node(id).op.kind_name())
        .collect()
}

#[test]
fn recorded_control_flow_models_match_onnxruntime() {
    let dirs = recorded_cases("control_flow");
    assert_eq!(dirs.len(), 8, "the cases of scripts/gen_control_flow.py");
    for dir in dirs {
        let what = dir.file_name().unwrap().to_string_lossy().into_owned();
        let g = load_model(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (inputs, expected) = load_test_data(&dir);
        let reference = layoutopt::reference::run(&g, &inputs)
            .unwrap_or_else(|e| panic!("{what} (reference): {e}"));
        assert_outputs_match(&format!("{what} (reference)"), &reference, &expected, 1e-5);

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
        assert_outputs_match(&format!("{what} (compiled)"), &outputs, &expected, 1e-5);
    }
}

/// The source layers of a case's imported graph.
fn layers(case: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/control_flow")
        .join(case);
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
    assert!(
        !layers.iter().any(|l| l.contains("else_branch")),
        "{layers:?}"
    );
}

#[test]
fn a_small_loop_of_known_trip_count_is_unrolled_under_its_name() {
    let layers = layers("loop_unrolled");
    for i in 0..3 {
        let layer = format!("rows/iteration{i}/add");
        assert!(layers.contains(&layer), "{layer} in {layers:?}");
    }
    assert!(
        !layers.iter().any(|l| l.contains("iteration3")),
        "{layers:?}"
    );
}

const F32: i32 = 1;
const BOOL: i32 = 9;

fn subgraph(nodes: Vec<NodeProto>, outputs: &[&str]) -> GraphProto {
    let mut g = GraphProto::new();
    g.name = "branch".into();
    g.node = nodes;
    g.output = outputs.iter().map(|o| value_info(o, F32, &[4])).collect();
    g
}

/// An If 'pick' on input `c` over x [4] with these branches.
fn if_model(then_branch: GraphProto, else_branch: GraphProto) -> onnx_protobuf::ModelProto {
    let mut n = node("If", "pick", &["c"], &["y"]);
    n.attribute = vec![
        graph_attr("then_branch", then_branch),
        graph_attr("else_branch", else_branch),
    ];
    model(
        vec![n],
        vec![value_info("c", BOOL, &[]), value_info("x", F32, &[4])],
        vec![value_info("y", F32, &[4])],
        vec![],
        17,
    )
}

#[test]
fn a_branch_reading_an_undefined_value_is_refused_naming_the_if() {
    let reads_nothing = subgraph(vec![node("Neg", "neg", &["ghost"], &["a"])], &["a"]);
    let fine = subgraph(vec![node("Abs", "abs", &["x"], &["b"])], &["b"]);
    let e = import_model(&if_model(reads_nothing, fine), "if.onnx")
        .unwrap_err()
        .to_string();
    for needle in ["'pick'", "reads 'ghost', which no enclosing graph defines"] {
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn an_error_inside_a_branch_names_the_branch_layer() {
    let mut bad = node("Transpose", "flip", &["x"], &["a"]);
    bad.attribute = vec![ints_attr("perm", &[3])];
    let fine = subgraph(vec![node("Abs", "abs", &["x"], &["b"])], &["b"]);
    let e = import_model(&if_model(subgraph(vec![bad], &["a"]), fine), "if.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("'pick/then_branch/flip'"), "{e}");
}

#[test]
fn branches_of_different_shapes_are_refused_naming_the_if() {
    let mut wide = node("Concat", "twice", &["x", "x"], &["a"]);
    wide.attribute = vec![int_attr("axis", 0)];
    let mut then_branch = subgraph(vec![wide], &[]);
    then_branch.output = vec![value_info("a", F32, &[8])];
    let fine = subgraph(vec![node("Abs", "abs", &["x"], &["b"])], &["b"]);
    let e = import_model(&if_model(then_branch, fine), "if.onnx")
        .unwrap_err()
        .to_string();
    for needle in [
        "'pick'",
        "output 0 has shape [8] in then_branch ('a') but [4]",
    ] {
        assert!(e.contains(needle), "{e}");
    }
}

/// `--freeze y=FILE` makes graph input y a constant: in `if_runtime_else` the
/// nested If on sum(y) > 0 then folds and is inlined, only the outer If (on x)
/// stays, and the run gives what onnxruntime recorded. A frozen value of
/// another shape is refused naming the input.
#[test]
fn a_frozen_input_folds_the_control_flow_it_decides() {
    use crate::support::process::{layoutopt, layoutopt_ok, scratch_dir};
    use layoutopt::api::{load_model_with, read_npy, ImportOptions};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/control_flow/if_runtime_else");
    let (inputs, expected) = load_test_data(&dir);
    let model = dir.join("model.onnx");
    let opts = ImportOptions {
        constant_inputs: [("y".to_string(), inputs[1].clone())].into(),
        ..ImportOptions::default()
    };
    let g = load_model_with(&model, &opts).unwrap();
    assert_eq!(g.inputs().len(), 1);
    assert_eq!(control_ops(&g), ["If"]);
    let outer = (g.node_ids().into_iter())
        .find_map(|id| match &g.node(id).op {
            Op::Control(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    let branches = layoutopt::reference::control::subgraphs(&outer);
    assert_eq!(branches.len(), 2);
    for b in branches {
        assert_eq!(
            control_ops(b),
            Vec::<&str>::new(),
            "the nested If is inlined"
        );
    }

    let out = scratch_dir("frozen_input");
    let data = dir.join("test_data_set_0");
    let (model, x, y) = (
        model.display().to_string(),
        data.join("input_0.pb").display().to_string(),
        data.join("input_1.pb").display().to_string(),
    );
    let o = out.display().to_string();
    layoutopt_ok(&[
        "run",
        &model,
        "--freeze",
        &format!("y={y}"),
        "--input",
        &format!("x={x}"),
        "--output",
        &o,
    ]);
    let got = read_npy(&std::fs::read(out.join("out.npy")).unwrap()).unwrap();
    assert_outputs_match("frozen y", &[got], &expected, 1e-5);

    let row = Tensor::from_f32(vec![4], vec![1.0; 4]);
    let row_file = out.join("row.npy");
    std::fs::write(&row_file, layoutopt::api::write_npy(&row).unwrap()).unwrap();
    let row_file = row_file.display().to_string();
    let wrong = layoutopt(&["run", &model, "--freeze", &format!("y={row_file}")]);
    assert_ne!(wrong.code, 0);
    assert!(wrong.stderr.contains("graph input 'y'"), "{}", wrong.stderr);
}
