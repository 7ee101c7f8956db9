//! The command implementations, one module per command group. `main.rs` only
//! parses arguments and maps results to exit codes.

/// `print!` that returns the write error instead of panicking (a closed pipe,
/// as with `layoutopt inspect m.onnx | head`, ends the command quietly).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($t)*)
    }};
}

/// `println!` that returns the write error instead of panicking.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)
    }};
}

pub mod export;
pub mod inspect;
pub mod native;
pub mod plan;
pub mod progress;
pub mod run;

use layoutopt::api::{
    self, load_tensor_pb, read_file, read_npy, CostModel, DimRange, Graph, ImportError,
    ImportOptions, Machine, Plan, PlanLayouts, PlannerKind, RuleSource, RuntimeOptions,
    ShapeBounds, TargetFamily, Tensor,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What a command returns: any stage's error, printed on stderr by `main`.
pub type CliResult = Result<(), Box<dyn std::error::Error>>;

/// Parses a `--planner` value (a usage error when no planner has the name),
/// listing the planners in `--help`.
pub fn planner_parser() -> impl clap::builder::TypedValueParser<Value = PlannerKind> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(PlannerKind::ALL.map(PlannerKind::name))
        .try_map(|s| s.parse::<PlannerKind>())
}

/// A command-line value (or the environment variable standing for one) that
/// does not parse: clap reports it as a usage error.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// Not a thread count this machine allows.
    #[error("'{given}' is not a thread count: give 0 (one per core) up to {max} (4 per core)")]
    Threads {
        /// The value given.
        given: String,
        /// The most threads allowed.
        max: usize,
    },
    /// Not a positive byte count.
    #[error(
        "{}'{given}' is not a memory limit: give bytes, or a number with K, M, G or T (e.g. 2G)",
        from_env.map_or(String::new(), |var| format!("{var}: "))
    )]
    MemoryLimit {
        /// The value given.
        given: String,
        /// The environment variable it came from, if not the command line.
        from_env: Option<&'static str>,
    },
    /// Not a graph input's name and whole shape.
    #[error("'{given}' is not NAME=D1,D2,... with each D an extent or a range LO..HI (e.g. input=1,3,224,224 or input=1,3,32..1024,32..1024)")]
    InputShape {
        /// The value given.
        given: String,
    },
    /// Not a shape of `--shapes`.
    #[error("'{given}' is not a shape such as 1x3x224x224 (--shapes: shapes separated by commas, a model's inputs joined by ':')")]
    ShapeSet {
        /// The shape as given.
        given: String,
    },
    /// Not `NAME=FILE`.
    #[error("'{given}' is not NAME=FILE (e.g. sr=sr.npy)")]
    Freeze {
        /// The value given.
        given: String,
    },
    /// `NAME=` without a file.
    #[error("'{given}' names input '{name}' but no file")]
    InputWithoutFile {
        /// The value given.
        given: String,
        /// The input it names.
        name: String,
    },
}

/// Checks a `--target` value at parse time, so a bad one is a usage error.
pub fn parse_target(s: &str) -> Result<TargetFamily, api::LayoutError> {
    s.parse()
}

/// Checks a `--threads` value at parse time: 0 (one per core) up to 4 per core.
pub fn parse_threads(s: &str) -> Result<usize, ArgError> {
    let max = api::max_threads();
    match s.parse::<usize>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(ArgError::Threads {
            given: s.to_string(),
            max,
        }),
    }
}

/// Checks a `--memory-limit` value at parse time: a positive byte count.
pub fn parse_memory_limit(s: &str) -> Result<u64, ArgError> {
    match api::parse_bytes(s) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(ArgError::MemoryLimit {
            given: s.to_string(),
            from_env: None,
        }),
    }
}

/// Checks `LAYOUTOPT_MEMORY_LIMIT` when it is set: a value that is not a
/// byte count is an error, not silently the default.
pub fn memory_limit_from_env() -> Result<(), ArgError> {
    use layoutopt::api::MEMORY_LIMIT_ENV;
    match std::env::var(MEMORY_LIMIT_ENV) {
        Ok(v) => match parse_memory_limit(&v) {
            Ok(_) => Ok(()),
            Err(_) => Err(ArgError::MemoryLimit {
                given: v,
                from_env: Some(MEMORY_LIMIT_ENV),
            }),
        },
        Err(_) => Ok(()),
    }
}

/// PlannerKind and target family options shared by the planning commands.
#[derive(clap::Args, Clone)]
pub struct Planning {
    /// PlannerKind.
    #[arg(long, default_value = "global", value_parser = planner_parser())]
    pub planner: PlannerKind,
    /// TargetFamily layout family: nchw, nhwc, nchwc (block width from this CPU) or nchw<x>c.
    #[arg(long, default_value = "nchwc", value_parser = parse_target)]
    pub target: TargetFamily,
    /// Folder of `*.rules` files to rewrite with instead of the built-in rules
    /// (also LAYOUTOPT_RULES).
    #[arg(long, value_name = "DIR")]
    pub rules: Option<std::path::PathBuf>,
}

impl Planning {
    /// The rules to rewrite with: `--rules`, else `LAYOUTOPT_RULES`, else built in.
    pub fn rule_source(&self) -> RuleSource {
        match &self.rules {
            Some(dir) => RuleSource::Dir(dir.clone()),
            None => RuleSource::from_env(),
        }
    }

    /// Plans `g` under a spinner, its convolutions costed by their measured
    /// times on the threads and kernels of `runtime`.
    pub fn plan(
        &self,
        machine: &Machine,
        g: &Graph,
        runtime: &RuntimeOptions,
    ) -> Result<Plan, Box<dyn std::error::Error>> {
        let costs = api::measured_costs(machine, runtime)?;
        let msg = format!("planning with '{}' for {}", self.planner, self.target);
        Ok(progress::step(&msg, || {
            self.plan_with(g, self.planner, &costs)
        })?)
    }

    /// Plans `g` with `planner` for this target and rules under `costs`,
    /// warning on stderr when the rewriting could not run.
    pub fn plan_with(
        &self,
        g: &Graph,
        planner: PlannerKind,
        costs: &CostModel,
    ) -> Result<Plan, api::Error> {
        let plan = PlanLayouts::new(planner, self.target)
            .with_rules(Some(self.rule_source()))
            .with_cost_model(costs.clone())
            .plan(g)?;
        let stages = [
            ("graph rules", &plan.report.graph_rewrite),
            ("e-graph rewriting", &plan.report.rewrite),
        ];
        for (stage, r) in stages {
            let Some(r) = r else { continue };
            if r.skipped || !r.applied {
                let what = if r.skipped { "skipped" } else { "not applied" };
                eprintln!(
                    "warning: {stage} {what}: {}",
                    r.note.as_deref().unwrap_or("no reason given")
                );
            } else if let Some(note) = &r.note {
                eprintln!("warning: {stage}: {note}");
            }
        }
        Ok(plan)
    }
}

/// Parses `NAME=D1,D2,...` (a graph input and its whole shape), each
/// dimension an extent or a range `LO..HI`.
pub fn parse_input_shape(s: &str) -> Result<(String, Vec<DimRange>), ArgError> {
    let bad = || ArgError::InputShape {
        given: s.to_string(),
    };
    let (name, dims) = s.split_once('=').ok_or_else(bad)?;
    if name.is_empty() {
        return Err(bad());
    }
    let dims = dims
        .split(',')
        .map(|d| d.parse::<DimRange>().map_err(|_| bad()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((name.to_string(), dims))
}

/// Shapes of graph inputs, for models with symbolic dimensions.
#[derive(clap::Args, Clone, Default)]
pub struct InputShapes {
    /// The shape of a graph input, binding its symbolic dimensions (repeat for
    /// several inputs), e.g. `--input-shape input=4,3,224,224`. A dimension
    /// may be a range `LO..HI` (both included), e.g. `input=1,3,32..1024,32..1024`:
    /// `bench --shapes` refuses shapes outside it and plans ahead at its
    /// largest; `run` takes the extent from the `--input` file, else the
    /// largest, as other commands do.
    #[arg(long = "input-shape", value_name = "NAME=D1,D2,...", value_parser = parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<DimRange>)>,
}

impl InputShapes {
    /// The bounds the shapes give.
    pub fn bounds(&self) -> ShapeBounds {
        ShapeBounds(self.input_shapes.iter().cloned().collect())
    }
}

/// The model a command reads, the shapes that bind its symbolic dimensions,
/// and the inputs frozen to a value.
#[derive(clap::Args, Clone)]
pub struct ModelArgs {
    /// The model file (.onnx or .tflite).
    pub model: PathBuf,
    #[command(flatten)]
    pub shapes: InputShapes,
    /// Freeze a graph input of an ONNX model to the tensor in FILE (.npy or a
    /// serialized ONNX TensorProto .pb), of the input's type and shape: it
    /// becomes a constant, so a configuration input (a sample rate, a mode
    /// flag) folds the control flow and shapes it decides at import, e.g.
    /// `--freeze sr=sr.npy`. The input is then no longer given at run time.
    #[arg(long = "freeze", value_name = "NAME=FILE", value_parser = parse_freeze)]
    pub freeze: Vec<(String, PathBuf)>,
}

/// Parses `NAME=FILE` of `--freeze`.
fn parse_freeze(s: &str) -> Result<(String, PathBuf), ArgError> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), file.into()))
        }
        _ => Err(ArgError::Freeze {
            given: s.to_string(),
        }),
    }
}

/// A tensor file: `.npy` (NumPy) or a serialized ONNX TensorProto (`.pb`).
fn read_tensor(path: &Path) -> Result<Tensor, Box<dyn std::error::Error>> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => {
            let bytes = read_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(read_npy(&bytes).map_err(|m| format!("{}: {m}", path.display()))?)
        }
        _ => Ok(load_tensor_pb(path)?.1),
    }
}

impl ModelArgs {
    /// The model file.
    pub fn path(&self) -> &Path {
        &self.model
    }

    /// Imports the model under a spinner, each input bounded by a range at
    /// its largest shape.
    pub fn load(&self) -> Result<Graph, api::Error> {
        self.load_at(HashMap::new())
    }

    /// [`Self::load`] with the inputs of `shapes` at those shapes instead.
    pub fn load_at(&self, shapes: HashMap<String, Vec<usize>>) -> Result<Graph, api::Error> {
        let constant_inputs = (self.freeze.iter())
            .map(|(name, file)| match read_tensor(file) {
                Ok(t) => Ok((name.clone(), t)),
                Err(e) => Err(ImportError::Model {
                    path: self.model.display().to_string(),
                    message: format!("--freeze {name}: {e}"),
                }),
            })
            .collect::<Result<_, _>>()?;
        let opts = ImportOptions {
            input_shapes: self
                .shapes
                .bounds()
                .upper()
                .into_iter()
                .chain(shapes)
                .collect(),
            constant_inputs,
            ..ImportOptions::default()
        };
        progress::step(&format!("importing {}", self.model.display()), || {
            api::load_model_with(&self.model, &opts)
        })
    }
}
