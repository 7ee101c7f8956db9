//! Every bundled model imports and, through the reference executor, reproduces the
//! outputs onnxruntime recorded for its reference input: max abs error at most
//! 1e-4 times the output's max magnitude (2e-3 for float16 outputs).

use crate::support::bundled;
use crate::support::bundled::load_test_data;
use crate::support::compare::assert_close;
use layoutopt::frontend::onnx::{load_onnx, ImportOptions};

#[test]
fn bundled_models_match_onnxruntime() {
    let dirs = bundled::bundled_onnx_dirs();
    for dir in dirs {
        let g = load_onnx(&dir.join("model.onnx"), &ImportOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let (inputs, expected) = load_test_data(&dir);
        assert!(
            !inputs.is_empty() && !expected.is_empty(),
            "{} has no test data",
            dir.display()
        );
        let outputs = layoutopt::reference::run(&g, &inputs)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        assert_eq!(outputs.len(), expected.len());
        for (i, (out, exp)) in outputs.iter().zip(&expected).enumerate() {
            assert_eq!(out.shape, exp.shape, "{} output {i}", dir.display());
            let what = format!("{} output {i}", dir.display());
            let (err, mag) = assert_close(exp, out, 1e-4, &what);
            println!("{what}: max abs err {err:.3e}, max magnitude {mag:.3e}");
        }
    }
}
