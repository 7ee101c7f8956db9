//! The machine-readable output of every command (`--json`) and of the Python
//! package: one versioned schema, documented in `docs/json-schema.md` and
//! written down as a JSON Schema in `docs/layoutopt.schema.json`.
//!
//! Every document is an object with `schema_version`, `command` and
//! `model_file` (the model's file name, never its folder), and the command's
//! own keys. Tensors are named by the model's tensor names, spans are objects
//! (`file`, `layer`, `op_type`, `index`), and every key with a unit says it:
//! `_ms` (milliseconds), `_ns` (nanoseconds), `_bytes`.

use crate::graph::{Graph, Op, Span};
use crate::layout::report::PlanReport;
use crate::runtime::{ConvAlgo, LayerAlgo};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The schema's version: raised whenever a key changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 3;

/// A document of `command` about the model at `model`: the envelope's keys
/// and those of `body` (an object), pretty-printed.
pub fn document<T: Serialize>(command: &str, model: &Path, body: &T) -> String {
    let mut doc = serde_json::Map::new();
    doc.insert("schema_version".into(), SCHEMA_VERSION.into());
    doc.insert("command".into(), command.into());
    doc.insert("model_file".into(), file_name(model).into());
    match serde_json::to_value(body) {
        Ok(serde_json::Value::Object(fields)) => doc.extend(fields),
        other => unreachable!("a document body is an object, not {other:?}"),
    }
    serde_json::to_string_pretty(&serde_json::Value::Object(doc)).unwrap_or_default()
}

/// The `plan` document: the plan report, and with `conv_algorithms` (the
/// CLI's, which compiles nothing else) each convolution step's algorithm under
/// `timings`, since it is chosen by measuring.
pub fn plan_document(
    model: &Path,
    report: &PlanReport,
    conv_algorithms: Option<&[LayerAlgo]>,
) -> String {
    let Some(convs) = conv_algorithms else {
        return document("plan", model, report);
    };
    let mut body = serde_json::to_value(report).unwrap_or_default();
    let convs: Vec<ConvAlgorithm> = convs.iter().map(ConvAlgorithm::from).collect();
    if let Some(timings) = body.get_mut("timings").and_then(|t| t.as_object_mut()) {
        timings.insert(
            "conv_algorithms".into(),
            serde_json::to_value(convs).unwrap_or_default(),
        );
    }
    document("plan", model, &body)
}

/// The algorithm a convolution step runs with, and what choosing it measured.
#[derive(Clone, Debug, Serialize)]
pub struct ConvAlgorithm {
    /// The step's name.
    pub step: String,
    /// The algorithm it runs with (`direct`, `winograd-f2`, `winograd-f4`).
    pub algorithm: String,
    /// Each timed candidate's milliseconds (empty unless chosen by measuring).
    pub measured_ms: BTreeMap<String, f64>,
    /// Each Winograd size's relative error on the layer against the direct kernel.
    pub relative_error: BTreeMap<String, f64>,
    /// The source layers it computes.
    pub spans: Vec<Span>,
}

impl From<&LayerAlgo> for ConvAlgorithm {
    fn from(c: &LayerAlgo) -> ConvAlgorithm {
        let by_algo =
            |pairs: &[(ConvAlgo, f64)]| pairs.iter().map(|(a, v)| (a.to_string(), *v)).collect();
        ConvAlgorithm {
            step: c.name.clone(),
            algorithm: c.decision.algo.to_string(),
            measured_ms: by_algo(&c.decision.millis),
            relative_error: by_algo(&c.decision.errors),
            spans: c.spans.clone(),
        }
    }
}

/// A tensor of the model's interface or of a node.
#[derive(Clone, Debug, Serialize)]
pub struct TensorInfo {
    /// The model's name for it.
    pub name: String,
    /// Its element type.
    pub dtype: String,
    /// Its logical shape.
    pub shape: Vec<usize>,
}

/// One node of an imported graph.
#[derive(Clone, Debug, Serialize)]
pub struct NodeInfo {
    /// The node's name.
    pub name: String,
    /// Its op.
    pub op: String,
    /// The tensors it produces.
    pub outputs: Vec<TensorInfo>,
    /// The layout its outputs are stored in ("row-major" unless planned).
    pub layout: String,
    /// The source layers it stands for.
    pub spans: Vec<Span>,
}

/// The `inspect` document: the imported graph.
#[derive(Clone, Debug, Serialize)]
pub struct Inspection {
    /// The model's name.
    pub graph: String,
    /// Graph inputs.
    pub inputs: Vec<TensorInfo>,
    /// Graph outputs.
    pub outputs: Vec<TensorInfo>,
    /// Constants (not listed among the nodes).
    pub constants: usize,
    /// Every other node, in topological order.
    pub nodes: Vec<NodeInfo>,
    /// How many nodes of each op.
    pub op_counts: BTreeMap<String, usize>,
}

impl Inspection {
    /// The inspection of `g`.
    pub fn of(g: &Graph) -> Result<Inspection, crate::graph::GraphError> {
        let tensor = |v: &crate::graph::Value| TensorInfo {
            name: v.name.clone(),
            dtype: v.ty.dtype.to_string(),
            shape: v.ty.shape.clone(),
        };
        let mut nodes = Vec::new();
        let mut op_counts = BTreeMap::new();
        let mut constants = 0;
        for id in g.topo_order()? {
            let n = g.node(id);
            if matches!(n.op, Op::Constant(_)) {
                constants += 1;
                continue;
            }
            *op_counts.entry(n.op.kind_name().to_string()).or_default() += 1;
            // An imported graph stores every tensor row-major (TFLite
            // activations are NHWC tensors, row-major); a planned op says
            // where its output lives.
            let layout = match &n.op {
                Op::InLayout(l) => l.outputs[0].0.to_string(),
                _ => "row-major".to_string(),
            };
            nodes.push(NodeInfo {
                name: n.name.clone(),
                op: n.op.kind_name().to_string(),
                outputs: n.outputs.iter().map(tensor).collect(),
                layout,
                spans: n.spans.clone(),
            });
        }
        Ok(Inspection {
            graph: g.name.clone(),
            inputs: g
                .inputs()
                .iter()
                .map(|&id| tensor(&g.node(id).outputs[0]))
                .collect(),
            outputs: g.outputs().iter().map(|&v| tensor(g.value(v))).collect(),
            constants,
            nodes,
            op_counts,
        })
    }
}

/// Timed runs of a compiled model.
#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    /// Compiling the planned graph (not part of any run).
    pub compile_ms: f64,
    /// Worker threads.
    pub threads: usize,
    /// Untimed runs before the timed ones.
    pub warmup_runs: usize,
    /// Every timed run, in the order they ran.
    pub runs_ms: Vec<f64>,
    /// The fastest run.
    pub min_ms: f64,
    /// The median run (nearest rank).
    pub p50_ms: f64,
    /// The 90th percentile (nearest rank).
    pub p90_ms: f64,
    /// The mean run.
    pub mean_ms: f64,
    /// One run as the cost model predicts it (`compare --measure`, `bench
    /// --profile`; else `null`): each step's measured kernel time, else its
    /// bytes and flops at the machine's peaks.
    pub predicted_ms: Option<f64>,
}

impl Timing {
    /// The timing of a bench report.
    pub fn of(
        report: &crate::runtime::profile::bench::BenchReport,
        compile: std::time::Duration,
        threads: usize,
        warmup_runs: usize,
    ) -> Timing {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        Timing {
            compile_ms: ms(compile),
            threads,
            warmup_runs,
            runs_ms: report.times.iter().map(|&d| ms(d)).collect(),
            min_ms: ms(report.min),
            p50_ms: ms(report.p50),
            p90_ms: ms(report.p90),
            mean_ms: ms(report.mean),
            predicted_ms: report
                .profile
                .as_ref()
                .map(|p| p.predicted.iter().sum::<f64>() * 1e3),
        }
    }
}

/// The `export` document: the plan written and where.
#[derive(Clone, Debug, Serialize)]
pub struct Export<'a> {
    /// What the model is for (`verification` or `onnxruntime`).
    #[serde(rename = "for")]
    pub purpose: &'static str,
    /// The planner that made the plan.
    pub planner: &'a str,
    /// The target layout family.
    pub target: &'a str,
    /// Transforms the plan keeps that move data.
    pub transform_count: usize,
    /// The written model's file name (no folder).
    pub output_file: String,
    /// Its opset.
    pub opset: i64,
    /// The source's symbolic batch, if it has one.
    pub symbolic_batch: Option<&'a str>,
    /// Whether that batch stayed symbolic (else the plan fixed it).
    pub batch_kept_symbolic: bool,
    /// The external data file's name, when the tensors went to one.
    pub data_file: Option<String>,
}

/// A path's file name, without the folders of the machine that wrote it.
fn file_name(p: &Path) -> String {
    p.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

impl<'a> Export<'a> {
    /// The document of `written`, an export of the plan `report` describes.
    pub fn of(
        purpose: super::ExportFor,
        report: &'a PlanReport,
        written: &'a super::Exported,
    ) -> Export<'a> {
        Export {
            purpose: purpose.name(),
            planner: &report.planner,
            target: &report.family,
            transform_count: report.transform_count,
            output_file: file_name(&written.path),
            opset: written.opset,
            symbolic_batch: written.symbolic_batch.as_deref(),
            batch_kept_symbolic: written.batch_kept_symbolic,
            data_file: written.data_file.as_deref().map(file_name),
        }
    }
}

/// One planner's row of the `compare` document.
#[derive(Clone, Debug, Serialize)]
pub struct CompareRow {
    /// The planner.
    pub planner: String,
    /// Transforms its plan keeps that move data.
    pub transform_count: usize,
    /// Bytes those transforms read and write.
    pub transform_bytes: usize,
    /// Its objective under the cost model (ns, estimated).
    pub estimated_cost_ns: f64,
    /// How long planning took.
    pub plan_ms: f64,
    /// The solver's relative gap (global planner only).
    pub solver_gap: Option<f64>,
    /// Compile time and timed runs, with `--measure`.
    pub measured: Option<Timing>,
}

impl CompareRow {
    /// The row of a plan, with its measurement if any.
    pub fn of(report: &PlanReport, measured: Option<Timing>) -> CompareRow {
        CompareRow {
            planner: report.planner.clone(),
            transform_count: report.transform_count,
            transform_bytes: report.transform_bytes,
            estimated_cost_ns: report.estimated_cost,
            plan_ms: report.timings.plan_ms,
            solver_gap: report.solver.as_ref().map(|s| s.gap),
            measured,
        }
    }
}

/// The `compare` document: every planner on one target.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The target layout family.
    pub target: String,
    /// One row per planner.
    pub planners: Vec<CompareRow>,
}

/// The first step of a run whose output held NaN or an infinity (`--check-finite`).
#[derive(Clone, Debug, Serialize)]
pub struct NonFiniteStep {
    /// The step's name.
    pub step: String,
    /// The ops of the step.
    pub kind: String,
    /// The source layers it computes.
    pub spans: Vec<Span>,
    /// Its logical output elements that are NaN.
    pub nan: usize,
    /// ... that are +inf.
    pub pos_inf: usize,
    /// ... that are -inf.
    pub neg_inf: usize,
    /// Its logical output elements.
    pub elements: usize,
}

impl From<crate::runtime::NonFinite> for NonFiniteStep {
    fn from(f: crate::runtime::NonFinite) -> NonFiniteStep {
        NonFiniteStep {
            step: f.step,
            kind: f.kind,
            spans: f.spans,
            nan: f.counts[0],
            pos_inf: f.counts[1],
            neg_inf: f.counts[2],
            elements: f.of,
        }
    }
}

/// How one compiled run went.
#[derive(Clone, Debug, Serialize)]
pub struct Execution {
    /// Compiling the planned graph.
    pub compile_ms: f64,
    /// The run.
    pub run_ms: f64,
    /// The instruction set of the kernels.
    pub isa: String,
    /// Worker threads.
    pub threads: usize,
    /// The intermediate-value arena.
    pub arena_bytes: usize,
    /// Worker pools the process's machine context started, from import to
    /// the end of the run (one: planning, compiling and running share it).
    pub worker_pools: usize,
    /// Steps that ran on the reference executor (no native kernel).
    pub fallback_steps: Vec<String>,
    /// With `--check-finite`: the first step with NaN or infinite output,
    /// `null` when every step's output was finite.
    pub first_non_finite: Option<NonFiniteStep>,
}

/// One output of a run.
#[derive(Clone, Debug, Serialize)]
pub struct OutputSummary {
    /// The model's output name.
    pub name: String,
    /// Its element type.
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// The smallest element (NaN, written `null`, when any element is NaN).
    pub min: f64,
    /// The largest element (NaN when any element is NaN).
    pub max: f64,
    /// The mean element.
    pub mean: f64,
    /// Elements that are NaN or infinite.
    pub non_finite: usize,
    /// The largest absolute difference from the recorded output, when the
    /// model has one (elements finite on both sides).
    pub max_abs_error: Option<f64>,
    /// Elements NaN or infinite on one side only (recorded output only).
    pub mismatched: Option<usize>,
}

/// The `run` document.
#[derive(Clone, Debug, Serialize)]
pub struct RunDoc {
    /// The planner.
    pub planner: String,
    /// The target layout family.
    pub target: String,
    /// Importing the model.
    pub import_ms: f64,
    /// Planning it.
    pub plan_ms: f64,
    /// Transforms the plan keeps that move data.
    pub transform_count: usize,
    /// Compilation and the run.
    pub execution: Execution,
    /// Every output, in the model's order.
    pub outputs: Vec<OutputSummary>,
}

/// One step of a `bench --profile`.
#[derive(Clone, Debug, Serialize)]
pub struct StepTime {
    /// The step's name.
    pub name: String,
    /// Its ops.
    pub kind: String,
    /// Whether it ran on the reference executor.
    pub fallback: bool,
    /// Its mean time per run.
    pub mean_ms: f64,
    /// Its median time over the runs.
    pub median_ms: f64,
    /// Its time per run as the cost model predicts it.
    pub predicted_ms: f64,
    /// Bytes it reads and writes per run.
    pub moved_bytes: u64,
    /// Its floating-point operations per run.
    pub flops: f64,
}

/// The `bench` document.
#[derive(Clone, Debug, Serialize)]
pub struct BenchDoc {
    /// The planner.
    pub planner: String,
    /// The target layout family.
    pub target: String,
    /// The instruction set of the kernels.
    pub isa: String,
    /// The intermediate-value arena.
    pub arena_bytes: usize,
    /// Importing the model.
    pub import_ms: f64,
    /// Planning it.
    pub plan_ms: f64,
    /// Compile time and every timed run.
    pub timing: Timing,
    /// With `--profile`: every step, in run order.
    pub profile: Option<Vec<StepTime>>,
}

impl BenchDoc {
    /// The document of a bench report, the model imported in `import_ms`.
    pub fn of(
        report: &PlanReport,
        import_ms: f64,
        model: &crate::runtime::CompiledModel,
        bench: &crate::runtime::profile::bench::BenchReport,
        timing: Timing,
    ) -> BenchDoc {
        let profile = bench.profile.as_ref().map(|p| {
            p.steps
                .iter()
                .zip(&p.predicted)
                .map(|(s, predicted)| StepTime {
                    name: s.name.clone(),
                    kind: s.kind.clone(),
                    fallback: s.fallback,
                    mean_ms: s.times.iter().sum::<std::time::Duration>().as_secs_f64() * 1e3
                        / p.runs.max(1) as f64,
                    median_ms: s.median().as_secs_f64() * 1e3,
                    predicted_ms: predicted * 1e3,
                    moved_bytes: s.work.bytes,
                    flops: s.work.flops,
                })
                .collect()
        });
        BenchDoc {
            planner: report.planner.clone(),
            target: report.family.clone(),
            isa: model.isa().to_string(),
            arena_bytes: model.arena_bytes(),
            import_ms,
            plan_ms: report.timings.plan_ms,
            timing,
            profile,
        }
    }
}

/// One shape of `bench --shapes`.
#[derive(Clone, Debug, Serialize)]
pub struct ShapeTiming {
    /// Every input's shape, in the model's input order.
    pub shapes: Vec<Vec<usize>>,
    /// Whether this shape was imported, planned and compiled for itself (not
    /// before, for the same shape or when a static model's session opened).
    pub compiled_now: bool,
    /// Whether the layouts and convolution algorithms decided at the
    /// session's first shape were made again for this one (nothing planned
    /// or measured) rather than planned for it.
    pub replayed: bool,
    /// Of the shape's `compile_ms`: the import, the plan and the compile of
    /// the planned graph.
    pub import_ms: f64,
    #[allow(missing_docs)]
    pub plan_ms: f64,
    #[allow(missing_docs)]
    pub build_ms: f64,
    /// Import, plan and compile of this shape (`compile_ms`), and its timed runs.
    pub timing: Timing,
}

/// The `bench_shapes` document: `bench --shapes`, one row per shape.
#[derive(Clone, Debug, Serialize)]
pub struct BenchShapesDoc {
    /// The planner.
    pub planner: String,
    /// The target layout family.
    pub target: String,
    /// Milliseconds opening the session took: the file read and decoded
    /// once (and a static model compiled, or bounds' largest shape planned
    /// and compiled ahead).
    pub open_ms: f64,
    /// Every shape, in the order given.
    pub shapes: Vec<ShapeTiming>,
}

/// The `explore` document: the plans shown and the page written.
#[derive(Clone, Debug, Serialize)]
pub struct Exploration {
    /// The planners of the plans shown, in page order.
    pub planners: Vec<String>,
    /// The target layout family.
    pub target: String,
    /// The page's file name (no folder).
    pub output_file: String,
}

impl Exploration {
    /// The document of a page of `reports`' plans written at `out`.
    pub fn of(reports: &[&PlanReport], out: &Path) -> Exploration {
        Exploration {
            planners: reports.iter().map(|r| r.planner.clone()).collect(),
            target: reports
                .first()
                .map(|r| r.family.clone())
                .unwrap_or_default(),
            output_file: file_name(out),
        }
    }
}
