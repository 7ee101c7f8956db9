//! Time and peak memory of the whole pipeline (import, plan, compile, run) on
//! long chains of 1k, 10k and 100k nodes, the scaling tests' chains: Relu
//! chains on f32[1,8], Add/Mul chains with a constant operand per node, conv/add
//! residual chains on f32[1,8,4,4], and a Max of n inputs. Each size runs in a child process, so
//! its peak RSS (`VmHWM`) is its own. Run with
//! `cargo bench --bench chain_scaling` (add `-- --quick` to stop at 10k).
//! Prints one table; linear growth is the goal (10x the nodes, about 10x the
//! time and memory).

// The chains and the pipeline options are the scaling tests' own.
#[path = "../tests/support/chains.rs"]
mod chains;
// The chains are built with a few of the ONNX builders and of the process helpers.
#[allow(dead_code)]
#[path = "../tests/support/onnx.rs"]
mod onnx;
#[allow(dead_code)]
#[path = "../tests/support/process.rs"]
mod process;

use chains::{chain_model, compile_chain, plan_chain};
use layoutopt::api;
use layoutopt::graph::{Tensor, ValueRef};
use process::own_peak_kb;
use std::process::Command;
use std::time::Instant;

/// The kinds of chain `chain_model` builds, each measured here.
const KINDS: [&str; 4] = ["relu", "add", "convadd", "max"];

/// One measurement, in the child: prints the seconds of each stage and the peak.
fn child(kind: &str, n: usize) {
    let dir = std::env::temp_dir().join(format!("layoutopt_chain_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.onnx");
    std::fs::write(&path, chain_model(kind, n)).unwrap();
    let base = own_peak_kb();
    let t = Instant::now();
    let g = api::load_model(&path).expect("imports");
    let import = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let plan = plan_chain(&g);
    let planning = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let model = compile_chain(&plan);
    let compile = t.elapsed().as_secs_f64();
    let ty = g.value_type(ValueRef::new(g.inputs()[0], 0)).clone();
    let x = Tensor::from_f32(ty.shape.clone(), vec![0.5; ty.numel()]);
    let t = Instant::now();
    model.run(&[x]).expect("runs");
    let run = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{import:.3} {planning:.3} {compile:.3} {run:.4} {} {base}",
        own_peak_kb()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(k) = args.iter().position(|a| a == "--child") {
        child(&args[k + 1], args[k + 2].parse().unwrap());
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let sizes: &[usize] = if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    println!(
        "{:<9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "graph", "nodes", "import s", "plan s", "compile", "run s", "total s", "peak MB"
    );
    let exe = std::env::current_exe().unwrap();
    for kind in KINDS {
        for &n in sizes {
            let out = Command::new(&exe)
                .args(["--child", kind, &n.to_string()])
                .output()
                .expect("the child runs");
            let text = String::from_utf8_lossy(&out.stdout);
            let f: Vec<f64> = text
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            let [import, planning, compile, run, peak, _base] = f[..] else {
                println!(
                    "{kind:<9} {n:>7} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                continue;
            };
            println!(
                "{kind:<9} {n:>7} {import:>8.3} {planning:>8.3} {compile:>8.3} {run:>8.4} {:>8.3} {:>9.1}",
                import + planning + compile + run,
                peak / 1024.0
            );
        }
    }
}
