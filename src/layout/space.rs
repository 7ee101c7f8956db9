//! The plan space: one variable per planned node choosing how it runs, with
//! the transform costs between neighbours, as one assignment problem for
//! every planner.
//!
//! Modelling note: materialisation shares one transform among the consumers
//! that want the same layout. The problem prices that sharing for one layout
//! per value (a variant of the producer pays the transform once, and its
//! readers wanting that layout then read it free); a third layout is charged
//! per edge, so the real plan never moves more bytes than the model counted.

use super::candidates::{impls, value_candidates, Impl, LayoutId, Layouts};
use super::cost::{conv_epilogue_reads, CostModel};
use super::solver::{Pair, Problem};
use super::target::TargetFamily;
use super::Layout;
use super::PlanError;
use crate::graph::{Graph, NodeId, Op, ValueRef, ValueType};
use std::collections::{BTreeMap, HashMap};

/// The choices of a graph: one variable per non-constant node, in topological order.
pub struct PlanSpace {
    /// The layout family the plan targets.
    pub family: TargetFamily,
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
    pub fn build(
        g: &Graph,
        family: TargetFamily,
        model: &CostModel,
    ) -> Result<PlanSpace, PlanError> {
        PlanSpace::build_pinned(g, family, model, &Pins::new())
    }

    /// [`build`](Self::build) with graph inputs and outputs pinned to layouts.
    pub fn build_pinned(
        g: &Graph,
        family: TargetFamily,
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
