//! Model importers: each turns a file into a `Graph` with per-layer spans.
pub mod onnx;
pub mod tflite;
