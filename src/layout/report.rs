//! What a plan reports: the transforms it keeps, where every model tensor
//! lives, what the solver and the rewriting did, and how long it took.

use super::cost::{physical_bytes, same_bytes};
use super::extract::{FiredRule, Method, RewriteReport, StopReason};
use super::space::Pins;
use super::Layout;
use crate::graph::{format_spans, Graph, Node, Op, Span, ValueType};
use crate::ops::LayoutTransform;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};

/// What the solver did.
#[derive(Clone, Debug, Serialize)]
pub struct SolverInfo {
    /// The cost of the chosen assignment (ns, estimated).
    #[serde(rename = "objective_ns")]
    pub objective: f64,
    /// A proved lower bound on the optimal cost (ns).
    #[serde(rename = "lower_bound_ns")]
    pub lower_bound: f64,
    /// The relative gap between the two.
    pub gap: f64,
    /// Independent regions solved.
    pub regions: usize,
    /// Variables fixed before solving (one choice or dominated).
    pub fixed_variables: usize,
    /// Regions by method ("elimination", "lp-integral", "integer", "fallback").
    pub methods: BTreeMap<String, usize>,
    /// Whether some region fell back to a heuristic.
    pub fallback_used: bool,
}

/// One transform the plan keeps.
#[derive(Clone, Debug, Serialize)]
pub struct TransformInfo {
    /// The model tensor transformed.
    #[serde(rename = "tensor")]
    pub value: String,
    /// Its layout before.
    pub from: String,
    /// Its layout after.
    pub to: String,
    /// Its logical shape.
    pub shape: Vec<usize>,
    /// Bytes the transform reads and writes (0 for a relabelling).
    #[serde(rename = "moved_bytes")]
    pub bytes: usize,
    /// Both layouts put every element at the same offset: no data moves.
    pub relabel: bool,
    /// The layers on either side of it.
    pub spans: Vec<Span>,
}

impl TransformInfo {
    /// "FROM -> TO" with each side's padded axes spelled out.
    fn describe(&self) -> String {
        let (from, to) = (&self.from, &self.to);
        let shape = &self.shape;
        format!("{} -> {}", describe(from, shape), describe(to, shape))
    }
}

/// The layout named `name` (as a report holds it) with the padded axes of a
/// tensor of shape `shape` spelled out.
fn describe(name: &str, shape: &[usize]) -> String {
    Layout::parse(name).map_or_else(|_| name.to_string(), |l| l.describe(shape))
}

/// Where a model tensor lives in a planned graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorLayout {
    /// The layout its producer writes it in.
    pub layout: String,
    /// Whether that is the row-major layout of its logical shape.
    pub row_major: bool,
    /// Its element type.
    pub dtype: String,
    /// Its logical shape.
    pub shape: Vec<usize>,
}

/// What a plan decided and what it costs.
#[derive(Clone, Debug, Serialize)]
pub struct PlanReport {
    /// The model's name.
    pub model: String,
    /// The planner that ran.
    pub planner: String,
    /// The target layout family.
    #[serde(rename = "target")]
    pub family: String,
    /// Every model tensor the planned graph keeps (graph inputs and op
    /// outputs; constants and tensors folded away are not listed), by name.
    pub tensors: BTreeMap<String, TensorLayout>,
    /// Every transform the plan keeps that moves data, in topological order.
    pub transforms: Vec<TransformInfo>,
    /// How many: `transforms.len()`.
    pub transform_count: usize,
    /// Bytes those transforms read and write.
    pub transform_bytes: usize,
    /// Every transform between layouts with the same bytes (no data moves: a
    /// relabelling), in topological order.
    pub relabels: Vec<TransformInfo>,
    /// How many: `relabels.len()`.
    pub relabel_count: usize,
    /// Constants re-packed into another layout at compile time.
    pub packed_constants: usize,
    /// Padding refills inserted where an op needed a known padding value.
    pub refills: usize,
    /// The rewriting of the op graph by the graph-stage rules, before the
    /// layouts were chosen, when there were such rules.
    pub graph_rewrite: Option<RewriteInfo>,
    /// The planner's objective under the cost model (ns, estimated).
    #[serde(rename = "estimated_cost_ns")]
    pub estimated_cost: f64,
    /// `estimated_cost` with the transforms the rewriting removed or added
    /// (ns, estimated): what the planned graph costs under the cost model.
    #[serde(rename = "rewritten_cost_ns")]
    pub rewritten_cost: f64,
    /// Measured times within this fraction of each other count as one, so
    /// that noise cannot flip a choice between alternatives that measure
    /// alike (`cost::WithinMargin`); 0 under an unmeasured cost model.
    pub cost_margin: f64,
    /// Convolutions a measured cost model could not measure in some pair of
    /// layouts (no native kernel for them, not f32, too large to measure),
    /// priced there by the estimate: where the cost model guessed. 0 under
    /// the unmeasured cost model, which estimates every one.
    pub unmeasured_convs: usize,
    /// Layout transforms a measured cost model priced from one measured at a
    /// shape that differs in one axis (a family of shapes is measured once),
    /// not at their own: where it estimated from a neighbour. 0 under the
    /// unmeasured cost model.
    pub estimated_transforms: usize,
    /// Convolutions (each in a pair of layouts) a measured cost model priced
    /// from one measured with a neighbouring count of input or output
    /// channels, not at their own. 0 under the unmeasured cost model.
    pub estimated_convs: usize,
    /// The solver's account, for the global planner.
    pub solver: Option<SolverInfo>,
    /// The e-graph rewriting after materialisation, when it ran.
    pub rewrite: Option<RewriteInfo>,
    /// Wall-clock measurements, the only fields that differ between runs: one
    /// key, so that tools comparing reports can drop it.
    pub timings: PlanTimings,
}

/// How long planning took.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PlanTimings {
    /// The whole plan (ms).
    pub plan_ms: f64,
    /// The planner's assignment of layouts: the solver, for the global planner (ms).
    pub assign_ms: f64,
    /// The e-graph rewriting of the planner's assignment and of each
    /// alternative worth rewriting (ms).
    pub rewrite_ms: f64,
    /// Every pass of the plan, in the order it ran.
    pub passes: Vec<PassTiming>,
}

/// One pass of a plan, as it ran.
#[derive(Clone, Debug, Serialize)]
pub struct PassTiming {
    /// The pass's name.
    pub name: &'static str,
    /// Its wall time (ms).
    pub wall_ms: f64,
}

impl PlanReport {
    /// The report with its timings zeroed: what was decided, the same on every run.
    pub fn without_timings(self) -> PlanReport {
        PlanReport {
            timings: PlanTimings::default(),
            ..self
        }
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan report serialises")
    }

    /// The report as text for the terminal.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "plan of {} with '{}' for {}: {} transforms, {} bytes moved, {} relabels (no data moved), estimated cost {:.1} us, planned in {:.1} ms",
            self.model,
            self.planner,
            self.family,
            self.transform_count,
            self.transform_bytes,
            self.relabel_count,
            self.estimated_cost / 1e3,
            self.timings.plan_ms
        );
        if self.unmeasured_convs > 0 {
            let _ = writeln!(
                s,
                "cost model: {} convolutions could not be measured in some layouts and are estimated there",
                self.unmeasured_convs
            );
        }
        if self.estimated_transforms > 0 || self.estimated_convs > 0 {
            let _ = writeln!(
                s,
                "cost model: {} layout transforms and {} convolutions (in a pair of layouts) are priced from one measured at a neighbouring shape",
                self.estimated_transforms, self.estimated_convs
            );
        }
        if let Some(sv) = &self.solver {
            let _ = writeln!(
                s,
                "solver: objective {:.1}, lower bound {:.1}, gap {:.2}%, {} regions {:?}, {} fixed{}",
                sv.objective,
                sv.lower_bound,
                sv.gap * 100.0,
                sv.regions,
                sv.methods,
                sv.fixed_variables,
                if sv.fallback_used { ", FALLBACK used" } else { "" }
            );
        }
        if let Some(r) = &self.graph_rewrite {
            r.describe("graph rules", &mut s);
        }
        if let Some(r) = &self.rewrite {
            r.describe("rewrite", &mut s);
        }
        let _ = writeln!(
            s,
            "constants re-packed: {}, padding refills: {}",
            self.packed_constants, self.refills
        );
        for t in &self.transforms {
            let _ = writeln!(
                s,
                "  transform {} {} ({} bytes) at {}",
                t.value,
                t.describe(),
                t.bytes,
                format_spans(&t.spans)
            );
        }
        for t in &self.relabels {
            let _ = writeln!(
                s,
                "  relabel {} {} at {}",
                t.value,
                t.describe(),
                format_spans(&t.spans)
            );
        }
        for (name, t) in self.tensors.iter().filter(|(_, t)| !t.row_major) {
            let _ = writeln!(s, "  layout {name} {}", describe(&t.layout, &t.shape));
        }
        s
    }
}

/// What the e-graph rewriting of the materialised graph did.
#[derive(Clone, Debug, Serialize)]
pub struct RewriteInfo {
    /// Whether its result replaced the materialised graph.
    pub applied: bool,
    /// Whether it did not run at all (rules that failed to load, a graph it
    /// cannot express): the plan then stands unrewritten, and
    /// the user is warned.
    pub skipped: bool,
    /// Why it was not applied or skipped, and any rule condition that failed.
    pub note: Option<String>,
    /// Rewriting iterations run.
    pub iterations: usize,
    /// The extractor used (none when skipped).
    #[serde(serialize_with = "display_text")]
    pub extraction: Option<Method>,
    /// Estimated cost before rewriting (ns): the bytes the e-graph's cost
    /// counts (every op's and transform's inputs and outputs) at the cost
    /// model's `ns_per_byte`.
    #[serde(rename = "cost_before_ns")]
    pub cost_before: f64,
    /// Estimated cost after rewriting (ns), the same way.
    #[serde(rename = "cost_after_ns")]
    pub cost_after: f64,
    /// Why rewriting stopped (`Saturated` when no rule could change more).
    #[serde(serialize_with = "display_text")]
    pub stop_reason: Option<StopReason>,
    /// The rules whose rewrites the result keeps, with the layers each covered.
    pub fired: Vec<FiredRule>,
}

impl RewriteInfo {
    pub(super) fn skipped(note: String) -> RewriteInfo {
        RewriteInfo {
            applied: false,
            skipped: true,
            note: Some(note),
            iterations: 0,
            extraction: None,
            cost_before: 0.0,
            cost_after: 0.0,
            stop_reason: None,
            fired: vec![],
        }
    }

    /// The account of a rewriting run `r`, its result `applied` or not, with
    /// `notes`; costs at `ns_per_byte`.
    pub(super) fn ran(
        r: &RewriteReport,
        applied: bool,
        notes: Vec<String>,
        ns_per_byte: f64,
    ) -> RewriteInfo {
        RewriteInfo {
            applied,
            skipped: false,
            note: (!notes.is_empty()).then(|| notes.join("; ")),
            iterations: r.iterations,
            extraction: Some(r.extract.method),
            cost_before: r.cost_before * ns_per_byte,
            cost_after: r.extract.cost * ns_per_byte,
            stop_reason: Some(r.stop_reason.clone()),
            fired: if applied { r.fired.clone() } else { vec![] },
        }
    }

    /// One line of the text report, `what` naming the stage, then a line per
    /// rule that fired.
    fn describe(&self, what: &str, s: &mut String) {
        let _ = writeln!(
            s,
            "{what}: {} ({} iterations, {}, {} extraction, cost {:.1} -> {:.1} us){}",
            if self.applied {
                "applied"
            } else {
                "not applied"
            },
            self.iterations,
            self.stop_reason
                .as_ref()
                .map(|r| r.to_string())
                .unwrap_or_default(),
            self.extraction.map(|m| m.to_string()).unwrap_or_default(),
            self.cost_before / 1e3,
            self.cost_after / 1e3,
            self.note
                .as_ref()
                .map(|n| format!(": {n}"))
                .unwrap_or_default()
        );
        for f in &self.fired {
            let _ = writeln!(s, "  rule {} at {}", f.rule, format_spans(&f.spans));
        }
    }
}

/// A value's text (the extractor's name, why rewriting stopped), empty when
/// there is none.
fn display_text<T: fmt::Display, S: serde::Serializer>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.as_ref().map(|v| v.to_string()).unwrap_or_default())
}

/// Every layout transform of a planned graph, in topological order.
pub fn kept_transforms(g: &Graph) -> Vec<TransformInfo> {
    let order = g.topo_order().unwrap_or_else(|_| g.node_ids());
    order
        .into_iter()
        .filter_map(|id| {
            let n = g.node(id);
            let Op::LayoutTransform(LayoutTransform {
                from, to, logical, ..
            }) = &n.op
            else {
                return None;
            };
            let ty = ValueType::new(n.outputs[0].ty.dtype, logical.clone());
            let relabel = from != to && same_bytes(from, to, logical);
            let input = g
                .node_inputs(id)
                .first()
                .map(|&v| g.value(v).name.clone())
                .unwrap_or_default();
            Some(TransformInfo {
                value: input,
                from: from.to_string(),
                to: to.to_string(),
                shape: logical.clone(),
                bytes: if relabel {
                    0
                } else {
                    physical_bytes(&ty, from) + physical_bytes(&ty, to)
                },
                relabel,
                spans: n.spans.clone(),
            })
        })
        .collect()
}

/// Every model tensor of a planned graph with the layout its producer writes
/// it in (see [`Plan::layout_of`](super::plan::Plan::layout_of)), and its
/// logical type in `source`.
pub(super) fn tensor_layouts(
    g: &Graph,
    source: &Graph,
    pins: &Pins,
) -> BTreeMap<String, TensorLayout> {
    let logical: HashMap<&str, &ValueType> = source
        .node_ids()
        .into_iter()
        .flat_map(|id| source.node(id).outputs.iter())
        .map(|v| (v.name.as_str(), &v.ty))
        .collect();
    let mut out = BTreeMap::new();
    for id in g.node_ids() {
        let n = g.node(id);
        if !holds_model_tensors(&n.op) {
            continue;
        }
        for (k, v) in n.outputs.iter().enumerate() {
            let (Some(l), Some(ty)) = (stored_layout(n, k, pins), logical.get(v.name.as_str()))
            else {
                continue;
            };
            let entry = TensorLayout {
                layout: l.to_string(),
                row_major: l.is_identity(),
                dtype: ty.dtype.to_string(),
                shape: ty.shape.clone(),
            };
            out.insert(v.name.clone(), entry);
        }
    }
    out
}

/// Whether a planned node's outputs are model tensors: not a constant, nor a
/// transform the plan added.
pub(super) fn holds_model_tensors(op: &Op) -> bool {
    !matches!(
        op,
        Op::Constant(_) | Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_)
    )
}

/// The layout output `k` of a planned node is stored in (`None` only for a
/// rank too high to name its axes).
pub(super) fn stored_layout(n: &Node, k: usize, pins: &Pins) -> Option<Layout> {
    match &n.op {
        Op::InLayout(l) => Some(l.outputs[k].0.clone()),
        Op::LayoutTransform(LayoutTransform { to, .. }) => Some(to.clone()),
        Op::Input => match pins.get(&n.outputs[k].name) {
            Some(pin) => Some(pin.clone()),
            None => Layout::identity(n.outputs[k].ty.shape.len()).ok(),
        },
        _ => Layout::identity(n.outputs[k].ty.shape.len()).ok(),
    }
}
