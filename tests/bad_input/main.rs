//! Bad input, split by kind: `hostile` runs the command line on hostile and
//! huge files (FIFOs, devices, links, sparse files, recorded cases of
//! tests/hostile/) under time and peak-memory bounds; `malformed` builds
//! models with one explicit defect each and checks the library's and the
//! command line's error; `fuzz_regressions` replays the fuzz corpora and
//! mutates the bundled models in process, which must never panic.
//!
//! A binary of its own: a child's peak RSS from `wait4` includes the pages of
//! the process that spawned it, so the spawning process must stay small.

// This binary uses a part of each of these shared helpers (the integration
// binary uses all of them).
#[allow(dead_code)]
#[path = "../support/bundled.rs"]
mod bundled;
#[allow(dead_code)]
#[path = "../support/compare.rs"]
mod compare;
#[allow(dead_code)]
#[path = "../support/onnx.rs"]
mod onnx;
#[allow(dead_code)]
#[path = "../support/process.rs"]
mod process;
#[allow(dead_code)]
#[path = "../support/tflite.rs"]
mod tflite;

mod fuzz_regressions;
mod hostile;
mod malformed;

use tflite::{Field, ModelSpec, OpSpec, TensorSpec, CONV_2D, CONV_OPTIONS, VALID};

/// The valid TFLite model the TFLite defects start from: x [1,H,W,1] conv
/// w [1,K,K,1] -> y (VALID padding, given strides).
fn tfl_conv(hw: i32, k: i32, stride: i32) -> ModelSpec {
    let w = vec![0.5; (k * k) as usize];
    let tensors = vec![
        TensorSpec::f32("x", &[1, hw, hw, 1]),
        TensorSpec::f32_const("w", &[1, k, k, 1], &w),
        TensorSpec::f32_const("b", &[1], &[0.0]),
        TensorSpec::f32("y", &[1, 1, 1, 1]),
    ];
    let conv = OpSpec::new(CONV_2D, &[0, 1, 2], &[3]).options(
        CONV_OPTIONS,
        &[
            (0, Field::I8(VALID)),
            (1, Field::I32(stride)),
            (2, Field::I32(stride)),
        ],
    );
    ModelSpec::new(tensors, vec![conv], &[0], &[3])
}
