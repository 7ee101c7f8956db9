//! Graphs of any length: long elementwise chains (Relu, Add with a constant),
//! conv/add chains and a 20k-input Max import, plan, compile and run in
//! seconds, with memory that grows linearly, and match the reference
//! executor. Each case runs in a child process (this test binary again, or the
//! command line), whose peak RSS comes from `wait4`.

mod common;

use common::{measure, model, model_bytes, node, scratch_dir, value_info, Child};
use layoutopt::api::{self, PlanLayouts, Planner, Target};
use layoutopt::graph::{DType, Tensor};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use onnx_protobuf::NodeProto;
use std::path::Path;
use std::process::Command;

const FLOAT: i32 = 1;
/// The environment variable that makes `child` run one case.
const CASE_ENV: &str = "LAYOUTOPT_SCALING_CASE";

/// An ONNX model of `n` nodes of one kind (see the arms).
fn chain_model(kind: &str, n: usize) -> Vec<u8> {
    let mut nodes: Vec<NodeProto> = vec![];
    let mut inits = vec![];
    let mut shape = vec![1i64, 8];
    let mut prev = "x".to_string();
    match kind {
        // x -> Relu -> Relu -> ...
        "relu" => {
            for i in 0..n {
                let out = format!("v{i}");
                nodes.push(node("Relu", &out, &[&prev], &[&out]));
                prev = out;
            }
        }
        // x + c + c + ... (one operand from outside the chain per node)
        "add" => {
            inits.push(("c", Tensor::from_f32(vec![1, 8], vec![0.001; 8])));
            for i in 0..n {
                let out = format!("v{i}");
                let op = if i % 2 == 0 { "Add" } else { "Mul" };
                nodes.push(node(op, &out, &[&prev, "c"], &[&out]));
                prev = out;
            }
        }
        // y = x + conv(x), repeated: a residual chain of conv and add.
        "convadd" => {
            shape = vec![1, 8, 4, 4];
            let w: Vec<f32> = (0..64)
                .map(|k| ((k * 7 % 13) as f32 - 6.0) * 0.02)
                .collect();
            inits.push(("w", Tensor::from_f32(vec![8, 8, 1, 1], w)));
            for i in 0..n / 2 {
                let (c, out) = (format!("c{i}"), format!("v{i}"));
                nodes.push(node("Conv", &c, &[&prev, "w"], &[&c]));
                nodes.push(node("Add", &out, &[&c, &prev], &[&out]));
                prev = out;
            }
        }
        // Max of n Relus of x: one node of n inputs.
        "max" => {
            let names: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
            for r in &names {
                nodes.push(node("Relu", r, &["x"], &[r]));
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            nodes.push(node("Max", "max", &refs, &["y"]));
            prev = "y".into();
        }
        _ => panic!("no model kind {kind}"),
    }
    let m = model(
        nodes,
        vec![value_info("x", FLOAT, &shape)],
        vec![value_info(&prev, FLOAT, &shape)],
        inits,
        13,
    );
    model_bytes(&m)
}

/// Runs case `kind:n` in a child copy of this test binary.
fn run_case(kind: &str, n: usize) -> Child {
    let dir = scratch_dir(&format!("scaling_{kind}_{n}"));
    let path = dir.join("model.onnx");
    std::fs::write(&path, chain_model(kind, n)).unwrap();
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE_ENV, &path);
    let c = measure(command);
    assert!(c.ok, "{kind} x{n} failed:\n{}\n{}", c.stdout, c.stderr);
    assert!(
        c.stdout.contains("matches the reference"),
        "{kind} x{n}:\n{}",
        c.stdout
    );
    let peak_kb = c
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("peak "))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("the child reports its peak");
    let c = Child { peak_kb, ..c };
    eprintln!(
        "{kind} x{n}: {:.2} s, peak {} MB",
        c.seconds,
        c.peak_kb / 1024
    );
    c
}

/// The work of one child: import, plan, compile and run the model, and compare
/// with the reference executor.
fn pipeline(path: &Path) {
    let g = api::load_model(path).expect("imports");
    let plan = PlanLayouts::new(Planner::Global, Target::host_blocked())
        .plan(&g)
        .expect("plans");
    let model = CompiledModel::compile(
        &plan.graph,
        &RuntimeOptions {
            threads: 1,
            ..Default::default()
        },
    )
    .expect("compiles");
    let ty = g.value_type(layoutopt::graph::ValueRef::new(g.inputs()[0], 0));
    let n = ty.numel();
    let x = Tensor::from_f32(
        ty.shape.clone(),
        (0..n)
            .map(|k| ((k * 37 % 17) as f32 - 8.0) * 0.25)
            .collect(),
    );
    let got = model.run(std::slice::from_ref(&x)).expect("runs");
    let want = layoutopt::reference::run(&g, &[x]).expect("the reference runs");
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        assert_eq!(a.dtype(), DType::F32);
        assert_eq!(a.shape, b.shape);
        for (p, q) in a.f32s().iter().zip(b.f32s().iter()) {
            assert!(
                (p - q).abs() <= 1e-4 * (1.0 + q.abs()) || (p.is_nan() && q.is_nan()),
                "{p} vs {q}"
            );
        }
    }
    println!("matches the reference");
    // The peak of this process since its exec (wait4's figure also counts the
    // parent's pages at the fork).
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap();
    println!("peak {}", hwm.trim());
}

/// The child's entry point: does nothing unless a case is given.
#[test]
fn child() {
    if let Ok(path) = std::env::var(CASE_ENV) {
        pipeline(Path::new(&path));
    }
}

/// Compiling a chain costs time and memory linear in its length: four times
/// the nodes take well under sixteen times the memory (what a quadratic
/// compiler took: 1,000 Relus needed 1.6 GB, 5,000 more than 24 GB).
#[test]
fn long_relu_chains_grow_linearly() {
    let small = run_case("relu", 5_000);
    let big = run_case("relu", 20_000);
    assert!(
        big.peak_kb < 6 * small.peak_kb,
        "5k nodes peak {} kB, 20k nodes {} kB",
        small.peak_kb,
        big.peak_kb
    );
    assert!(big.peak_kb < 256 << 10, "{} kB", big.peak_kb);
}

/// 100,000 Relus import, plan, compile and run in seconds.
#[test]
fn a_chain_of_100k_relus_runs_in_seconds() {
    let c = run_case("relu", 100_000);
    assert!(c.seconds < 60.0, "{:.1} s", c.seconds);
    assert!(c.peak_kb < 1 << 20, "{} kB", c.peak_kb);
}

/// Binary chains with an operand from outside the chain per node (which a
/// single fused loop nest of the whole chain made quadratic: 500 Adds took
/// 10 s), and conv/add residual chains.
#[test]
fn add_and_conv_chains_of_20k_nodes_run() {
    for kind in ["add", "convadd"] {
        let c = run_case(kind, 20_000);
        assert!(c.seconds < 60.0, "{kind}: {:.1} s", c.seconds);
        assert!(c.peak_kb < 512 << 10, "{kind}: {} kB", c.peak_kb);
    }
}

/// A Max of 20,000 inputs (a chain of 20,000 binary maxima) is handled.
#[test]
fn a_max_of_20k_inputs_runs() {
    let c = run_case("max", 20_000);
    assert!(c.seconds < 60.0, "{:.1} s", c.seconds);
    assert!(c.peak_kb < 512 << 10, "{} kB", c.peak_kb);
}
