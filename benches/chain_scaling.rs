//! Time and peak memory of the whole pipeline (import, plan, compile, run) on
//! long chains of 1k, 10k and 100k nodes: Relu chains on f32[1,8], Add/Mul
//! chains with a constant operand per node, conv/add residual chains on
//! f32[1,8,4,4], and a Max of n inputs. Each size runs in a child process, so
//! its peak RSS (`VmHWM`) is its own. Run with
//! `cargo bench --bench chain_scaling` (add `-- --quick` to stop at 10k).
//! Prints one table; linear growth is the goal (10x the nodes, about 10x the
//! time and memory).

use layoutopt::api::{self, PlanLayouts, Planner, Target};
use layoutopt::frontend::onnx::tensor_to_proto;
use layoutopt::graph::{Tensor, ValueRef};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use onnx_protobuf::{
    tensor_shape_proto, type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use protobuf::Message;
use std::process::Command;
use std::time::Instant;

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for &d in dims {
        let mut dim = tensor_shape_proto::Dimension::new();
        dim.value = Some(tensor_shape_proto::dimension::Value::DimValue(d));
        shape.dim.push(dim);
    }
    let mut tt = type_proto::Tensor::new();
    tt.elem_type = 1;
    tt.shape = Some(shape).into();
    let mut tp = TypeProto::new();
    tp.value = Some(type_proto::Value::TensorType(tt));
    let mut vi = ValueInfoProto::new();
    vi.name = name.to_string();
    vi.type_ = Some(tp).into();
    vi
}

fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.to_string();
    n.name = output.to_string();
    n.input = inputs.iter().map(|s| s.to_string()).collect();
    n.output = vec![output.to_string()];
    n
}

/// The ONNX model of `n` nodes of one kind.
fn chain(kind: &str, n: usize) -> Vec<u8> {
    let mut g = GraphProto::new();
    let mut shape = vec![1i64, 8];
    let mut prev = "x".to_string();
    match kind {
        "relu" => {
            for i in 0..n {
                let out = format!("v{i}");
                g.node.push(node("Relu", &[&prev], &out));
                prev = out;
            }
        }
        "add/mul" => {
            let c = Tensor::from_f32(vec![1, 8], vec![0.001; 8]);
            g.initializer.push(tensor_to_proto("c", &c));
            for i in 0..n {
                let out = format!("v{i}");
                let op = if i % 2 == 0 { "Add" } else { "Mul" };
                g.node.push(node(op, &[&prev, "c"], &out));
                prev = out;
            }
        }
        "conv/add" => {
            shape = vec![1, 8, 4, 4];
            let w = Tensor::from_f32(vec![8, 8, 1, 1], vec![0.01; 64]);
            g.initializer.push(tensor_to_proto("w", &w));
            for i in 0..n / 2 {
                let (c, out) = (format!("c{i}"), format!("v{i}"));
                g.node.push(node("Conv", &[&prev, "w"], &c));
                g.node.push(node("Add", &[&c, &prev], &out));
                prev = out;
            }
        }
        "max" => {
            let names: Vec<String> = (0..n - 1).map(|i| format!("r{i}")).collect();
            for r in &names {
                g.node.push(node("Relu", &["x"], r));
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            g.node.push(node("Max", &refs, "y"));
            prev = "y".into();
        }
        _ => panic!("no kind {kind}"),
    }
    g.name = "chain".into();
    g.input.push(value_info("x", &shape));
    g.output.push(value_info(&prev, &shape));
    let mut m = ModelProto::new();
    m.ir_version = 8;
    let mut op = OperatorSetIdProto::new();
    op.version = 13;
    m.opset_import.push(op);
    m.graph = Some(g).into();
    m.write_to_bytes().expect("encodes")
}

/// This process's peak RSS in kB.
fn peak_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// One measurement, in the child: prints the seconds of each stage and the peak.
fn child(kind: &str, n: usize) {
    let dir = std::env::temp_dir().join(format!("layoutopt_chain_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.onnx");
    std::fs::write(&path, chain(kind, n)).unwrap();
    let base = peak_kb();
    let t = Instant::now();
    let g = api::load_model(&path).expect("imports");
    let import = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let plan = PlanLayouts::new(Planner::Global, Target::host_blocked())
        .plan(&g)
        .expect("plans");
    let planning = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let model = CompiledModel::compile(
        &plan.graph,
        &RuntimeOptions {
            threads: 1,
            ..Default::default()
        },
    )
    .expect("compiles");
    let compile = t.elapsed().as_secs_f64();
    let ty = g.value_type(ValueRef::new(g.inputs()[0], 0)).clone();
    let x = Tensor::from_f32(ty.shape.clone(), vec![0.5; ty.numel()]);
    let t = Instant::now();
    model.run(&[x]).expect("runs");
    let run = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{import:.3} {planning:.3} {compile:.3} {run:.4} {} {base}",
        peak_kb()
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
    for kind in ["relu", "add/mul", "conv/add", "max"] {
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
