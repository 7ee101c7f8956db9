//! Graphs of any length: long elementwise chains (Relu, Add with a constant),
//! conv/add chains and a 20k-input Max import, plan, compile and run in
//! seconds, with memory that grows linearly, and match the reference
//! executor. Each case runs in a child process (this test binary again, or the
//! command line), whose peak RSS comes from `wait4`.

use crate::support::chains::{chain_model, compile_chain, plan_chain};
use crate::support::process::{measure, own_peak_kb, scratch_dir, test_in_child, Child};
use layoutopt::api;
use layoutopt::graph::{DType, Tensor};
use std::path::Path;

/// The environment variable that makes `child` run one case.
const CASE_ENV: &str = "LAYOUTOPT_SCALING_CASE";

/// Runs case `kind:n` in a child copy of this test binary.
fn run_case(kind: &str, n: usize) -> Child {
    let dir = scratch_dir(&format!("scaling_{kind}_{n}"));
    let path = dir.join("model.onnx");
    std::fs::write(&path, chain_model(kind, n)).unwrap();
    let mut command = test_in_child("scaling::child");
    command.env(CASE_ENV, &path);
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
    let model = compile_chain(&plan_chain(&g));
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
    println!("peak {} kB", own_peak_kb());
}

/// The child's entry point: does nothing unless a case is given.
#[test]
fn child() {
    if let Ok(path) = std::env::var(CASE_ENV) {
        pipeline(Path::new(&path));
    }
}

/// Runs case `kind:n` and asserts it took under a minute and under
/// `peak_limit_kb` of memory.
fn runs_within_a_minute(kind: &str, n: usize, peak_limit_kb: u64) {
    let c = run_case(kind, n);
    assert!(c.seconds < 60.0, "{kind} x{n}: {:.1} s", c.seconds);
    assert!(c.peak_kb < peak_limit_kb, "{kind} x{n}: {} kB", c.peak_kb);
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
    runs_within_a_minute("relu", 100_000, 1 << 20);
}

/// Binary chains with an operand from outside the chain per node (which a
/// single fused loop nest of the whole chain made quadratic: 500 Adds took
/// 10 s), and conv/add residual chains.
#[test]
fn add_and_conv_chains_of_20k_nodes_run() {
    for kind in ["add", "convadd"] {
        runs_within_a_minute(kind, 20_000, 512 << 10);
    }
}

/// A Max of 20,000 inputs (a chain of 20,000 binary maxima) is handled.
#[test]
fn a_max_of_20k_inputs_runs() {
    runs_within_a_minute("max", 20_000, 512 << 10);
}
