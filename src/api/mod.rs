//! The library API: load a model, run passes over its [`Graph`], run it.
//!
//! A [`Pass`] takes a graph and gives a graph back, so layoutopt's planner fits
//! into any pipeline that holds a [`Graph`]. [`PlanLayouts`] is the planner as a
//! pass; [`Pipeline`] runs passes in order.
//!
//! ```
//! use layoutopt::api::{load_model, Costs, Pass, PlanLayouts, Pipeline, PlannerKind, TargetFamily};
//! use layoutopt::frontend::onnx::load_tensor_pb;
//! use std::path::Path;
//!
//! # fn main() -> Result<(), layoutopt::api::Error> {
//! let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small");
//! // Import (ONNX or TFLite, told apart by the file's contents).
//! let graph = load_model(&dir.join("model.onnx"))?;
//! // The global planner, blocking channels by 8, as one pass of a pipeline,
//! // priced by the built-in cost model (the same plan on every machine).
//! let global = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8));
//! let pipeline = Pipeline::new().with(global.with_costs(Costs::BuiltIn));
//! let planned = pipeline.run(graph.clone())?;
//! assert!(planned.node_count() > graph.node_count()); // transforms were added
//!
//! // Both graphs compute the same thing (reference executor).
//! let (_, input) = load_tensor_pb(&dir.join("test_data_set_0/input_0.pb"))?;
//! let before = layoutopt::reference::run(&graph, &[input.clone()])?;
//! let after = layoutopt::reference::run(&planned, &[input])?;
//! let (a, b) = (before[0].data.to_f64(), after[0].data.to_f64());
//! assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() <= 1e-4 * x.abs().max(1.0)));
//! # Ok(())
//! # }
//! ```
//!
//! A user's own pass goes into the same pipeline:
//!
//! ```
//! use layoutopt::api::{Error, Pass, Pipeline, PlanLayouts, PlannerKind, TargetFamily};
//! use layoutopt::graph::{Graph, Op};
//!
//! /// Counts the layout transforms a plan kept.
//! struct CountTransforms(std::cell::Cell<usize>);
//!
//! impl Pass for CountTransforms {
//!     fn name(&self) -> &str {
//!         "count-transforms"
//!     }
//!     fn run(&self, g: Graph) -> Result<Graph, Error> {
//!         let n = g
//!             .node_ids()
//!             .into_iter()
//!             .filter(|&id| matches!(g.node(id).op, Op::LayoutTransform(_)))
//!             .count();
//!         self.0.set(n);
//!         Ok(g)
//!     }
//! }
//!
//! # fn main() -> Result<(), Error> {
//! let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small/model.onnx");
//! let g = layoutopt::api::load_model(&path)?;
//! let count = CountTransforms(std::cell::Cell::new(usize::MAX));
//! let keep = Pipeline::new().with(PlanLayouts::new(PlannerKind::Keep, TargetFamily::Nchwc(16)));
//! let g = keep.run(g)?;
//! count.run(g)?;
//! assert_eq!(count.0.get(), 0); // `keep` leaves every tensor row-major
//! # Ok(())
//! # }
//! ```

mod artifacts;
pub mod json;
pub mod logical;
pub mod native;
mod session;

use crate::export::ExportError;
use crate::frontend::onnx::load_onnx;
use crate::frontend::tflite::{import_tflite, TfliteError};
use crate::layout::plan::{plan_with, PlanOptions};
use crate::layout::planners::Planner;
use crate::layout::PlanError;
use crate::reference::ExecError;
pub use artifacts::{check_output, explore_plans, export_plan, ExportFor, Exported};
use std::io::Read;
use std::path::Path;

pub use crate::core::budget::{parse_bytes, set_limit as set_memory_limit, MEMORY_LIMIT_ENV};
pub use crate::core::{HugePageAdvice, Layout};
pub use crate::frontend::bounds::{DimRange, ShapeBounds};
pub use crate::frontend::npy::{read_npy, read_npz, write_npy};
pub use crate::frontend::onnx::{load_tensor_pb, ImportError, ImportOptions};
pub use crate::frontend::{read_file, DeclaredValue, Dim, Interface, ShapeMismatch};
pub use crate::graph::{format_spans, DType, Graph, Span, Tensor, TensorData, ValueType};
pub use crate::layout::cost::{ConvQuery, CostModel, MeasuredCosts, WithinMargin};
pub use crate::layout::plan::Plan;
/// The layout planners: `Keep`, `Local`, `Greedy`, `Global` (parsed from their
/// command-line names); see [`crate::layout::planners`] for what each does.
pub use crate::layout::planners::PlannerKind;
pub use crate::layout::report::PlanReport;
pub use crate::layout::rules::RuleSource;
/// The layout family a plan targets: `Nchw` (nothing to plan), `Nhwc`, or
/// `Nchwc(x)`, channels blocked by `x` ([`TargetFamily::host_blocked`] picks `x` from
/// this CPU's vector width). Parsed from `nchw`, `nhwc`, `nchwc`, `nchw<x>c`.
pub use crate::layout::target::TargetFamily;
pub use crate::layout::LayoutError;
pub use native::{
    bench, clear_measurements, compile, conv_algorithms, max_threads, measured_costs,
    measured_under_load_note, predicted_step_seconds, time_run, BenchReport, CompiledModel,
    ConvAlgo, ConvAlgoChoice, Isa, KernelPath, Machine, ModelInput, Roofline, RuntimeError,
    RuntimeOptions,
};
pub use session::{CompileStages, Session, SessionOptions, ShapeModel};

/// Any error of the pipeline, from the stage that raised it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An ONNX import error.
    #[error(transparent)]
    Onnx(#[from] ImportError),
    /// A TFLite import error.
    #[error(transparent)]
    Tflite(#[from] TfliteError),
    /// A layout error.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A planning error.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The graph is malformed.
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    /// A reference execution error.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A compilation or run error of the native runtime.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An export error.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// The explorer page could not be made.
    #[error(transparent)]
    Explorer(#[from] crate::explorer::ExplorerError),
    /// An output file was refused or could not be written.
    #[error("{0}")]
    Output(String),
    /// A model run in stages ([`Session`]) failed at the op it is cut at, or
    /// was asked for what only a model compiled whole has.
    #[error("{}: {message}", format_spans(spans))]
    DataDependent {
        /// The layer of the cut.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
    /// Inputs given to a run do not fit what the model declares.
    #[error(transparent)]
    Input(#[from] crate::frontend::ShapeMismatch),
    /// A pass of a pipeline failed.
    #[error("pass '{pass}': {message}")]
    Pass {
        /// The name of the pass.
        pass: String,
        /// What went wrong.
        message: String,
    },
}

impl Error {
    /// The source layers the error names (file, layer, op type, node index),
    /// from whichever stage raised it; none where the error is about a file,
    /// an input or the machine rather than a layer.
    pub fn spans(&self) -> Vec<Span> {
        match self {
            Error::Onnx(e) => e.spans(),
            Error::Tflite(e) => e.spans(),
            Error::Plan(e) => e.spans(),
            Error::Graph(e) => e.spans(),
            Error::Exec(e) => e.spans(),
            Error::Runtime(e) => e.spans(),
            Error::Export(e) => e.spans(),
            Error::DataDependent { spans, .. } => spans.clone(),
            Error::Explorer(crate::explorer::ExplorerError::Graph(e)) => e.spans(),
            Error::Layout(_)
            | Error::Explorer(_)
            | Error::Output(_)
            | Error::Input(_)
            | Error::Pass { .. } => {
                vec![]
            }
        }
    }
}

/// Whether `bytes` are a TFLite flatbuffer: its file identifier "TFL3" sits
/// right after the 4-byte root offset.
pub fn is_tflite(bytes: &[u8]) -> bool {
    bytes.get(4..8) == Some(b"TFL3")
}

/// Imports an ONNX or TFLite model. The file's contents decide (a TFLite
/// flatbuffer carries the identifier "TFL3"); a `.tflite` file without it is
/// reported as a bad TFLite file, anything else is read as ONNX.
pub fn load_model(path: &Path) -> Result<Graph, Error> {
    load_model_with(path, &ImportOptions::default())
}

/// [`load_model`] with the choices the file leaves open: input shapes that bind
/// symbolic dimensions (ONNX; a TFLite model's shapes are static), frozen inputs.
pub fn load_model_with(path: &Path, opts: &ImportOptions) -> Result<Graph, Error> {
    let file = path.display().to_string();
    let io_error = |source| ImportError::Io {
        path: file.clone(),
        source,
    };
    let mut head = Vec::with_capacity(8);
    crate::frontend::open_file(path)
        .and_then(|f| f.take(8).read_to_end(&mut head))
        .map_err(io_error)?;
    let tflite_ext = path.extension().is_some_and(|e| e == "tflite");
    if is_tflite(&head) || tflite_ext {
        if !opts.constant_inputs.is_empty() {
            return Err(ImportError::Model {
                path: file,
                message: "inputs can be frozen to a value in ONNX models only".into(),
            }
            .into());
        }
        let bytes = crate::frontend::map_file(path).map_err(io_error)?;
        return Ok(import_tflite(&bytes, &file)?);
    }
    Ok(load_onnx(path, opts)?)
}

/// A step of a compilation pipeline: a graph in, a graph out.
pub trait Pass {
    /// A short name for reports and errors.
    fn name(&self) -> &str;
    /// Transforms the graph, or says why it cannot.
    fn run(&self, g: Graph) -> Result<Graph, Error>;
}

/// The layout planner as a pass: plans every tensor's layout with one of the
/// [`PlannerKind`]s for a [`TargetFamily`] layout family under a [`CostModel`], and
/// returns the planned graph (transforms and laid-out ops made explicit; see
/// [`logical`] for how a later pass reads it).
pub struct PlanLayouts {
    planner: Box<dyn Planner>,
    family: TargetFamily,
    costs: Costs,
    options: PlanOptions,
}

/// What a plan prices its choices by.
#[derive(Clone, Debug)]
pub enum Costs {
    /// This machine's measured peaks and kernel times (the process's
    /// [`Machine::shared`]), for a model compiled with these options: what a
    /// plan of a model to run here should use.
    Measured(RuntimeOptions),
    /// The built-in cost model: nothing is measured, and every machine makes
    /// the same plan.
    BuiltIn,
    /// A cost model of the caller's.
    Model(CostModel),
}

impl Default for Costs {
    /// Measured, for a model run on one thread per core with every
    /// convolution's algorithm chosen by measurement (the command line's
    /// defaults).
    fn default() -> Costs {
        Costs::Measured(RuntimeOptions::with_threads(0))
    }
}

impl Costs {
    /// The cost model these costs stand for.
    pub fn model(&self) -> Result<CostModel, Error> {
        match self {
            Costs::Measured(options) => measured_costs(Machine::shared(), options),
            Costs::BuiltIn => Ok(CostModel::default()),
            Costs::Model(cost) => Ok(cost.clone()),
        }
    }
}

impl PlanLayouts {
    /// The planner `planner` for `target`, with this machine's measured costs
    /// ([`Costs::default`]) and the rules of `LAYOUTOPT_RULES`, else the ones
    /// built in.
    pub fn new(planner: PlannerKind, target: TargetFamily) -> PlanLayouts {
        PlanLayouts {
            planner: planner.build(),
            family: target,
            costs: Costs::default(),
            options: PlanOptions::default(),
        }
    }

    /// The layouts `decisions` recorded (a plan of the same model at
    /// another input shape, [`Plan::decisions`]) made again for `target`:
    /// nothing is measured or solved, and planning fails where the graph is
    /// not the one decided for.
    pub fn replaying(
        decisions: std::sync::Arc<crate::layout::replay::LayoutDecisions>,
        target: TargetFamily,
    ) -> PlanLayouts {
        PlanLayouts {
            planner: Box::new(crate::layout::replay::Replay { decisions }),
            family: target,
            costs: Costs::BuiltIn,
            options: PlanOptions::default(),
        }
    }

    /// The plan an export for onnxruntime is made of: every tensor in its
    /// source layout (onnxruntime's kernels take plain NCHW and block channels
    /// themselves, so transforms would be extra work there), batch norms folded
    /// into the convolutions before them, transposed and 1-D convolutions kept
    /// (its own kernels run them), and layoutopt's other graph passes and rewrites.
    pub fn for_onnxruntime() -> PlanLayouts {
        let mut p =
            PlanLayouts::new(PlannerKind::Keep, TargetFamily::Nchw).with_costs(Costs::BuiltIn);
        p.options.fold_batchnorms = true;
        p.options.kernel_forms = false;
        p
    }

    /// Pins the graph input or output `name` to `layout`: an input then
    /// arrives stored in it (the planned graph's input, and the compiled
    /// model's, has the layout's physical shape), an output is handed back in
    /// it. Planning fails when the name is no input or output or the layout
    /// does not fit its shape.
    pub fn with_pinned(mut self, name: &str, layout: Layout) -> PlanLayouts {
        self.options.pins.insert(name.to_string(), layout);
        self
    }

    /// Plans under `costs` instead of this machine's measured costs.
    pub fn with_costs(mut self, costs: Costs) -> PlanLayouts {
        self.costs = costs;
        self
    }

    /// Plans under the cost model `cost`.
    pub fn with_cost_model(self, cost: CostModel) -> PlanLayouts {
        self.with_costs(Costs::Model(cost))
    }

    /// Rewrites with `rules` (`None`: no rewriting) instead of the rules in
    /// `LAYOUTOPT_RULES`, or else the ones built in.
    pub fn with_rules(mut self, rules: Option<RuleSource>) -> PlanLayouts {
        self.options.rules = rules;
        self
    }

    /// Plans `g` and returns the plan with its report.
    pub fn plan(&self, g: &Graph) -> Result<Plan, Error> {
        Ok(plan_with(
            g,
            self.planner.as_ref(),
            self.family,
            &self.costs.model()?,
            &self.options,
        )?)
    }
}

impl Pass for PlanLayouts {
    fn name(&self) -> &str {
        self.planner.name()
    }
    fn run(&self, g: Graph) -> Result<Graph, Error> {
        Ok(self.plan(&g)?.graph)
    }
}

/// Passes run in order, each on the previous one's graph.
#[derive(Default)]
pub struct Pipeline {
    passes: Vec<Box<dyn Pass>>,
}

impl Pipeline {
    /// An empty pipeline.
    pub fn new() -> Pipeline {
        Pipeline::default()
    }

    /// Appends a pass.
    pub fn with(mut self, pass: impl Pass + 'static) -> Pipeline {
        self.passes.push(Box::new(pass));
        self
    }

    /// The names of the passes, in order.
    pub fn names(&self) -> Vec<&str> {
        self.passes.iter().map(|p| p.name()).collect()
    }
}

impl Pass for Pipeline {
    fn name(&self) -> &str {
        "pipeline"
    }
    fn run(&self, g: Graph) -> Result<Graph, Error> {
        self.passes.iter().try_fold(g, |g, p| p.run(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error from a stage names the layer through `Error::spans`, and a
    /// file-level one names none.
    #[test]
    fn errors_name_their_layers() {
        let hostile = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
        let e = load_model(&hostile.join("conv_strides_zero.onnx")).unwrap_err();
        let spans = e.spans();
        assert_eq!(spans.len(), 1, "{e}: {spans:?}");
        assert_eq!(&*spans[0].op_type, "Conv", "{e}");
        assert!(e.to_string().contains(&*spans[0].layer), "{e}");
        let missing = load_model(&hostile.join("no such file.onnx")).unwrap_err();
        assert!(missing.spans().is_empty(), "{missing}");
    }
}
