//! Between the graph IR and the e-graph: the region of a planned graph that
//! rewriting may change becomes classes of physical tensors (the values it
//! reads from outside the region become sources), and the extracted choice of
//! nodes is spliced back in place of the region.

use super::*;
use crate::graph::NodeId;
use crate::layout::{AlgebraError, Layout, LayoutError, PadValue};
use crate::ops::{Crop, LayoutTransform, PadWith};
use rustc_hash::FxHashSet;

/// A region of a graph turned into an e-graph.
pub struct GraphEGraph {
    /// The e-graph built from the region.
    pub egraph: LEGraph,
    /// The classes of the region's values that the graph outputs or that
    /// nodes outside the region read: the graph's outputs first, in order.
    pub roots: Vec<Id>,
    /// The graph value each root stands for.
    pub root_values: Vec<ValueRef>,
    /// The class of each value of the region and each value it reads.
    pub classes: FxHashMap<ValueRef, Id>,
    /// The region's nodes that splicing replaces (all but its sources).
    replaced: FxHashSet<NodeId>,
}

/// Adds `spans` and `name` to a class.
fn annotate(eg: &mut LEGraph, id: Id, spans: &[Span], name: &str) {
    let data = &mut eg[id].data;
    data.spans = merge_spans([data.spans.as_slice(), spans]);
    if data.name.is_none() {
        data.name = Some(name.to_string());
    }
}

/// Records the model's name of the tensor class `id` computes.
fn name_value(eg: &mut LEGraph, id: Id, name: &str) {
    let data = &mut eg[id].data;
    if data.value_name.is_none() {
        data.value_name = Some(name.to_string());
    }
}

fn checked_add(
    eg: &mut LEGraph,
    node: Lang,
    spans: &[Span],
    name: &str,
) -> Result<Id, LayoutError> {
    let id = eg.add(node);
    if let Info::Invalid(m) = &eg[id].data.info {
        return Err(LayoutError::Graph(format!(
            "{}: {m}",
            crate::graph::format_spans(spans)
        )));
    }
    annotate(eg, id, spans, name);
    Ok(id)
}

/// Where the plan packed constant `id` into a layout: the layout and logical
/// shape every reader takes it in, when they agree and fit its physical shape.
fn packed_placement(g: &Graph, id: NodeId) -> Option<(Layout, Vec<usize>)> {
    let Op::Constant(t) = &g.node(id).op else {
        return None;
    };
    let mut placed = None;
    for (reader, i) in g.consumers(ValueRef::new(id, 0)) {
        let Op::InLayout(l) = &g.node(reader).op else {
            return None;
        };
        let p = l.inputs.get(i)?;
        if placed.get_or_insert_with(|| p.clone()) != p {
            return None;
        }
    }
    let (layout, logical) = placed?;
    let packed = !layout.is_identity() && layout.physical_shape(&logical).ok()? == t.shape;
    packed.then_some((layout, logical))
}

/// The row-major layout of `shape`, and `shape` as the logical shape.
fn row_major(shape: &[usize]) -> Result<(Layout, Vec<usize>), AlgebraError> {
    let layout = Layout::identity(shape.len())?;
    Ok((layout, shape.to_vec()))
}

/// The source standing for value `v` read from outside the region: its tensor
/// as the reading region node `reader` (at input `port`) takes it, and
/// constant when everything it is computed from is.
fn given(
    g: &Graph,
    v: ValueRef,
    reader: NodeId,
    port: usize,
    constant: &mut FxHashMap<NodeId, bool>,
) -> Result<Source, NodeError> {
    let ty = g.value_type(v);
    let (layout, logical) = match &g.node(reader).op {
        Op::InLayout(l) => l
            .inputs
            .get(port)
            .cloned()
            .ok_or_else(|| NodeError::Mismatch(format!("input {port} has no placement")))?,
        _ => row_major(&ty.shape)?,
    };
    Ok(Source {
        value: v,
        info: TensorInfo {
            dtype: ty.dtype,
            pad: pad_fact(
                &layout,
                &logical,
                PadValue::Undef,
                "outside the rewritten region",
            ),
            layout,
            logical,
            is_const: computed_from_constants(g, v.node, constant),
        },
        scalar: None,
    })
}

/// Whether node `id` computes from constants only, memoised in `known`.
fn computed_from_constants(g: &Graph, id: NodeId, known: &mut FxHashMap<NodeId, bool>) -> bool {
    // Explicit stack: the graph may be deeper than the thread's stack.
    let mut stack = vec![id];
    while let Some(&n) = stack.last() {
        if known.contains_key(&n) {
            stack.pop();
            continue;
        }
        let value = match g.node(n).op {
            Op::Constant(_) => Some(true),
            Op::Input => Some(false),
            _ => {
                let inputs = g.node_inputs(n);
                let open: Vec<NodeId> = inputs
                    .iter()
                    .map(|v| v.node)
                    .filter(|p| !known.contains_key(p))
                    .collect();
                match open.is_empty() {
                    true => Some(inputs.iter().all(|v| known[&v.node])),
                    false => {
                        stack.extend(open);
                        None
                    }
                }
            }
        };
        if let Some(value) = value {
            known.insert(n, value);
            stack.pop();
        }
    }
    known[&id]
}

/// The source a graph input or constant becomes.
fn source_node(g: &Graph, id: NodeId) -> Result<Source, NodeError> {
    let node = g.node(id);
    let ty = &node.outputs[0].ty;
    let constant = match &node.op {
        Op::Constant(t) => Some(t),
        _ => None,
    };
    let (layout, logical) = match packed_placement(g, id) {
        Some(placed) => placed,
        None => row_major(&ty.shape)?,
    };
    Ok(Source {
        value: ValueRef::new(id, 0),
        info: TensorInfo {
            dtype: ty.dtype,
            layout,
            logical,
            pad: None,
            is_const: constant.is_some(),
        },
        scalar: constant
            .filter(|t| t.shape.iter().product::<usize>() == 1 && t.dtype().is_float())
            .map(|t| t.to_f32()[0]),
    })
}

/// The nodes of `region` in an order where a node's producers in the region
/// come before it; an error on a cycle.
fn region_order(g: &Graph, region: &FxHashSet<NodeId>) -> Result<Vec<NodeId>, LayoutError> {
    let mut starts: Vec<NodeId> = region.iter().copied().collect();
    starts.sort();
    let mut done: FxHashSet<NodeId> = FxHashSet::default();
    let mut open: FxHashSet<NodeId> = FxHashSet::default();
    let mut order = Vec::with_capacity(region.len());
    for start in starts {
        let mut stack = vec![(start, false)];
        while let Some((n, expanded)) = stack.pop() {
            if expanded {
                open.remove(&n);
                done.insert(n);
                order.push(n);
                continue;
            }
            if done.contains(&n) {
                continue;
            }
            if !open.insert(n) {
                return Err(LayoutError::Graph(format!(
                    "{}: the graph has a cycle through this layer",
                    crate::graph::format_spans(&g.node(n).spans)
                )));
            }
            stack.push((n, true));
            for v in g.node_inputs(n).into_iter().rev() {
                if region.contains(&v.node) && !done.contains(&v.node) {
                    stack.push((v.node, false));
                }
            }
        }
    }
    Ok(order)
}

/// Builds the e-graph of a whole graph.
pub fn graph_to_egraph(g: &Graph) -> Result<GraphEGraph, LayoutError> {
    region_to_egraph(g, None)
}

/// Builds the e-graph of the nodes of `region` of `g` (`None`: all of them).
/// Ops other than the transforms must read row-major tensors (the graph IR
/// has no other way to say what they mean).
pub fn region_to_egraph(
    g: &Graph,
    region: Option<&FxHashSet<NodeId>>,
) -> Result<GraphEGraph, LayoutError> {
    let mut eg = LEGraph::new(LayoutAnalysis::default());
    let mut ids: FxHashMap<ValueRef, Id> = FxHashMap::default();
    let err = |spans: &[Span], m: NodeError| {
        LayoutError::Graph(format!("{}: {m}", crate::graph::format_spans(spans)))
    };
    let order = match region {
        Some(r) => region_order(g, r)?,
        None => g
            .topo_order()
            .map_err(|e| LayoutError::Graph(e.to_string()))?,
    };
    let in_region = |id: NodeId| region.is_none_or(|r| r.contains(&id));
    let mut constant = FxHashMap::default();
    for &nid in &order {
        let node = g.node(nid);
        let (spans, name) = (&node.spans, node.name.as_str());
        // Values from outside the region are sources.
        let mut ins = Vec::new();
        for (port, v) in g.node_inputs(nid).into_iter().enumerate() {
            if let Some(&id) = ids.get(&v) {
                ins.push(id);
                continue;
            }
            let s = given(g, v, nid, port, &mut constant).map_err(|m| err(spans, m))?;
            eg.analysis.sources.push(s);
            let id = eg.add(Lang::Atom(Atom::Source(eg.analysis.sources.len() - 1)));
            let value_name = &g.value(v).name;
            annotate(&mut eg, id, &g.node(v.node).spans, value_name);
            name_value(&mut eg, id, value_name);
            ids.insert(v, id);
            ins.push(id);
        }
        let add_atom = |eg: &mut LEGraph, a: Atom| eg.add(Lang::Atom(a));
        let lang = match &node.op {
            Op::Input | Op::Constant(_) => {
                let s = source_node(g, nid).map_err(|m| err(spans, m))?;
                eg.analysis.sources.push(s);
                Lang::Atom(Atom::Source(eg.analysis.sources.len() - 1))
            }
            Op::LayoutTransform(LayoutTransform {
                from,
                to,
                pad,
                logical,
            }) => {
                // A pad value where `to` has no padding means nothing: drop it,
                // so that equal buffers are equal nodes.
                let pad = match pad_fact(to, logical, *pad, "") {
                    Some(_) => *pad,
                    None => PadValue::Undef,
                };
                let (f, t, p) = (
                    add_atom(&mut eg, Atom::Layout(from.clone())),
                    add_atom(&mut eg, Atom::Layout(to.clone())),
                    add_atom(&mut eg, Atom::Pad(pad)),
                );
                Lang::Xform([f, t, p, ins[0]])
            }
            Op::PadWith(PadWith {
                begins,
                ends,
                value,
            }) => {
                let (b, e, v) = (
                    add_atom(&mut eg, Atom::Ints(begins.clone())),
                    add_atom(&mut eg, Atom::Ints(ends.clone())),
                    add_atom(&mut eg, Atom::Pad(*value)),
                );
                Lang::Pad([b, e, v, ins[0]])
            }
            Op::Crop(Crop {
                begins,
                ends,
                assume,
            }) => {
                let s = match assume {
                    Some(a) => {
                        eg.analysis.assumptions.push(a.clone());
                        Atom::Assume(eg.analysis.assumptions.len() - 1)
                    }
                    None => Atom::Pad(PadValue::Undef),
                };
                let (b, e, s) = (
                    add_atom(&mut eg, Atom::Ints(begins.clone())),
                    add_atom(&mut eg, Atom::Ints(ends.clone())),
                    add_atom(&mut eg, s),
                );
                Lang::Crop([b, e, s, ins[0]])
            }
            op => {
                let outputs = match op {
                    Op::Unary(_) | Op::Binary(_) => vec![],
                    Op::InLayout(l) => {
                        let in_dtypes: Vec<DType> = ins
                            .iter()
                            .map(|&i| tensor_of(&eg, i).map(|t| t.dtype))
                            .collect::<Result<_, _>>()
                            .map_err(|m| err(spans, m))?;
                        OpEntry::in_layout(
                            l.inner.clone(),
                            l.inputs.clone(),
                            l.outputs.clone(),
                            &in_dtypes,
                        )
                        .map_err(|m| err(spans, m))?
                        .outputs
                    }
                    _ => {
                        for &i in &ins {
                            let t = tensor_of(&eg, i).map_err(|m| err(spans, m))?;
                            if !t.layout.is_identity() {
                                return Err(err(
                                    spans,
                                    NodeError::Mismatch(format!("{} reads a tensor in layout {}: only row-major inputs are understood here", op.kind_name(), t.layout)),
                                ));
                            }
                        }
                        node.outputs
                            .iter()
                            .map(|v| {
                                let l = Layout::identity(v.ty.shape.len())
                                    .map_err(|e| err(spans, e.into()))?;
                                Ok((v.ty.shape.clone(), l))
                            })
                            .collect::<Result<_, LayoutError>>()?
                    }
                };
                let k = eg.analysis.intern(OpEntry {
                    op: op.clone(),
                    outputs,
                });
                let k = add_atom(&mut eg, Atom::Op(k));
                let mut children = vec![k];
                children.extend(&ins);
                match op {
                    Op::Unary(_) => Lang::Unary([k, ins[0]]),
                    Op::Binary(_) => Lang::Binary([k, ins[0], ins[1]]),
                    Op::Pool(_) | Op::GlobalPool(_) => Lang::Pool([k, ins[0]]),
                    Op::Reshape(_) => Lang::Reshape([k, ins[0]]),
                    Op::Transpose(_) => Lang::Transpose([k, ins[0]]),
                    Op::Concat(_) => Lang::Concat(children.into()),
                    Op::Conv(_) => Lang::Conv(children.into()),
                    Op::Pad(_) => Lang::Padding([k, ins[0]]),
                    Op::Slice(_) => Lang::Slice([k, ins[0]]),
                    _ => Lang::Other(children.into()),
                }
            }
        };
        let id = checked_add(&mut eg, lang, spans, name)?;
        if node.outputs.len() == 1 {
            name_value(&mut eg, id, &node.outputs[0].name);
            ids.insert(ValueRef::new(nid, 0), id);
        } else {
            for i in 0..node.outputs.len() {
                let ix = eg.add(Lang::Atom(Atom::Index(i)));
                let out = checked_add(&mut eg, Lang::Get([ix, id]), spans, &node.outputs[i].name)?;
                name_value(&mut eg, out, &node.outputs[i].name);
                ids.insert(ValueRef::new(nid, i), out);
            }
        }
    }
    eg.rebuild();
    // The graph's outputs, then the values read outside the region.
    let mut root_values: Vec<ValueRef> = g
        .outputs()
        .iter()
        .copied()
        .filter(|v| in_region(v.node))
        .collect();
    let replaced: FxHashSet<NodeId> = order
        .iter()
        .copied()
        .filter(|&n| !matches!(g.node(n).op, Op::Input | Op::Constant(_)))
        .collect();
    if region.is_some() {
        let mut seen: FxHashSet<ValueRef> = root_values.iter().copied().collect();
        for &n in order.iter().filter(|n| replaced.contains(n)) {
            for i in 0..g.node(n).outputs.len() {
                let v = ValueRef::new(n, i);
                let outside = g.consumers(v).iter().any(|&(c, _)| !in_region(c));
                if outside && seen.insert(v) {
                    root_values.push(v);
                }
            }
        }
    }
    Ok(GraphEGraph {
        roots: root_values.iter().map(|v| eg.find(ids[v])).collect(),
        root_values,
        classes: ids,
        egraph: eg,
        replaced,
    })
}

impl GraphEGraph {
    /// `g` with the region replaced by the chosen node of each class the
    /// roots need: the readers of each root value read the value built for
    /// its class, and the nodes no longer read are removed.
    pub fn splice(&self, g: Graph, choice: &FxHashMap<Id, Lang>) -> Result<Graph, LayoutError> {
        // The names of the nodes that stay are taken; the new nodes may reuse
        // the names of the ones they replace.
        let (mut names, mut value_names) = (FxHashSet::default(), FxHashSet::default());
        for id in g.node_ids() {
            if !self.replaced.contains(&id) {
                let n = g.node(id);
                names.insert(n.name.clone());
                value_names.extend(n.outputs.iter().map(|v| v.name.clone()));
            }
        }
        let before: Vec<(ValueRef, String)> = g
            .outputs()
            .iter()
            .map(|&v| (v, g.value(v).name.clone()))
            .collect();
        let mut b = GraphBuilder {
            eg: &self.egraph,
            choice,
            g,
            built: FxHashMap::default(),
            names,
            value_names,
        };
        let mut new_values = Vec::with_capacity(self.roots.len());
        for &root in &self.roots {
            new_values.push(b.build(root)?);
        }
        let mut out = b.g;
        for (&old, &new) in self.root_values.iter().zip(&new_values) {
            if old != new {
                out.replace_uses(old, new);
            }
        }
        // An output must be its own value, named as before: add an Identity
        // when an output became a source or another output.
        let mut outputs = out.outputs().to_vec();
        for (i, (old, name)) in before.into_iter().enumerate() {
            if outputs[i] == old {
                continue;
            }
            let v = outputs[i];
            let shared = outputs.iter().enumerate().any(|(j, &w)| j != i && w == v);
            outputs[i] = if matches!(out.node(v.node).op, Op::Input | Op::Constant(_)) || shared {
                let node_name = fresh_in(&mut b.names, &name);
                // The replaced output node is still there, unread.
                let spans = out.node(old.node).spans.clone();
                let id = out
                    .add_node(
                        Op::Identity,
                        &node_name,
                        &[v],
                        std::slice::from_ref(&name),
                        spans,
                    )
                    .map_err(|e| LayoutError::Graph(e.to_string()))?;
                ValueRef::new(id, 0)
            } else {
                out.node_mut(v.node).outputs[v.output].name = name;
                v
            };
        }
        out.set_outputs(outputs);
        out.remove_dead_nodes();
        Ok(out)
    }
}

struct GraphBuilder<'a> {
    eg: &'a LEGraph,
    choice: &'a FxHashMap<Id, Lang>,
    g: Graph,
    built: FxHashMap<Id, ValueRef>,
    names: FxHashSet<String>,
    value_names: FxHashSet<String>,
}

/// `base`, or `base_1`, `base_2`, ...: the first not in `taken`, which then holds it.
fn fresh_in(taken: &mut FxHashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut n = 1;
    while !taken.insert(name.clone()) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

impl GraphBuilder<'_> {
    fn fresh(&mut self, base: &str) -> String {
        fresh_in(&mut self.names, base)
    }

    /// The class's model tensor name for the value built from it, if it has one.
    fn value_name(&mut self, id: Id) -> Option<String> {
        let name = self.eg[id].data.value_name.as_deref()?;
        Some(fresh_in(&mut self.value_names, name))
    }

    fn build(&mut self, id: Id) -> Result<ValueRef, LayoutError> {
        let id = self.eg.find(id);
        if let Some(&v) = self.built.get(&id) {
            return Ok(v);
        }
        let node = self
            .choice
            .get(&id)
            .ok_or_else(|| LayoutError::Graph(format!("no node chosen for class {id}")))?;
        let data = &self.eg[id].data;
        let spans = data.spans.clone();
        let base = data
            .name
            .clone()
            .unwrap_or_else(|| format!("rewritten_{id}"));
        let eg = self.eg;
        let e = |m: NodeError| LayoutError::Graph(format!("class {id}: {m}"));
        let (op, inputs): (Op, Vec<Id>) = match node {
            Lang::Atom(Atom::Source(k)) => {
                // The source's node also stands for what its class absorbed.
                let v = eg.analysis.sources[*k].value;
                let node = self.g.node_mut(v.node);
                node.spans = merge_spans([node.spans.as_slice(), spans.as_slice()]);
                self.built.insert(id, v);
                return Ok(v);
            }
            Lang::Atom(a) => {
                return Err(e(NodeError::Mismatch(format!(
                    "attribute {a} chosen as a tensor"
                ))))
            }
            Lang::Xform([f, t, p, x]) => {
                let op = Op::LayoutTransform(LayoutTransform {
                    from: layout_of(eg, *f).map_err(e)?.clone(),
                    to: layout_of(eg, *t).map_err(e)?.clone(),
                    logical: tensor_of(eg, *x).map_err(e)?.logical.clone(),
                    pad: pad_of(eg, *p).map_err(e)?,
                });
                (op, vec![*x])
            }
            Lang::Pad([b, en, v, x]) => {
                let op = Op::PadWith(PadWith {
                    begins: ints_of(eg, *b).map_err(e)?.to_vec(),
                    ends: ints_of(eg, *en).map_err(e)?.to_vec(),
                    value: pad_of(eg, *v).map_err(e)?,
                });
                (op, vec![*x])
            }
            Lang::Crop([b, en, s, x]) => {
                let assume = match atom(eg, *s).map_err(e)? {
                    Atom::Assume(k) => Some(eg.analysis.assumptions[*k].clone()),
                    _ => None,
                };
                let op = Op::Crop(Crop {
                    begins: ints_of(eg, *b).map_err(e)?.to_vec(),
                    ends: ints_of(eg, *en).map_err(e)?.to_vec(),
                    assume,
                });
                (op, vec![*x])
            }
            Lang::Get([i, t]) => {
                let Atom::Index(i) = atom(eg, *i).map_err(e)? else {
                    return Err(e(NodeError::Mismatch("get without an index".into())));
                };
                let v = self.build(*t)?;
                let v = ValueRef::new(v.node, *i);
                if let Some(name) = self.value_name(id) {
                    self.g.node_mut(v.node).outputs[*i].name = name;
                }
                self.built.insert(id, v);
                return Ok(v);
            }
            Lang::Unary([k, x])
            | Lang::Pool([k, x])
            | Lang::Reshape([k, x])
            | Lang::Transpose([k, x])
            | Lang::Padding([k, x])
            | Lang::Slice([k, x]) => (entry_of(eg, *k).map_err(e)?.op.clone(), vec![*x]),
            Lang::Binary([k, a, b]) => (entry_of(eg, *k).map_err(e)?.op.clone(), vec![*a, *b]),
            Lang::Concat(ch) | Lang::Conv(ch) | Lang::Other(ch) => {
                let (k, xs) = ch
                    .split_first()
                    .ok_or_else(|| e(NodeError::Mismatch("empty op node".into())))?;
                (entry_of(eg, *k).map_err(e)?.op.clone(), xs.to_vec())
            }
        };
        let ins = inputs
            .iter()
            .map(|&x| self.build(x))
            .collect::<Result<Vec<_>, _>>()?;
        let name = self.fresh(&base);
        let value_names: Vec<String> = match op.def().num_outputs() {
            1 => self.value_name(id).into_iter().collect(),
            _ => vec![],
        };
        let nid = self
            .g
            .add_node(op, &name, &ins, &value_names, spans)
            .map_err(|err| LayoutError::Graph(err.to_string()))?;
        let v = ValueRef::new(nid, 0);
        self.built.insert(id, v);
        Ok(v)
    }
}
