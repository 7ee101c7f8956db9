//! The layoutopt command line: argument parsing and exit codes. The commands
//! live in `cli/`, one module per command group.
//!
//! Exit codes: 0 success, 1 an error from a model or a stage (printed on
//! stderr), 2 a usage error (clap's convention).

mod cli;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Large buffers (decoded weights, packed kernels, measured kernels' outputs)
/// on huge pages: fewer page faults in import, plan and compile.
#[global_allocator]
static ALLOCATOR: layoutopt::api::HugePageAdvice = layoutopt::api::HugePageAdvice;

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
    Inspect(cli::inspect::InspectArgs),
    /// Plan the layout of every tensor and print the plan report.
    Plan(cli::plan::PlanArgs),
    /// Plan with every planner and compare them side by side.
    Compare(cli::plan::CompareArgs),
    /// Import a model, plan it, run it, and print a summary of its outputs.
    ///
    /// The inputs come from `--input` files, else from the model's
    /// `test_data_set_0/` folder when there is one (its recorded outputs are then
    /// compared), else from a seeded random generator.
    Run(cli::run::RunArgs),
    /// Compile the planned model and time repeated runs: latency percentiles,
    /// and with --profile the time of every kernel against this machine's roofline.
    Bench(cli::run::BenchArgs),
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
    Export(cli::export::ExportArgs),
    /// Measure this machine's peaks again, and with --clear forget every
    /// cached measurement (peaks and kernel times) first.
    ///
    /// Measurements are cached in $XDG_CACHE_HOME/layoutopt (else
    /// ~/.cache/layoutopt). Those taken while other processes kept the cores
    /// busy are never cached; clear the cache to measure again what was
    /// cached before that guard existed, or after the machine changed.
    Calibrate(cli::native::CalibrateArgs),
    /// Write a self-contained HTML explorer of two plans of a model.
    ///
    /// The graph is drawn with every tensor's layout and the kept transforms
    /// highlighted; it zooms, pans, searches nodes and collapses regions of
    /// nodes whose source layer names share a prefix; clicking a node shows its
    /// source spans, its lowered loop nest and its schedule record step by step.
    Explore(cli::export::ExploreArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.memory_limit {
        Some(bytes) => layoutopt::api::set_memory_limit(bytes),
        None => {
            if let Err(e) = cli::memory_limit_from_env() {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let json = cli.json;
    // The one machine context of the process: every command that measures,
    // compiles or runs takes its pools, peaks and kernel times from it.
    let machine = layoutopt::api::Machine::shared();
    let result = match &cli.command {
        Command::Inspect(args) => cli::inspect::inspect(args, json),
        Command::Plan(args) => cli::plan::plan(machine, args, json),
        Command::Compare(args) => cli::plan::compare(machine, args, json),
        Command::Run(args) => cli::run::run(machine, args, json),
        Command::Bench(args) => cli::run::bench(machine, args, json),
        Command::Export(args) => cli::export::export(machine, args, json),
        Command::Calibrate(args) => cli::native::calibrate(machine, args, json),
        Command::Explore(args) => cli::export::explore(machine, args, json),
    };
    if let Some(note) = layoutopt::api::measured_under_load_note() {
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
