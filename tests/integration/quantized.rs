//! Quantized models (models/quant: scripts/gen_quant.py with onnxruntime's
//! quantizer, scripts/gen_tflite_quant.py with the TFLite converter) import,
//! run every step natively and reproduce their runtime's recorded outputs.
//!
//! Quantized values are their float meaning on their quantization grid (see
//! `frontend/onnx/ops/quantize.rs` and `frontend/tflite/ops/quant.rs`).
//! Convolutions sum their integers exactly, as the peers' integer kernels do;
//! depthwise ones and the other ops compute in float, so the two differ only
//! where a value lies at half a step and float rounding tips it the other
//! way: quantized outputs agree within one step, most elements exactly.

use crate::support::bundled::{load_test_data, load_test_data_set};
use crate::support::compare::{assert_outputs_match, max_abs_err};
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::export::{export_bytes, ExportOptions};
use layoutopt::frontend::onnx::{import_onnx, ImportOptions};
use layoutopt::graph::{Graph, Op, Tensor, UnaryOp};
use layoutopt::runtime::{CompiledModel, ConvAlgo, Isa, RuntimeOptions};
use std::path::{Path, PathBuf};

/// Imports, plans and runs `models/quant/<name>/<file>` with no reference
/// fallback; returns the graph, the outputs, the recorded outputs and the
/// algorithm of every convolution.
fn run(name: &str, file: &str) -> (Graph, Vec<Tensor>, Vec<Tensor>, Vec<ConvAlgo>) {
    run_with(name, file, &RuntimeOptions::default())
}

/// `run` with the runtime's `options`.
fn run_with(
    name: &str,
    file: &str,
    options: &RuntimeOptions,
) -> (Graph, Vec<Tensor>, Vec<Tensor>, Vec<ConvAlgo>) {
    let (g, m) = compile(name, file, options);
    let (inputs, expected) = load_test_data(&quant_dir(name));
    let out = m.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(out.len(), expected.len(), "{name}");
    assert_eq!(out[0].shape, expected[0].shape, "{name}");
    let algos = m.conv_steps().iter().map(|c| c.decision.algo).collect();
    (g, out, expected, algos)
}

/// The folder of bundled quantized model `name`.
fn quant_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models/quant")
        .join(name)
}

/// `models/quant/<name>/<file>` imported, planned and compiled with
/// `options`, with no step on the reference executor.
fn compile(name: &str, file: &str, options: &RuntimeOptions) -> (Graph, CompiledModel) {
    let g = load_model(&quant_dir(name).join(file)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
        .with_costs(Costs::BuiltIn)
        .plan(&g)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let m =
        CompiledModel::compile(&planned.graph, options).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(m.fallback_steps(), vec![], "{name}");
    (g, m)
}

/// Checks that `got` is within one `step` of `want` everywhere and, where
/// there are enough elements to count, exact in at least 99% of them.
fn within_one_step(name: &str, got: &Tensor, want: &Tensor, step: f64) {
    let off: Vec<f64> = got
        .data
        .to_f64()
        .iter()
        .zip(want.data.to_f64())
        .map(|(g, w)| (g - w).abs())
        .collect();
    let worst = off.iter().copied().fold(0.0, f64::max);
    let exact = off.iter().filter(|d| **d <= step * 1e-3).count();
    assert!(
        worst <= step * 1.001,
        "{name}: off by {worst}, one step is {step}"
    );
    if off.len() >= 1000 {
        assert!(
            exact * 100 >= off.len() * 99,
            "{name}: {exact} of {} elements exact",
            off.len()
        );
    }
}

#[test]
fn static_quantized_onnx_models_are_within_one_step_of_onnxruntime() {
    for name in [
        "convnet_qdq_s8",
        "convnet_qdq_u8",
        "convnet_qop_u8",
        "resnet_small_qdq_s8",
        "resnet_small_qdq_u8",
        "resnet_small_qop_u8",
        "mobilenet_small_qdq_s8",
        "mobilenet_small_qdq_u8",
        "mobilenet_small_qop_u8",
    ] {
        let (g, out, expected, algos) = run(name, "model.onnx");
        within_one_step(name, &out[0], &expected[0], output_step(&g));
        // Every convolution but the depthwise ones sums integers (its input
        // is on a quantization grid, in QOperator models through a max pool
        // of the quantized integers).
        assert!(
            algos.contains(&ConvAlgo::Int8)
                && algos
                    .iter()
                    .all(|a| matches!(a, ConvAlgo::Int8 | ConvAlgo::Depthwise)),
            "{name}: {algos:?}"
        );
    }
}

/// The quantization step of the graph's dequantized output: the scale of the
/// quantization round trip that computes it, or the constant its last product
/// (`(q - zero_point) * scale`) multiplies by.
fn output_step(g: &Graph) -> f64 {
    let out = g.outputs()[0];
    if let Op::Unary(UnaryOp::QuantizeDequantize { scale, .. }) = g.node(out.node).op {
        return f64::from(scale);
    }
    g.node_inputs(out.node)
        .iter()
        .find_map(|&v| g.constant(v).filter(|t| t.numel() == 1))
        .map(|t| t.data.to_f64()[0])
        .expect("the output is dequantized by a constant scale")
}

/// A quantized add and a quantized multiply round the sum and the product
/// of two grid values as onnxruntime's QLinearAdd and QLinearMul do (from the
/// integers, with their ratios of scales), on every instruction set:
/// `qlinear_pairs_*` adds and multiplies every pair of integers of the type,
/// and every result must be onnxruntime's, bit for bit. Rounding the float
/// sum instead, 1 of the u8 pairs and 149 of the s8 ones round the other way;
/// the float product rounds the same on these grids, but not always (2 of
/// 2.6 million products over 40 random s8 grids).
#[test]
fn quantized_adds_and_products_round_as_onnxruntime_does() {
    for name in ["qlinear_pairs_u8", "qlinear_pairs_s8"] {
        for isa in Isa::ALL.into_iter().filter(|isa| isa.available()) {
            let options = RuntimeOptions {
                isa: Some(isa),
                ..Default::default()
            };
            let (_, out, expected, _) = run_with(name, "model.onnx", &options);
            assert_eq!(out.len(), 2, "{name}: the sum and the product");
            for (what, got, want) in [
                ("sums", &out[0], &expected[0]),
                ("products", &out[1], &expected[1]),
            ] {
                let (got, want) = (got.data.to_f64(), want.data.to_f64());
                let differ = got.iter().zip(&want).filter(|(g, w)| g != w).count();
                assert_eq!(
                    differ,
                    0,
                    "{name} on {isa}: {differ} of {} {what} differ",
                    want.len()
                );
            }
        }
    }
}

/// A quantized softmax is onnxruntime's, bit for bit: its com.microsoft
/// QLinearSoftmax of opset 13 (rows of 197) and of opset 12 (axis 1 of
/// [60, 2, 197]: rows of 394), and the QDQ form it fuses into that kernel,
/// over random values on u8 and s8 grids. Each runs as one step. A float
/// softmax rounded onto the grid instead puts 30-135 of the 23,640 elements
/// of each output a step away. The fourth output, a com.microsoft
/// QLinearWhere, is also onnxruntime's.
#[test]
fn quantized_softmaxes_match_onnxruntime_exactly() {
    for name in ["qlinear_softmax_u8", "qlinear_softmax_s8"] {
        let (_, m) = compile(name, "model.onnx", &RuntimeOptions::default());
        // The opset-12 form reshapes its rows back before the rounding.
        let fused = (m.describe().iter())
            .filter(|s| {
                s.contains("[Softmax+QuantizeDequantize]")
                    || s.contains("[Softmax+Reshape+QuantizeDequantize]")
            })
            .count();
        assert_eq!(fused, 3, "{name}: {:#?}", m.describe());
        let (inputs, expected) = load_test_data(&quant_dir(name));
        let out = m.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.len(), 4, "{name}");
        for (k, (got, want)) in out.iter().zip(&expected).enumerate() {
            assert_eq!(got.shape, want.shape, "{name} output {k}");
            let (got, want) = (got.data.to_f64(), want.data.to_f64());
            let differ = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            assert_eq!(differ, 0, "{name} output {k}: {differ} elements differ");
        }
    }
}

/// Products of two quantized activations sum their integers and round the
/// sum as onnxruntime's QLinearMatMul does, in both forms (the QDQ one fused
/// into that kernel), batched, broadcast and with fewer columns than a
/// vector. The grids make every odd sum a tie in exact arithmetic: from the
/// dequantized values, 2-12 of the outputs of each product were a step away.
#[test]
fn quantized_matmuls_match_onnxruntime_exactly() {
    for name in ["qlinear_matmul_u8", "qlinear_matmul_s8"] {
        let (_, m) = compile(name, "model.onnx", &RuntimeOptions::default());
        let integer = m
            .describe()
            .iter()
            .filter(|s| s.contains("(integers)"))
            .count();
        assert_eq!(integer, 3, "{name}: {:#?}", m.describe());
        let (inputs, expected) = load_test_data(&quant_dir(name));
        let out = m.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.len(), 3, "{name}");
        for (k, (got, want)) in out.iter().zip(&expected).enumerate() {
            assert_eq!(got.shape, want.shape, "{name} output {k}");
            let (got, want) = (got.data.to_f64(), want.data.to_f64());
            let differ = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            assert_eq!(differ, 0, "{name} output {k}: {differ} elements differ");
        }
    }
}

/// A QDQ average pool on the grid of a relu's output (zero point 0) rounds
/// every average as onnxruntime's QLinearAveragePool does where the pool
/// runs with channels innermost (NCHW16c here, which the local planner
/// picks): the window's f32 sum in row order divided by its count.
/// Multiplying by the inverse counts instead, 11 of the 4,608 outputs land a
/// step away (ties of border windows of 4 and 6). In NCHW the kernel sums a
/// window column by column, and 14 outputs are a step away.
#[test]
fn quantized_average_pools_round_as_onnxruntime_does() {
    let name = "qdq_average_pool_u8";
    let g = load_model(&quant_dir(name).join("model.onnx")).expect("loads");
    let (inputs, expected) = load_test_data(&quant_dir(name));
    let want = expected[0].data.to_f64();
    for (planner, most_off) in [(PlannerKind::Local, 0), (PlannerKind::Keep, 20)] {
        let planned = PlanLayouts::new(planner, TargetFamily::Nchwc(16))
            .with_costs(Costs::BuiltIn)
            .plan(&g)
            .expect("plans");
        let m =
            CompiledModel::compile(&planned.graph, &RuntimeOptions::default()).expect("compiles");
        let got = m.run(&inputs).expect("runs")[0].data.to_f64();
        let differ = got.iter().zip(&want).filter(|(g, w)| g != w).count();
        assert!(
            differ <= most_off,
            "{planner:?}: {differ} of {} averages differ",
            want.len()
        );
        within_one_step(
            name,
            &m.run(&inputs).expect("runs")[0],
            &expected[0],
            0.0127,
        );
    }
}

/// Quantized transformers (the zoo's ViTTiny and GPT2Tiny through
/// `quantize_static`: QDQ with u8 and s8 activations, QOperator with u8) run
/// with every step native within 1e-4 of onnxruntime's outputs' magnitude
/// (exactly, on the machine they were made on). Before their softmaxes and
/// masking products were computed as onnxruntime's quantized kernels compute
/// them, ViTTiny's QDQ form was 0.109 away and GPT2Tiny's 0.063, on outputs
/// up to 2.9, and the QOperator form did not import.
#[test]
fn quantized_transformers_match_onnxruntime() {
    for name in [
        "ViTTiny_onnx_qdq_u8",
        "GPT2Tiny_onnx_qop_u8",
        "GPT2Tiny_onnx_qdq_s8",
    ] {
        let (_, m) = compile(name, "model.onnx", &RuntimeOptions::default());
        let (inputs, expected) = load_test_data(&quant_dir(name));
        let out = m.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_outputs_match(name, &out, &expected, 1e-4);
    }
}

/// A dynamically quantized LSTM (onnxruntime's com.microsoft
/// DynamicQuantizeLSTM, weights int8 per direction or per gate row) runs as
/// a float LSTM on its dequantized weights: within 1e-5 of onnxruntime's float
/// LSTM on those weights (`test_data_set_1`), and within 0.02 of onnxruntime's
/// own kernel (`test_data_set_0`), which also rounds X and the hidden state to
/// 8 bits at every step (0.011 apart at most, on outputs up to 1.1).
#[test]
fn dynamically_quantized_lstms_run_on_their_dequantized_weights() {
    for name in ["lstm_dynamic", "lstm_dynamic_per_channel"] {
        let (_, m) = compile(name, "model.onnx", &RuntimeOptions::default());
        let dir = quant_dir(name);
        let (inputs, quantized) = load_test_data(&dir);
        let (_, float) = load_test_data_set(&dir, 1).expect("the float LSTM's outputs");
        let out = m.run(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.len(), 3, "{name}: Y, Y_h and Y_c");
        for (k, got) in out.iter().enumerate() {
            let (to_float, _) = max_abs_err(&float[k], got);
            let (to_quantized, _) = max_abs_err(&quantized[k], got);
            assert!(
                to_float <= 1e-5,
                "{name} output {k}: {to_float} from the float LSTM"
            );
            assert!(
                to_quantized <= 0.02,
                "{name} output {k}: {to_quantized} from onnxruntime"
            );
        }
    }
}

/// Every op of a full-integer TFLite model rounds as the interpreter's do
/// (its convolutions' requantization, XNNPACK's add, TFLite's integer
/// average pool, whose ties go away from zero): the int8 logits are equal.
#[test]
fn full_integer_tflite_equals_the_interpreter() {
    let (_, out, expected, _) = run("tflite_int8", "model.tflite");
    assert_eq!(out[0].data.to_f64(), expected[0].data.to_f64());
}

/// A TFLite convolution's fused relu comes before the rounding onto its
/// output grid, with a transpose back to channels-last between them: the
/// relu, the transpose (a relabel once planned) and the rounding all run in
/// the integer kernel's requantizing epilogue.
#[test]
fn tflite_relus_before_the_output_grid_run_in_the_integer_epilogue() {
    let (_, planned) = bundled_tflite_int8();
    let m = CompiledModel::compile(&planned, &RuntimeOptions::default()).unwrap();
    let steps = m.describe();
    assert!(
        steps
            .iter()
            .any(|s| s.contains("[Conv+Relu+Transpose+QuantizeDequantize (int8)")),
        "{steps:#?}"
    );
}

/// The layers of a full-integer model whose outputs are rounded onto a grid
/// are its quantized layers, as imported and as planned (where each
/// rounding is folded into a QuantizeDequantize): what `run` reports as
/// computed in float or by integer kernels.
#[test]
fn planning_keeps_the_quantized_layers_of_a_tflite_model() {
    let (g, planned) = bundled_tflite_int8();
    let imported = g.quantized_layers();
    // Three convolutions, the depthwise one, the add, the pool and the dense layer.
    assert!(imported.len() >= 7, "{imported:?}");
    assert_eq!(planned.quantized_layers(), imported);
}

/// The bundled full-integer TFLite model as imported, and planned as `run`
/// plans it.
fn bundled_tflite_int8() -> (Graph, Graph) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/quant/tflite_int8/model.tflite");
    let g = load_model(&path).unwrap();
    let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
        .with_costs(Costs::BuiltIn)
        .plan(&g)
        .unwrap();
    (g, planned.graph)
}

/// Dynamic-range models: int8 weights, float activations. onnxruntime
/// quantizes the activations per run exactly as the model's own ops say,
/// and TFLite's hybrid kernels quantize their input onto a grid fitted to it
/// at every run, as the importer's DynamicQuantize does (in float, the
/// TFLite model's outputs moved by 0.2% of their magnitude): both are
/// reproduced to float rounding.
#[test]
fn dynamic_range_models_match_their_runtimes() {
    for (name, file, tolerance) in [
        ("convnet_dynamic", "model.onnx", 1e-5),
        ("resnet_small_dynamic", "model.onnx", 1e-5),
        ("tflite_dynamic", "model.tflite", 1e-5),
    ] {
        let (_, out, expected, _) = run(name, file);
        let (err, mag) = max_abs_err(&expected[0], &out[0]);
        assert!(
            err <= tolerance * mag,
            "{name}: error {err} > {tolerance} * {mag}"
        );
    }
}

/// A TFLite hybrid layer whose integer kernel quantizes its input itself
/// reads the values before the quantization, and the quantization's own step
/// is dropped: the bundled model's convolution and fully connected layer
/// each quantize their input per run (the dense layer always in integers,
/// the convolution as measured against the float kernels).
#[test]
fn hybrid_tflite_layers_quantize_their_input_in_their_own_step() {
    let (_, m) = compile("tflite_dynamic", "model.tflite", &RuntimeOptions::default());
    let steps = m.describe();
    let count = |what: &str| steps.iter().filter(|s| s.contains(what)).count();
    let (in_kernels, apart) = (count("quantized per run"), count("[DynamicQuantize]"));
    assert!(
        steps
            .iter()
            .any(|s| s.contains("[Gemm (int8, quantized per run)]")),
        "{steps:#?}"
    );
    assert_eq!(in_kernels + apart, 2, "{steps:#?}");
}

/// A dynamic-range model's per-run quantizations export as the ONNX ops of
/// their arithmetic: the exported plan, read back and run by the reference
/// executor, gives the interpreter's recorded outputs as the model does.
#[test]
fn per_run_quantizations_export_to_onnx() {
    let g = load_model(&quant_dir("tflite_dynamic").join("model.tflite")).unwrap();
    let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
        .with_costs(Costs::BuiltIn)
        .plan(&g)
        .unwrap();
    let bytes = export_bytes(&planned.graph, &ExportOptions::default()).unwrap();
    let back = import_onnx(&bytes, "exported.onnx", None, &ImportOptions::default()).unwrap();
    let (inputs, expected) = load_test_data(&quant_dir("tflite_dynamic"));
    let out = layoutopt::reference::run(&back, &inputs).unwrap();
    let (err, mag) = max_abs_err(&expected[0], &out[0]);
    assert!(err <= 1e-5 * mag, "error {err} against {mag}");
}
