//! The layoutopt command line: a thin layer over the library's stages.

mod cli_run;

use clap::{Parser, Subcommand};
use layoutopt::frontend::onnx::{load_onnx, load_tensor_pb, ImportOptions};
use layoutopt::frontend::tflite::load_tflite;
use layoutopt::graph::{format_spans, Graph, Op, Tensor, TensorData};
use layoutopt::layout::op_rules::{CostModel, Family};
use layoutopt::layout::plan::{plan, planner_by_name, Plan};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "layoutopt",
    version,
    about = "Graph-level layout planning for neural-network models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import a model and print its ops, shapes and spans.
    Inspect {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
    },
    /// Plan the layout of every tensor and print the plan report.
    Plan {
        /// The model file (.onnx).
        model: PathBuf,
        #[command(flatten)]
        planning: Planning,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Plan with every planner and compare them side by side.
    Compare {
        /// The model file (.onnx).
        model: PathBuf,
        /// Target layout family: nchw, nhwc, nchwc (block from this CPU) or nchw<x>c.
        #[arg(long, default_value = "nchwc")]
        target: String,
    },
    /// Import a model, plan it, run it, and print a summary of its outputs.
    ///
    /// The inputs come from `--input` files, else from the model's
    /// `test_data_set_0/` folder when there is one (its recorded outputs are then
    /// compared), else from a seeded random generator.
    Run {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        /// Input tensors as serialized ONNX TensorProto (.pb), one per graph input.
        #[arg(long = "input")]
        inputs: Vec<PathBuf>,
        /// Seed for random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        planning: Planning,
        /// Worker threads of the native runtime (0: one per core).
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
    /// Plan and compile a model, then time it: latency percentiles, and with
    /// `--profile` the time of every step.
    Bench {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        #[command(flatten)]
        planning: Planning,
        #[command(flatten)]
        bench: cli_run::BenchArgs,
    },
}

#[derive(clap::Args)]
struct Planning {
    /// Planner: keep, local, greedy or global.
    #[arg(long, default_value = "global")]
    planner: String,
    /// Target layout family: nchw, nhwc, nchwc (block from this CPU) or nchw<x>c.
    #[arg(long, default_value = "nchwc")]
    target: String,
}

impl Planning {
    fn plan(&self, g: &Graph) -> Result<Plan, Box<dyn std::error::Error>> {
        let planner = planner_by_name(&self.planner)?;
        let family = Family::parse(&self.target)?;
        Ok(plan(g, planner.as_ref(), family, &CostModel::default())?)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { model } => inspect(&model),
        Command::Plan {
            model,
            planning,
            json,
        } => plan_cmd(&model, &planning, json),
        Command::Compare { model, target } => compare(&model, &target),
        Command::Run {
            model,
            inputs,
            seed,
            planning,
            threads,
        } => run(&model, &inputs, seed, &planning, threads),
        Command::Bench {
            model,
            planning,
            bench,
        } => bench_cmd(&model, &planning, &bench),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type CliResult = Result<(), Box<dyn std::error::Error>>;

fn load(model: &Path) -> Result<Graph, Box<dyn std::error::Error>> {
    if model.extension().is_some_and(|e| e == "tflite") {
        return Ok(load_tflite(model)?);
    }
    Ok(load_onnx(model, &ImportOptions::default())?)
}

fn inspect(model: &Path) -> CliResult {
    let g = load(model)?;
    println!("graph '{}': {} nodes", g.name, g.node_count());
    for id in g.topo_order()? {
        let n = g.node(id);
        if matches!(n.op, Op::Constant(_)) {
            continue;
        }
        let outs: Vec<String> = n
            .outputs
            .iter()
            .map(|v| format!("{} {}", v.name, v.ty))
            .collect();
        println!(
            "  {:<20} {:<40} <- {}",
            n.op.kind_name(),
            outs.join(", "),
            format_spans(&n.spans)
        );
    }
    Ok(())
}

/// Reference tensors stored beside a model in ONNX test-data layout.
fn test_data(model: &Path, prefix: &str) -> Vec<PathBuf> {
    let dir = model.with_file_name("test_data_set_0");
    (0..)
        .map(|i| dir.join(format!("{prefix}_{i}.pb")))
        .take_while(|p| p.exists())
        .collect()
}

/// A reproducible pseudo-random tensor (splitmix64, uniform in [-1, 1)).
fn random_tensor(shape: &[usize], dtype: layoutopt::graph::DType, seed: u64) -> Tensor {
    let mut state = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let n = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect();
    Tensor::new(shape.to_vec(), TensorData::from_f64(dtype, vals))
}

fn plan_cmd(model: &Path, planning: &Planning, json: bool) -> CliResult {
    let g = load(model)?;
    let p = planning.plan(&g)?;
    if json {
        println!("{}", p.report.to_json());
    } else {
        print!("{}", p.report.to_text());
    }
    Ok(())
}

fn compare(model: &Path, target: &str) -> CliResult {
    let g = load(model)?;
    let family = Family::parse(target)?;
    println!(
        "{:<8} {:>10} {:>14} {:>16} {:>12} {:>10}",
        "planner", "transforms", "bytes moved", "est. cost (us)", "plan (ms)", "gap"
    );
    for name in ["keep", "local", "greedy", "global"] {
        let planner = planner_by_name(name)?;
        let p = plan(&g, planner.as_ref(), family, &CostModel::default())?;
        let r = &p.report;
        let gap = r
            .solver
            .as_ref()
            .map_or("-".to_string(), |s| format!("{:.2}%", s.gap * 100.0));
        println!(
            "{:<8} {:>10} {:>14} {:>16.1} {:>12.1} {:>10}",
            name,
            r.transform_count,
            r.transform_bytes,
            r.estimated_cost / 1e3,
            r.plan_time_ms,
            gap
        );
    }
    Ok(())
}

fn run(
    model: &Path,
    input_files: &[PathBuf],
    seed: u64,
    planning: &Planning,
    threads: usize,
) -> CliResult {
    let t0 = Instant::now();
    let source = load(model)?;
    let import_time = t0.elapsed();
    let t_plan = Instant::now();
    let planned = planning.plan(&source)?;
    let plan_time = t_plan.elapsed();
    let g = planned.graph;
    let recorded = input_files.is_empty() && !test_data(model, "input").is_empty();
    let files = if recorded {
        test_data(model, "input")
    } else {
        input_files.to_vec()
    };
    let inputs = model_inputs(&g, &files, seed)?;
    let (outputs, ran) = cli_run::run_native(&g, &inputs, threads)?;
    println!(
        "{}: {} nodes, imported in {:.1} ms, planned ('{}', {}) in {:.1} ms: {} transforms kept; {ran}",
        model.display(),
        g.node_count(),
        import_time.as_secs_f64() * 1e3,
        planned.report.planner,
        planned.report.family,
        plan_time.as_secs_f64() * 1e3,
        planned.report.transform_count,
    );
    let expected: Vec<Tensor> = if recorded {
        test_data(model, "output")
            .iter()
            .map(|p| load_tensor_pb(p).map(|(_, t)| t))
            .collect::<Result<_, _>>()?
    } else {
        vec![]
    };
    for (i, (out, v)) in outputs.iter().zip(g.outputs()).enumerate() {
        let vals = out.data.to_f64();
        let (min, max) = vals
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            });
        let mean = vals.iter().sum::<f64>() / vals.len().max(1) as f64;
        let head: Vec<String> = vals.iter().take(5).map(|x| format!("{x:.5}")).collect();
        println!(
            "output '{}' {}{:?}: min {min:.5} max {max:.5} mean {mean:.5} [{}{}]",
            g.value(*v).name,
            out.dtype(),
            out.shape,
            head.join(", "),
            if vals.len() > 5 { ", ..." } else { "" }
        );
        if let Some(exp) = expected.get(i) {
            let err = exp
                .data
                .to_f64()
                .iter()
                .zip(&vals)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            println!("  max abs error vs recorded output: {err:.3e}");
        }
    }
    Ok(())
}

fn bench_cmd(model: &Path, planning: &Planning, args: &cli_run::BenchArgs) -> CliResult {
    let g = planning.plan(&load(model)?)?.graph;
    let files = test_data(model, "input");
    let inputs = model_inputs(&g, &files, args.seed)?;
    cli_run::bench_native(&g, &inputs, args)
}

/// The graph inputs from .pb files, or seeded random ones when there are none.
fn model_inputs(
    g: &Graph,
    files: &[PathBuf],
    seed: u64,
) -> Result<Vec<Tensor>, Box<dyn std::error::Error>> {
    if files.is_empty() {
        return Ok(g
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let ty = &g.node(id).outputs[0].ty;
                random_tensor(&ty.shape, ty.dtype, seed + i as u64)
            })
            .collect());
    }
    Ok(files
        .iter()
        .map(|p| load_tensor_pb(p).map(|(_, t)| t))
        .collect::<Result<_, _>>()?)
}
