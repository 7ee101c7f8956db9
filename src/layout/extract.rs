//! Extraction: one node per needed class, minimising bytes moved.
//!
//! A transform (or pad, crop) costs the bytes it reads and writes; an op costs
//! the bytes of its inputs and outputs (so a padded buffer costs more than a
//! tight one); anything computable from constants alone costs nothing (it is
//! folded at compile time). The exact extractor counts a class shared by several
//! users once: it states the choice as an assignment problem for the layout
//! solver (`solver.rs`), which splits it into regions around the classes with
//! alternatives and solves each by exact elimination, in time linear in the
//! graph. The greedy (tree-cost) extractor stands in when it is cheaper (it may
//! use nodes on cycles, which the exact one leaves out) or the exact one fails,
//! and the report says which ran.

use super::egraph::{
    entry_of, region_to_egraph, rewrite_region, Info, LEGraph, Lang, LayoutAnalysis,
};
use super::solver::{solve, Pair, Problem, SolveError, SolveOptions};
use super::LayoutError;
use crate::graph::{Graph, ValueType};
use egg::{Id, Language, Rewrite, Runner};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

fn bytes_of(eg: &LEGraph, id: Id) -> f64 {
    match &eg[id].data.info {
        Info::Tensor(t) => t.bytes() as f64,
        Info::Tuple(ts) => ts.iter().map(|t| t.bytes() as f64).sum(),
        _ => 0.0,
    }
}

fn is_const(eg: &LEGraph, id: Id) -> bool {
    match &eg[id].data.info {
        Info::Tensor(t) => t.is_const,
        Info::Tuple(_) => false,
        _ => true,
    }
}

/// A flop in bytes moved: the unmeasured cost model's ns per flop over its ns
/// per byte. Without it, computing a convolution twice (once more for a
/// second reader) would cost only the bytes it reads and writes.
const BYTES_PER_FLOP: f64 = 0.2;

/// The arithmetic of an op node in flops: 0 for transforms and atoms.
fn node_flops(eg: &LEGraph, class: Id, node: &Lang) -> f64 {
    let (k, xs) = match node {
        Lang::Unary([k, x]) | Lang::Pool([k, x]) | Lang::Padding([k, x]) => (*k, vec![*x]),
        Lang::Binary([k, a, b]) => (*k, vec![*a, *b]),
        Lang::Conv(ch) | Lang::Other(ch) => match ch.split_first() {
            Some((k, xs)) => (*k, xs.to_vec()),
            None => return 0.0,
        },
        _ => return 0.0,
    };
    let Ok(entry) = entry_of(eg, k) else {
        return 0.0;
    };
    let types = |ids: &[Id]| -> Option<Vec<ValueType>> {
        ids.iter()
            .map(|&i| match &eg[i].data.info {
                Info::Tensor(t) => Some(t.value_type()),
                _ => None,
            })
            .collect()
    };
    let ins = types(&xs);
    let outs: Option<Vec<ValueType>> = match &eg[class].data.info {
        Info::Tensor(t) => Some(vec![t.value_type()]),
        Info::Tuple(ts) => Some(ts.iter().map(|t| t.value_type()).collect()),
        _ => None,
    };
    match (ins, outs) {
        (Some(ins), Some(outs)) => {
            let (ins, outs): (Vec<&ValueType>, Vec<&ValueType>) =
                (ins.iter().collect(), outs.iter().collect());
            entry.op.def().flops(&ins, &outs)
        }
        _ => 0.0,
    }
}

/// The cost of one node, not counting its children, in bytes moved: the
/// bytes of its tensor inputs and outputs, and its arithmetic. Invalid nodes
/// cost infinity.
pub fn node_cost(eg: &LEGraph, class: Id, node: &Lang) -> f64 {
    if matches!(eg[class].data.info, Info::Invalid(_)) {
        return f64::INFINITY;
    }
    match node {
        Lang::Atom(_) | Lang::Get(_) => 0.0,
        _ if is_const(eg, class) => 0.0,
        _ => {
            let tensors = node
                .children()
                .iter()
                .filter(|&&c| !matches!(eg[c].data.info, Info::Atom(_)));
            bytes_of(eg, class)
                + tensors.map(|&c| bytes_of(eg, c)).sum::<f64>()
                + node_flops(eg, class, node) * BYTES_PER_FLOP
        }
    }
}

/// Which extractor ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The optimal choice on the cycle-free nodes, by the layout solver.
    Exact,
    /// Each class's cheapest node, bottom-up (when it beats the exact choice,
    /// which cannot use a node on a cycle, or that failed).
    Greedy,
    /// No rule applied and every class holds one node: nothing to choose.
    Unchanged,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Exact => "Exact",
            Method::Greedy => "Greedy",
            Method::Unchanged => "Unchanged",
        })
    }
}

/// What extraction did.
#[derive(Clone, Debug)]
pub struct ExtractReport {
    /// Which extractor chose.
    pub method: Method,
    /// Cost of the chosen nodes, each class counted once.
    pub cost: f64,
    /// Nodes in the classes reachable from the roots.
    pub nodes: usize,
    /// Why the exact choice was not used, when it was not.
    pub note: Option<String>,
}

/// Classes reachable from the roots, and for each the nodes that are not on a
/// cycle: a depth-first walk drops every node with a child still on the walk's
/// stack, which leaves no cycle (every cycle has such a back edge) and keeps
/// each original acyclic term.
fn acyclic_nodes(eg: &LEGraph, roots: &[Id]) -> FxHashMap<Id, Vec<Lang>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut mark: FxHashMap<Id, Mark> = FxHashMap::default();
    let mut keep: FxHashMap<Id, Vec<Lang>> = FxHashMap::default();
    for &root in roots {
        let root = eg.find(root);
        if mark.contains_key(&root) {
            continue;
        }
        // Explicit stack: (class, index of next node, index of next child).
        let mut stack: Vec<(Id, usize, usize)> = vec![(root, 0, 0)];
        mark.insert(root, Mark::Open);
        keep.insert(root, Vec::new());
        while let Some(&(class, ni, ci)) = stack.last() {
            let top = stack.len() - 1;
            let nodes = &eg[class].nodes;
            if ni >= nodes.len() {
                mark.insert(class, Mark::Done);
                stack.pop();
                continue;
            }
            let node = &nodes[ni];
            let children = node.children();
            if ci < children.len() {
                let child = eg.find(children[ci]);
                stack[top].2 += 1;
                match mark.get(&child) {
                    None => {
                        mark.insert(child, Mark::Open);
                        keep.insert(child, Vec::new());
                        stack.push((child, 0, 0));
                    }
                    // A back edge: drop this node.
                    Some(Mark::Open) => stack[top].2 = usize::MAX,
                    Some(Mark::Done) => {}
                }
                continue;
            }
            if ci != usize::MAX {
                keep.get_mut(&class)
                    .expect("marked classes are kept")
                    .push(node.clone());
            }
            stack[top].1 += 1;
            stack[top].2 = 0;
        }
    }
    keep
}

/// Each class's cheapest node by tree cost (its own cost plus its children's
/// tree costs), for the classes the roots reach. A node's tree cost is never
/// below its children's, so classes are settled cheapest first as in
/// Dijkstra's algorithm: a node is priced once, when the last of its children
/// is settled, which takes time linear in the e-graph (up to the heap's log).
/// egg's `Extractor` sweeps every class until nothing changes, as many sweeps
/// as the graph is deep.
fn greedy(eg: &LEGraph, roots: &[Id]) -> FxHashMap<Id, Lang> {
    let classes: Vec<Id> = eg.classes().map(|c| c.id).collect();
    let index: FxHashMap<Id, usize> = classes.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    // Per node: its distinct child classes; per class: the nodes reading it.
    let mut kids: Vec<Vec<Vec<usize>>> = Vec::with_capacity(classes.len());
    let mut readers: Vec<Vec<(usize, usize)>> = vec![Vec::new(); classes.len()];
    for (ci, &c) in classes.iter().enumerate() {
        let of_class: Vec<Vec<usize>> = eg[c]
            .nodes
            .iter()
            .enumerate()
            .map(|(ni, n)| {
                let mut ks: Vec<usize> = n.children().iter().map(|&k| index[&eg.find(k)]).collect();
                ks.sort_unstable();
                ks.dedup();
                for &k in &ks {
                    readers[k].push((ci, ni));
                }
                ks
            })
            .collect();
        kids.push(of_class);
    }
    let mut waiting: Vec<Vec<usize>> = kids
        .iter()
        .map(|nodes| nodes.iter().map(Vec::len).collect())
        .collect();
    let mut best: Vec<Option<(f64, usize)>> = vec![None; classes.len()];
    // Min-heap on (cost, class, node): ties break by index, the same on every run.
    let mut heap = std::collections::BinaryHeap::new();
    let priced = |ci: usize, ni: usize, best: &[Option<(f64, usize)>]| {
        let c = classes[ci];
        let own = node_cost(eg, c, &eg[c].nodes[ni]);
        let below: f64 = kids[ci][ni]
            .iter()
            .map(|&k| best[k].map_or(f64::INFINITY, |b| b.0))
            .sum();
        std::cmp::Reverse((Priced(own + below), ci, ni))
    };
    for (ci, counts) in waiting.iter().enumerate() {
        for (ni, &n) in counts.iter().enumerate() {
            if n == 0 {
                heap.push(priced(ci, ni, &best));
            }
        }
    }
    while let Some(std::cmp::Reverse((Priced(cost), ci, ni))) = heap.pop() {
        if best[ci].is_some() {
            continue;
        }
        best[ci] = Some((cost, ni));
        for &(pc, pn) in &readers[ci] {
            waiting[pc][pn] -= 1;
            if waiting[pc][pn] == 0 && best[pc].is_none() {
                heap.push(priced(pc, pn, &best));
            }
        }
    }
    let mut choice = FxHashMap::default();
    let mut stack: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    while let Some(c) = stack.pop() {
        if choice.contains_key(&c) {
            continue;
        }
        // A class on a cycle only (never settled) takes its first node.
        let ni = best[index[&c]].map_or(0, |b| b.1);
        let node = eg[c].nodes[ni].clone();
        stack.extend(node.children().iter().map(|&ch| eg.find(ch)));
        choice.insert(c, node);
    }
    choice
}

/// A cost ordered totally (`f64::total_cmp`), for the heap.
#[derive(Clone, Copy, PartialEq)]
struct Priced(f64);

impl Eq for Priced {}

impl PartialOrd for Priced {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Priced {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// How deep `needs` looks below a class: rules rewrite a few levels at most, so
/// the nodes of a class meet again within a few levels.
const NEEDS_DEPTH: usize = 4;

/// Classes that class `v` uses whichever nodes are chosen, looking `depth`
/// levels down (`children[v][k]`: the child classes of `v`'s node `k`).
fn needs(children: &[Vec<Vec<usize>>], v: usize, depth: usize) -> BTreeSet<usize> {
    let mut common: Option<BTreeSet<usize>> = None;
    for kids in &children[v] {
        let mut under: BTreeSet<usize> = kids.iter().copied().collect();
        if depth > 1 {
            for &k in kids {
                under.extend(needs(children, k, depth - 1));
            }
        }
        common = Some(match common {
            None => under,
            Some(c) => c.intersection(&under).copied().collect(),
        });
    }
    common.unwrap_or_default()
}

/// Why the exact extractor chose nothing.
#[derive(Debug, thiserror::Error)]
enum ExactError {
    /// The layout solver failed.
    #[error(transparent)]
    Solve(#[from] SolveError),
    /// Every choice uses a node on a cycle.
    #[error("no cycle-free extraction")]
    NoAcyclicChoice,
}

/// The exact choice on the cycle-free nodes, as an assignment problem for the
/// layout solver: one variable per class, choosing "unused" or one of its
/// nodes at that node's cost; a pair term forbids a used node whose child class
/// is unused. Each class is paid once however many users share it. The problem
/// falls apart into small regions around the classes that have alternatives,
/// which exact elimination solves in time linear in the graph.
fn exact(
    eg: &LEGraph,
    roots: &[Id],
    nodes: &FxHashMap<Id, Vec<Lang>>,
) -> Result<FxHashMap<Id, Lang>, ExactError> {
    // A fixed variable order, so that ties between equally cheap extractions
    // break the same way on every run.
    let mut classes: Vec<Id> = nodes.keys().copied().collect();
    classes.sort();
    let var: FxHashMap<Id, usize> = classes.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let options: Vec<Vec<&Lang>> = classes
        .iter()
        .map(|c| {
            nodes[c]
                .iter()
                .filter(|n| node_cost(eg, *c, n).is_finite())
                .collect()
        })
        .collect();
    let children: Vec<Vec<Vec<usize>>> = options
        .iter()
        .map(|opts| {
            opts.iter()
                .map(|n| n.children().iter().map(|ch| var[&eg.find(*ch)]).collect())
                .collect()
        })
        .collect();
    // Classes every extraction uses: the roots, and what a used class needs
    // whichever node it takes. Forbidding "unused" there lets the solver fix
    // most classes before it looks for regions, which then stay small.
    let mut needed = vec![false; classes.len()];
    let mut stack: Vec<usize> = roots.iter().map(|r| var[&eg.find(*r)]).collect();
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut needed[v], true) {
            continue;
        }
        match children[v].as_slice() {
            [only] => stack.extend(only),
            _ => stack.extend(needs(&children, v, NEEDS_DEPTH)),
        }
    }
    let unary: Vec<Vec<f64>> = classes
        .iter()
        .zip(&options)
        .zip(&needed)
        .map(|((&c, opts), &needed)| {
            let unused = if needed { f64::INFINITY } else { 0.0 };
            std::iter::once(unused)
                .chain(opts.iter().map(|n| node_cost(eg, c, n)))
                .collect()
        })
        .collect();
    // Dearer than every node together: no optimum pays it.
    let forbidden = 1.0 + unary.iter().flat_map(|u| u.iter().skip(1)).sum::<f64>();
    let mut pairs = Vec::new();
    for (a, kids) in children.iter().enumerate() {
        let mut any: Vec<usize> = kids.iter().flatten().copied().collect();
        any.sort_unstable();
        any.dedup();
        for b in any {
            let nb = unary[b].len();
            let mut cost = vec![0.0; unary[a].len() * nb];
            for (k, of_node) in kids.iter().enumerate() {
                if of_node.contains(&b) {
                    cost[(k + 1) * nb] = forbidden;
                }
            }
            pairs.push(Pair { a, b, cost });
        }
    }
    let problem = Problem { unary, pairs };
    let solution = solve(&problem, &SolveOptions::default())?;
    if solution.objective >= forbidden {
        return Err(ExactError::NoAcyclicChoice);
    }
    Ok(classes
        .iter()
        .zip(&options)
        .zip(&solution.choice)
        .filter(|(_, &k)| k > 0)
        .map(|((&c, opts), &k)| (c, opts[k - 1].clone()))
        .collect())
}

/// Cost of a choice, each reachable class counted once.
fn choice_cost(eg: &LEGraph, roots: &[Id], choice: &FxHashMap<Id, Lang>) -> f64 {
    chosen_classes(eg, roots, choice)
        .into_iter()
        .filter_map(|c| choice.get(&c).map(|n| node_cost(eg, c, n)))
        .sum()
}

/// The classes the roots need under `choice`, each once, in the order of a
/// depth-first walk (a fixed order, so that costs summed over them agree to
/// the last bit between runs).
fn chosen_classes(eg: &LEGraph, roots: &[Id], choice: &FxHashMap<Id, Lang>) -> Vec<Id> {
    let mut seen = FxHashSet::default();
    let mut order = Vec::new();
    let mut stack: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    while let Some(c) = stack.pop() {
        if seen.insert(c) {
            order.push(c);
            if let Some(n) = choice.get(&c) {
                stack.extend(n.children().iter().map(|&ch| eg.find(ch)));
            }
        }
    }
    order
}

/// Extracts one node per class needed by the roots.
pub fn extract(eg: &LEGraph, roots: &[Id]) -> (FxHashMap<Id, Lang>, ExtractReport) {
    let nodes = acyclic_nodes(eg, roots);
    let count: usize = nodes.values().map(Vec::len).sum();
    let greedy_choice = greedy(eg, roots);
    let (choice, method, note) = match exact(eg, roots, &nodes) {
        // The exact choice sees only the cycle-free nodes; the greedy extractor
        // may use a node that the cycle cut dropped, so keep the cheaper.
        Ok(c) => {
            let (ce, cg) = (
                choice_cost(eg, roots, &c),
                choice_cost(eg, roots, &greedy_choice),
            );
            if cg < ce {
                let note = format!("greedy cost {cg} beat the exact {ce} on the cycle-free nodes");
                (greedy_choice, Method::Greedy, Some(note))
            } else {
                (c, Method::Exact, None)
            }
        }
        Err(e) => (
            greedy_choice,
            Method::Greedy,
            Some(format!("exact extraction failed: {e}")),
        ),
    };
    let cost = choice_cost(eg, roots, &choice);
    (
        choice,
        ExtractReport {
            method,
            cost,
            nodes: count,
            note,
        },
    )
}

/// Limits of one rewriting run. The node and time limits grow with the graph,
/// so that a large graph is rewritten as thoroughly as a small one.
#[derive(Clone, Debug)]
pub struct RewriteLimits {
    /// At most this many rewriting iterations.
    pub iterations: usize,
    /// Stop once the e-graph has this many nodes, or `growth` times the nodes
    /// it started with when that is more.
    pub nodes: usize,
    /// See `nodes`.
    pub growth: usize,
    /// Stop after this long, plus `time_per_node` for each node it started with.
    pub time: Duration,
    /// See `time`.
    pub time_per_node: Duration,
    /// Put the whole graph into the e-graph rather than the region the rules
    /// can change (slower; a check on the region).
    pub whole_graph: bool,
}

impl Default for RewriteLimits {
    fn default() -> RewriteLimits {
        RewriteLimits {
            iterations: 30,
            nodes: 50_000,
            growth: 8,
            time: Duration::from_secs(2),
            time_per_node: Duration::from_micros(100),
            whole_graph: false,
        }
    }
}

/// What a rewriting run did.
#[derive(Clone, Debug)]
pub struct RewriteReport {
    /// How the rewritten graph was extracted.
    pub extract: ExtractReport,
    /// Cost of the input graph under the same cost model.
    pub cost_before: f64,
    /// Rewriting iterations run.
    pub iterations: usize,
    /// Why rewriting stopped.
    pub stop_reason: StopReason,
    /// Nodes in the e-graph when it stopped.
    pub egraph_nodes: usize,
    /// Rule conditions that failed to evaluate (bugs, reported, never hidden).
    pub failures: Vec<String>,
    /// The rules whose rewrites the extracted graph keeps, with the source
    /// layers each covered, in the order they fired.
    pub fired: Vec<FiredRule>,
}

/// A rule whose rewrite the extracted graph keeps.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FiredRule {
    /// The rule's name.
    pub rule: String,
    /// The source layers its match covered.
    pub spans: Vec<crate::graph::Span>,
}

/// The firings of `eg` that the extracted `choice` keeps: those whose right
/// side computes a class of the extracted graph (the class no longer computed
/// by the node the left side matched but by the one the right side built, or
/// for a right side that is a variable, by another node of the class it
/// joined), and those whose right side built a node that a kept firing's left
/// side matched (a fold of a fold).
fn kept_firings(eg: &LEGraph, roots: &[Id], choice: &FxHashMap<Id, Lang>) -> Vec<FiredRule> {
    let used: FxHashSet<Id> = chosen_classes(eg, roots, choice).into_iter().collect();
    let canonical = |n: &Lang| n.clone().map_children(|c| eg.find(c));
    let firings = &eg.analysis.firings;
    let mut kept: Vec<bool> = firings
        .iter()
        .map(|f| {
            let class = eg.find(f.class);
            let Some(chosen) = choice.get(&class).filter(|_| used.contains(&class)) else {
                return false;
            };
            let chosen = canonical(chosen);
            let replaced = f.lhs.last().is_none_or(|l| canonical(l) != chosen);
            let built = f.rhs.as_ref().is_none_or(|r| canonical(r) == chosen);
            replaced && built
        })
        .collect();
    // The nodes the kept firings' left sides matched: a firing that built one
    // is kept too, and its own left side's nodes join them.
    let mut matched: FxHashSet<Lang> = FxHashSet::default();
    let mut fresh: Vec<usize> = (0..firings.len()).filter(|&i| kept[i]).collect();
    while !fresh.is_empty() {
        for i in fresh.drain(..) {
            matched.extend(firings[i].lhs.iter().map(&canonical));
        }
        for (i, f) in firings.iter().enumerate() {
            let built = f
                .rhs
                .as_ref()
                .is_some_and(|r| matched.contains(&canonical(r)));
            if !kept[i] && built {
                kept[i] = true;
                fresh.push(i);
            }
        }
    }
    let mut seen: FxHashSet<(String, Id)> = FxHashSet::default();
    firings
        .iter()
        .zip(&kept)
        .filter(|(f, &k)| k && seen.insert((f.rule.clone(), eg.find(f.class))))
        .map(|(f, _)| FiredRule {
            rule: f.rule.clone(),
            spans: f.spans.clone(),
        })
        .collect()
}

/// Why a rewriting run stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum StopReason {
    /// No rule changed the e-graph any more.
    Saturated,
    /// It ran this many iterations, the limit.
    IterationLimit(usize),
    /// The e-graph reached this many nodes, the limit.
    NodeLimit(usize),
    /// It ran this many seconds, the limit.
    TimeLimit(f64),
    /// Anything else the rewriting engine reports.
    Other(String),
}

impl From<egg::StopReason> for StopReason {
    fn from(r: egg::StopReason) -> StopReason {
        match r {
            egg::StopReason::Saturated => StopReason::Saturated,
            egg::StopReason::IterationLimit(n) => StopReason::IterationLimit(n),
            egg::StopReason::NodeLimit(n) => StopReason::NodeLimit(n),
            egg::StopReason::TimeLimit(s) => StopReason::TimeLimit(s),
            egg::StopReason::Other(m) => StopReason::Other(m),
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Saturated => write!(f, "Saturated"),
            StopReason::IterationLimit(n) => write!(f, "IterationLimit({n})"),
            StopReason::NodeLimit(n) => write!(f, "NodeLimit({n})"),
            StopReason::TimeLimit(s) => write!(f, "TimeLimit({s:?})"),
            StopReason::Other(m) => write!(f, "Other({m:?})"),
        }
    }
}

/// Rewrites `g` with `rules` and extracts the cheapest equivalent graph. Only
/// the region the rules can change goes into the e-graph (`rewrite_region`),
/// and the costs reported are that region's.
pub fn rewrite_graph(
    g: &Graph,
    rules: &[Rewrite<Lang, LayoutAnalysis>],
    limits: &RewriteLimits,
) -> Result<(Graph, RewriteReport), LayoutError> {
    // A dead node reading a value would keep it, and what it is computed from.
    let mut live = g.clone();
    live.remove_dead_nodes();
    let g = live;
    let region = match limits.whole_graph {
        true => None,
        false => rewrite_region(&g, rules),
    };
    let mut ge = region_to_egraph(&g, region.as_ref())?;
    let before = greedy(&ge.egraph, &ge.roots);
    let cost_before = choice_cost(&ge.egraph, &ge.roots, &before);
    let start = ge.egraph.total_number_of_nodes();
    let runner = Runner::default()
        .with_egraph(std::mem::take(&mut ge.egraph))
        .with_iter_limit(limits.iterations)
        .with_node_limit(limits.nodes.max(limits.growth * start))
        .with_time_limit(
            limits.time + limits.time_per_node * u32::try_from(start).unwrap_or(u32::MAX),
        )
        .run(rules);
    // A run that returned has stopped, for a reason.
    let stop_reason = runner
        .stop_reason
        .clone()
        .map_or(StopReason::Other("not stopped".into()), StopReason::from);
    let iterations = runner.iterations.len();
    let unchanged = runner.iterations.iter().all(|i| i.applied.is_empty())
        && runner.egraph.classes().all(|c| c.nodes.len() == 1);
    ge.roots = ge.roots.iter().map(|&r| runner.egraph.find(r)).collect();
    ge.egraph = runner.egraph;
    let failures = ge.egraph.analysis.failures.clone();
    let egraph_nodes = ge.egraph.total_number_of_nodes();
    let mut fired = vec![];
    let (mut out, extract) = match unchanged {
        // Solving for the one choice there is would take a third of the time
        // of rewriting a graph without transforms.
        true => {
            let report = ExtractReport {
                method: Method::Unchanged,
                cost: cost_before,
                nodes: egraph_nodes,
                note: None,
            };
            (g, report)
        }
        false => {
            let (choice, report) = extract(&ge.egraph, &ge.roots);
            fired = kept_firings(&ge.egraph, &ge.roots, &choice);
            (ge.splice(g, &choice)?, report)
        }
    };
    // Transforms of constants were costed as free: fold them now.
    crate::graph::fold_constants(&mut out).map_err(|e| LayoutError::Graph(e.to_string()))?;
    Ok((
        out,
        RewriteReport {
            extract,
            cost_before,
            iterations,
            stop_reason,
            egraph_nodes,
            failures,
            fired,
        },
    ))
}

/// The cost of a whole graph as extraction counts it: comparable between
/// graphs, where a rewriting report's costs cover only its region.
pub fn graph_cost(g: &Graph) -> Result<f64, LayoutError> {
    let ge = super::egraph::graph_to_egraph(g)?;
    let choice = greedy(&ge.egraph, &ge.roots);
    Ok(choice_cost(&ge.egraph, &ge.roots, &choice))
}
