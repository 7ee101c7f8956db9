//! `run` and `bench`: execute a planned model on the native runtime.

use super::{native, progress, read_tensor, CliResult, ModelArgs, Planning};
use layoutopt::api::json::{
    document, BenchDoc, BenchShapesDoc, OutputSummary, RunDoc, ShapeTiming, Timing,
};
use layoutopt::api::{
    self, read_file, read_npz, write_npy, DType, Graph, Machine, Tensor, TensorData, ValueType,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Reference tensors stored beside a model in ONNX test-data layout.
fn test_data(model: &Path, prefix: &str) -> Vec<PathBuf> {
    let dir = model.with_file_name("test_data_set_0");
    (0..)
        .map(|i| dir.join(format!("{prefix}_{i}.pb")))
        .take_while(|p| p.exists())
        .collect()
}

fn read_tensors(files: &[PathBuf]) -> Result<Vec<Tensor>, Box<dyn std::error::Error>> {
    files.iter().map(|p| read_tensor(p)).collect()
}

/// A tensor and the graph input it is for (none: positional).
type NamedTensor = (Option<String>, Tensor);

/// The tensors of one `--input`, each with the graph input it is for (none for
/// a positional one). A `.npz` archive gives every array under its own name; as
/// `NAME=FILE.npz` it gives the array `NAME`, or its only array. An archive of
/// one array whose name is no input's (numpy's `arr_0`) is positional.
fn input_tensors(
    a: &InputArg,
    input_names: &[&str],
) -> Result<Vec<NamedTensor>, Box<dyn std::error::Error>> {
    if a.path.extension().and_then(|e| e.to_str()) != Some("npz") {
        return Ok(vec![(a.name.clone(), read_tensor(&a.path)?)]);
    }
    let at = |m: String| format!("{}: {m}", a.path.display());
    let bytes = read_file(&a.path).map_err(|e| at(e.to_string()))?;
    let mut arrays = read_npz(&bytes).map_err(|e| at(e.to_string()))?;
    match &a.name {
        Some(n) => {
            let k = match arrays.iter().position(|(m, _)| m == n) {
                Some(k) => k,
                None if arrays.len() == 1 => 0,
                None => {
                    let held: Vec<&str> = arrays.iter().map(|(m, _)| m.as_str()).collect();
                    return Err(at(format!("no array '{n}' (the archive holds {held:?})")).into());
                }
            };
            Ok(vec![(Some(n.clone()), arrays.swap_remove(k).1)])
        }
        None if arrays.len() == 1 && !input_names.contains(&arrays[0].0.as_str()) => {
            Ok(vec![(None, arrays.remove(0).1)])
        }
        None => Ok(arrays.into_iter().map(|(m, t)| (Some(m), t)).collect()),
    }
}

/// An `--input`: a tensor file, for the graph input `name` when given.
#[derive(Clone, Debug)]
pub struct InputArg {
    /// The graph input it is for (`NAME=FILE`); none for a bare file.
    pub name: Option<String>,
    /// The tensor file.
    pub path: PathBuf,
}

/// Parses `NAME=FILE` or `FILE` (text before a `=` that holds a path separator is
/// part of the file name).
pub fn parse_input(s: &str) -> Result<InputArg, super::ArgError> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !name.contains(['/', '\\']) => {
            if file.is_empty() {
                return Err(super::ArgError::InputWithoutFile {
                    given: s.to_string(),
                    name: name.to_string(),
                });
            }
            Ok(InputArg {
                name: Some(name.to_string()),
                path: file.into(),
            })
        }
        _ => Ok(InputArg {
            name: None,
            path: s.into(),
        }),
    }
}

/// The tensors of `--input` arguments in the graph's input order: every input
/// named once (a bare file only for a model with one input), each of the type
/// the model declares.
fn named_inputs(
    inputs: &[(String, ValueType)],
    args: &[InputArg],
) -> Result<Vec<Tensor>, Box<dyn std::error::Error>> {
    let names: Vec<&str> = inputs.iter().map(|i| i.0.as_str()).collect();
    let mut given: Vec<Option<Tensor>> = vec![None; inputs.len()];
    let mut tensors = vec![];
    for a in args {
        tensors.extend(input_tensors(a, &names)?.into_iter().map(|t| (a, t)));
    }
    let count = tensors.len();
    for (a, (name, t)) in tensors {
        let k = match &name {
            Some(n) => names.iter().position(|m| m == n).ok_or_else(|| {
                format!(
                    "--input {}: the model has no input '{n}' (its inputs: {names:?})",
                    a.path.display()
                )
            })?,
            None if inputs.len() == 1 && count == 1 => 0,
            None => {
                return Err(format!(
                    "--input {}: the model has {} inputs {names:?}; give each as --input NAME=FILE",
                    a.path.display(),
                    inputs.len()
                )
                .into())
            }
        };
        let (name, ty) = (&inputs[k].0, &inputs[k].1);
        if t.dtype() != ty.dtype || t.shape != ty.shape {
            return Err(format!(
                "--input {name}={}: the file holds {}{:?}, the model's input '{name}' is {ty}",
                a.path.display(),
                t.dtype(),
                t.shape
            )
            .into());
        }
        if given[k].replace(t).is_some() {
            return Err(format!("input '{name}' is given twice").into());
        }
    }
    given
        .into_iter()
        .zip(&names)
        .map(|(t, n)| {
            t.ok_or_else(|| format!("input '{n}' is not given (--input {n}=FILE)").into())
        })
        .collect()
}

/// A reproducible pseudo-random tensor (splitmix64, uniform in [-1, 1)).
fn random_tensor(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
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

/// Inputs to run a model on, and the outputs recorded for them if any.
pub type Inputs = (Vec<Tensor>, Option<Vec<Tensor>>);

/// The inputs and outputs recorded beside the model
/// (`test_data_set_0/`), if there are.
fn recorded_inputs(model: &Path) -> Result<Option<Inputs>, Box<dyn std::error::Error>> {
    let recorded = test_data(model, "input");
    if recorded.is_empty() {
        return Ok(None);
    }
    let expected = read_tensors(&test_data(model, "output"))?;
    Ok(Some((read_tensors(&recorded)?, Some(expected))))
}

/// [`model_inputs`] for a session, whose inputs may have free dimensions:
/// the recorded inputs need no shapes, so `shapes` bind the declared ones
/// only when `files` or random tensors are used.
fn session_inputs(
    model: &Path,
    session: &api::Session,
    shapes: &HashMap<String, Vec<usize>>,
    files: &[InputArg],
    seed: u64,
) -> Result<Inputs, Box<dyn std::error::Error>> {
    match recorded_inputs(model)? {
        Some(recorded) if files.is_empty() => Ok(recorded),
        _ => {
            let declared = declared_inputs(session.interface(), shapes)?;
            model_inputs(model, &declared, files, seed)
        }
    }
}

/// The name and type of each input of `g`, in order.
pub fn graph_inputs(g: &Graph) -> Vec<(String, ValueType)> {
    (g.inputs().iter())
        .map(|&id| {
            let v = &g.node(id).outputs[0];
            (v.name.clone(), v.ty.clone())
        })
        .collect()
}

/// The name and type of each input a model declares, its free dimensions
/// bound by `shapes` (`--input-shape`); a free dimension left unbound is an
/// error naming the input and axis.
fn declared_inputs(
    interface: &api::Interface,
    shapes: &HashMap<String, Vec<usize>>,
) -> Result<Vec<(String, ValueType)>, Box<dyn std::error::Error>> {
    let mut inputs = vec![];
    for v in &interface.inputs {
        let dtype = v
            .dtype
            .ok_or_else(|| format!("input '{}' declares no type", v.name))?;
        let shape = match (shapes.get(&v.name), &v.dims) {
            (Some(shape), _) => shape.clone(),
            (None, Some(dims)) => (dims.iter().enumerate())
                .map(|(axis, d)| match d {
                    api::Dim::Static(n) => Ok(*n),
                    _ => Err(format!(
                        "input '{}': axis {axis} is free ({d}); give its shape with --input-shape {}=...",
                        v.name, v.name
                    )),
                })
                .collect::<Result<_, _>>()?,
            (None, None) => {
                return Err(format!(
                    "input '{}' declares no shape; give it with --input-shape {}=...",
                    v.name, v.name
                )
                .into())
            }
        };
        inputs.push((v.name.clone(), ValueType::new(dtype, shape)));
    }
    Ok(inputs)
}

/// The inputs to run a model taking `declared` on: `--input` files, else the
/// model's `test_data_set_0/` (with its recorded outputs), else seeded
/// random tensors.
pub fn model_inputs(
    model: &Path,
    declared: &[(String, ValueType)],
    files: &[InputArg],
    seed: u64,
) -> Result<Inputs, Box<dyn std::error::Error>> {
    if !files.is_empty() {
        return Ok((named_inputs(declared, files)?, None));
    }
    if let Some(recorded) = recorded_inputs(model)? {
        return Ok(recorded);
    }
    let inputs = (declared.iter().enumerate())
        .map(|(i, (_, ty))| random_tensor(&ty.shape, ty.dtype, seed + i as u64))
        .collect();
    Ok((inputs, None))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The shapes of the `--input` files for inputs that `--input-shape` bounds
/// by a range, each checked against its bounds: the model is imported at
/// them. A bare file stands for the one bounded input.
fn ranged_shapes(
    args: &RunArgs,
) -> Result<HashMap<String, Vec<usize>>, Box<dyn std::error::Error>> {
    let bounds = args.source.shapes.bounds();
    let mut shapes = HashMap::new();
    if !bounds.has_ranges() {
        return Ok(shapes);
    }
    let only = match bounds.0.len() {
        1 => bounds.0.keys().next().cloned(),
        _ => None,
    };
    for a in &args.inputs {
        for (name, t) in input_tensors(a, &[])? {
            let Some(name) = name.or_else(|| only.clone()) else {
                continue;
            };
            if bounds.0.contains_key(&name) {
                bounds.check_input(&name, &t.shape)?;
                shapes.insert(name, t.shape);
            }
        }
    }
    Ok(shapes)
}

/// Options of `layoutopt run`.
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: ModelArgs,
    /// An input tensor as `NAME=FILE` (.npy or a serialized ONNX TensorProto
    /// .pb), one per graph input; a bare FILE only for a model with one input.
    /// A .npz archive gives every input it names (or, as NAME=FILE.npz, the
    /// array NAME or its only array).
    #[arg(long = "input", value_name = "NAME=FILE", value_parser = parse_input)]
    pub inputs: Vec<InputArg>,
    /// Write every output to DIR as `<output name>.npy`.
    #[arg(long = "output", value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Seed for random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Worker threads (0: one per core; at most 4 per core).
    #[arg(long, default_value_t = 0, value_parser = super::parse_threads)]
    pub threads: usize,
    /// Look at every step's output and name the first that holds NaN or an
    /// infinity, with its source layers.
    #[arg(long)]
    pub check_finite: bool,
    #[command(flatten)]
    pub planning: Planning,
    #[command(flatten)]
    pub kernels: native::KernelArgs,
}

pub fn run(machine: &Machine, args: &RunArgs, json: bool) -> CliResult {
    let (model, check_finite) = (args.source.path(), args.check_finite);
    let options = &args.kernels.options(args.threads);
    let t0 = Instant::now();
    let source = match args.source.load_at(ranged_shapes(args)?) {
        Err(api::Error::Onnx(api::ImportError::DataDependent { .. })) => {
            return run_staged(args, json)
        }
        loaded => loaded?,
    };
    let import_time = t0.elapsed();
    let planned = args.planning.plan(machine, &source, options)?;
    let g = planned.graph;
    let (inputs, expected) = model_inputs(model, &graph_inputs(&source), &args.inputs, args.seed)?;
    let (outputs, execution) = progress::step("compiling and running", || {
        native::run_native(machine, &g, &inputs, options, check_finite)
    })?;
    // The model's own output names (the planned graph's may be internal).
    let names: Vec<String> = source
        .outputs()
        .iter()
        .map(|&v| source.value(v).name.clone())
        .collect();
    let summaries = output_summaries(args, &names, &outputs, expected.as_deref())?;
    if json {
        let doc = RunDoc {
            planner: planned.report.planner.clone(),
            target: planned.report.family.clone(),
            import_ms: ms(import_time),
            plan_ms: planned.report.timings.plan_ms,
            transform_count: planned.report.transform_count,
            execution,
            outputs: summaries,
        };
        outln!("{}", document("run", model, &doc))?;
        return Ok(());
    }
    outln!(
        "{}: {} nodes, imported in {:.1} ms, planned ('{}', {}) in {:.1} ms: {} transforms kept; {}",
        model.display(),
        g.node_count(),
        ms(import_time),
        planned.report.planner,
        planned.report.family,
        planned.report.timings.plan_ms,
        planned.report.transform_count,
        native::execution_text(&execution, check_finite)
    )?;
    print_outputs(&outputs, &summaries)
}

/// `run` of a model cut into stages before an op whose output shape depends
/// on values: through a session, which plans and compiles each stage with
/// every shape known; the first run compiles the stages after the cut, the
/// second shows the latency of one run.
fn run_staged(args: &RunArgs, json: bool) -> CliResult {
    let model = args.source.path();
    if json || !args.source.freeze.is_empty() || args.check_finite {
        return Err("a model run in stages (an op's output shape depends on values) takes no --json, --freeze or --check-finite yet".into());
    }
    let (session, open_time) =
        open_session(&args.source, &args.planning, &args.kernels, args.threads)?;
    let mut shapes = args.source.shapes.bounds().upper();
    shapes.extend(ranged_shapes(args)?);
    let (inputs, expected) = session_inputs(model, &session, &shapes, &args.inputs, args.seed)?;
    let given: Vec<api::ModelInput> = inputs.iter().map(api::ModelInput::Tensor).collect();
    let t1 = Instant::now();
    let outputs = progress::step("compiling the later stages and running", || {
        session.run(&given)
    })?;
    let first_run = t1.elapsed();
    native::warn_of_fallbacks(&session.fallback_steps(), None);
    let t2 = Instant::now();
    session.run(&given)?;
    let second_run = t2.elapsed();
    let names: Vec<String> = (session.interface().outputs.iter())
        .map(|v| v.name.clone())
        .collect();
    let summaries = output_summaries(args, &names, &outputs, expected.as_deref())?;
    outln!(
        "{}: run in stages cut before layer {}, whose output shape depends on values; opened (first stage planned and compiled) in {:.1} ms, first run (later stages compiled) {:.1} ms, second run {:.3} ms",
        model.display(),
        cut_text(&session),
        ms(open_time),
        ms(first_run),
        ms(second_run)
    )?;
    print_outputs(&outputs, &summaries)
}

/// A session's options from the command line's planning, kernels, threads
/// and `--input-shape` bounds.
fn session_options(
    source: &ModelArgs,
    planning: &Planning,
    kernels: &native::KernelArgs,
    threads: usize,
) -> api::SessionOptions {
    let mut options = api::SessionOptions::with_threads(threads);
    options.runtime = kernels.options(threads);
    options.planner = planning.planner;
    options.target = planning.target;
    options.bounds = source.shapes.bounds();
    options
}

/// Opens `source` as a session with the command line's planning, kernels
/// and threads; also returns how long opening took (the first stage planned
/// and compiled).
fn open_session(
    source: &ModelArgs,
    planning: &Planning,
    kernels: &native::KernelArgs,
    threads: usize,
) -> Result<(api::Session, Duration), api::Error> {
    let options = session_options(source, planning, kernels, threads);
    let model = source.path();
    let t0 = Instant::now();
    let session = progress::step(&format!("opening {}", model.display()), || {
        api::Session::open(model, options)
    })?;
    Ok((session, t0.elapsed()))
}

/// The layer a staged session is cut at, as `'name' (OpType)`.
fn cut_text(session: &api::Session) -> String {
    (session.cut())
        .map(|s| format!("'{}' ({})", s.layer, s.op_type))
        .unwrap_or_default()
}

/// `bench` of a model cut into stages: every run through its session, the
/// first (which compiles the stages after the cut) timed apart.
fn bench_staged(args: &BenchArgs, json: bool) -> CliResult {
    let model = args.source.path();
    if json || args.profile || !args.source.freeze.is_empty() {
        return Err("a model run in stages (an op's output shape depends on values) takes no --json, --profile or --freeze yet".into());
    }
    let (session, open_time) =
        open_session(&args.source, &args.planning, &args.kernels, args.threads)?;
    let shapes = args.source.shapes.bounds().upper();
    let (inputs, _) = session_inputs(model, &session, &shapes, &[], args.seed)?;
    let given: Vec<api::ModelInput> = inputs.iter().map(api::ModelInput::Tensor).collect();
    let t0 = Instant::now();
    session.run(&given)?;
    let first_run = t0.elapsed();
    native::warn_of_fallbacks(&session.fallback_steps(), None);
    for _ in 0..args.warmup {
        session.run(&given)?;
    }
    let mut times = Vec::with_capacity(args.runs as usize);
    for _ in 0..args.runs {
        let t = Instant::now();
        session.run(&given)?;
        times.push(ms(t.elapsed()));
    }
    times.sort_by(f64::total_cmp);
    outln!(
        "{}: run in stages cut before layer {}; opened (first stage planned and compiled) in {:.1} ms, first run (later stages compiled) {:.1} ms; latency p50 {:.3} ms, min {:.3} ms over {} runs",
        model.display(),
        cut_text(&session),
        ms(open_time),
        ms(first_run),
        times[times.len() / 2],
        times[0],
        times.len()
    )?;
    Ok(())
}

/// Each output's statistics, against the recorded outputs when there are;
/// also writes the outputs to `--output-dir`.
fn output_summaries(
    args: &RunArgs,
    names: &[String],
    outputs: &[Tensor],
    expected: Option<&[Tensor]>,
) -> Result<Vec<OutputSummary>, Box<dyn std::error::Error>> {
    if let Some(dir) = &args.output_dir {
        write_outputs(dir, names, outputs)?;
    }
    if let Some(exp) = expected {
        if exp.len() != outputs.len() {
            return Err(format!(
                "{} recorded outputs for a model with {} outputs",
                exp.len(),
                outputs.len()
            )
            .into());
        }
    }
    (outputs.iter().zip(names).enumerate())
        .map(|(i, (out, name))| summarize(name, out, expected.map(|e| (i, &e[i]))))
        .collect()
}

/// Prints each output's statistics and its first elements.
fn print_outputs(outputs: &[Tensor], summaries: &[OutputSummary]) -> CliResult {
    for (out, s) in outputs.iter().zip(summaries) {
        let head = out.data.slice_f64(0..out.numel().min(5));
        let head: Vec<String> = head.iter().map(|x| format!("{x:.5}")).collect();
        outln!(
            "output '{}' {}{:?}: min {:.5} max {:.5} mean {:.5} [{}{}]",
            s.name,
            s.dtype,
            s.shape,
            s.min,
            s.max,
            s.mean,
            head.join(", "),
            if out.numel() > 5 { ", ..." } else { "" }
        )?;
        if let Some(err) = s.max_abs_error {
            outln!("  max abs error vs recorded output: {err:.3e}")?;
        }
        if let Some(m) = s.mismatched.filter(|&m| m > 0) {
            outln!(
                "  {m} element(s) are NaN or infinite on one side only (counted apart from the error)"
            )?;
        }
        if s.non_finite > 0 {
            outln!("  {} element(s) are NaN or infinite", s.non_finite)?;
        }
    }
    Ok(())
}

/// An output's statistics, and its difference from the recorded output.
fn summarize(
    name: &str,
    out: &Tensor,
    expected: Option<(usize, &Tensor)>,
) -> Result<OutputSummary, Box<dyn std::error::Error>> {
    // Read in pieces: an f64 copy of a whole large output would double the
    // memory the run needs.
    let (mut min, mut max, mut sum, mut non_finite) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0);
    for piece in pieces(out.numel()) {
        for x in out.data.slice_f64(piece) {
            // A NaN makes the range NaN, as in numpy: `f64::min`/`max` would
            // skip it and print a healthy-looking range.
            if x.is_nan() || min.is_nan() {
                (min, max) = (f64::NAN, f64::NAN);
            } else {
                (min, max) = (min.min(x), max.max(x));
            }
            sum += x;
            non_finite += usize::from(!x.is_finite());
        }
    }
    let (mut max_abs_error, mut mismatched) = (None, None);
    if let Some((i, exp)) = expected {
        if exp.dtype() != out.dtype() || exp.shape != out.shape {
            return Err(format!(
                "recorded output {i} is {}{:?}, but output '{name}' is {}{:?}",
                exp.dtype(),
                exp.shape,
                out.dtype(),
                out.shape
            )
            .into());
        }
        let (mut err, mut m) = (0.0f64, 0);
        for piece in pieces(out.numel()) {
            let (e, k) = compare_values(
                &exp.data.slice_f64(piece.clone()),
                &out.data.slice_f64(piece),
            );
            (err, m) = (err.max(e), m + k);
        }
        (max_abs_error, mismatched) = (Some(err), Some(m));
    }
    Ok(OutputSummary {
        name: name.to_string(),
        dtype: out.dtype().to_string(),
        shape: out.shape.clone(),
        min,
        max,
        mean: sum / out.numel().max(1) as f64,
        non_finite,
        max_abs_error,
        mismatched,
    })
}

/// Writes each output as `DIR/<name>.npy` (the name with path separators and
/// other unsafe characters replaced by `_`), creating DIR.
fn write_outputs(dir: &Path, names: &[String], outputs: &[Tensor]) -> CliResult {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut used = std::collections::HashSet::new();
    for (name, t) in names.iter().zip(outputs) {
        let mut file: String = name
            .chars()
            .map(|c| {
                if c.is_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if file.is_empty() || file.starts_with('.') {
            file.insert(0, '_');
        }
        while !used.insert(file.clone()) {
            file.push('_');
        }
        let path = dir.join(format!("{file}.npy"));
        let bytes = write_npy(t).map_err(|m| format!("output '{name}': {m}"))?;
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Element ranges of about a million elements covering `n`.
fn pieces(n: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    const PIECE: usize = 1 << 20;
    (0..n.div_ceil(PIECE)).map(move |k| k * PIECE..((k + 1) * PIECE).min(n))
}

/// The largest absolute difference over the elements finite on both sides, and
/// how many elements differ in kind: NaN, +inf or -inf on one side but not the
/// same on the other. A NaN never hides in a maximum (`f64::max` skips NaN).
fn compare_values(expected: &[f64], got: &[f64]) -> (f64, usize) {
    let mut err = 0.0f64;
    let mut mismatched = 0;
    for (&a, &b) in expected.iter().zip(got) {
        if a.is_finite() && b.is_finite() {
            err = err.max((a - b).abs());
        } else if !(a.is_nan() && b.is_nan() || a == b) {
            mismatched += 1;
        }
    }
    (err, mismatched)
}

/// Options of `layoutopt bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub source: ModelArgs,
    #[command(flatten)]
    pub planning: Planning,
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
    pub kernels: native::KernelArgs,
    /// Time several input shapes in one process, each imported, planned and
    /// compiled when first met: shapes `D1xD2x...` separated by commas, a
    /// model's several inputs joined by `:` in its input order, e.g.
    /// `--shapes 1x3x224x224,1x3x320x320,4x3x224x224`. Prints each shape's
    /// compile time (import, plan and compile) and latency.
    #[arg(long = "shapes", id = "shape_sets", value_name = "SHAPES", value_parser = parse_shape_sets)]
    pub shape_sets: Option<ShapeSets>,
}

/// The shape sets of `bench --shapes`: each set every input's shape.
#[derive(Clone)]
pub struct ShapeSets(Vec<Vec<Vec<usize>>>);

/// Parses `--shapes`: `D1xD2,...` per shape set, inputs joined by `:`.
fn parse_shape_sets(s: &str) -> Result<ShapeSets, super::ArgError> {
    let dims = |shape: &str| -> Result<Vec<usize>, super::ArgError> {
        shape
            .split('x')
            .map(|d| d.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| super::ArgError::ShapeSet {
                given: shape.to_string(),
            })
    };
    let sets = s.split(',').map(|set| set.split(':').map(dims).collect());
    Ok(ShapeSets(sets.collect::<Result<_, _>>()?))
}

/// `layoutopt bench --shapes`: one session, each shape compiled when first
/// met and timed.
fn bench_shapes(args: &BenchArgs, sets: &[Vec<Vec<usize>>], json: bool) -> CliResult {
    let path = args.source.path();
    if !args.source.freeze.is_empty() {
        return Err("--shapes gives every input's shape: leave out --freeze".into());
    }
    if args.planning.rules.is_some() || args.profile {
        return Err("--shapes plans with the built-in rules and has no profile: leave out --rules and --profile".into());
    }
    let mut options = session_options(&args.source, &args.planning, &args.kernels, args.threads);
    options.max_shapes = sets.len() + 1;
    let opening = Instant::now();
    let session = api::Session::open(path, options)?;
    let open_ms = ms(opening.elapsed());
    if !json {
        outln!(
            "{}: session opened in {open_ms:.1} ms (the file read and decoded once)",
            path.display()
        )?;
    }
    // Bounds on every free dimension plan the largest shape when the session
    // opens; the shapes timed then make that plan again.
    if let (false, [ahead]) = (
        session.interface().is_static(),
        &session.compiled_shapes()[..],
    ) {
        let shapes: Vec<&[usize]> = ahead.iter().map(Vec::as_slice).collect();
        let (compiled, _) = session.model_for(&shapes)?;
        if !json {
            let name: Vec<String> = ahead.iter().map(|s| shape_text(s)).collect();
            outln!(
                "{}: planned and compiled ahead in {:.1} ms (the largest shape the bounds allow)",
                name.join(":"),
                ms(compiled.compile_time)
            )?;
        }
    }
    let mut rows = vec![];
    for set in sets {
        let shapes: Vec<&[usize]> = set.iter().map(Vec::as_slice).collect();
        let (compiled, now) = session.model_for(&shapes)?;
        let inputs: Vec<Tensor> = (compiled.inputs.iter().enumerate())
            .map(|(i, t)| random_tensor(&t.shape, t.dtype, args.seed + i as u64))
            .collect();
        let model = &compiled.model;
        let runs = (args.warmup as usize, args.runs as usize);
        let report = api::bench(model, &inputs, runs, None)?;
        let compile = compiled.compile_time;
        let timing = Timing::of(&report, compile, model.threads(), args.warmup as usize);
        let name = set
            .iter()
            .map(|s| shape_text(s))
            .collect::<Vec<_>>()
            .join(":");
        if !json {
            outln!(
                "{name}: compiled in {:.1} ms{} (import {:.1}, {} {:.1}, compile {:.1}), latency p50 {:.3} ms, min {:.3} ms over {} runs",
                timing.compile_ms,
                if now { "" } else { ", earlier" },
                ms(compiled.stages.import),
                match compiled.replayed {
                    true => "the first shape's plan made again",
                    false => "plan",
                },
                ms(compiled.stages.plan),
                ms(compiled.stages.compile),
                timing.p50_ms,
                timing.min_ms,
                timing.runs_ms.len()
            )?;
        }
        rows.push(ShapeTiming {
            shapes: set.clone(),
            compiled_now: now,
            replayed: compiled.replayed,
            import_ms: ms(compiled.stages.import),
            plan_ms: ms(compiled.stages.plan),
            build_ms: ms(compiled.stages.compile),
            timing,
        });
    }
    if json {
        let doc = BenchShapesDoc {
            planner: args.planning.planner.to_string(),
            target: args.planning.target.to_string(),
            open_ms,
            shapes: rows,
        };
        outln!("{}", document("bench_shapes", path, &doc))?;
    }
    Ok(())
}

/// `1x3x224x224`.
fn shape_text(shape: &[usize]) -> String {
    shape
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join("x")
}

/// `layoutopt bench`: plan and compile, then print latency percentiles (and
/// the profile), as text or as the `bench` document.
pub fn bench(machine: &Machine, args: &BenchArgs, json: bool) -> CliResult {
    if let Some(ShapeSets(sets)) = &args.shape_sets {
        return bench_shapes(args, sets, json);
    }
    let path = args.source.path();
    let options = args.kernels.options(args.threads);
    let t0 = Instant::now();
    let source = match args.source.load() {
        Err(api::Error::Onnx(api::ImportError::DataDependent { .. })) => {
            return bench_staged(args, json)
        }
        loaded => loaded?,
    };
    let import_ms = ms(t0.elapsed());
    let planned = args.planning.plan(machine, &source, &options)?;
    let (inputs, _) = model_inputs(path, &graph_inputs(&planned.graph), &[], args.seed)?;
    if !json {
        outln!(
            "{}: imported in {import_ms:.1} ms, '{}' plan for {} in {:.1} ms",
            path.display(),
            planned.report.planner,
            planned.report.family,
            planned.report.timings.plan_ms
        )?;
    }
    let t0 = Instant::now();
    let model = native::compile(machine, &planned.graph, &options)?;
    let compile = t0.elapsed();
    if !json {
        println!(
            "compiled in {:.1} ms ({} kernels, {} threads, {:.1} MB arena)",
            compile.as_secs_f64() * 1e3,
            model.isa(),
            model.threads(),
            model.arena_bytes() as f64 / 1e6
        );
    }
    let roofline = match args.profile {
        true => Some(machine.peaks(model.threads(), args.reprobe)?),
        false => None,
    };
    let report = api::bench(
        &model,
        &inputs,
        (args.warmup as usize, args.runs as usize),
        roofline,
    )?;
    if json {
        let timing = Timing::of(&report, compile, model.threads(), args.warmup as usize);
        let doc = BenchDoc::of(&planned.report, import_ms, &model, &report, timing);
        println!("{}", document("bench", path, &doc));
    } else {
        print!("{report}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::compare_values;

    #[test]
    fn nan_and_inf_never_hide_in_the_error() {
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        // Same non-finite values agree; a NaN against a number is a mismatch.
        assert_eq!(compare_values(&[1.0, nan, inf], &[1.5, nan, inf]), (0.5, 0));
        assert_eq!(compare_values(&[1.0, 2.0], &[nan, 2.0]), (0.0, 1));
        assert_eq!(compare_values(&[nan, -inf], &[0.0, inf]), (0.0, 2));
    }
}
