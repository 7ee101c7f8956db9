//! The models and test data committed with the crate: bundled models under
//! models/, and tensors stored in ONNX test-data layout.

use layoutopt::frontend::onnx::load_tensor_pb;
use layoutopt::graph::Tensor;
use std::path::{Path, PathBuf};

/// The input and expected output tensors stored in `<dir>/test_data_set_0/`.
pub fn load_test_data(dir: &Path) -> (Vec<Tensor>, Vec<Tensor>) {
    load_test_data_set(dir, 0).unwrap_or_default()
}

/// The inputs and outputs of `test_data_set_<k>` beside a model, if it exists.
pub fn load_test_data_set(dir: &Path, k: usize) -> Option<(Vec<Tensor>, Vec<Tensor>)> {
    let data = dir.join(format!("test_data_set_{k}"));
    if !data.is_dir() {
        return None;
    }
    let load = |prefix: &str| -> Vec<Tensor> {
        (0..)
            .map(|i| data.join(format!("{prefix}_{i}.pb")))
            .take_while(|p| p.exists())
            .map(|p| load_tensor_pb(&p).expect("test data tensor loads").1)
            .collect()
    };
    Some((load("input"), load("output")))
}

/// The case folders of `tests/<folder>/` (each a model beside its recorded
/// test data), sorted.
pub fn recorded_cases(folder: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(folder);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("tests/{folder}: {e}"))
        .map(|e| e.expect("a readable entry").path())
        .collect();
    dirs.sort();
    dirs
}

/// The bundled model files, `models/*/model.onnx` (and `model.tflite` with
/// `tflite`), sorted.
pub fn bundled_models(tflite: bool) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let names: &[&str] = if tflite {
        &["model.onnx", "model.tflite"]
    } else {
        &["model.onnx"]
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("models/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .filter(|p| p.exists())
        .collect();
    files.sort();
    files
}

/// The folders of the bundled ONNX models (model.onnx beside test_data_set_0/);
/// there are at least three.
pub fn bundled_onnx_dirs() -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = bundled_models(false)
        .iter()
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .collect();
    assert!(
        dirs.len() >= 3,
        "expected the bundled models, found {dirs:?}"
    );
    dirs
}
