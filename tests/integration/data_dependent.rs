//! Models whose shapes depend on values (issue 43): a NonZero,
//! NonMaxSuppression or Unique whose input is computed at run time cuts the
//! model into stages, each planned and compiled with every shape known. The
//! small models of scripts/gen_data_dependent.py reproduce onnxruntime's
//! outputs for every recorded input set (integers exactly, floats within 1e-5
//! of max(1, largest magnitude)), through one session whose later stages are
//! compiled per extent the cut gives, an extent of 0 included.

use crate::support::bundled::load_test_data_set;
use crate::support::compare::assert_outputs_match;
use crate::support::process::layoutopt_ok;
use layoutopt::api::{
    load_model_with, Costs, Error, ImportError, ImportOptions, ModelInput, Session, SessionOptions,
    TargetFamily,
};
use std::path::{Path, PathBuf};

fn case(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data_dependent")
        .join(name)
}

fn session(dir: &Path) -> Session {
    let mut options = SessionOptions::with_threads(1);
    options.costs = Some(Costs::BuiltIn);
    options.target = TargetFamily::Nchwc(8);
    Session::open(&dir.join("model.onnx"), options).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn models_cut_at_data_dependent_ops_match_onnxruntime() {
    // The cases of scripts/gen_data_dependent.py, with the op each is first
    // cut at and how many input sets it records: two written with
    // onnx.helper, two exported by tf2onnx from TensorFlow functions.
    for (name, cut, sets) in [
        ("detection_nms", "NonMaxSuppression", 2),
        ("nonzero_mask", "NonZero", 3),
        ("tf_nms", "NonMaxSuppression", 1),
        ("tf_combined", "NonMaxSuppression", 1),
    ] {
        let dir = case(name);
        let s = session(&dir);
        let at = s.cut().unwrap_or_else(|| panic!("{name} is not cut"));
        assert_eq!(&*at.op_type, cut, "{name}");
        let layer = at.layer.to_string();
        for k in 0..sets {
            let (inputs, expected) = load_test_data_set(&dir, k).expect("a recorded set");
            let given: Vec<ModelInput> = inputs.iter().map(ModelInput::Tensor).collect();
            let outputs = s
                .run(&given)
                .unwrap_or_else(|e| panic!("{name} set {k}: {e}"));
            assert_outputs_match(&format!("{name} set {k}"), &outputs, &expected, 1e-5);
        }
        assert!(
            load_test_data_set(&dir, sets).is_none(),
            "{name}: every set tried"
        );
        // No one compiled model serves it, and imported whole it is refused
        // naming the layer.
        let inputs = load_test_data_set(&dir, 0).unwrap().0;
        let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
        let err = s
            .model_for(&shapes)
            .err()
            .expect("a staged model has no one model");
        assert!(err.to_string().contains(&layer), "{err}");
        let opts = ImportOptions {
            input_shapes: (s.interface().inputs.iter())
                .zip(&inputs)
                .map(|(v, t)| (v.name.clone(), t.shape.clone()))
                .collect(),
            ..ImportOptions::default()
        };
        match load_model_with(&dir.join("model.onnx"), &opts) {
            Err(Error::Onnx(e @ ImportError::DataDependent { .. })) => {
                assert_eq!(*e.spans()[0].layer, layer, "{e}");
            }
            other => panic!("{name}: {:?}", other.map(|g| g.node_count())),
        }
    }
}

/// The command line runs a staged model on the inputs recorded beside it and
/// compares its outputs with the recorded ones; `bench` times its runs.
#[test]
fn the_command_line_runs_a_model_in_stages() {
    let model = case("detection_nms").join("model.onnx");
    let text = &layoutopt_ok(&["run", model.to_str().unwrap(), "--threads", "1"]);
    assert!(
        text.contains("cut before layer 'nms' (NonMaxSuppression)"),
        "{text}"
    );
    assert!(text.contains("output 'kept_boxes' f32[12, 4]"), "{text}");
    let errors: Vec<f64> = (text.lines())
        .filter_map(|l| l.trim().strip_prefix("max abs error vs recorded output: "))
        .map(|e| e.parse().unwrap())
        .collect();
    assert_eq!(errors.len(), 5, "{text}");
    assert!(errors.iter().all(|&e| e <= 1e-5), "{text}");
    let model = case("tf_combined").join("model.onnx");
    let args = [
        "bench",
        model.to_str().unwrap(),
        "--threads",
        "1",
        "--runs",
        "5",
    ];
    let text = layoutopt_ok(&args);
    assert!(text.contains("over 5 runs"), "{text}");
}

/// A staged run warns of the steps that fall back to the reference executor,
/// in whichever stage they are, as a whole model's run does: here a
/// determinant of f64 values (native only on f32), beside a NonZero cut.
#[test]
fn a_staged_run_names_its_fallback_steps() {
    use crate::support::onnx::{int_attr, model, model_bytes, node, value_info};
    use crate::support::process::{layoutopt, scratch_dir};
    let (f32_code, f64_code, i64_code) = (1, 11, 7);
    let mut to_f64 = node("Cast", "to_f64", &["m"], &["m64"]);
    to_f64.attribute.push(int_attr("to", f64_code));
    let mut to_f32 = node("Cast", "to_f32", &["d64"], &["d"]);
    to_f32.attribute.push(int_attr("to", f32_code));
    let mut count = node("ReduceSum", "count", &["nz"], &["s"]);
    count.attribute.push(int_attr("keepdims", 0));
    let nodes = vec![
        node("NonZero", "nz", &["x"], &["nz"]),
        count,
        to_f64,
        node("Det", "det", &["m64"], &["d64"]),
        to_f32,
    ];
    let m = model(
        nodes,
        vec![
            value_info("x", f32_code as i32, &[6]),
            value_info("m", f32_code as i32, &[2, 2]),
        ],
        vec![
            value_info("s", i64_code, &[]),
            value_info("d", f32_code as i32, &[]),
        ],
        vec![],
        13,
    );
    let path = scratch_dir("staged_fallbacks").join("model.onnx");
    std::fs::write(&path, model_bytes(&m)).unwrap();
    let out = layoutopt(&["run", path.to_str().unwrap(), "--threads", "1"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("run in stages cut before layer 'nz'"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("run on the reference executor") && out.stderr.contains("'det'"),
        "{}",
        out.stderr
    );
}
