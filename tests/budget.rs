//! The memory budget (`--memory-limit`, `LAYOUTOPT_MEMORY_LIMIT`) holds for
//! every stage: models whose values, folds or run would pass it are refused
//! before allocating, naming the layer and the bytes, and a model under it
//! runs within it. Each case runs the command line in a child process whose
//! peak RSS comes from `wait4` (this test binary stays small, so the pages
//! the child shares with it until its exec do not count for much).

// This binary uses a part of these shared helpers (the integration binary
// uses all of them).
#[allow(dead_code)]
#[path = "support/onnx.rs"]
mod onnx;
#[allow(dead_code)]
#[path = "support/process.rs"]
mod process;

use crate::onnx::{model, model_bytes, node, value_info};
use crate::process::{measure, scratch_dir, Child};
use layoutopt::graph::{DType, Tensor};
use std::path::Path;
use std::process::Command;

const FLOAT: i32 = 1;

fn cli(dir: &Path, model_bytes: Vec<u8>, args: &[&str]) -> Child {
    let path = dir.join("model.onnx");
    std::fs::write(&path, model_bytes).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_layoutopt"));
    command.args(args).arg(&path);
    let c = measure(command);
    assert!(
        c.seconds < 60.0,
        "{args:?} took {:.1} s:\n{}",
        c.seconds,
        c.stdout
    );
    c
}

/// Runs `model_bytes` under `--memory-limit {limit_mb}M` and asserts it ran
/// and peaked under the limit and the program's own size (64 MiB).
fn runs_under(dir: &Path, model_bytes: Vec<u8>, limit_mb: u64) {
    let limit = format!("{limit_mb}M");
    let c = cli(dir, model_bytes, &["--memory-limit", &limit, "run"]);
    assert!(c.ok, "{}", c.stderr);
    assert!(c.peak_kb < (limit_mb + 64) << 10, "{} kB", c.peak_kb);
}

/// Runs `model_bytes` under `--memory-limit {limit}` and asserts it was
/// refused with an error naming each of `needles`, before allocating
/// (its peak under 64 MiB).
fn refused_under(dir: &Path, model_bytes: Vec<u8>, limit: &str, needles: &[&str]) {
    let c = cli(dir, model_bytes, &["--memory-limit", limit, "run"]);
    assert!(!c.ok);
    for n in needles {
        assert!(c.stderr.contains(n), "{n:?} not in {}", c.stderr);
    }
    assert!(c.peak_kb < 64 << 10, "{} kB", c.peak_kb);
}

fn int64s(v: &[i64]) -> Tensor {
    Tensor::new(
        vec![v.len()],
        layoutopt::graph::TensorData::from_f64(DType::I64, v.iter().map(|&x| x as f64).collect()),
    )
}

/// x f32[1,1000] padded to f32[1, 1000 + pad] (the output).
fn pad_model(pad: i64) -> Vec<u8> {
    let m = model(
        vec![node("Pad", "big_pad", &["x", "pads"], &["y"])],
        vec![value_info("x", FLOAT, &[1, 1000])],
        vec![value_info("y", FLOAT, &[1, 1000 + pad])],
        vec![("pads", int64s(&[0, 0, 0, pad]))],
        13,
    );
    model_bytes(&m)
}

/// A ConstantOfShape of `n` floats followed by `adds` Adds of a constant.
fn constant_of_shape_model(n: i64, adds: usize) -> Vec<u8> {
    let mut nodes = vec![node("ConstantOfShape", "fill", &["shape"], &["v0"])];
    for i in 0..adds {
        let (a, b) = (format!("v{i}"), format!("v{}", i + 1));
        nodes.push(node("Add", &format!("add{i}"), &[&a, "one"], &[&b]));
    }
    let m = model(
        nodes,
        vec![],
        vec![value_info(&format!("v{adds}"), FLOAT, &[n])],
        vec![
            ("shape", int64s(&[n])),
            ("one", Tensor::from_f32(vec![1], vec![1.0])),
        ],
        13,
    );
    model_bytes(&m)
}

/// A Pad whose output passes the limit is refused, naming the layer and
/// the bytes, before anything is allocated.
#[test]
fn a_pad_past_the_limit_is_refused_with_its_layer_and_bytes() {
    let dir = scratch_dir("budget_pad_refused");
    // 200 MB of output under a 64 MiB limit.
    let needles = ["big_pad", "200004000 bytes", "67108864 bytes"];
    refused_under(&dir, pad_model(50_000_000), "64M", &needles);
}

/// Under the limit, a run's peak stays near its values: a 100 MB output
/// with a limit of 110 MB peaks below the limit and the program's own size.
#[test]
fn a_pad_within_the_limit_runs_within_it() {
    let dir = scratch_dir("budget_pad_runs");
    runs_under(&dir, pad_model(25_000_000), 110);
}

/// A 40 MB ConstantOfShape and five Adds after it under a 64 MiB limit:
/// nothing is folded past the fold limit (an eighth of the budget), and
/// the model, which needs two 40 MB values at once, is refused.
#[test]
fn folds_stay_under_the_fold_limit_and_the_run_is_refused() {
    let dir = scratch_dir("budget_fold_chain");
    let model = || constant_of_shape_model(10_000_000, 5);
    refused_under(&dir, model(), "64M", &["memory limit of 67108864 bytes"]);
    // With room for it, the same model runs, the fill computed at run time.
    runs_under(&dir, model(), 200);
}

/// Three billion booleans are neither folded nor allocated.
#[test]
fn a_constant_of_shape_of_3e9_bools_is_refused() {
    let dir = scratch_dir("budget_bools");
    let mut fill = node("ConstantOfShape", "bools", &["shape"], &["y"]);
    let mut value = onnx_protobuf::AttributeProto::new();
    value.name = "value".into();
    value.type_ = onnx_protobuf::attribute_proto::AttributeType::TENSOR.into();
    let t = Tensor::new(
        vec![1],
        layoutopt::graph::TensorData::from_f64(DType::Bool, vec![1.0]),
    );
    value.t = Some(layoutopt::frontend::onnx::tensor_to_proto("v", &t)).into();
    fill.attribute.push(value);
    let m = model(
        vec![fill],
        vec![],
        vec![value_info("y", 9, &[3_000_000_000])],
        vec![("shape", int64s(&[3_000_000_000]))],
        13,
    );
    refused_under(&dir, model_bytes(&m), "1G", &["3000000000 bytes", "bools"]);
}

/// A limit that is not a byte count is a usage error.
#[test]
fn a_bad_limit_is_a_usage_error() {
    let dir = scratch_dir("budget_bad_limit");
    let c = cli(&dir, pad_model(10), &["--memory-limit", "lots", "run"]);
    assert!(
        !c.ok && c.stderr.contains("not a memory limit"),
        "{}",
        c.stderr
    );
}
