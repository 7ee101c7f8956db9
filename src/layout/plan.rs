//! Layout planning as a sequence of passes, each with one job, run in order by
//! [`plan_with`] and listed with its wall time in the report:
//! 1. `canonicalize`: fold and canonicalise a copy of the graph;
//! 2. `candidates`: the plan space: candidate layouts, each op's impls, and the
//!    assignment problem over them;
//! 3. `solve`: the planner chooses one impl per op;
//! 4. `materialize`: the choice spelled out as a graph with explicit transforms;
//! 5. `rewrite`: e-graph rewriting of that graph;
//! 6. `alternatives`: the planner's other assignments, materialised and
//!    rewritten when they might end cheaper; the cheapest stays;
//! 7. `report`: what the plan kept, and where every tensor lives.

use super::cost::{CostModel, Estimated};
use super::egraph::{Lang, LayoutAnalysis};
use super::extract::{rewrite_graph, RewriteLimits};
use super::materialize::{materialise, transforms_cost, Materialised};
use super::planners::{Assignment, Planner};
use super::replay::LayoutDecisions;
use super::report::{
    holds_model_tensors, kept_transforms, stored_layout, tensor_layouts, PassTiming, PlanReport,
    PlanTimings, RewriteInfo, SolverInfo,
};
use super::rules::{RuleError, RuleSet, RuleSource};
use super::space::{Pins, PlanSpace};
use super::target::TargetFamily;
use super::{Layout, LayoutError, PlanError};
use crate::graph::{
    common_subexpressions, conv_transposes_as_convs, drop_identities, lift_1d_windows,
    reductions_as_global_pools, Graph,
};
use egg::Rewrite;
use std::time::{Duration, Instant};

/// A planned graph and its report.
pub struct Plan {
    /// The planned graph.
    pub graph: Graph,
    /// What the plan decided.
    pub report: PlanReport,
    /// The layouts pinned for graph inputs and outputs.
    pub pins: Pins,
    /// The layouts chosen for each planned node, to plan the same model at
    /// another input shape by ([`super::replay::Replay`]).
    pub decisions: LayoutDecisions,
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

/// Plans `g` with `planner` for `family` and materialises the result.
pub fn plan(
    g: &Graph,
    planner: &dyn Planner,
    family: TargetFamily,
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
    /// Rewrite ops into the forms the native kernels run: transposed
    /// convolutions as convolutions over their stride phases, 1-D
    /// convolutions and pools as 2-D. Another runtime has kernels for the
    /// source forms, and the rewrites add tensors of a higher rank.
    pub kernel_forms: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            rules: Some(RuleSource::from_env()),
            rewrite_limits: RewriteLimits::default(),
            pins: Pins::new(),
            fold_batchnorms: false,
            kernel_forms: true,
        }
    }
}

/// Rewrites on a thread with a large stack: converting between the graph and the
/// e-graph recurses as deep as the graph is long.
fn rewrite_deep(
    g: &Graph,
    rules: &[Rewrite<Lang, LayoutAnalysis>],
    limits: &RewriteLimits,
) -> Result<(Graph, super::extract::RewriteReport), LayoutError> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(512 << 20)
            .spawn_scoped(s, || rewrite_graph(g, rules, limits))
            .map_err(|e| LayoutError::Invalid(format!("cannot start the rewriting thread: {e}")))?
            .join()
            .map_err(|_| LayoutError::Invalid("the rewriting thread panicked".into()))?
    })
}

/// The rules of a plan, loaded once for every stage and alternative: `None`
/// when rewriting is off, the load error when they do not load (each stage
/// then reports itself skipped).
type LoadedRules = Option<Result<RuleSet, RuleError>>;

/// Plans `g` with `planner` for `family`, materialises the choice, and rewrites
/// the result with the e-graph rules (keeping it only when it moves no more
/// bytes): the passes below, run in order, each timed into the report.
pub fn plan_with(
    g: &Graph,
    planner: &dyn Planner,
    family: TargetFamily,
    model: &CostModel,
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    let t0 = Instant::now();
    let mut passes = PassLog::default();
    let rules: LoadedRules = options.rules.as_ref().map(RuleSource::load);
    let (folded, graph_rewrite) =
        passes.run("canonicalize", || canonicalize(g, options, &rules, model))?;
    let g = &folded;
    let space = passes.run("candidates", || {
        PlanSpace::build_pinned(g, family, model, &options.pins)
    })?;
    let Assignment { choice, solver } = passes.run("solve", || planner.assign(g, &space))?;
    let own = passes.run("materialize", || materialise(g, &space, choice, model))?;
    let own = passes.run("rewrite", || finish(own, model, options, &rules));
    let (best, alternatives_rewrite_ms) = passes.run("alternatives", || {
        cheapest_alternative(g, &space, planner, own, model, (options, &rules))
    })?;
    let mut plan = passes.run("report", || {
        let planned = Planned {
            planner: planner.name(),
            family,
            solver,
            graph_rewrite,
            cost_margin: model.margin(),
            unmeasured_convs: model.unmeasured_convs(),
            estimated: model.estimated(),
        };
        let decisions = LayoutDecisions::record(g, &space, &best.choice);
        report(g, best, planned, &options.pins, decisions)
    });
    plan.report.timings = PlanTimings {
        plan_ms: ms(t0.elapsed()),
        assign_ms: passes.wall_ms("solve"),
        rewrite_ms: passes.wall_ms("rewrite") + alternatives_rewrite_ms,
        passes: passes.done,
    };
    Ok(plan)
}

/// The passes of a plan that ran, in order, each with its wall time.
#[derive(Default)]
struct PassLog {
    done: Vec<PassTiming>,
}

impl PassLog {
    /// Runs the pass `name` and records how long it took.
    fn run<T>(&mut self, name: &'static str, pass: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = pass();
        self.done.push(PassTiming {
            name,
            wall_ms: ms(start.elapsed()),
        });
        out
    }

    /// How long the pass `name` took (ms).
    fn wall_ms(&self, name: &str) -> f64 {
        self.done
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.wall_ms)
            .sum()
    }
}

/// Brings a copy of `g` (which shares the weights) into the forms the planner
/// expects, and returns what the graph rules did, when there were any. The
/// graph-stage rules (`rules/`: pads into windows, affine ops into
/// convolutions, transpose and reshape chains) do most of it; the passes that
/// stay in Rust, and why:
/// - `fold_conv_batchnorm`, asked for by an export only (rules run on every plan);
/// - `conv_transposes_as_convs` and `lift_1d_windows`, the kernel forms another
///   runtime is spared: they split weights into stride phases, arithmetic the
///   rule language has no word for;
/// - `drop_identities` (casts to their own type, identities) and
///   `common_subexpressions`: ops without a node kind of their own, which a
///   rule over the generic `op` node would bring, with the whole graph, into
///   every rewriting;
/// - `reductions_as_global_pools`: a global pool pays only through the layouts
///   it can run in, which the graph stage's extraction does not see.
fn canonicalize(
    g: &Graph,
    options: &PlanOptions,
    rules: &LoadedRules,
    model: &CostModel,
) -> Result<(Graph, Option<RewriteInfo>), PlanError> {
    let mut folded = g.clone();
    if options.fold_batchnorms {
        crate::graph::fold_conv_batchnorm(&mut folded)?;
    }
    if options.kernel_forms {
        conv_transposes_as_convs(&mut folded)?;
        lift_1d_windows(&mut folded)?;
    }
    drop_identities(&mut folded)?;
    common_subexpressions(&mut folded)?;
    let rewrite = match rules {
        None => None,
        Some(Err(e)) => Some(RewriteInfo::skipped(e.to_string())),
        // A stage without rules has nothing to report.
        Some(Ok(r)) if r.graph.is_empty() => None,
        Some(Ok(r)) => match rewrite_deep(&folded, &r.graph, &options.rewrite_limits) {
            Ok((rewritten, report)) => {
                folded = rewritten;
                let notes = report.failures.clone();
                Some(RewriteInfo::ran(&report, true, notes, model.ns_per_byte))
            }
            Err(e) => Some(RewriteInfo::skipped(e.to_string())),
        },
    };
    reductions_as_global_pools(&mut folded)?;
    Ok((folded, rewrite))
}

/// Rewriting may improve another assignment beyond the planner's own choice:
/// finishes each alternative worth it and keeps the cheapest once rewritten,
/// `best` on a tie. Also returns how long their rewriting took (ms).
fn cheapest_alternative(
    g: &Graph,
    space: &PlanSpace,
    planner: &dyn Planner,
    mut best: Finished,
    model: &CostModel,
    (options, rules): (&PlanOptions, &LoadedRules),
) -> Result<(Finished, f64), PlanError> {
    let mut rewrite_ms = 0.0;
    for choice in planner.alternatives(g, space) {
        let beat = best.rewritten_cost - 1e-9 * best.rewritten_cost.abs();
        if choice == best.choice {
            continue;
        }
        // Rewriting removes at most every transform: an assignment that
        // could not win even so is not worth rewriting.
        let other = materialise(g, space, choice, model)?;
        if other.cost - other.transforms_cost >= beat {
            continue;
        }
        let t_rewrite = Instant::now();
        let other = finish(other, model, options, rules);
        rewrite_ms += ms(t_rewrite.elapsed());
        if other.rewritten_cost < beat {
            best = other;
        }
    }
    Ok((best, rewrite_ms))
}

/// What the passes before materialisation decided, for the report.
struct Planned {
    planner: &'static str,
    family: TargetFamily,
    solver: Option<SolverInfo>,
    graph_rewrite: Option<RewriteInfo>,
    cost_margin: f64,
    unmeasured_convs: usize,
    estimated: Estimated,
}

/// The plan of the finished assignment `best` of `g` (the canonical graph),
/// with its report (timings left for the caller).
fn report(
    g: &Graph,
    best: Finished,
    planned: Planned,
    pins: &Pins,
    decisions: LayoutDecisions,
) -> Plan {
    let (relabels, transforms): (Vec<_>, Vec<_>) = kept_transforms(&best.graph)
        .into_iter()
        .partition(|t| t.relabel);
    let report = PlanReport {
        model: g.name.clone(),
        planner: planned.planner.to_string(),
        family: planned.family.to_string(),
        tensors: tensor_layouts(&best.graph, g, pins),
        transform_count: transforms.len(),
        relabel_count: relabels.len(),
        transform_bytes: transforms.iter().map(|t| t.bytes).sum(),
        transforms,
        relabels,
        packed_constants: best.packed_constants,
        refills: best.refills,
        graph_rewrite: planned.graph_rewrite,
        estimated_cost: best.estimated_cost,
        rewritten_cost: best.rewritten_cost,
        cost_margin: planned.cost_margin,
        unmeasured_convs: planned.unmeasured_convs,
        estimated_transforms: planned.estimated.transforms,
        estimated_convs: planned.estimated.convs,
        solver: planned.solver,
        rewrite: best.rewrite,
        timings: PlanTimings::default(),
    };
    Plan {
        graph: best.graph,
        report,
        pins: pins.clone(),
        decisions,
    }
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

/// Rewrites a materialised assignment with the e-graph rules (keeping the
/// result only when its transforms cost no more).
fn finish(
    m: Materialised,
    model: &CostModel,
    options: &PlanOptions,
    rules: &LoadedRules,
) -> Finished {
    let Materialised {
        choice,
        mut graph,
        packed_constants,
        refills,
        transforms_cost: materialised,
        cost: estimated,
    } = m;
    let rewrite = rules.as_ref().map(|loaded| {
        let rules = match loaded {
            Ok(r) => &r.layout,
            Err(e) => return RewriteInfo::skipped(e.to_string()),
        };
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
                RewriteInfo::ran(&r, better, notes, model.ns_per_byte)
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
