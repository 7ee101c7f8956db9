//! The committed subset of the real-model suite (models/zoo, from
//! scripts/gen_zoo.py, scripts/gen_bert.py, scripts/gen_onnx_zoo.py and
//! scripts/gen_transformers.py; 33 MB), and the bundled models of integer and
//! boolean TFLite ops and of detection post-processing
//! (scripts/gen_tflite_detection.py): each model imports, runs every step natively (no
//! reference fallback) and reproduces the outputs its own runtime recorded
//! (onnxruntime for ONNX, the TFLite interpreter for TFLite) within 1e-4 of
//! the largest magnitude.

use crate::support::bundled::load_test_data;
use crate::support::compare::max_abs_err;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;

/// Directories under models/ and their model files.
const SUBSET: [(&str, &str); 20] = [
    ("zoo/BertEncoder_onnx", "model.onnx"),
    ("zoo/MobileNetV3Small_onnx", "model.onnx"),
    ("zoo/MobileNetV3Small_tflite", "model.tflite"),
    ("zoo/BlazeLandmark_tflite", "model.tflite"),
    // Grouped 1x1 convolutions, a channel shuffle, depthwise convolutions.
    ("zoo/ShuffleNetG3_96_onnx", "model.onnx"),
    // Grouped 3x3 convolutions of 4, 8 and 16 channels per group, squeeze-excite.
    ("zoo/ResNeXtSmall_64_onnx", "model.onnx"),
    // keras_hub transformers through tf2onnx and the TFLite converter: padding
    // and causal masks computed on integers at run time, rotary embeddings,
    // grouped-query attention, a decoding step with its key/value caches.
    ("zoo/BertTiny_onnx", "model.onnx"),
    ("zoo/BertTiny_tflite", "model.tflite"),
    ("zoo/GPT2Tiny_onnx", "model.onnx"),
    ("zoo/GPT2Tiny_tflite", "model.tflite"),
    ("zoo/GPT2Step_onnx", "model.onnx"),
    ("zoo/GPT2Step_tflite", "model.tflite"),
    ("zoo/LlamaTiny_onnx", "model.onnx"),
    ("zoo/LlamaTiny_tflite", "model.tflite"),
    ("zoo/ViTTiny_onnx", "model.onnx"),
    ("zoo/ViTTiny_tflite", "model.tflite"),
    ("tflite_logic", "model.tflite"),
    // Detection post-processing: SSD's TFLite_Detection_PostProcess (fast and
    // regular NMS), NON_MAX_SUPPRESSION_V4/V5 with padded outputs.
    ("detection/tflite_ssd_fast", "model.tflite"),
    ("detection/tflite_ssd_regular", "model.tflite"),
    ("detection/tflite_nms_padded", "model.tflite"),
];

#[test]
fn committed_real_models_run_natively_and_match_their_runtimes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    for (dir, file) in SUBSET {
        let dir = root.join(dir);
        let g = load_model(&dir.join(file)).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
            .with_costs(Costs::BuiltIn)
            .plan(&g)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let m = CompiledModel::compile(
            &planned.graph,
            &RuntimeOptions {
                threads: 2,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        assert_eq!(m.fallback_steps(), vec![], "{}", dir.display());
        let (inputs, expected) = load_test_data(&dir);
        let outputs = m
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        assert_eq!(outputs.len(), expected.len(), "{}", dir.display());
        for (out, exp) in outputs.iter().zip(&expected) {
            assert_eq!(out.shape, exp.shape, "{}", dir.display());
            let (err, mag) = max_abs_err(exp, out);
            assert!(
                err <= 1e-4 * mag,
                "{}: error {err} > 1e-4 * {mag}",
                dir.display()
            );
        }
    }
}
