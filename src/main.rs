//! The layoutopt command line: argument parsing and exit codes. The commands
//! live in `cli/`, one module per command group.
//!
//! Exit codes: 0 success, 1 an error from a model or a stage (printed on
//! stderr), 2 a usage error (clap's convention).

mod cli;

use clap::{Parser, Subcommand};
use cli::Planning;
use layoutopt::api::{PlannerKind, TargetFamily};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "layoutopt",
    version,
    about = "Graph-level layout planning for neural-network models",
    after_help = "MODEL is an ONNX (.onnx) or TFLite (.tflite) file."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The memory budget of every stage (import, folding, planning, compilation,
    /// the run), in bytes or with a K/M/G/T suffix (e.g. 2G); a model that would
    /// need more is refused before allocating. Default: LAYOUTOPT_MEMORY_LIMIT,
    /// else half the machine's available memory.
    #[arg(long, global = true, value_name = "BYTES", value_parser = cli::parse_memory_limit)]
    memory_limit: Option<u64>,
    /// Print the result as one JSON document (schema in docs/json-schema.md)
    /// instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Import a model and print its ops, shapes, layouts and source spans.
    Inspect {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        #[command(flatten)]
        shapes: cli::InputShapes,
    },
    /// Plan the layout of every tensor and print the plan report.
    Plan {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        #[command(flatten)]
        shapes: cli::InputShapes,
        #[command(flatten)]
        planning: Planning,
        #[command(flatten)]
        kernels: cli::native::KernelArgs,
    },
    /// Plan with every planner and compare them side by side.
    Compare {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        #[command(flatten)]
        shapes: cli::InputShapes,
        /// Target layout family: nchw, nhwc, nchwc (block width from this CPU) or nchw<x>c.
        #[arg(long, default_value = "nchwc", value_parser = cli::parse_target)]
        target: TargetFamily,
        /// Folder of `*.rules` files to rewrite with instead of the built-in rules
        /// (also LAYOUTOPT_RULES).
        #[arg(long, value_name = "DIR")]
        rules: Option<PathBuf>,
        /// Also compile every plan (timed apart) and time 10 runs after 3
        /// untimed ones.
        #[arg(long)]
        measure: bool,
    },
    /// Import a model, plan it, run it, and print a summary of its outputs.
    ///
    /// The inputs come from `--input` files, else from the model's
    /// `test_data_set_0/` folder when there is one (its recorded outputs are then
    /// compared), else from a seeded random generator.
    Run {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        #[command(flatten)]
        shapes: cli::InputShapes,
        /// An input tensor as `NAME=FILE` (.npy or a serialized ONNX TensorProto
        /// .pb), one per graph input; a bare FILE only for a model with one input.
        /// A .npz archive gives every input it names (or, as NAME=FILE.npz, the
        /// array NAME or its only array).
        #[arg(long = "input", value_name = "NAME=FILE", value_parser = cli::run::parse_input)]
        inputs: Vec<cli::run::InputArg>,
        /// Write every output to DIR as `<output name>.npy`.
        #[arg(long = "output", value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// Seed for random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Worker threads (0: one per core; at most 4 per core).
        #[arg(long, default_value_t = 0, value_parser = cli::parse_threads)]
        threads: usize,
        /// Look at every step's output and name the first that holds NaN or an
        /// infinity, with its source layers.
        #[arg(long)]
        check_finite: bool,
        #[command(flatten)]
        planning: Planning,
        #[command(flatten)]
        kernels: cli::native::KernelArgs,
    },
    /// Compile the planned model and time repeated runs: latency percentiles,
    /// and with --profile the time of every kernel against this machine's roofline.
    Bench {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        #[command(flatten)]
        shapes: cli::InputShapes,
        #[command(flatten)]
        bench: cli::native::BenchArgs,
        #[command(flatten)]
        planning: Planning,
    },
    /// Write a model as standard ONNX: the plan, to verify it, or a model to run.
    ///
    /// `--for verification` (the default) writes the planned graph with its
    /// layout transforms as Transpose / Reshape / Pad / Slice nodes, so any ONNX
    /// runtime checks the plan against the source model's outputs; runtimes
    /// without blocked kernels run those nodes as extra work, so it runs slower
    /// there than the source model.
    ///
    /// `--for onnxruntime` writes a model to run in onnxruntime: the source's
    /// own layouts (onnxruntime's kernels take NCHW and block channels
    /// themselves), with layoutopt's graph simplifications: constants folded,
    /// batch norms and pads folded into convolutions, shape arithmetic gone.
    /// `--planner` and `--target` do not apply to it.
    Export {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        #[command(flatten)]
        shapes: cli::InputShapes,
        #[command(flatten)]
        output: cli::export::OutputFile,
        #[command(flatten)]
        planning: Planning,
        /// What the model is for.
        #[arg(long = "for", value_name = "PURPOSE", default_value = "verification",
              value_parser = cli::export::purpose_parser())]
        purpose: layoutopt::api::ExportFor,
    },
    /// Measure this machine's peaks again, and with --clear forget every
    /// cached measurement (peaks and kernel times) first.
    ///
    /// Measurements are cached in $XDG_CACHE_HOME/layoutopt (else
    /// ~/.cache/layoutopt). Those taken while other processes kept the cores
    /// busy are never cached; clear the cache to measure again what was
    /// cached before that guard existed, or after the machine changed.
    Calibrate {
        /// Worker threads of the peaks probe (0: one per core; at most 4 per core).
        #[arg(long, default_value_t = 0, value_parser = cli::parse_threads)]
        threads: usize,
        /// Remove the cached peaks and kernel times first.
        #[arg(long)]
        clear: bool,
    },
    /// Write a self-contained HTML explorer of two plans of a model.
    ///
    /// The graph is drawn with every tensor's layout and the kept transforms
    /// highlighted; it zooms, pans, searches nodes and collapses regions of
    /// nodes whose source layer names share a prefix; clicking a node shows its
    /// source spans, its lowered loop nest and its schedule record step by step.
    Explore {
        /// The model file (.onnx or .tflite).
        model: PathBuf,
        #[command(flatten)]
        shapes: cli::InputShapes,
        #[command(flatten)]
        output: cli::export::OutputFile,
        #[command(flatten)]
        planning: Planning,
        /// The planner shown beside `--planner`.
        #[arg(long, default_value = "local", value_parser = cli::planner_parser())]
        against: PlannerKind,
        #[command(flatten)]
        kernels: cli::native::KernelArgs,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.memory_limit {
        Some(bytes) => layoutopt::core::budget::set_limit(bytes),
        None => {
            if let Err(e) = cli::memory_limit_from_env() {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let json = cli.json;
    let result = match &cli.command {
        Command::Inspect { model, shapes } => cli::inspect::inspect(model, shapes, json),
        Command::Plan {
            model,
            shapes,
            planning,
            kernels,
        } => cli::plan::plan(model, shapes, planning, json, &kernels.options(0)),
        Command::Compare {
            model,
            shapes,
            target,
            rules,
            measure,
        } => {
            let planning = cli::Planning {
                planner: PlannerKind::Global,
                target: *target,
                rules: rules.clone(),
            };
            cli::plan::compare(model, shapes, &planning, *measure, json)
        }
        Command::Run {
            model,
            shapes,
            inputs,
            output_dir,
            seed,
            threads,
            check_finite,
            planning,
            kernels,
        } => cli::run::run(
            model,
            shapes,
            inputs,
            *seed,
            planning,
            (&kernels.options(*threads), *check_finite, json),
            output_dir.as_deref(),
        ),
        Command::Bench {
            model,
            shapes,
            bench,
            planning,
        } => cli::run::bench(model, shapes, planning, bench, json),
        Command::Export {
            model,
            shapes,
            output,
            planning,
            purpose,
        } => cli::export::export(model, shapes, output, (planning, *purpose), json),
        Command::Calibrate { threads, clear } => cli::native::calibrate(*threads, *clear, json),
        Command::Explore {
            model,
            shapes,
            output,
            planning,
            against,
            kernels,
        } => cli::export::explore(
            model,
            shapes,
            output,
            planning,
            (*against, json),
            &kernels.options(0),
        ),
    };
    if let Some(note) = layoutopt::runtime::load::not_cached_note() {
        eprintln!("note: {note}");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`| head`): nothing left to do.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
