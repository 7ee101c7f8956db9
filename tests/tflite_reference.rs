//! The committed TFLite models, imported and run by the reference executor, reproduce
//! the outputs the TFLite interpreter recorded for their reference inputs: max abs
//! error at most 1e-4 times the output's max magnitude.

mod common;

use common::{load_test_data, max_abs_err};
use layoutopt::frontend::tflite::load_tflite;
use std::path::Path;

fn check(model: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(model);
    let g = load_tflite(&dir.join("model.tflite")).unwrap_or_else(|e| panic!("{model}: {e}"));
    let (inputs, expected) = load_test_data(&dir);
    assert!(
        !inputs.is_empty() && !expected.is_empty(),
        "{model} has no test data"
    );
    let outputs = layoutopt::reference::run(&g, &inputs).unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(outputs.len(), expected.len());
    for (i, (out, exp)) in outputs.iter().zip(&expected).enumerate() {
        assert_eq!(out.shape, exp.shape, "{model} output {i}");
        let (err, mag) = max_abs_err(exp, out);
        println!("{model} output {i}: max abs err {err:.3e}, max magnitude {mag:.3e}");
        assert!(
            err <= 1e-4 * mag,
            "{model} output {i}: error {err} > 1e-4 * {mag}"
        );
    }
}

#[test]
fn cnn_matches_the_tflite_interpreter() {
    check("tflite_cnn");
}

#[test]
fn f16_cnn_matches_the_tflite_interpreter() {
    check("tflite_cnn_f16");
}

#[test]
fn transformer_matches_the_tflite_interpreter() {
    check("tflite_transformer");
}
