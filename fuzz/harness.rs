//! What each fuzz target does with one input; shared by the libFuzzer targets in
//! `fuzz_targets/` and the bounded in-process fuzzer in `tests/bad_input/fuzz_regressions.rs`,
//! so both exercise exactly the same code. Any panic here is a bug: every input
//! must give `Ok` or a clear error.
#![allow(dead_code)] // each includer uses part of it

use layoutopt::frontend::onnx::{import_onnx, ImportOptions};
use layoutopt::frontend::tflite::import_tflite;
use layoutopt::graph::{Graph, Tensor, TensorData};

/// Graphs this small are also run, so the executor sees what the importer accepted.
const RUN_LIMIT_BYTES: u64 = 1 << 20;

/// Runs the reference executor and the compiled runtime on zero inputs when the
/// graph is small.
fn run_small(g: &Graph) {
    if !g
        .peak_live_bytes()
        .is_ok_and(|(peak, _)| peak <= RUN_LIMIT_BYTES)
    {
        return;
    }
    let inputs: Vec<Tensor> = g
        .inputs()
        .iter()
        .map(|&id| {
            let ty = &g.node(id).outputs[0].ty;
            Tensor::new(ty.shape.clone(), TensorData::zeros(ty.dtype, ty.numel()))
        })
        .collect();
    let _ = layoutopt::reference::run_with_limit(g, &inputs, RUN_LIMIT_BYTES);
    // And compiled (hand kernels, TIR through codegen, fallbacks) on one thread.
    let options = layoutopt::runtime::RuntimeOptions {
        threads: 1,
        ..Default::default()
    };
    if let Ok(m) = layoutopt::runtime::CompiledModel::compile(g, &options) {
        let _ = m.run(&inputs);
    }
}

pub fn onnx(data: &[u8]) {
    if let Ok(g) = import_onnx(data, "fuzz.onnx", None, &ImportOptions::default()) {
        run_small(&g);
    }
}

pub fn tflite(data: &[u8]) {
    if let Ok(g) = import_tflite(data, "fuzz.tflite") {
        run_small(&g);
    }
}

pub fn rules(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = layoutopt::layout::rules::parse_rules(text, "fuzz.rules");
    }
}
