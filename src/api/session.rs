//! A session: one model file, run at whatever input shapes its callers bring.
//!
//! The layouts and convolution algorithms a model runs with do not depend on
//! the extent of a free dimension (a dynamic batch, an image of any size), so
//! a session decides them once: the first shape it meets is imported, planned
//! with this machine's measured costs and compiled, and every later shape is
//! imported and compiled with the same decisions made again
//! ([`crate::layout::replay`]), nothing planned or measured. The file is read
//! once: every import shares its decoded nodes and converted weights. A shape whose
//! graph differs from the first one's (an import that folded a shape into the
//! graph) is planned afresh. Each shape's compiled model is kept in a bounded
//! cache (least recently used first out), so a server that sees a few shapes
//! compiles each once. A model whose inputs are all static is compiled when
//! the session opens, as onnxruntime creates its session.
//!
//! ```
//! use layoutopt::api::{ModelInput, Session, SessionOptions, Tensor};
//! use std::path::Path;
//!
//! # fn main() -> Result<(), layoutopt::api::Error> {
//! let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small/model.onnx");
//! let session = Session::open(&path, SessionOptions::with_threads(1))?;
//! assert_eq!(session.interface().inputs[0].name, "input");
//! let x = Tensor::from_f32(vec![1, 3, 32, 32], vec![0.5; 3 * 32 * 32]);
//! let outputs = session.run(&[ModelInput::Tensor(&x)])?;
//! assert_eq!(outputs[0].shape, vec![1, 10]);
//! # Ok(())
//! # }
//! ```

use super::{
    compile, is_tflite, load_model_with, Costs, Error, ImportOptions, Machine, ModelInput,
    PlanLayouts, PlannerKind, RuntimeOptions, TargetFamily,
};
use crate::frontend::bounds::ShapeBounds;
use crate::frontend::onnx::DecodedModel;
use crate::frontend::{Dim, Interface};
use crate::graph::{Tensor, ValueType};
use crate::layout::replay::LayoutDecisions;
use crate::runtime::{CompiledModel, DecidedAlgos};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod staged;
use staged::Staged;

/// How a session plans and compiles its model.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Threads, kernels and instruction set of the compiled model.
    pub runtime: RuntimeOptions,
    /// The layout planner.
    pub planner: PlannerKind,
    /// The layout family planned for.
    pub target: TargetFamily,
    /// How many compiled shapes the session keeps (at least 1).
    pub max_shapes: usize,
    /// What plans are priced by; `None`: this machine's measured costs for
    /// `runtime`.
    pub costs: Option<Costs>,
    /// Bounds on the input shapes the session will see: a shape outside them
    /// is refused, and when they bound every free dimension the session
    /// plans and compiles ahead at the largest shape they allow.
    pub bounds: ShapeBounds,
}

impl SessionOptions {
    /// The command line's defaults on `threads` workers (0: one per core):
    /// the global planner, this CPU's blocked layouts, 8 shapes kept.
    pub fn with_threads(threads: usize) -> SessionOptions {
        SessionOptions {
            runtime: RuntimeOptions::with_threads(threads),
            planner: PlannerKind::Global,
            target: TargetFamily::host_blocked(),
            max_shapes: 8,
            costs: None,
            bounds: ShapeBounds::default(),
        }
    }
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions::with_threads(0)
    }
}

/// The model compiled for one combination of input shapes.
pub struct ShapeModel {
    /// The compiled model.
    pub model: CompiledModel,
    /// The type of each input, in the interface's order.
    pub inputs: Vec<ValueType>,
    /// How long import, planning and compilation took for these shapes.
    pub compile_time: Duration,
    /// Each of them apart.
    pub stages: CompileStages,
    /// Whether the layouts and convolution algorithms decided at the
    /// session's first shape were made again (nothing planned or measured);
    /// `false`: planned and measured for these shapes.
    pub replayed: bool,
}

/// How long each stage of making a [`ShapeModel`] took.
#[derive(Clone, Copy, Debug, Default)]
pub struct CompileStages {
    /// Importing the model at the shapes.
    pub import: Duration,
    /// Planning it (or making the first shape's plan again).
    pub plan: Duration,
    /// Compiling the planned graph.
    pub compile: Duration,
}

/// What a session decided at the first shape it planned, made again at every
/// later one.
#[derive(Clone)]
struct Decided {
    layouts: Arc<LayoutDecisions>,
    conv_algos: Arc<DecidedAlgos>,
}

/// Compiled models by their input shapes, the most recently used last.
type CompiledShapes = Vec<(Vec<Vec<usize>>, Arc<ShapeModel>)>;

/// What a session imports its model from at a new input shape.
enum Source {
    /// The file: a TFLite model (its shapes are static), or an ONNX model
    /// whose inputs are all static, compiled when the session opened.
    File,
    /// An ONNX model with free dimensions, decoded once: each new shape
    /// imports its nodes again and shares its weights.
    Decoded(Box<DecodedModel>),
    /// An ONNX model cut before an op whose output shape depends on values.
    Staged(Box<Staged>),
}

/// A model file opened for running at any shape it declares.
pub struct Session {
    path: PathBuf,
    source: Source,
    options: SessionOptions,
    interface: Interface,
    compiled: Mutex<CompiledShapes>,
    decided: Mutex<Option<Decided>>,
}

impl Session {
    /// Opens the ONNX or TFLite model at `path`: reads what it declares and,
    /// when every input is static, compiles it.
    pub fn open(path: &Path, options: SessionOptions) -> Result<Session, Error> {
        let mut head = Vec::with_capacity(8);
        crate::frontend::open_file(path)
            .and_then(|f| f.take(8).read_to_end(&mut head))
            .map_err(|source| crate::frontend::onnx::ImportError::Io {
                path: path.display().to_string(),
                source,
            })?;
        let tflite = is_tflite(&head) || path.extension().is_some_and(|e| e == "tflite");
        // A TFLite model runs at the shapes it stores.
        if tflite {
            let whole = ImportOptions::default();
            let (graph, model, decided) =
                Session::build(path, &Source::File, &options, &whole, None)?;
            let interface = Interface::of_graph(&graph);
            (options.bounds.check_against(&interface)).map_err(Error::Input)?;
            let s = Session {
                path: path.to_path_buf(),
                source: Source::File,
                options,
                interface,
                compiled: Mutex::new(Vec::new()),
                decided: Mutex::new(None),
            };
            return Ok(s.holding(model, decided));
        }
        Session::of_decoded(path, DecodedModel::read(path)?, options)
    }

    /// A session over the decoded ONNX model read from `path`: compiled now
    /// when its inputs are static, run in stages when an op's output shape
    /// depends on values computed at run time.
    pub(super) fn of_decoded(
        path: &Path,
        decoded: DecodedModel,
        options: SessionOptions,
    ) -> Result<Session, Error> {
        let interface = decoded.interface()?;
        (options.bounds.check_against(&interface)).map_err(Error::Input)?;
        let whole = ImportOptions::default();
        let session = |source| Session {
            path: path.to_path_buf(),
            source,
            options: options.clone(),
            interface: interface.clone(),
            compiled: Mutex::new(Vec::new()),
            decided: Mutex::new(None),
        };
        if let Some(stages) = decoded.stages()? {
            let staged = Staged::open(path, stages, &options)?;
            return Ok(session(Source::Staged(Box::new(staged))));
        }
        if interface.is_static() {
            let source = Source::Decoded(Box::new(decoded));
            let (_, model, decided) = Session::build(path, &source, &options, &whole, None)?;
            // Its one shape is compiled: the weights need not be kept twice.
            return Ok(session(Source::File).holding(model, decided));
        }
        let s = session(Source::Decoded(Box::new(decoded)));
        if let Some(largest) = s.largest_shapes() {
            let shapes: Vec<&[usize]> = largest.iter().map(Vec::as_slice).collect();
            s.model_for(&shapes)?;
        }
        Ok(s)
    }

    /// The largest shape of every input the bounds allow, when they bound
    /// every free dimension.
    fn largest_shapes(&self) -> Option<Vec<Vec<usize>>> {
        let upper = self.options.bounds.upper();
        (self.interface.inputs.iter())
            .map(|v| match (upper.get(&v.name), &v.dims) {
                (Some(shape), _) => Some(shape.clone()),
                (None, Some(dims)) => (dims.iter())
                    .map(|d| match d {
                        Dim::Static(n) => Some(*n),
                        _ => None,
                    })
                    .collect(),
                (None, None) => None,
            })
            .collect()
    }

    /// The session with `model` compiled for its shapes, and what was
    /// decided for it.
    fn holding(self, model: ShapeModel, decided: Decided) -> Session {
        let shapes = model.inputs.iter().map(|t| t.shape.clone()).collect();
        self.lock().push((shapes, Arc::new(model)));
        *lock(&self.decided) = Some(decided);
        self
    }

    /// What the model takes and gives, free dimensions unbound.
    pub fn interface(&self) -> &Interface {
        &self.interface
    }

    /// The options the session compiles with.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The model compiled for these input shapes (in the interface's
    /// order), and whether this call compiled it: from the cache, or
    /// imported, planned (or its first shape's plan made again) and compiled
    /// now. A shape the model does not declare
    /// is an error naming the input and dimension.
    pub fn model_for(&self, shapes: &[&[usize]]) -> Result<(Arc<ShapeModel>, bool), Error> {
        self.check_shapes(shapes)?;
        if let Source::Staged(staged) = &self.source {
            return Err(staged.no_single_model());
        }
        let key: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
        {
            let mut cache = self.lock();
            if let Some(at) = cache.iter().position(|(k, _)| *k == key) {
                let hit = cache.remove(at);
                let model = hit.1.clone();
                cache.push(hit);
                return Ok((model, false));
            }
        }
        let opts = ImportOptions {
            input_shapes: (self.interface.inputs.iter())
                .zip(&key)
                .map(|(v, s)| (v.name.clone(), s.clone()))
                .collect(),
            ..ImportOptions::default()
        };
        let earlier = lock(&self.decided).clone();
        let (_, model, decided) = Session::build(
            &self.path,
            &self.source,
            &self.options,
            &opts,
            earlier.as_ref(),
        )?;
        lock(&self.decided).get_or_insert(decided);
        let model = Arc::new(model);
        let mut cache = self.lock();
        cache.push((key, model.clone()));
        let excess = cache.len().saturating_sub(self.options.max_shapes.max(1));
        cache.drain(..excess);
        Ok((model, true))
    }

    /// Runs the model on `inputs`, in the interface's order; returns the
    /// outputs in the interface's order.
    pub fn run(&self, inputs: &[ModelInput]) -> Result<Vec<Tensor>, Error> {
        let shapes: Vec<&[usize]> = inputs.iter().map(ModelInput::shape).collect();
        if let Source::Staged(staged) = &self.source {
            self.check_shapes(&shapes)?;
            let names: Vec<&str> = self
                .interface
                .inputs
                .iter()
                .map(|v| v.name.as_str())
                .collect();
            return staged.run(&names, inputs);
        }
        let (compiled, _) = self.model_for(&shapes)?;
        Ok(compiled.model.run_inputs(inputs)?)
    }

    /// The layer the model is cut at when it runs in stages (the first op
    /// whose output shape depends on values computed at run time): it then
    /// has no one compiled model ([`Session::model_for`]).
    pub fn cut(&self) -> Option<&crate::graph::Span> {
        match &self.source {
            Source::Staged(staged) => Some(staged.cut()),
            _ => None,
        }
    }

    /// Checks `shapes` against what the model declares and the bounds.
    fn check_shapes(&self, shapes: &[&[usize]]) -> Result<(), Error> {
        self.interface.check_shapes(shapes).map_err(Error::Input)?;
        (self.options.bounds.check(&self.interface, shapes)).map_err(Error::Input)
    }

    /// The steps that run on the reference executor, without a native
    /// kernel, in every model compiled so far (each stage's of a model run in
    /// stages): their names, kinds and source layers, each step once.
    pub fn fallback_steps(&self) -> Vec<(String, String, Vec<crate::graph::Span>)> {
        let mut found: Vec<(String, String, Vec<crate::graph::Span>)> = vec![];
        let compiled = self
            .lock()
            .iter()
            .flat_map(|(_, m)| m.model.fallback_steps())
            .collect::<Vec<_>>();
        let staged = match &self.source {
            Source::Staged(staged) => staged.fallback_steps(),
            _ => vec![],
        };
        for step in compiled.into_iter().chain(staged) {
            if !found.iter().any(|f| f.0 == step.0) {
                found.push(step);
            }
        }
        found
    }

    /// The input shapes compiled and kept, the most recently used last.
    pub fn compiled_shapes(&self) -> Vec<Vec<Vec<usize>>> {
        self.lock().iter().map(|(k, _)| k.clone()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CompiledShapes> {
        lock(&self.compiled)
    }

    /// Imports the model from `source` (or the file at `path`) with `opts`,
    /// plans and compiles it: with `decided`'s layouts and algorithms where
    /// they fit the graph, else planned with measured costs. Also returns
    /// what the model was compiled with.
    fn build(
        path: &Path,
        source: &Source,
        options: &SessionOptions,
        opts: &ImportOptions,
        decided: Option<&Decided>,
    ) -> Result<(crate::graph::Graph, ShapeModel, Decided), Error> {
        let start = Instant::now();
        let graph = match source {
            Source::File => load_model_with(path, opts)?,
            Source::Decoded(model) => model.import(opts)?,
            Source::Staged(staged) => return Err(staged.no_single_model()),
        };
        let imported = Instant::now();
        // A graph the decisions do not fit is planned afresh, which reports
        // any real fault of it.
        let replayed = decided.and_then(|d| {
            let plan = PlanLayouts::replaying(d.layouts.clone(), options.target)
                .plan(&graph)
                .ok()?;
            Some((plan, d.clone()))
        });
        let (plan, runtime, replayed) = match replayed {
            Some((plan, d)) => {
                let mut runtime = options.runtime.clone();
                runtime.conv_algo.decided = Some(d.conv_algos);
                (plan, runtime, true)
            }
            None => {
                let costs = (options.costs.clone())
                    .unwrap_or_else(|| Costs::Measured(options.runtime.clone()));
                let plan = PlanLayouts::new(options.planner, options.target)
                    .with_costs(costs)
                    .plan(&graph)?;
                (plan, options.runtime.clone(), false)
            }
        };
        let planned = Instant::now();
        let model = compile(Machine::shared(), &plan.graph, &runtime)?;
        let stages = CompileStages {
            import: imported - start,
            plan: planned - imported,
            compile: planned.elapsed(),
        };
        let decided = Decided {
            conv_algos: Arc::new(model.decided_algos()),
            layouts: Arc::new(plan.decisions),
        };
        let g = &plan.graph;
        let inputs = (g.inputs().iter())
            .map(|&id| g.node(id).outputs[0].ty.clone())
            .collect();
        let model = ShapeModel {
            model,
            inputs,
            compile_time: start.elapsed(),
            stages,
            replayed,
        };
        Ok((graph, model, decided))
    }
}

/// The value behind `m`: a panic while holding the lock leaves a valid value.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
