//! Layout planning: build the assignment problem of a graph, let a planner choose
//! one implementation per op, materialise the transforms the choice implies, and
//! report what was kept.
//!
//! Four planners share the problem, so their plans compare on one cost scale:
//! - `keep`: every op in its source (row-major) layout: no transforms;
//! - `local`: each layout source takes the family's layout, agnostic ops follow
//!   their first operand, everything else converts back (TVM ConvertLayout style;
//!   only back-to-back pairs cancel, because transforms are inserted per edge
//!   between differing layouts);
//! - `greedy`: `local`, then transforms sunk and hoisted through agnostic ops by
//!   moving one op at a time to its best layout given its neighbours, until no
//!   single move helps;
//! - `global`: the whole graph at once with `solver::solve`, with a lower bound.
//!
//! Modelling note: materialisation shares one transform among the consumers
//! that want the same layout. The problem prices that sharing for one layout
//! per value (a variant of the producer pays the transform once, and its
//! readers wanting that layout then read it free); a third layout is charged
//! per edge, so the real plan never moves more bytes than the model counted.

use super::extract::{rewrite_graph_with, RewriteLimits};
use super::op_rules::{
    conv_epilogue_reads, impls, op_kind, physical_bytes, relabelled, relabelled_back, same_bytes,
    value_candidates, CostModel, Family, Impl, LayoutId, Layouts, OpKind,
};
use super::rules::RuleSource;
use super::solver::{self, Method, Pair, Problem, SolveOptions};
use super::{pad_flow, Layout, LayoutError, PadValue, Requirement};
use crate::graph::{
    fold_conv_affine, fold_node, fold_pads, format_spans, merge_spans, movement_chains,
    reductions_as_global_pools, Graph, GraphError, LaidOut, NodeId, Op, PadFold, Span, ValueRef,
    ValueType,
};
use crate::ops::LayoutTransform;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Why a graph could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A layout error.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A layout does not fit a shape.
    #[error(transparent)]
    Algebra(#[from] crate::core::AlgebraError),
    /// The graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The solver failed.
    #[error(transparent)]
    Solve(#[from] solver::SolveError),
    /// A pinned layout names no graph input or output, or does not fit it.
    #[error("pinned layout: {0}")]
    Pin(String),
    /// No planner has this name.
    #[error("unknown planner '{0}' (expected keep, local, greedy or global)")]
    UnknownPlanner(String),
    /// Something is wrong at these layers.
    #[error("{}: {message}", format_spans(spans))]
    AtLayer {
        /// The layers at fault.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
}

/// The choices of a graph: one variable per non-constant node, in topological order.
pub struct PlanSpace {
    /// The layout family the plan targets.
    pub family: Family,
    /// The planned nodes, in topological order.
    pub nodes: Vec<NodeId>,
    /// The ways each node can run.
    pub impls: Vec<Vec<Impl>>,
    /// The choices of each node's variable in the problem: an impl, and for an
    /// output read by several nodes, the layout one shared transform makes
    /// for every reader wanting it.
    pub variants: Vec<Vec<Variant>>,
    /// Every layout the impls use.
    pub layouts: Layouts,
    /// The layout of each graph input and output (by value), row-major unless pinned.
    pub interface: HashMap<ValueRef, LayoutId>,
    /// The assignment problem over the nodes.
    pub problem: Problem,
}

/// One choice of a node's variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// The impl the node runs.
    pub imp: usize,
    /// The layout its output is also transformed to, once, for all readers
    /// wanting it (the materialiser shares transforms the same way).
    pub shared: Option<LayoutId>,
}

/// Each impl alone, and with each shared layout its output is not already in.
fn variants(impls: &[Impl], shared: &[LayoutId]) -> Vec<Variant> {
    let mut out = Vec::with_capacity(impls.len() * (1 + shared.len()));
    for (imp, i) in impls.iter().enumerate() {
        out.push(Variant { imp, shared: None });
        for &x in shared.iter().filter(|&&x| x != i.outputs[0]) {
            out.push(Variant {
                imp,
                shared: Some(x),
            });
        }
    }
    out
}

/// The layouts worth one shared transform: those at least two reader edges
/// (or one and the graph output) may want. Sharing a layout one edge wants
/// would only move its transform.
fn shared_candidates(
    edges: &[(usize, usize)],
    output: Option<LayoutId>,
    impls: &[Vec<Impl>],
) -> Vec<LayoutId> {
    let mut wanted_by: BTreeMap<LayoutId, usize> = BTreeMap::new();
    for &(reader, j) in edges {
        let mut layouts: Vec<LayoutId> = impls[reader].iter().map(|i| i.inputs[j]).collect();
        layouts.sort();
        layouts.dedup();
        for l in layouts {
            *wanted_by.entry(l).or_default() += 1;
        }
    }
    if let Some(l) = output {
        *wanted_by.entry(l).or_default() += 1;
    }
    wanted_by
        .into_iter()
        .filter(|&(_, n)| n >= 2)
        .map(|(l, _)| l)
        .collect()
}

/// Layouts pinned for graph inputs and outputs, by tensor name: an input
/// pinned to a layout arrives stored in it (the planned graph's input has the
/// layout's physical shape), and an output pinned is handed back in it.
pub type Pins = HashMap<String, Layout>;

impl PlanSpace {
    /// The impl variable `var` runs when it takes choice `k` of the problem.
    pub fn impl_of(&self, var: usize, k: usize) -> &Impl {
        &self.impls[var][self.variants[var][k].imp]
    }

    /// The problem's choice for one impl per node: each node's shared
    /// transform is taken where it lowers the cost given its readers' impls.
    pub fn lift(&self, impls: &[usize]) -> Vec<usize> {
        let plain: Vec<usize> = impls
            .iter()
            .zip(&self.variants)
            .map(|(&imp, vs)| {
                vs.iter()
                    .position(|v| v.imp == imp && v.shared.is_none())
                    .expect("every impl has a variant without a shared transform")
            })
            .collect();
        let mut reads: Vec<Vec<&Pair>> = vec![Vec::new(); plain.len()];
        for p in &self.problem.pairs {
            reads[p.a].push(p);
        }
        // A reader's pair term depends on its impl only, so the plain choice
        // of the readers prices every variant of the producer.
        (0..plain.len())
            .map(|var| {
                let cost = |k: usize| {
                    self.problem.unary[var][k]
                        + reads[var]
                            .iter()
                            .map(|p| p.cost[k * self.problem.unary[p.b].len() + plain[p.b]])
                            .sum::<f64>()
                };
                (0..self.variants[var].len())
                    .filter(|&k| self.variants[var][k].imp == impls[var])
                    .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
                    .unwrap_or(plain[var])
            })
            .collect()
    }

    /// Enumerates every node's implementations and the pairwise transform costs.
    pub fn build(g: &Graph, family: Family, model: &CostModel) -> Result<PlanSpace, PlanError> {
        PlanSpace::build_pinned(g, family, model, &Pins::new())
    }

    /// [`build`](Self::build) with graph inputs and outputs pinned to layouts.
    pub fn build_pinned(
        g: &Graph,
        family: Family,
        model: &CostModel,
        pins: &Pins,
    ) -> Result<PlanSpace, PlanError> {
        let order = g.topo_order()?;
        let mut layouts = Layouts::default();
        let interface = interface_layouts(g, pins, &mut layouts)?;
        let cands = value_candidates(g, &order, family, &mut layouts)?;
        let nodes: Vec<NodeId> = order
            .iter()
            .copied()
            .filter(|&id| !matches!(g.node(id).op, Op::Constant(_)))
            .collect();
        let var_of: HashMap<NodeId, usize> =
            nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut all_impls = Vec::with_capacity(nodes.len());
        for &id in &nodes {
            all_impls.push(if matches!(g.node(id).op, Op::Input) {
                let l = interface[&ValueRef::new(id, 0)];
                vec![Impl {
                    inputs: vec![],
                    outputs: vec![l],
                    cost: 0.0,
                }]
            } else {
                impls(g, id, &cands, &mut layouts, model)?
            });
        }
        // Reader edges of each value: (reader variable, input index).
        let mut readers: HashMap<ValueRef, Vec<(usize, usize)>> = HashMap::new();
        for (cv, &id) in nodes.iter().enumerate() {
            for (j, v) in g.node_inputs(id).into_iter().enumerate() {
                if var_of.contains_key(&v.node) {
                    readers.entry(v).or_default().push((cv, j));
                }
            }
        }
        let variants: Vec<Vec<Variant>> = nodes
            .iter()
            .zip(&all_impls)
            .map(|(&id, impls)| {
                let v = ValueRef::new(id, 0);
                let edges = readers.get(&v).map_or(&[][..], |r| r.as_slice());
                let output = interface.get(&v).filter(|_| g.outputs().contains(&v));
                let shared = if g.node(id).outputs.len() == 1 {
                    shared_candidates(edges, output.copied(), &all_impls)
                } else {
                    Vec::new()
                };
                variants(impls, &shared)
            })
            .collect();
        // Transform costs depend only on the value's type and the two layouts.
        let mut cache = HashMap::new();
        // The cost of handing value `v` of variable `var` (in variant `variant`)
        // to a reader wanting layout `want`: nothing when it is stored so, or
        // already transformed to it for another reader.
        let mut reach = |var: usize, variant: &Variant, v: ValueRef, want: LayoutId| {
            let have = all_impls[var][variant.imp].outputs[v.output];
            if have == want || variant.shared == Some(want) {
                return 0.0;
            }
            cached_transform_cost(&mut cache, model, &layouts, g.value_type(v), have, want)
        };
        // A conv's epilogue node pays its own cost on the edge from the value
        // before it, when a transform there keeps it out of the conv's step.
        let epilogue = conv_epilogue_reads(g, model);
        let own_cost = |var: usize, variant: &Variant| all_impls[var][variant.imp].cost;
        let mut unary: Vec<Vec<f64>> = Vec::with_capacity(nodes.len());
        for (var, &id) in nodes.iter().enumerate() {
            let v = ValueRef::new(id, 0);
            let costs = variants[var]
                .iter()
                .map(|variant| {
                    let own = match epilogue.contains_key(&id) {
                        true => 0.0,
                        false => own_cost(var, variant),
                    };
                    // The one transform every reader wanting `x` shares.
                    let shared = variant.shared.map_or(0.0, |x| {
                        let alone = Variant {
                            shared: None,
                            ..*variant
                        };
                        reach(var, &alone, v, x)
                    });
                    // Graph outputs are handed back row-major, or as pinned.
                    let handed: f64 = g
                        .outputs()
                        .iter()
                        .filter(|o| o.node == id)
                        .map(|&o| reach(var, variant, o, interface[&o]))
                        .sum();
                    own + shared + handed
                })
                .collect();
            unary.push(costs);
        }
        let mut pairs = Vec::new();
        for (cv, &id) in nodes.iter().enumerate() {
            for (j, v) in g.node_inputs(id).into_iter().enumerate() {
                let Some(&pv) = var_of.get(&v.node) else {
                    continue; // constants are re-packed at compile time
                };
                let mut cost = Vec::with_capacity(variants[pv].len() * variants[cv].len());
                let fused_here = epilogue.get(&id) == Some(&j);
                for p in &variants[pv] {
                    for c in &variants[cv] {
                        let want = all_impls[cv][c.imp].inputs[j];
                        let have = all_impls[pv][p.imp].outputs[v.output];
                        let unfused = match fused_here && have != want {
                            true => own_cost(cv, c),
                            false => 0.0,
                        };
                        cost.push(reach(pv, p, v, want) + unfused);
                    }
                }
                pairs.push(Pair { a: pv, b: cv, cost });
            }
        }
        Ok(PlanSpace {
            family,
            nodes,
            impls: all_impls,
            variants,
            layouts,
            interface,
            problem: Problem { unary, pairs },
        })
    }
}

/// The layout of every graph input and output: its pin, else row-major. A pin
/// must fit the tensor's shape and name a graph input or output.
fn interface_layouts(
    g: &Graph,
    pins: &Pins,
    layouts: &mut Layouts,
) -> Result<HashMap<ValueRef, LayoutId>, PlanError> {
    let inputs = g.inputs().iter().map(|&id| ValueRef::new(id, 0));
    let mut out = HashMap::new();
    for v in inputs.chain(g.outputs().iter().copied()) {
        let value = g.value(v);
        let id = match pins.get(&value.name) {
            Some(l) => {
                l.physical_shape(&value.ty.shape).map_err(|e| {
                    PlanError::Pin(format!("'{}' {}: layout {l}: {e}", value.name, value.ty))
                })?;
                layouts.intern(l.clone())
            }
            None => layouts.identity(value.ty.shape.len())?,
        };
        out.insert(v, id);
    }
    let named: Vec<&str> = out.keys().map(|&v| g.value(v).name.as_str()).collect();
    if let Some(name) = pins.keys().find(|n| !named.contains(&n.as_str())) {
        return Err(PlanError::Pin(format!(
            "'{name}' is no graph input or output (they are {named:?})"
        )));
    }
    Ok(out)
}

fn cached_transform_cost<'g>(
    cache: &mut HashMap<(&'g ValueType, LayoutId, LayoutId), f64>,
    model: &CostModel,
    layouts: &Layouts,
    ty: &'g ValueType,
    from: LayoutId,
    to: LayoutId,
) -> f64 {
    if from == to {
        return 0.0;
    }
    *cache
        .entry((ty, from, to))
        .or_insert_with(|| model.transform_cost(ty, layouts.get(from), layouts.get(to)))
}

/// What a planner decided, with the solver's account when there was one.
pub struct Assignment {
    /// The impl chosen for each node of the space.
    pub choice: Vec<usize>,
    /// The solver's account, for the global planner.
    pub solver: Option<SolverInfo>,
}

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

/// A layout planner.
pub trait Planner: Send + Sync {
    /// The planner's name as the command line spells it.
    fn name(&self) -> &'static str;
    /// Chooses an impl for each node of `space`.
    fn assign(&self, g: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError>;
    /// Other assignments to finish as well: the solver does not see what the
    /// rewriting after materialisation removes, so another assignment may end
    /// cheaper; the plan keeps the cheapest once rewritten. None by default.
    fn alternatives(&self, _g: &Graph, _space: &PlanSpace) -> Vec<Vec<usize>> {
        Vec::new()
    }
}

/// Every op in its source layout.
pub struct Keep;
/// Per-op preferences, transforms between disagreeing neighbours.
pub struct Local;
/// `Local`, then single-op moves while they lower the cost.
pub struct Greedy;
/// The whole graph at once.
pub struct Global {
    /// Limits of the solver.
    pub options: SolveOptions,
}

impl Planner for Keep {
    fn name(&self) -> &'static str {
        "keep"
    }
    fn assign(&self, _: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        Ok(Assignment {
            choice: space.lift(&vec![0; space.nodes.len()]),
            solver: None,
        })
    }
}

impl Planner for Local {
    fn name(&self) -> &'static str {
        "local"
    }
    fn assign(&self, g: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        Ok(Assignment {
            choice: space.lift(&local_choice(g, space)),
            solver: None,
        })
    }
}

fn local_choice(g: &Graph, space: &PlanSpace) -> Vec<usize> {
    let target = space.family.activation_layout();
    let var_of: HashMap<NodeId, usize> = space
        .nodes
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i))
        .collect();
    let mut choice = vec![0; space.nodes.len()];
    for (var, &id) in space.nodes.iter().enumerate() {
        let impls = &space.impls[var];
        let pick = match op_kind(&g.node(id).op) {
            OpKind::Source => impls.iter().position(|i| {
                let l = |id| Some(space.layouts.get(id));
                l(i.outputs[0]) == target.as_ref() && l(i.inputs[0]) == target.as_ref()
            }),
            OpKind::Agnostic => g.node_inputs(id).first().and_then(|v| {
                let have = var_of
                    .get(&v.node)
                    .map(|&pv| &space.impls[pv][choice[pv]].outputs[v.output])?;
                impls.iter().position(|i| &i.inputs[0] == have)
            }),
            _ => None,
        };
        choice[var] = pick.unwrap_or(0);
    }
    choice
}

impl Planner for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn assign(&self, g: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        let start = space.lift(&local_choice(g, space));
        Ok(Assignment {
            choice: solver::improve_locally(&space.problem, start),
            solver: None,
        })
    }
}

impl Planner for Global {
    fn name(&self) -> &'static str {
        "global"
    }
    /// The local and greedy assignments: after rewriting, global is never
    /// worse than either.
    fn alternatives(&self, g: &Graph, space: &PlanSpace) -> Vec<Vec<usize>> {
        let local = space.lift(&local_choice(g, space));
        let greedy = solver::improve_locally(&space.problem, local.clone());
        vec![local, greedy]
    }
    fn assign(&self, _: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        let s = solver::solve(&space.problem, &self.options)?;
        let mut methods = BTreeMap::new();
        for r in &s.regions {
            let name = match r.method {
                Method::Elimination { .. } => "elimination",
                Method::LpIntegral => "lp-integral",
                Method::Integer => "integer",
                Method::Fallback { .. } => "fallback",
            };
            *methods.entry(name.to_string()).or_insert(0) += 1;
        }
        Ok(Assignment {
            solver: Some(SolverInfo {
                objective: s.objective,
                lower_bound: s.lower_bound,
                gap: s.gap(),
                regions: s.regions.len(),
                fixed_variables: s.fixed_variables,
                methods,
                fallback_used: s.used_fallback(),
            }),
            choice: s.choice,
        })
    }
}

/// The planner of a name: keep, local, greedy or global.
pub fn planner_by_name(name: &str) -> Result<Box<dyn Planner>, PlanError> {
    Ok(name.parse::<PlannerKind>()?.build())
}

/// The planners by name: the typed choice of the library API (`api::Planner`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlannerKind {
    /// Every op in its source (row-major) layout: no transforms.
    Keep,
    /// Each op in its preferred layout, transforms between disagreeing neighbours.
    Local,
    /// `Local`, then single-op moves while they lower the cost.
    Greedy,
    /// The whole graph as one assignment problem, solved with a lower bound.
    Global,
}

impl PlannerKind {
    /// Every planner, in the order the command line's `compare` lists them.
    pub const ALL: [PlannerKind; 4] = [
        PlannerKind::Keep,
        PlannerKind::Local,
        PlannerKind::Greedy,
        PlannerKind::Global,
    ];

    /// The planner's name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            PlannerKind::Keep => "keep",
            PlannerKind::Local => "local",
            PlannerKind::Greedy => "greedy",
            PlannerKind::Global => "global",
        }
    }

    /// The planner itself.
    pub fn build(self) -> Box<dyn Planner> {
        match self {
            PlannerKind::Keep => Box::new(Keep),
            PlannerKind::Local => Box::new(Local),
            PlannerKind::Greedy => Box::new(Greedy),
            PlannerKind::Global => Box::new(Global {
                options: Default::default(),
            }),
        }
    }
}

impl std::str::FromStr for PlannerKind {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<PlannerKind, PlanError> {
        PlannerKind::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| PlanError::UnknownPlanner(s.to_string()))
    }
}

impl std::fmt::Display for PlannerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
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
#[derive(Clone, Debug, Serialize)]
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
    /// Explicit pads folded into the padding of the conv or pool after them.
    pub pad_folds: Vec<PadFold>,
    /// The planner's objective under the cost model (ns, estimated).
    #[serde(rename = "estimated_cost_ns")]
    pub estimated_cost: f64,
    /// `estimated_cost` with the transforms the rewriting removed or added
    /// (ns, estimated): what the planned graph costs under the cost model.
    #[serde(rename = "rewritten_cost_ns")]
    pub rewritten_cost: f64,
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
        if let Some(r) = &self.rewrite {
            let _ = writeln!(
                s,
                "rewrite: {} ({} iterations, {} extraction, cost {:.1} -> {:.1} us){}",
                if r.applied { "applied" } else { "not applied" },
                r.iterations,
                r.extraction,
                r.cost_before / 1e3,
                r.cost_after / 1e3,
                r.note
                    .as_ref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(
            s,
            "constants re-packed: {}, padding refills: {}",
            self.packed_constants, self.refills
        );
        for f in &self.pad_folds {
            let _ = writeln!(
                s,
                "  pad {} folded into {} (fill {})",
                f.pad, f.into, f.fill
            );
        }
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

/// A planned graph and its report.
pub struct Plan {
    /// The planned graph.
    pub graph: Graph,
    /// What the plan decided.
    pub report: PlanReport,
    /// The layouts pinned for graph inputs and outputs.
    pub pins: Pins,
}

impl Plan {
    /// The storage layout of the model tensor `name` in the planned graph, as
    /// its producer writes it (a transform after it may hand its consumers
    /// another); `None` when no tensor of that name survives planning (an
    /// explicit Pad or a batch norm folded into a convolution) or it names no
    /// tensor at all. `report.tensors` lists them all.
    pub fn layout_of(&self, name: &str) -> Option<Layout> {
        self.graph.node_ids().into_iter().find_map(|id| {
            let n = self.graph.node(id);
            let k = n.outputs.iter().position(|v| v.name == name)?;
            holds_model_tensors(&n.op).then(|| stored_layout(n, k, &self.pins))?
        })
    }
}

/// Whether a planned node's outputs are model tensors: not a constant, nor a
/// transform the plan added.
fn holds_model_tensors(op: &Op) -> bool {
    !matches!(
        op,
        Op::Constant(_) | Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_)
    )
}

/// The layout output `k` of a planned node is stored in (`None` only for a
/// rank too high to name its axes).
fn stored_layout(n: &crate::graph::Node, k: usize, pins: &Pins) -> Option<Layout> {
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

/// Plans `g` with `planner` for `family` and materialises the result.
pub fn plan(
    g: &Graph,
    planner: &dyn Planner,
    family: Family,
    model: &CostModel,
) -> Result<Plan, PlanError> {
    plan_with(g, planner, family, model, &PlanOptions::default())
}

/// How a plan is finished after materialisation.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// The rules for the e-graph rewriting of the materialised graph; `None`
    /// skips rewriting.
    pub rules: Option<RuleSource>,
    /// Limits of the rewriting.
    pub rewrite_limits: RewriteLimits,
    /// Layouts pinned for graph inputs and outputs.
    pub pins: Pins,
    /// Fold batch norms into the convolutions before them (the native compiler
    /// fuses them itself; an export for another runtime folds them).
    pub fold_batchnorms: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            rules: Some(RuleSource::from_env()),
            rewrite_limits: RewriteLimits::default(),
            pins: Pins::new(),
            fold_batchnorms: false,
        }
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
    /// The extractor used.
    pub extraction: String,
    /// Estimated cost before rewriting (ns): the bytes the e-graph's cost
    /// counts (every op's and transform's inputs and outputs) at the cost
    /// model's `ns_per_byte`.
    #[serde(rename = "cost_before_ns")]
    pub cost_before: f64,
    /// Estimated cost after rewriting (ns), the same way.
    #[serde(rename = "cost_after_ns")]
    pub cost_after: f64,
}

impl RewriteInfo {
    fn skipped(note: String) -> RewriteInfo {
        RewriteInfo {
            applied: false,
            skipped: true,
            note: Some(note),
            iterations: 0,
            extraction: String::new(),
            cost_before: 0.0,
            cost_after: 0.0,
        }
    }
}

/// Rewrites on a thread with a large stack: converting between the graph and the
/// e-graph recurses as deep as the graph is long.
fn rewrite_deep(
    g: &Graph,
    rules: &RuleSource,
    limits: &RewriteLimits,
) -> Result<(Graph, super::extract::RewriteReport), LayoutError> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(512 << 20)
            .spawn_scoped(s, || rewrite_graph_with(g, rules, limits))
            .map_err(|e| LayoutError::Invalid(format!("cannot start the rewriting thread: {e}")))?
            .join()
            .map_err(|_| LayoutError::Invalid("the rewriting thread panicked".into()))?
    })
}

/// Plans `g` with `planner` for `family`, materialises the choice, and rewrites
/// the result with the e-graph rules (keeping it only when it moves no more bytes).
pub fn plan_with(
    g: &Graph,
    planner: &dyn Planner,
    family: Family,
    model: &CostModel,
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    let t0 = Instant::now();
    // Folding and canonical forms edit a copy (which shares the weights).
    let mut folded = g.clone();
    if options.fold_batchnorms {
        crate::graph::fold_conv_batchnorm(&mut folded)?;
    }
    movement_chains(&mut folded)?;
    let pad_folds = fold_pads(&mut folded)?;
    fold_conv_affine(&mut folded)?;
    reductions_as_global_pools(&mut folded)?;
    let g = &folded;
    let space = PlanSpace::build_pinned(g, family, model, &options.pins)?;
    let t_assign = Instant::now();
    let assignment = planner.assign(g, &space)?;
    let assign_ms = ms(t_assign.elapsed());
    // Rewriting may improve another assignment beyond the planner's own
    // choice: finish each and keep the cheapest once rewritten.
    let own = materialise(g, &space, assignment.choice, model)?;
    let t_rewrite = Instant::now();
    let mut best = finish(own, model, options);
    let mut rewrite_ms = ms(t_rewrite.elapsed());
    for choice in planner.alternatives(g, &space) {
        let beat = best.rewritten_cost - 1e-9 * best.rewritten_cost.abs();
        if choice == best.choice {
            continue;
        }
        // Rewriting removes at most every transform: an assignment that
        // could not win even so is not worth rewriting.
        let other = materialise(g, &space, choice, model)?;
        if other.cost - other.transforms_cost >= beat {
            continue;
        }
        let t_rewrite = Instant::now();
        let other = finish(other, model, options);
        rewrite_ms += ms(t_rewrite.elapsed());
        if other.rewritten_cost < beat {
            best = other;
        }
    }
    let Finished {
        graph,
        packed_constants,
        refills,
        rewrite,
        estimated_cost,
        rewritten_cost,
        ..
    } = best;
    let (relabels, transforms): (Vec<_>, Vec<_>) =
        kept_transforms(&graph).into_iter().partition(|t| t.relabel);
    let report = PlanReport {
        model: g.name.clone(),
        planner: planner.name().to_string(),
        family: family.to_string(),
        tensors: tensor_layouts(&graph, g, &options.pins),
        transform_count: transforms.len(),
        relabel_count: relabels.len(),
        transform_bytes: transforms.iter().map(|t| t.bytes).sum(),
        transforms,
        relabels,
        packed_constants,
        refills,
        pad_folds,
        estimated_cost,
        rewritten_cost,
        solver: assignment.solver,
        rewrite,
        timings: PlanTimings {
            plan_ms: ms(t0.elapsed()),
            assign_ms,
            rewrite_ms,
        },
    };
    Ok(Plan {
        graph,
        report,
        pins: options.pins.clone(),
    })
}

/// One assignment materialised and rewritten.
struct Finished {
    choice: Vec<usize>,
    graph: Graph,
    packed_constants: usize,
    refills: usize,
    rewrite: Option<RewriteInfo>,
    /// The assignment's cost in the solver's problem.
    estimated_cost: f64,
    /// The assignment's cost with the transforms of the rewritten graph in
    /// place of the materialised one's.
    rewritten_cost: f64,
}

/// What the cost model charges for the transforms of a planned graph.
fn transforms_cost(g: &Graph, model: &CostModel) -> f64 {
    g.node_ids()
        .into_iter()
        .filter_map(|id| {
            let n = g.node(id);
            let Op::LayoutTransform(t) = &n.op else {
                return None;
            };
            let ty = ValueType::new(n.outputs[0].ty.dtype, t.logical.clone());
            Some(model.transform_cost(&ty, &t.from, &t.to))
        })
        .sum()
}

/// An assignment spelled out as a graph, before rewriting.
struct Materialised {
    choice: Vec<usize>,
    graph: Graph,
    packed_constants: usize,
    refills: usize,
    /// What its transforms cost in the model.
    transforms_cost: f64,
    /// The assignment's cost in the solver's problem.
    cost: f64,
}

fn materialise(
    g: &Graph,
    space: &PlanSpace,
    choice: Vec<usize>,
    model: &CostModel,
) -> Result<Materialised, PlanError> {
    let mut m = Materializer::new(g, &space.layouts);
    m.run(space, &choice)?;
    Ok(Materialised {
        cost: space.problem.cost(&choice),
        transforms_cost: transforms_cost(&m.out, model),
        choice,
        packed_constants: m.packed_constants,
        refills: m.refills,
        graph: m.out,
    })
}

/// Rewrites a materialised assignment with the e-graph rules (keeping the
/// result only when its transforms cost no more).
fn finish(m: Materialised, model: &CostModel, options: &PlanOptions) -> Finished {
    let Materialised {
        choice,
        mut graph,
        packed_constants,
        refills,
        transforms_cost: materialised,
        cost: estimated,
    } = m;
    let rewrite = options.rules.as_ref().map(|rules| {
        match rewrite_deep(&graph, rules, &options.rewrite_limits) {
            Ok((rewritten, r)) => {
                let better = transforms_cost(&rewritten, model) <= materialised;
                if better {
                    graph = rewritten;
                }
                let mut notes: Vec<String> = r.failures.clone();
                if !better {
                    notes.push("the rewritten graph's transforms cost more".to_string());
                }
                RewriteInfo {
                    applied: better,
                    skipped: false,
                    note: (!notes.is_empty()).then(|| notes.join("; ")),
                    iterations: r.iterations,
                    extraction: format!("{:?}", r.extract.method),
                    cost_before: r.cost_before * model.ns_per_byte,
                    cost_after: r.extract.cost * model.ns_per_byte,
                }
            }
            Err(e) => RewriteInfo::skipped(e.to_string()),
        }
    });
    // The rewritten graph's transforms in place of the materialised ones.
    let rewritten_cost = estimated - materialised + transforms_cost(&graph, model);
    Finished {
        choice,
        graph,
        packed_constants,
        refills,
        rewrite,
        estimated_cost: estimated,
        rewritten_cost,
    }
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
/// it in (see [`Plan::layout_of`]), and its logical type in `source`.
fn tensor_layouts(g: &Graph, source: &Graph, pins: &Pins) -> BTreeMap<String, TensorLayout> {
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Where a source value lives in the planned graph.
#[derive(Clone, Copy)]
struct Placed {
    value: ValueRef,
    layout: LayoutId,
    pad: PadValue,
}

struct Materializer<'a> {
    src: &'a Graph,
    layouts: &'a Layouts,
    out: Graph,
    placed: HashMap<ValueRef, Placed>,
    /// Transforms already made, shared by every consumer wanting that layout.
    converted: HashMap<(ValueRef, LayoutId, Option<u32>), (ValueRef, PadValue)>,
    packed_constants: usize,
    refills: usize,
}

impl<'a> Materializer<'a> {
    fn new(src: &'a Graph, layouts: &'a Layouts) -> Materializer<'a> {
        Materializer {
            src,
            layouts,
            out: Graph::new(src.name.clone()),
            placed: HashMap::new(),
            converted: HashMap::new(),
            packed_constants: 0,
            refills: 0,
        }
    }

    fn layout(&self, id: LayoutId) -> &'a Layout {
        self.layouts.get(id)
    }

    /// The row-major layout of `v` (interned while the plan space was built).
    fn row_major(&self, v: ValueRef) -> Result<LayoutId, PlanError> {
        let rank = self.src.value_type(v).shape.len();
        self.layouts.identity_id(rank).ok_or_else(|| {
            PlanError::Graph(GraphError::Graph(format!(
                "no row-major layout of rank {rank}"
            )))
        })
    }

    fn run(&mut self, space: &PlanSpace, choice: &[usize]) -> Result<(), PlanError> {
        let chosen: HashMap<NodeId, &Impl> = space
            .nodes
            .iter()
            .zip(choice)
            .enumerate()
            .map(|(var, (&id, &k))| (id, space.impl_of(var, k)))
            .collect();
        for id in self.src.topo_order()? {
            let node = self.src.node(id);
            match &node.op {
                Op::Input => {
                    // A pinned input arrives stored in its layout.
                    let src = ValueRef::new(id, 0);
                    let layout = space.interface[&src];
                    let ty = &node.outputs[0].ty;
                    let physical = self.layout(layout).physical_shape(&ty.shape)?;
                    let v = self.out.add_input(
                        &node.name,
                        ValueType::new(ty.dtype, physical),
                        node.spans.clone(),
                    );
                    self.place(src, v, layout);
                }
                Op::Constant(t) => {
                    let v = self
                        .out
                        .add_constant(&node.name, t.clone(), node.spans.clone());
                    let src = ValueRef::new(id, 0);
                    let row_major = self.row_major(src)?;
                    self.place(src, v, row_major);
                }
                op => self.place_op(id, op, chosen[&id])?,
            }
        }
        let mut outputs = Vec::new();
        for &v in self.src.outputs() {
            outputs.push(self.get(v, space.interface[&v], None, &[])?);
        }
        self.out.set_outputs(outputs);
        Ok(())
    }

    /// Records that the source value `src` is `v`, stored in `layout`.
    fn place(&mut self, src: ValueRef, v: ValueRef, layout: LayoutId) {
        self.placed.insert(
            src,
            Placed {
                value: v,
                layout,
                pad: PadValue::Undef,
            },
        );
    }

    fn place_op(&mut self, id: NodeId, op: &Op, imp: &Impl) -> Result<(), PlanError> {
        let node = self.src.node(id);
        let src_inputs = self.src.node_inputs(id);
        let row_major = imp
            .inputs
            .iter()
            .chain(&imp.outputs)
            .all(|&l| self.layout(l).is_identity());
        let refills = if row_major {
            vec![None; src_inputs.len()]
        } else {
            match self.refills(op, &src_inputs, imp)? {
                Some(refills) => refills,
                // The op cannot run in the planned layouts (it needs something
                // in the padding no transform can write): it runs row-major
                // instead, with transforms around it.
                None => return self.place_op(id, op, &self.row_major_impl(id)?),
            }
        };
        let mut inputs = Vec::with_capacity(src_inputs.len());
        for (j, &v) in src_inputs.iter().enumerate() {
            inputs.push(self.get(v, imp.inputs[j], refills[j], &node.spans)?);
        }
        self.refills += refills.iter().flatten().count();
        let names: Vec<String> = node.outputs.iter().map(|v| v.name.clone()).collect();
        let new_op = if row_major {
            op.clone()
        } else {
            let x_shape = &self.src.value_type(src_inputs[0]).shape;
            let padded = self.layout(imp.inputs[0]).padded_axes(x_shape)?;
            // What the padding holds once refilled.
            let pads: Vec<PadValue> = src_inputs
                .iter()
                .zip(&imp.inputs)
                .zip(&refills)
                .map(|((v, &w), refill)| match refill {
                    Some(fill) => PadValue::Known(*fill),
                    None => self.pad_of(*v, w),
                })
                .collect();
            let out_pad = pad_flow(op, &pads, &padded).output;
            Op::InLayout(Box::new(LaidOut {
                inner: op.clone(),
                inputs: src_inputs
                    .iter()
                    .zip(&imp.inputs)
                    .map(|(v, &l)| {
                        (
                            self.layout(l).clone(),
                            self.src.value_type(*v).shape.clone(),
                        )
                    })
                    .collect(),
                outputs: imp
                    .outputs
                    .iter()
                    .map(|&l| (self.layout(l).clone(), out_pad))
                    .collect(),
            }))
        };
        let new_id = self
            .out
            .add_node(new_op, &node.name, &inputs, &names, node.spans.clone())?;
        for (i, &layout) in imp.outputs.iter().enumerate() {
            let pad = match &self.out.node(new_id).op {
                Op::InLayout(lo) => lo.outputs[i].1,
                _ => PadValue::Undef,
            };
            self.placed.insert(
                ValueRef::new(id, i),
                Placed {
                    value: ValueRef::new(new_id, i),
                    layout,
                    pad,
                },
            );
        }
        Ok(())
    }

    /// The value each input's padding must be rewritten with for `op` to run in
    /// `imp` (`None` where it already holds what the op needs), or `None` when
    /// the op needs something no transform writes there.
    #[allow(clippy::type_complexity)]
    fn refills(
        &self,
        op: &Op,
        src_inputs: &[ValueRef],
        imp: &Impl,
    ) -> Result<Option<Vec<Option<f32>>>, PlanError> {
        let pads: Vec<PadValue> = src_inputs
            .iter()
            .zip(&imp.inputs)
            .map(|(v, &want)| self.pad_of(*v, want))
            .collect();
        let x_shape = &self.src.value_type(src_inputs[0]).shape;
        let padded = self.layout(imp.inputs[0]).padded_axes(x_shape)?;
        let flow = pad_flow(op, &pads, &padded);
        let mut refills = Vec::with_capacity(src_inputs.len());
        for (j, req) in flow.inputs.iter().enumerate() {
            let shape = &self.src.value_type(src_inputs[j]).shape;
            if req.is_met_by(pads[j]) || self.layout(imp.inputs[j]).padded_axes(shape)?.is_empty() {
                refills.push(None);
                continue;
            }
            refills.push(Some(match req {
                Requirement::Value(v) => *v,
                Requirement::Finite => 0.0,
                _ => return Ok(None),
            }));
        }
        refills.resize(src_inputs.len(), None);
        Ok(Some(refills))
    }

    /// Node `id` with every input and output row-major.
    fn row_major_impl(&self, id: NodeId) -> Result<Impl, PlanError> {
        let node = self.src.node(id);
        let inputs = self.src.node_inputs(id);
        let outputs = (0..node.outputs.len()).map(|i| ValueRef::new(id, i));
        Ok(Impl {
            inputs: inputs
                .iter()
                .map(|&v| self.row_major(v))
                .collect::<Result<_, _>>()?,
            outputs: outputs
                .map(|v| self.row_major(v))
                .collect::<Result<_, _>>()?,
            cost: 0.0,
        })
    }

    /// The padding `v` holds once in layout `want`: what the transform made for
    /// it wrote, or what its producer left.
    fn pad_of(&self, v: ValueRef, want: LayoutId) -> PadValue {
        // Constants are packed at compile time with zeros in any padding.
        if self.src.constant(v).is_some() {
            return PadValue::Known(0.0);
        }
        if let Some((_, pad)) = self.converted.get(&(v, want, None)) {
            return *pad;
        }
        let p = &self.placed[&v];
        if p.layout == want {
            p.pad
        } else {
            PadValue::Known(0.0)
        }
    }

    /// `v` in layout `want` when `v` is a relabelling (a transpose or reshape
    /// that kept its input's bytes) of `x`: `x` in the layout that relabels to
    /// `want`, relabelled again. The transform then happens on `x`, shared with
    /// every other reader of `x` or of another relabelling of it that wants
    /// the same bytes, instead of once per relabelled copy.
    fn through_relabel(
        &mut self,
        v: ValueRef,
        want: LayoutId,
        consumer: &[Span],
    ) -> Result<Option<ValueRef>, PlanError> {
        let op = &self.src.node(v.node).op;
        let [x] = self.src.node_inputs(v.node)[..] else {
            return Ok(None);
        };
        if self.src.constant(x).is_some() {
            return Ok(None);
        }
        let (x_shape, v_shape) = (&self.src.value_type(x).shape, &self.src.value_type(v).shape);
        let (px, pv) = (self.placed[&x], self.placed[&v]);
        let ran_as_relabel = relabelled(op, self.layout(px.layout), x_shape).as_ref()
            == Some(self.layout(pv.layout));
        let to = self.layout(want);
        let back = relabelled_back(op, to, x_shape, v_shape)
            .filter(|b| relabelled(op, b, x_shape).as_ref() == Some(to))
            .and_then(|b| self.layouts.find(&b));
        let (true, Some(back)) = (ran_as_relabel, back) else {
            return Ok(None);
        };
        let xv = self.get(x, back, None, consumer)?;
        let pad = self.pad_of(x, back);
        let node = self.src.node(v.node);
        let name = format!("{}@{}", node.outputs[v.output].name, to);
        let relabel = Op::InLayout(Box::new(LaidOut {
            inner: op.clone(),
            inputs: vec![(self.layout(back).clone(), x_shape.clone())],
            outputs: vec![(to.clone(), pad)],
        }));
        let spans = merge_spans([node.spans.as_slice(), consumer]);
        let id = self
            .out
            .add_node(relabel, &name, &[xv], std::slice::from_ref(&name), spans)?;
        let result = ValueRef::new(id, 0);
        self.converted.insert((v, want, None), (result, pad));
        Ok(Some(result))
    }

    /// `v` in layout `want`, inserting (or reusing) a transform; `refill` forces a
    /// transform that rewrites the padding with that value.
    fn get(
        &mut self,
        v: ValueRef,
        want: LayoutId,
        refill: Option<f32>,
        consumer: &[Span],
    ) -> Result<ValueRef, PlanError> {
        let p = self.placed[&v];
        if p.layout == want && refill.is_none() {
            return Ok(p.value);
        }
        let key = (v, want, refill.map(f32::to_bits));
        if let Some(&(done, _)) = self.converted.get(&key) {
            return Ok(done);
        }
        if refill.is_none() {
            if let Some(shared) = self.through_relabel(v, want, consumer)? {
                return Ok(shared);
            }
        }
        let (from, to) = (self.layout(p.layout), self.layout(want));
        let ty = self.src.value_type(v).clone();
        let pad = PadValue::Known(refill.unwrap_or(0.0));
        let producer = self.src.node(v.node);
        let spans = merge_spans([producer.spans.as_slice(), consumer]);
        let name = format!("{}@{}", producer.outputs[v.output].name, to);
        let op = Op::LayoutTransform(LayoutTransform {
            from: from.clone(),
            to: to.clone(),
            logical: ty.shape.clone(),
            pad,
        });
        let id = self
            .out
            .add_node(op, &name, &[p.value], std::slice::from_ref(&name), spans)?;
        let result = if let Some(consts) = fold_node(&mut self.out, id)? {
            self.packed_constants += 1;
            consts[0]
        } else {
            ValueRef::new(id, 0)
        };
        self.converted.insert(key, (result, pad));
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, Tensor};
    use crate::ops::testutil::conv_3x3;

    /// An input read by two convolutions that both run blocked: the
    /// materialiser makes one transform for both, and the problem charges it
    /// once (a variant of the input pays it), not once per reader.
    #[test]
    fn a_transform_shared_by_two_readers_is_charged_once() {
        let mut g = Graph::new("fan-out");
        let ty = ValueType::new(DType::F32, vec![1, 32, 8, 8]);
        let x = g.add_input("x", ty, vec![]);
        let mut outs = Vec::new();
        for name in ["a", "b"] {
            let w = g.add_constant(
                &format!("{name}_w"),
                Tensor::from_f32(vec![32, 32, 3, 3], vec![0.01; 32 * 32 * 9]),
                vec![],
            );
            let id = g
                .add_node(conv_3x3(), name, &[x, w], &[name.to_string()], vec![])
                .unwrap();
            outs.push(ValueRef::new(id, 0));
        }
        g.set_outputs(outs);
        let model = CostModel::default();
        let space = PlanSpace::build(&g, Family::Nchwc(16), &model).unwrap();
        let choice = solver::solve(&space.problem, &SolveOptions::default())
            .unwrap()
            .choice;
        let ops: f64 = (0..choice.len())
            .map(|var| space.impl_of(var, choice[var]).cost)
            .sum();
        let m = materialise(&g, &space, choice.clone(), &model).unwrap();
        let transforms = kept_transforms(&m.graph);
        let into_blocked = transforms.iter().filter(|t| t.value == "x").count();
        assert_eq!(into_blocked, 1, "{transforms:?}");
        let charged = space.problem.cost(&choice) - ops;
        assert!(
            (charged - m.transforms_cost).abs() <= 1e-6 * charged.abs(),
            "the problem charged {charged} ns for transforms costing {} ns",
            m.transforms_cost
        );
    }

    /// A blocked conv whose relu feeds a row-major graph output: the
    /// transform back to NCHW goes after the relu, which then runs in the
    /// conv's epilogue, not between them (both move the same bytes, but the
    /// relu would be a pass of its own).
    #[test]
    fn a_transform_goes_after_the_activation_a_conv_fuses() {
        let mut g = Graph::new("conv-relu");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![1, 32, 8, 8]), vec![]);
        let w = g.add_constant(
            "w",
            Tensor::from_f32(vec![32, 32, 3, 3], vec![0.01; 32 * 32 * 9]),
            vec![],
        );
        let conv = g
            .add_node(conv_3x3(), "conv", &[x, w], &["conv".to_string()], vec![])
            .unwrap();
        let relu = g
            .add_node(
                Op::Unary(crate::ops::UnaryOp::Relu),
                "relu",
                &[ValueRef::new(conv, 0)],
                &["relu".to_string()],
                vec![],
            )
            .unwrap();
        g.set_outputs(vec![ValueRef::new(relu, 0)]);
        let model = CostModel::default();
        let space = PlanSpace::build(&g, Family::Nchwc(16), &model).unwrap();
        let choice = solver::solve(&space.problem, &SolveOptions::default())
            .unwrap()
            .choice;
        let m = materialise(&g, &space, choice, &model).unwrap();
        let transformed: Vec<String> = kept_transforms(&m.graph)
            .into_iter()
            .map(|t| t.value)
            .collect();
        assert_eq!(transformed, ["x", "relu"]);
    }
}
