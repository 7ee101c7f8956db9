//! Extraction: one node per needed class, minimising bytes moved.
//!
//! A transform (or pad, crop) costs the bytes it reads and writes; an op costs
//! the bytes of its inputs and outputs (so a padded buffer costs more than a
//! tight one); anything computable from constants alone costs nothing (it is
//! folded at compile time). The ILP extractor counts a class shared by several
//! users once; it runs while the e-graph is small enough, the greedy
//! (tree-cost) extractor otherwise, and the report says which ran.

use super::egraph::{GraphEGraph, Info, LEGraph, Lang, LayoutAnalysis};
use super::rules::RuleSource;
use super::LayoutError;
use crate::graph::Graph;
use egg::{CostFunction, Extractor, Id, Language, Rewrite, Runner};
use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel, Variable,
    WithTimeLimit,
};
use std::collections::{HashMap, HashSet};
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

/// The cost of one node, not counting its children. Invalid nodes cost infinity.
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
            bytes_of(eg, class) + tensors.map(|&c| bytes_of(eg, c)).sum::<f64>()
        }
    }
}

struct TreeCost<'a> {
    eg: &'a LEGraph,
}

impl CostFunction<Lang> for TreeCost<'_> {
    type Cost = f64;
    fn cost<C>(&mut self, enode: &Lang, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        // The class of a node is found through its hash-cons entry.
        let own = match self.eg.lookup(enode.clone()) {
            Some(class) => node_cost(self.eg, class, enode),
            None => f64::INFINITY,
        };
        enode.fold(own, |sum, c| sum + costs(c))
    }
}

/// Which extractor ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The optimal choice by integer linear programming.
    Ilp,
    /// Each class's cheapest node, bottom-up (when the ILP is too large).
    Greedy,
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
    /// Why the ILP did not run or was not used, when it did not.
    pub note: Option<String>,
}

/// Above this many reachable nodes the greedy extractor runs instead of the ILP.
pub const ILP_NODE_LIMIT: usize = 4000;

/// Time the ILP may take before the greedy choice is used.
const ILP_SECONDS: f64 = 2.0;

/// Classes reachable from the roots, and for each the nodes that are not on a
/// cycle: a depth-first walk drops every node with a child still on the walk's
/// stack, which leaves no cycle (every cycle has such a back edge) and keeps
/// each original acyclic term.
fn acyclic_nodes(eg: &LEGraph, roots: &[Id]) -> HashMap<Id, Vec<Lang>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut mark: HashMap<Id, Mark> = HashMap::new();
    let mut keep: HashMap<Id, Vec<Lang>> = HashMap::new();
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

fn greedy(eg: &LEGraph, roots: &[Id]) -> HashMap<Id, Lang> {
    let ex = Extractor::new(eg, TreeCost { eg });
    let mut choice = HashMap::new();
    let mut stack: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    while let Some(c) = stack.pop() {
        if choice.contains_key(&c) {
            continue;
        }
        let node = ex.find_best_node(c).clone();
        stack.extend(node.children().iter().map(|&ch| eg.find(ch)));
        choice.insert(c, node);
    }
    choice
}

fn ilp(
    eg: &LEGraph,
    roots: &[Id],
    nodes: &HashMap<Id, Vec<Lang>>,
) -> Result<HashMap<Id, Lang>, String> {
    let mut vars = ProblemVariables::new();
    // A fixed variable order, so that ties between equally cheap extractions
    // break the same way on every run.
    let mut classes: Vec<Id> = nodes.keys().copied().collect();
    classes.sort();
    let used: HashMap<Id, Variable> = classes
        .iter()
        .map(|&c| (c, vars.add(variable().binary())))
        .collect();
    let mut picks: Vec<(Id, &Lang, Variable)> = Vec::new();
    for &c in &classes {
        for n in &nodes[&c] {
            let cost = node_cost(eg, c, n);
            if cost.is_finite() {
                picks.push((c, n, vars.add(variable().binary())));
            }
        }
    }
    let objective: Expression = picks
        .iter()
        .map(|(c, n, x)| node_cost(eg, *c, n) * *x)
        .sum();
    let mut model = vars
        .minimise(objective)
        .using(microlp)
        .with_time_limit(ILP_SECONDS);
    let mut per_class: HashMap<Id, Expression> = HashMap::new();
    for (c, n, x) in &picks {
        *per_class.entry(*c).or_default() += *x;
        for ch in n.children() {
            model.add_constraint(constraint!(*x <= used[&eg.find(*ch)]));
        }
    }
    for &c in &classes {
        let sum = per_class.remove(&c).unwrap_or_default();
        model.add_constraint(constraint!(sum == used[&c]));
    }
    for r in roots {
        model.add_constraint(constraint!(used[&eg.find(*r)] == 1));
    }
    let sol = model.solve().map_err(|e| e.to_string())?;
    let mut choice = HashMap::new();
    for (c, n, x) in &picks {
        if sol.value(*x) > 0.5 {
            choice.insert(*c, (*n).clone());
        }
    }
    Ok(choice)
}

/// Cost of a choice, each reachable class counted once.
fn choice_cost(eg: &LEGraph, roots: &[Id], choice: &HashMap<Id, Lang>) -> f64 {
    let mut seen = HashSet::new();
    let mut stack: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    let mut total = 0.0;
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        if let Some(n) = choice.get(&c) {
            total += node_cost(eg, c, n);
            stack.extend(n.children().iter().map(|&ch| eg.find(ch)));
        }
    }
    total
}

/// Extracts one node per class needed by the roots.
pub fn extract(eg: &LEGraph, roots: &[Id]) -> (HashMap<Id, Lang>, ExtractReport) {
    extract_with_limit(eg, roots, ILP_NODE_LIMIT)
}

/// `extract` with the ILP used up to `ilp_limit` reachable nodes.
pub fn extract_with_limit(
    eg: &LEGraph,
    roots: &[Id],
    ilp_limit: usize,
) -> (HashMap<Id, Lang>, ExtractReport) {
    let nodes = acyclic_nodes(eg, roots);
    let count: usize = nodes.values().map(Vec::len).sum();
    let greedy_choice = greedy(eg, roots);
    let (choice, method, note) = if count > ilp_limit {
        let note = format!("{count} nodes exceed the ILP limit of {ilp_limit}");
        (greedy_choice, Method::Greedy, Some(note))
    } else {
        match ilp(eg, roots, &nodes) {
            // The ILP sees only the cycle-free nodes; the greedy extractor may
            // use a node that the cycle cut dropped, so keep the cheaper.
            Ok(c) => {
                let (ci, cg) = (
                    choice_cost(eg, roots, &c),
                    choice_cost(eg, roots, &greedy_choice),
                );
                if cg < ci {
                    let note =
                        format!("greedy cost {cg} beat the ILP's {ci} on the cycle-free nodes");
                    (greedy_choice, Method::Greedy, Some(note))
                } else {
                    (c, Method::Ilp, None)
                }
            }
            Err(e) => (
                greedy_choice,
                Method::Greedy,
                Some(format!("ILP failed: {e}")),
            ),
        }
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

/// Limits of one rewriting run.
#[derive(Clone, Debug)]
pub struct RewriteLimits {
    /// At most this many rewriting iterations.
    pub iterations: usize,
    /// Stop once the e-graph has this many nodes.
    pub nodes: usize,
    /// Stop after this long.
    pub time: Duration,
}

impl Default for RewriteLimits {
    fn default() -> RewriteLimits {
        RewriteLimits {
            iterations: 30,
            nodes: 50_000,
            time: Duration::from_secs(2),
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
    /// Why rewriting stopped (saturated, iteration, node or time limit).
    pub stop_reason: String,
    /// Nodes in the e-graph when it stopped.
    pub egraph_nodes: usize,
    /// Rule conditions that failed to evaluate (bugs, reported, never hidden).
    pub failures: Vec<String>,
}

/// Rewrites `g` with `rules` and extracts the cheapest equivalent graph.
pub fn rewrite_graph(
    g: &Graph,
    rules: &[Rewrite<Lang, LayoutAnalysis>],
    limits: &RewriteLimits,
) -> Result<(Graph, RewriteReport), LayoutError> {
    let ge = super::egraph::graph_to_egraph(g)?;
    let before = greedy(&ge.egraph, &ge.roots);
    let cost_before = choice_cost(&ge.egraph, &ge.roots, &before);
    let GraphEGraph {
        egraph,
        roots,
        inputs,
        graph_name,
        output_names,
    } = ge;
    let runner = Runner::default()
        .with_egraph(egraph)
        .with_iter_limit(limits.iterations)
        .with_node_limit(limits.nodes)
        .with_time_limit(limits.time)
        .run(rules);
    let stop_reason = format!("{:?}", runner.stop_reason);
    let iterations = runner.iterations.len();
    let ge = GraphEGraph {
        roots: roots.iter().map(|&r| runner.egraph.find(r)).collect(),
        inputs,
        egraph: runner.egraph,
        graph_name,
        output_names,
    };
    let failures = ge.egraph.analysis.failures.clone();
    let (choice, extract) = extract(&ge.egraph, &ge.roots);
    let mut out = ge.to_graph(&choice)?;
    // Transforms of constants were costed as free: fold them now.
    crate::graph::fold_constants(&mut out).map_err(|e| LayoutError::Graph(e.to_string()))?;
    Ok((
        out,
        RewriteReport {
            extract,
            cost_before,
            iterations,
            stop_reason,
            egraph_nodes: ge.egraph.total_number_of_nodes(),
            failures,
        },
    ))
}

/// `rewrite_graph` with the rules of `source`.
pub fn rewrite_graph_with(
    g: &Graph,
    source: &RuleSource,
    limits: &RewriteLimits,
) -> Result<(Graph, RewriteReport), LayoutError> {
    let rules = source.load()?;
    rewrite_graph(g, &rules, limits)
}
