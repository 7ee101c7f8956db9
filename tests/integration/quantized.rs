//! Quantized ONNX models (models/quant, from scripts/gen_quant.py:
//! onnxruntime's `quantize_static`, per-channel int8 weights, in the QDQ
//! format with int8 or uint8 activations and in the QOperator format) import, run every step natively and
//! reproduce onnxruntime's recorded outputs to within one quantization step
//! of the output, most elements exactly.
//!
//! They run in float on the quantization grid (see
//! `frontend/onnx/ops/quantize.rs`); onnxruntime's int8 kernels round the same
//! values, so the two differ only where a value lies at half a step and float
//! rounding tips it the other way.

use crate::support::bundled::load_test_data;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::graph::Graph;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;

const MODELS: [&str; 9] = [
    "convnet_qdq_s8",
    "convnet_qdq_u8",
    "convnet_qop_u8",
    "resnet_small_qdq_s8",
    "resnet_small_qdq_u8",
    "resnet_small_qop_u8",
    "mobilenet_small_qdq_s8",
    "mobilenet_small_qdq_u8",
    "mobilenet_small_qop_u8",
];

#[test]
fn static_quantized_models_run_natively_within_one_step_of_onnxruntime() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/quant");
    for name in MODELS {
        let dir = root.join(name);
        let g = load_model(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{name}: {e}"));
        let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
            .with_costs(Costs::BuiltIn)
            .plan(&g)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let m = CompiledModel::compile(&planned.graph, &RuntimeOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(m.fallback_steps(), vec![], "{name}");
        let (inputs, expected) = load_test_data(&dir);
        let out = m.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (got, want) = (out[0].data.to_f64(), expected[0].data.to_f64());
        assert_eq!(out[0].shape, expected[0].shape, "{name}");
        let step = output_step(&g);
        let off: Vec<f64> = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).collect();
        let worst = off.iter().copied().fold(0.0, f64::max);
        let exact = off.iter().filter(|d| **d <= step * 1e-3).count();
        assert!(
            worst <= step * 1.001,
            "{name}: off by {worst}, one step is {step}"
        );
        // Enough elements to count: at least 99% exact.
        if want.len() >= 1000 {
            assert!(
                exact * 100 >= want.len() * 99,
                "{name}: {exact} of {} elements exact",
                want.len()
            );
        }
    }
}

/// The quantization step of the graph's dequantized output: the constant
/// scale its last product (`(q - zero_point) * scale`) multiplies by.
fn output_step(g: &Graph) -> f64 {
    let out = g.outputs()[0];
    g.node_inputs(out.node)
        .iter()
        .find_map(|&v| g.constant(v).filter(|t| t.numel() == 1))
        .map(|t| t.data.to_f64()[0])
        .expect("the output is a product by a constant scale")
}
