//! Between the graph IR and the e-graph: a planned graph becomes classes of
//! physical tensors, and the extracted choice of nodes becomes a graph again.

use super::*;
use crate::graph::NodeId;
use crate::layout::{Layout, LayoutError, PadValue};
use crate::ops::{Crop, LayoutTransform, PadWith};
use rustc_hash::FxHashSet;

/// A graph turned into an e-graph: the classes of the graph's outputs.
pub struct GraphEGraph {
    /// The e-graph built from the graph.
    pub egraph: LEGraph,
    /// The classes of the graph's outputs, in order.
    pub roots: Vec<Id>,
    /// The classes of the graph's inputs, in the graph's input order.
    pub inputs: Vec<Id>,
    /// The graph's name, kept for the graph built back.
    pub graph_name: String,
    /// The graph's output names, kept for the graph built back.
    pub output_names: Vec<String>,
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

/// Builds the e-graph of a graph. Ops other than the transforms must read
/// row-major tensors (the graph IR has no other way to say what they mean).
pub fn graph_to_egraph(g: &Graph) -> Result<GraphEGraph, LayoutError> {
    let mut eg = LEGraph::new(LayoutAnalysis::default());
    let mut ids: FxHashMap<ValueRef, Id> = FxHashMap::default();
    let err = |spans: &[Span], m: String| {
        LayoutError::Graph(format!("{}: {m}", crate::graph::format_spans(spans)))
    };
    let order = g
        .topo_order()
        .map_err(|e| LayoutError::Graph(e.to_string()))?;
    for nid in order {
        let node = g.node(nid);
        let ins: Vec<Id> = g.node_inputs(nid).iter().map(|v| ids[v]).collect();
        let (spans, name) = (&node.spans, node.name.as_str());
        let add_atom = |eg: &mut LEGraph, a: Atom| eg.add(Lang::Atom(a));
        let lang = match &node.op {
            Op::Input | Op::Constant(_) => {
                eg.analysis.sources.push(Source {
                    name: node.name.clone(),
                    op: node.op.clone(),
                    ty: node.outputs[0].ty.clone(),
                    placed: packed_placement(g, nid),
                    spans: node.spans.clone(),
                });
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
                                    format!("{} reads a tensor in layout {}: only row-major inputs are understood here", op.kind_name(), t.layout),
                                ));
                            }
                        }
                        node.outputs
                            .iter()
                            .map(|v| {
                                let l = Layout::identity(v.ty.shape.len())
                                    .map_err(|e| err(spans, e.to_string()))?;
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
    let roots = g.outputs().iter().map(|v| eg.find(ids[v])).collect();
    let inputs = g
        .inputs()
        .iter()
        .map(|&n| eg.find(ids[&ValueRef::new(n, 0)]))
        .collect();
    let output_names = g
        .outputs()
        .iter()
        .map(|&v| g.value(v).name.clone())
        .collect();
    Ok(GraphEGraph {
        egraph: eg,
        roots,
        inputs,
        graph_name: g.name.clone(),
        output_names,
    })
}

impl GraphEGraph {
    /// Builds the graph that computes the roots with one chosen node per class.
    pub fn to_graph(&self, choice: &FxHashMap<Id, Lang>) -> Result<Graph, LayoutError> {
        let mut b = GraphBuilder {
            eg: &self.egraph,
            choice,
            g: Graph::new(self.graph_name.clone()),
            built: FxHashMap::default(),
            names: FxHashSet::default(),
            value_names: FxHashSet::default(),
        };
        // Inputs first, in their order, whether or not anything still reads them.
        for &input in &self.inputs {
            let class = self.egraph.find(input);
            let source = self.egraph[class].nodes.iter().find_map(|n| match n {
                Lang::Atom(Atom::Source(k)) => Some(*k),
                _ => None,
            });
            let k =
                source.ok_or_else(|| LayoutError::Graph("a graph input lost its node".into()))?;
            let s = &self.egraph.analysis.sources[k];
            let name = b.fresh(&s.name);
            let spans = merge_spans([s.spans.as_slice(), self.egraph[class].data.spans.as_slice()]);
            let v = b.g.add_input(&name, s.ty.clone(), spans);
            b.value_names.insert(name);
            b.built.insert(class, v);
        }
        let mut outs = Vec::with_capacity(self.roots.len());
        for (i, &root) in self.roots.iter().enumerate() {
            let mut v = b.build(root)?;
            let name = &self.output_names[i];
            // An output must be its own named value: add an Identity when the
            // chosen value is a source or another output.
            if matches!(b.g.node(v.node).op, Op::Input | Op::Constant(_)) || outs.contains(&v) {
                let spans = self.egraph[root].data.spans.clone();
                let node_name = b.fresh(name);
                let id =
                    b.g.add_node(
                        Op::Identity,
                        &node_name,
                        &[v],
                        std::slice::from_ref(name),
                        spans,
                    )
                    .map_err(|e| LayoutError::Graph(e.to_string()))?;
                v = ValueRef::new(id, 0);
            }
            b.g.node_mut(v.node).outputs[v.output].name = name.clone();
            outs.push(v);
        }
        b.g.set_outputs(outs);
        Ok(b.g)
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
        let e = |m: String| LayoutError::Graph(format!("class {id}: {m}"));
        let (op, inputs): (Op, Vec<Id>) = match node {
            Lang::Atom(Atom::Source(k)) => {
                let s = &eg.analysis.sources[*k];
                let name = self.fresh(&s.name);
                let spans = merge_spans([s.spans.as_slice(), spans.as_slice()]);
                let v = match &s.op {
                    Op::Constant(t) => self.g.add_constant(&name, t.clone(), spans),
                    _ => self.g.add_input(&name, s.ty.clone(), spans),
                };
                self.built.insert(id, v);
                return Ok(v);
            }
            Lang::Atom(a) => return Err(e(format!("attribute {a} chosen as a tensor"))),
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
                    return Err(e("get without an index".into()));
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
            | Lang::Transpose([k, x]) => (entry_of(eg, *k).map_err(e)?.op.clone(), vec![*x]),
            Lang::Binary([k, a, b]) => (entry_of(eg, *k).map_err(e)?.op.clone(), vec![*a, *b]),
            Lang::Concat(ch) | Lang::Other(ch) => {
                let (k, xs) = ch.split_first().ok_or_else(|| e("empty op node".into()))?;
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
