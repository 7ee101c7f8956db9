//! The native runtime behind `run`, `bench` and `compare --measure`: compile the
//! planned graph, run it, time it.

use layoutopt::api::json::{document, BenchDoc, Execution, Timing};
use layoutopt::graph::{format_spans, Graph, Tensor};
use layoutopt::layout::report::PlanReport;
use layoutopt::runtime::bench::bench;
use layoutopt::runtime::conv_algo::ConvAlgoChoice;
use layoutopt::runtime::roofline::{cache_dir, machine_peaks};
use layoutopt::runtime::simd::Isa;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::time::Instant;

type CliResult<T> = Result<T, Box<dyn std::error::Error>>;

/// How the kernels are chosen: each convolution's algorithm (`--conv-algo`)
/// and the instruction set (`--isa`).
#[derive(Default, clap::Args, Clone)]
pub struct KernelArgs {
    /// Convolution algorithm: auto (per layer the fastest of direct and each
    /// accurate Winograd size, measured at compile time and cached per CPU),
    /// direct, or winograd (F(4x4,3x3) where accurate enough, else F(2x2,3x3),
    /// on 3x3 stride-1 convolutions).
    #[arg(long = "conv-algo", value_name = "ALGO", default_value = "auto", value_parser = str::parse::<ConvAlgoChoice>)]
    pub conv_algo: ConvAlgoChoice,
    /// Instruction set of the hand-written kernels: avx512, avx2 or portable
    /// (default: the widest this CPU has), to compare or check the narrower paths.
    #[arg(long, value_name = "ISA", value_parser = str::parse::<Isa>)]
    pub isa: Option<Isa>,
}

impl KernelArgs {
    /// The runtime options for `threads` worker threads, measurements cached
    /// beside the roofline peaks.
    pub fn options(&self, threads: usize) -> RuntimeOptions {
        let mut options = RuntimeOptions::with_threads(threads);
        options.conv_algo.choice = self.conv_algo;
        options.isa = self.isa;
        options
    }
}

/// Options of `layoutopt bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Worker threads (0: one per core; at most 4 per core).
    #[arg(long, default_value_t = 0, value_parser = super::parse_threads)]
    pub threads: usize,
    /// Timed runs (1 to 1,000,000).
    #[arg(long, alias = "iterations", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub runs: u64,
    /// Untimed runs first (at most 1,000,000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub warmup: u64,
    /// Also print the time of every step (fused kernel or fallback), its GB/s
    /// and GFLOP/s, and how close it comes to this machine's roofline.
    #[arg(long)]
    pub profile: bool,
    /// Measure the machine's peaks for the profile again instead of reading
    /// them from the cache.
    #[arg(long, requires = "profile")]
    pub reprobe: bool,
    /// Seed of the random inputs (when the model has no test data).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub kernels: KernelArgs,
}

/// Compiles the planned graph, warning on stderr about every step that falls
/// back to the (slow) reference executor.
pub fn compile(g: &Graph, options: &RuntimeOptions) -> CliResult<CompiledModel> {
    let model = CompiledModel::compile(g, options)?;
    let fallbacks = model.fallback_steps();
    if !fallbacks.is_empty() {
        let named: Vec<String> = fallbacks
            .iter()
            .map(|(name, kind, spans)| format!("'{name}' ({kind}; {})", format_spans(spans)))
            .collect();
        eprintln!(
            "warning: {} of {} steps run on the reference executor, without a native kernel: {}",
            fallbacks.len(),
            model.describe().len(),
            named.join(", ")
        );
    }
    Ok(model)
}

/// Compiles the planned graph and runs it once; returns the outputs and how
/// compiling and running went. With `check_finite`, every step's output is
/// looked at for NaN or an infinity.
pub fn run_native(
    g: &Graph,
    inputs: &[Tensor],
    options: &RuntimeOptions,
    check_finite: bool,
) -> CliResult<(Vec<Tensor>, Execution)> {
    let t0 = Instant::now();
    let model = compile(g, options)?;
    let compile = t0.elapsed();
    let t1 = Instant::now();
    let (outputs, found) = match check_finite {
        true => model.run_checked(inputs)?,
        false => (model.run(inputs)?, None),
    };
    let run = t1.elapsed();
    let execution = Execution {
        compile_ms: compile.as_secs_f64() * 1e3,
        run_ms: run.as_secs_f64() * 1e3,
        isa: model.isa().to_string(),
        threads: model.threads(),
        arena_bytes: model.arena_bytes(),
        fallback_steps: model
            .fallback_steps()
            .into_iter()
            .map(|(n, _, _)| n)
            .collect(),
        first_non_finite: found.map(Into::into),
    };
    Ok((outputs, execution))
}

/// The lines `run` prints about compiling and running.
pub fn execution_text(e: &Execution, check_finite: bool) -> String {
    let mut line = format!(
        "compiled in {:.1} ms ({} kernels, {:.1} MB arena), ran in {:.2} ms (native runtime)",
        e.compile_ms,
        e.isa,
        e.arena_bytes as f64 / 1e6,
        e.run_ms
    );
    match &e.first_non_finite {
        Some(f) => line.push_str(&format!(
            "\ncheck-finite: the first step with NaN or infinite output is '{}' ({}; {}): {} NaN, {} +inf, {} -inf of {} elements",
            f.step,
            f.kind,
            format_spans(&f.spans),
            f.nan,
            f.pos_inf,
            f.neg_inf,
            f.elements
        )),
        None if check_finite => line.push_str("\ncheck-finite: every step's output is finite"),
        None => {}
    }
    line
}

/// `layoutopt bench`: compile, then print latency percentiles (and the
/// profile), as text or as the `bench` document.
pub fn bench_native(
    g: &Graph,
    inputs: &[Tensor],
    args: &BenchArgs,
    json: Option<(&std::path::Path, &PlanReport)>,
) -> CliResult<()> {
    let t0 = Instant::now();
    let model = compile(g, &args.kernels.options(args.threads))?;
    let compile = t0.elapsed();
    if json.is_none() {
        println!(
            "compiled in {:.1} ms ({} kernels, {} threads, {:.1} MB arena)",
            compile.as_secs_f64() * 1e3,
            model.isa(),
            model.threads(),
            model.arena_bytes() as f64 / 1e6
        );
    }
    let roofline = match args.profile {
        true => Some(machine_peaks(
            model.threads(),
            cache_dir().as_deref(),
            args.reprobe,
        )?),
        false => None,
    };
    let report = bench(
        &model,
        inputs,
        args.warmup as usize,
        args.runs as usize,
        roofline,
    )?;
    match json {
        Some((path, plan)) => {
            let timing = Timing::of(&report, compile, model.threads(), args.warmup as usize);
            let doc = BenchDoc::of(plan, &model, &report, timing);
            println!("{}", document("bench", path, &doc));
        }
        None => print!("{report}"),
    }
    Ok(())
}

/// `calibrate`: with `clear`, forgets every cached measurement (peaks and
/// kernel times, which are then measured again as models are planned and
/// compiled); then probes this machine's peaks on `threads` threads again.
pub fn calibrate(threads: usize, clear: bool, json: bool) -> CliResult<()> {
    if json {
        return Err("calibrate prints text only: leave out --json".into());
    }
    let dir = cache_dir().ok_or("no cache folder: neither XDG_CACHE_HOME nor HOME is set")?;
    if clear {
        let removed = layoutopt::runtime::calibrate::clear_calibration(&dir)
            .map_err(|e| format!("cannot clear the cache in {}: {e}", dir.display()))?;
        for path in &removed {
            outln!("removed {}", path.display())?;
        }
        if removed.is_empty() {
            outln!("nothing cached in {}", dir.display())?;
        }
    }
    outln!("{}", machine_peaks(threads, Some(&dir), true)?)?;
    Ok(())
}
