//! The TFLite models, imported and run by the reference executor, reproduce the
//! outputs the TFLite interpreter recorded for their reference inputs (max abs error
//! at most 1e-4 times the output's max magnitude), before and after layout planning.

use crate::support::bundled::load_test_data;
use crate::support::compare::max_abs_err;
use layoutopt::frontend::tflite::load_tflite;
use layoutopt::graph::{Graph, Op, Tensor};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::planner_by_name;
use layoutopt::layout::report::PlanReport;
use layoutopt::layout::target::TargetFamily;
use std::path::{Path, PathBuf};

fn model_dir(model: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(model)
}

fn load(dir: &Path) -> (Graph, Vec<Tensor>, Vec<Tensor>) {
    let label = dir.display();
    let g = load_tflite(&dir.join("model.tflite")).unwrap_or_else(|e| panic!("{label}: {e}"));
    let (inputs, expected) = load_test_data(dir);
    assert!(
        !inputs.is_empty() && !expected.is_empty(),
        "{label} has no test data"
    );
    (g, inputs, expected)
}

/// Runs `g` with the reference executor and compares with the interpreter's outputs.
fn check_outputs(label: &str, g: &Graph, inputs: &[Tensor], expected: &[Tensor]) {
    let outputs = layoutopt::reference::run(g, inputs).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert_eq!(outputs.len(), expected.len());
    for (i, (out, exp)) in outputs.iter().zip(expected).enumerate() {
        assert_eq!(out.shape, exp.shape, "{label} output {i}");
        let (err, mag) = max_abs_err(exp, out);
        println!("{label} output {i}: max abs err {err:.3e}, max magnitude {mag:.3e}");
        assert!(
            err <= 1e-4 * mag,
            "{label} output {i}: error {err} > 1e-4 * {mag}"
        );
    }
}

fn planned(g: &Graph, planner: &str, family: TargetFamily) -> (Graph, PlanReport) {
    let p = plan(
        g,
        planner_by_name(planner).unwrap().as_ref(),
        family,
        &CostModel::default(),
    )
    .unwrap_or_else(|e| panic!("planning {} with {planner}: {e}", g.name));
    (p.graph, p.report)
}

/// The model matches the interpreter as imported, and after global planning for
/// NHWC and for NCHW8c; planned for NHWC, the NHWC ↔ NCHW transposes the import
/// made around every conv and pool all cancel: no transform remains.
fn check(model: &str) {
    let report = check_planned(model);
    assert_eq!(report.transform_count, 0, "{}", report.to_text());
}

/// The model matches the interpreter as imported, and after global planning for
/// NHWC and for NCHW8c; returns the NHWC plan's report.
fn check_planned(model: &str) -> PlanReport {
    let (g, inputs, expected) = load(&model_dir(model));
    check_outputs(model, &g, &inputs, &expected);
    let mut nhwc = None;
    for family in [TargetFamily::Nhwc, TargetFamily::Nchwc(8)] {
        let (pg, report) = planned(&g, "global", family);
        check_outputs(
            &format!("{model} planned for {family}"),
            &pg,
            &inputs,
            &expected,
        );
        println!("{}", report.to_text().lines().next().unwrap_or_default());
        if family == TargetFamily::Nhwc {
            nhwc = Some(report);
        }
    }
    nhwc.expect("planned for NHWC")
}

#[test]
fn cnn_matches_the_tflite_interpreter() {
    check("tflite_cnn");
}

#[test]
fn f16_cnn_matches_the_tflite_interpreter() {
    check("tflite_cnn_f16");
}

/// Weights pruned to ~80% zeros and stored sparse by the converter: convolutions
/// through DENSIFY, the dense layer in 1x4 blocks read by FULLY_CONNECTED directly.
#[test]
fn sparse_cnn_matches_the_tflite_interpreter() {
    check("tflite_sparse");
}

/// Sparse float16 weights: DENSIFY then DEQUANTIZE, as MediaPipe's detectors ship them.
#[test]
fn sparse_f16_cnn_matches_the_tflite_interpreter() {
    check("tflite_sparse_f16");
}

/// MediaPipe's Convolution2DTransposeBias (SAME and VALID): the recorded output is
/// the interpreter's on the same network with TRANSPOSE_CONV (see
/// scripts/gen_custom_tflite.py, which checks a numpy transcription of MediaPipe's
/// kernel against it).
/// Under the default cost model the NHWC plan may keep a transform around a
/// ConvTranspose (a planner matter, as for TRANSPOSE_CONV); the numbers must match.
#[test]
fn transpose_conv_bias_matches_the_tflite_interpreter() {
    check_planned("tflite_transpose_conv_bias");
}

/// SSD post-processing (the custom TFLite_Detection_PostProcess, fast and
/// regular NMS) and NON_MAX_SUPPRESSION_V4/V5 with padded outputs: the kept
/// boxes, classes, indices and counts equal the interpreter's.
#[test]
fn detection_post_processing_matches_the_tflite_interpreter() {
    for model in ["tflite_ssd_fast", "tflite_ssd_regular", "tflite_nms_padded"] {
        let model = &format!("detection/{model}");
        check_planned(model);
    }
}

#[test]
fn transformer_matches_the_tflite_interpreter() {
    check("tflite_transformer");
}

#[test]
fn standalone_ops_match_the_tflite_interpreter() {
    check("tflite_ops");
}

/// Comparisons, logic, SELECT, TILE and SLICE on int32 ids and masks; POW,
/// SQUARE, SIN and COS.
#[test]
fn integer_and_boolean_ops_match_the_tflite_interpreter() {
    check("tflite_logic");
}

/// TensorFlow ops the converter keeps as builtins: SPACE_TO_DEPTH and back,
/// SPACE_TO_BATCH_ND and back, MIRROR_PAD (REFLECT, SYMMETRIC), LRN,
/// L2_NORMALIZATION, LOG_SOFTMAX, ELU, SIGN, FLOOR_DIV, FLOOR_MOD, ADD_N,
/// CUMSUM, ATAN2, ARG_MAX, ARG_MIN, TOPK_V2, GATHER_ND, SCATTER_ND,
/// REDUCE_ANY, ONE_HOT, BITWISE_XOR, RIGHT_SHIFT and BITCAST.
#[test]
fn tensorflow_builtin_ops_match_the_tflite_interpreter() {
    check("tflite_tf_ops");
}

/// MediaPipe's published models: the face and pose detectors store their weights
/// sparse (float16, DENSIFY then DEQUANTIZE), the selfie segmenter upsamples with
/// Convolution2DTransposeBias. Record them first with
/// `python3 scripts/gen_mediapipe_refs.py MEDIAPIPE_CHECKOUT/mediapipe/modules`.
#[test]
#[ignore = "needs models/full/mediapipe_* (scripts/gen_mediapipe_refs.py)"]
fn mediapipe_models_match_the_tflite_interpreter() {
    for name in [
        "face_detection_full_range_sparse",
        "pose_detection",
        "selfie_segmentation",
    ] {
        let (g, inputs, expected) = load(&model_dir(&format!("full/mediapipe_{name}")));
        check_outputs(name, &g, &inputs, &expected);
    }
}

/// Keras MobileNetV2 (224x224, seeded weights) as TFLite: build it first with
/// `python3 scripts/gen_tflite_models.py --full`. Run with `--ignored --nocapture`
/// to see the plan reports.
#[test]
#[ignore = "needs models/full/tflite_mobilenetv2 (scripts/gen_tflite_models.py --full)"]
fn full_mobilenetv2_imports_runs_and_plans() {
    let dir = model_dir("full/tflite_mobilenetv2");
    assert!(
        dir.join("model.tflite").exists(),
        "build it with scripts/gen_tflite_models.py --full"
    );
    let (g, inputs, expected) = load(&dir);
    let transposes = g
        .node_ids()
        .iter()
        .filter(|&&n| matches!(g.node(n).op, Op::Transpose(_)))
        .count();
    // 52 convolutions (17 depthwise), each wrapped NHWC → NCHW → NHWC.
    assert_eq!(transposes, 104);
    check_outputs("mobilenetv2", &g, &inputs, &expected);
    for (planner, family) in [
        ("local", TargetFamily::Nhwc),
        ("global", TargetFamily::Nhwc),
        ("local", TargetFamily::Nchwc(8)),
        ("global", TargetFamily::Nchwc(8)),
    ] {
        let (pg, report) = planned(&g, planner, family);
        println!(
            "{}",
            report
                .to_text()
                .lines()
                .take(2)
                .collect::<Vec<_>>()
                .join("\n")
        );
        if planner == "global" {
            check_outputs(
                &format!("mobilenetv2 {planner} {family}"),
                &pg,
                &inputs,
                &expected,
            );
        }
        if (planner, family) == ("global", TargetFamily::Nhwc) {
            assert_eq!(report.transform_count, 0);
        }
    }
}
