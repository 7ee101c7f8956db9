//! What the tests and benchmarks share: model builders (ONNX, TFLite, TIR,
//! long chains), the bundled models and test data, deterministic test values,
//! tensor comparison, message checks, and child processes measured for time and memory.

pub mod bundled;
pub mod chains;
pub mod compare;
pub mod onnx;
pub mod plan;
pub mod process;
pub mod text;
pub mod tflite;
pub mod tir;
pub mod tir_gen;
pub mod values;
