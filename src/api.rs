//! The library API: load a model, run passes over its [`Graph`], run it.
//!
//! A [`Pass`] takes a graph and gives a graph back, so layoutopt's planner fits
//! into any pipeline that holds a [`Graph`]. [`PlanLayouts`] is the planner as a
//! pass; [`Pipeline`] runs passes in order.
//!
//! ```
//! use layoutopt::api::{load_model, Pass, PlanLayouts, Pipeline};
//! use layoutopt::frontend::onnx::load_tensor_pb;
//! use std::path::Path;
//!
//! # fn main() -> Result<(), layoutopt::api::Error> {
//! let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small");
//! // Import (ONNX or TFLite, told apart by the file's contents).
//! let graph = load_model(&dir.join("model.onnx"))?;
//! // The global planner, blocking channels by 8, as one pass of a pipeline.
//! let pipeline = Pipeline::new().with(PlanLayouts::new("global", "nchw8c")?);
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
//! use layoutopt::api::{Error, Pass, Pipeline, PlanLayouts};
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
//! let keep = Pipeline::new().with(PlanLayouts::new("keep", "nchw16c")?);
//! let g = keep.run(g)?;
//! count.run(g)?;
//! assert_eq!(count.0.get(), 0); // `keep` leaves every tensor row-major
//! # Ok(())
//! # }
//! ```

use crate::export::ExportError;
use crate::frontend::onnx::{load_onnx, ImportError, ImportOptions};
use crate::frontend::tflite::{import_tflite, TfliteError};
use crate::graph::Graph;
use crate::layout::op_rules::{CostModel, Family};
use crate::layout::plan::{plan_with, planner_by_name, Plan, PlanError, PlanOptions, Planner};
use crate::layout::rules::RuleSource;
use crate::layout::LayoutError;
use crate::reference::ExecError;
use std::io::Read;
use std::path::Path;

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
    /// A reference execution error.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// An export error.
    #[error(transparent)]
    Export(#[from] ExportError),
    /// A pass of a pipeline failed.
    #[error("pass '{pass}': {message}")]
    Pass {
        /// The name of the pass.
        pass: String,
        /// What went wrong.
        message: String,
    },
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
        let bytes = crate::frontend::read_file(path).map_err(io_error)?;
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
/// planners (keep, local, greedy, global) for a target layout family, and
/// returns the planned graph (transforms and laid-out ops made explicit).
pub struct PlanLayouts {
    planner: Box<dyn Planner>,
    family: Family,
    cost: CostModel,
    options: PlanOptions,
}

impl PlanLayouts {
    /// `planner`: keep, local, greedy or global; `target`: nchw, nhwc, nchwc
    /// (block width from this CPU) or `nchw<x>c`.
    pub fn new(planner: &str, target: &str) -> Result<PlanLayouts, Error> {
        Ok(PlanLayouts {
            planner: planner_by_name(planner)?,
            family: Family::parse(target)?,
            cost: CostModel::default(),
            options: PlanOptions::default(),
        })
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
            &self.cost,
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
