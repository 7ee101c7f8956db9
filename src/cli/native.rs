//! The native runtime behind `run`, `bench` and `compare --measure`: compile the
//! planned graph, run it, time it.

use layoutopt::api::json::Execution;
use layoutopt::api::{
    self, format_spans, CompiledModel, ConvAlgo, ConvAlgoChoice, Graph, Isa, KernelPath, Machine,
    RuntimeOptions, Span, Tensor,
};
use std::time::Instant;

type CliResult<T> = Result<T, Box<dyn std::error::Error>>;

/// How the kernels are chosen: each convolution's algorithm (`--conv-algo`)
/// and the instruction set (`--isa`).
#[derive(Default, clap::Args, Clone)]
pub struct KernelArgs {
    /// Convolution algorithm: auto (per layer the fastest of direct, each
    /// accurate Winograd size and, for groups narrower than a vector, lane
    /// groups, for few output channels per group in NCHW, pixel lanes,
    /// measured at compile time and cached per CPU; a quantized
    /// convolution sums its integers exactly instead), direct (float), or
    /// winograd (F(4x4,3x3) where accurate enough, else F(2x2,3x3), on 3x3
    /// stride-1 convolutions).
    #[arg(long = "conv-algo", value_name = "ALGO", default_value = "auto", value_parser = str::parse::<ConvAlgoChoice>)]
    pub conv_algo: ConvAlgoChoice,
    /// Instruction set of the hand-written kernels: avx512, avx2 or portable
    /// (default: the widest this CPU has), to compare or check the narrower paths.
    #[arg(long, value_name = "ISA", value_parser = str::parse::<Isa>)]
    pub isa: Option<Isa>,
    /// Kernels: native (a hand-written kernel wherever one fits) or generic
    /// (generated TIR code for every op that lowers to it), to measure and
    /// test the generated code on its own.
    #[arg(long, value_name = "PATH", default_value = "native", value_parser = str::parse::<KernelPath>)]
    pub kernels: KernelPath,
}

impl KernelArgs {
    /// The runtime options for `threads` worker threads, measurements cached
    /// beside the roofline peaks.
    pub fn options(&self, threads: usize) -> RuntimeOptions {
        let mut options = RuntimeOptions::with_threads(threads);
        options.conv_algo.choice = self.conv_algo;
        options.isa = self.isa;
        options.kernels = self.kernels;
        options
    }
}

/// Compiles the planned graph, warning on stderr about every step that falls
/// back to the (slow) reference executor, and saying how many quantized
/// layers run on integer kernels and how many in float.
pub fn compile(machine: &Machine, g: &Graph, options: &RuntimeOptions) -> CliResult<CompiledModel> {
    let model = api::compile(machine, g, options)?;
    let quantized = g.quantized_layers();
    if !quantized.is_empty() {
        let integer = model
            .conv_steps()
            .iter()
            .filter(|c| c.decision.algo == ConvAlgo::Int8)
            .count();
        let depthwise = model.integer_depthwise_steps();
        let dense = model.integer_dense_steps();
        eprintln!(
            "note: {} quantized layers: {integer} convolutions, {depthwise} depthwise ones and {dense} matrix products sum their integers exactly (int8 kernels); the rest compute in float, each quantized value on its quantization grid",
            quantized.len()
        );
    }
    warn_of_fallbacks(&model.fallback_steps(), Some(model.step_count()));
    Ok(model)
}

/// Warns on stderr about every step that falls back to the (slow) reference
/// executor: its name, kind and source layers (`of_steps`: how many steps
/// there are in all, where one model holds them).
pub fn warn_of_fallbacks(fallbacks: &[(String, String, Vec<Span>)], of_steps: Option<usize>) {
    if fallbacks.is_empty() {
        return;
    }
    let named: Vec<String> = fallbacks
        .iter()
        .map(|(name, kind, spans)| format!("'{name}' ({kind}; {})", format_spans(spans)))
        .collect();
    let of = of_steps.map_or(String::new(), |n| format!(" of {n}"));
    eprintln!(
        "warning: {}{of} steps (control-flow subgraphs' included) run on the reference executor, without a native kernel: {}",
        fallbacks.len(),
        named.join(", ")
    );
}

/// Compiles the planned graph and runs it once; returns the outputs and how
/// compiling and running went. With `check_finite`, every step's output is
/// looked at for NaN or an infinity.
pub fn run_native(
    machine: &Machine,
    g: &Graph,
    inputs: &[Tensor],
    options: &RuntimeOptions,
    check_finite: bool,
) -> CliResult<(Vec<Tensor>, Execution)> {
    let t0 = Instant::now();
    let model = compile(machine, g, options)?;
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
        worker_pools: machine.pools_started(),
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

/// Options of `layoutopt calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Worker threads of the peaks probe (0: one per core; at most 4 per core).
    #[arg(long, default_value_t = 0, value_parser = super::parse_threads)]
    pub threads: usize,
    /// Remove the cached peaks and kernel times first.
    #[arg(long)]
    pub clear: bool,
}

/// `calibrate`: with `clear`, forgets every cached measurement (peaks and
/// kernel times, which are then measured again as models are planned and
/// compiled); then probes this machine's peaks on `threads` threads again.
pub fn calibrate(machine: &Machine, args: &CalibrateArgs, json: bool) -> CliResult<()> {
    let (threads, clear) = (args.threads, args.clear);
    if json {
        return Err("calibrate prints text only: leave out --json".into());
    }
    let dir = machine
        .cache_dir()
        .ok_or("no cache folder: neither XDG_CACHE_HOME nor HOME is set")?;
    if clear {
        let removed = api::clear_measurements(dir)
            .map_err(|e| format!("cannot clear the cache in {}: {e}", dir.display()))?;
        for path in &removed {
            outln!("removed {}", path.display())?;
        }
        if removed.is_empty() {
            outln!("nothing cached in {}", dir.display())?;
        }
    }
    outln!("{}", machine.peaks(threads, true)?)?;
    Ok(())
}
