//! The graph IR shared by every stage: typed ops on a petgraph DAG, typed values
//! (dtype and static shape), per-node source spans, shape inference and constant folding.

mod canonical;
mod conv_affine;
mod conv_lift;
mod conv_transpose;
mod fold;
mod memory;

mod precision;

pub use crate::core::scalar::QuantizedArithmetic;
pub use crate::core::{
    checked_numel, format_spans, format_spans_portable, merge_spans, numel, strides, DType, Span,
    Tensor, TensorData, ValueType,
};
pub use crate::ops::*;
pub use canonical::{common_subexpressions, drop_identities, reductions_as_global_pools};
pub use conv_affine::fold_conv_batchnorm;
pub use conv_lift::lift_1d_windows;
pub use conv_transpose::conv_transposes_as_convs;
pub use fold::{fold_constants, fold_node, grid_of};
pub use memory::{
    check_value_size, checked_size_bytes, format_bytes, machine_memory, memory_limit, parse_bytes,
    ValueSizeError, MEMORY_LIMIT_ENV,
};

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::collections::{HashMap, HashSet};

/// A node of the graph.
pub type NodeId = NodeIndex;

/// An error in building or checking a graph, naming the layer at fault.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// Something is wrong at these source layers.
    #[error("{}: {message}", format_spans(spans))]
    AtLayer {
        /// The layers at fault.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
    /// Something is wrong with the graph as a whole.
    #[error("graph: {0}")]
    Graph(String),
}

impl GraphError {
    /// The layers at fault, none for the graph as a whole.
    pub fn spans(&self) -> Vec<Span> {
        match self {
            GraphError::AtLayer { spans, .. } => spans.clone(),
            GraphError::Graph(_) => vec![],
        }
    }
}

impl GraphError {
    /// An error at `spans`.
    pub fn at(spans: &[Span], message: impl Into<String>) -> GraphError {
        GraphError::AtLayer {
            spans: spans.to_vec(),
            message: message.into(),
        }
    }
}

/// One output value of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// The value's name (from the source model where it had one).
    pub name: String,
    /// Its dtype and logical shape.
    pub ty: ValueType,
}

/// A node: its op, a unique name, where it came from, and its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// What the node computes.
    pub op: Op,
    /// A unique name (from the source layer where it had one).
    pub name: String,
    /// The source layers the node stands for.
    pub spans: Vec<Span>,
    /// The values the node produces, in output order.
    pub outputs: Vec<Value>,
}

/// A reference to one output of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueRef {
    /// The producing node.
    pub node: NodeId,
    /// Which of its outputs.
    pub output: usize,
}

impl ValueRef {
    /// Output `output` of `node`.
    pub fn new(node: NodeId, output: usize) -> ValueRef {
        ValueRef { node, output }
    }
}

/// An edge: which output of the source feeds which input of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Port {
    /// The output of the source node.
    pub output: usize,
    /// The input of the target node.
    pub input: usize,
}

/// A dataflow graph. Graph inputs are `Op::Input` nodes, constants `Op::Constant` nodes.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The model's name.
    pub name: String,
    /// The integer arithmetic of the model's quantized ops.
    pub quantized_arithmetic: QuantizedArithmetic,
    /// The name of a symbolic dimension that is axis 0 of every graph input
    /// (an ONNX `dim_param` bound to a value at import): the batch, which export
    /// keeps symbolic where the plan allows.
    pub symbolic_batch: Option<String>,
    dag: StableDiGraph<Node, Port>,
    inputs: Vec<NodeId>,
    outputs: Vec<ValueRef>,
}

impl Graph {
    /// An empty graph named `name`.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    /// An empty graph with `self`'s name and quantized arithmetic: what a
    /// pass that rebuilds the graph node by node starts from.
    pub fn empty_like(&self) -> Graph {
        Graph {
            quantized_arithmetic: self.quantized_arithmetic,
            ..Graph::new(self.name.clone())
        }
    }

    /// Adds a graph input.
    pub fn add_input(&mut self, name: &str, ty: ValueType, spans: Vec<Span>) -> ValueRef {
        let id = self.dag.add_node(Node {
            op: Op::Input,
            name: name.to_string(),
            spans,
            outputs: vec![Value {
                name: name.to_string(),
                ty,
            }],
        });
        self.inputs.push(id);
        ValueRef::new(id, 0)
    }

    /// Adds a constant node holding `tensor`.
    pub fn add_constant(&mut self, name: &str, tensor: Tensor, spans: Vec<Span>) -> ValueRef {
        let ty = ValueType::new(tensor.dtype(), tensor.shape.clone());
        let id = self.dag.add_node(Node {
            op: Op::Constant(tensor),
            name: name.to_string(),
            spans,
            outputs: vec![Value {
                name: name.to_string(),
                ty,
            }],
        });
        ValueRef::new(id, 0)
    }

    /// Adds an op node fed by `inputs`, inferring its output types.
    /// `output_names` names the outputs (missing names are made from the node name).
    pub fn add_node(
        &mut self,
        op: Op,
        name: &str,
        inputs: &[ValueRef],
        output_names: &[String],
        spans: Vec<Span>,
    ) -> Result<NodeId, GraphError> {
        let in_types: Vec<&ValueType> = inputs.iter().map(|&v| self.value_type(v)).collect();
        let out_types = infer_outputs(&op, &in_types).map_err(|m| GraphError::at(&spans, m))?;
        // Shapes come from user files: refuse sizes that overflow or could never be
        // allocated here, before constant folding or a run tries.
        for (i, ty) in out_types.iter().enumerate() {
            check_value_size(ty, &format!("output {i}"), memory_limit())
                .map_err(|e| GraphError::at(&spans, e.to_string()))?;
        }
        let outputs = out_types
            .into_iter()
            .enumerate()
            .map(|(i, ty)| Value {
                name: output_names
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| format!("{name}:{i}")),
                ty,
            })
            .collect();
        let id = self.dag.add_node(Node {
            op,
            name: name.to_string(),
            spans,
            outputs,
        });
        for (i, v) in inputs.iter().enumerate() {
            self.dag.add_edge(
                v.node,
                id,
                Port {
                    output: v.output,
                    input: i,
                },
            );
        }
        Ok(id)
    }

    /// Sets the graph's outputs, in order.
    pub fn set_outputs(&mut self, outputs: Vec<ValueRef>) {
        self.outputs = outputs;
    }

    /// The `Op::Input` nodes, in the model's input order.
    pub fn inputs(&self) -> &[NodeId] {
        &self.inputs
    }

    /// The graph's outputs, in the model's output order.
    pub fn outputs(&self) -> &[ValueRef] {
        &self.outputs
    }

    /// Node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.dag[id]
    }

    /// Node `id`, to change.
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.dag[id]
    }

    /// Whether node `id` exists (it may have been removed).
    pub fn contains(&self, id: NodeId) -> bool {
        self.dag.contains_node(id)
    }

    /// How many nodes the graph has.
    pub fn node_count(&self) -> usize {
        self.dag.node_count()
    }

    /// All node ids, in insertion order.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.dag.node_indices().collect()
    }

    /// The value `v` refers to.
    pub fn value(&self, v: ValueRef) -> &Value {
        &self.dag[v.node].outputs[v.output]
    }

    /// The type of value `v`.
    pub fn value_type(&self, v: ValueRef) -> &ValueType {
        &self.value(v).ty
    }

    /// The constant tensor behind a value, if it is a constant node's output.
    pub fn constant(&self, v: ValueRef) -> Option<&Tensor> {
        match &self.dag[v.node].op {
            Op::Constant(t) => Some(t),
            _ => None,
        }
    }

    /// The values feeding a node, in input order.
    pub fn node_inputs(&self, id: NodeId) -> Vec<ValueRef> {
        let mut ins: Vec<(usize, ValueRef)> = self
            .dag
            .edges_directed(id, Direction::Incoming)
            .map(|e| {
                (
                    e.weight().input,
                    ValueRef::new(e.source(), e.weight().output),
                )
            })
            .collect();
        ins.sort();
        ins.into_iter().map(|(_, v)| v).collect()
    }

    /// Every (node, input index) that reads `v`, sorted.
    pub fn consumers(&self, v: ValueRef) -> Vec<(NodeId, usize)> {
        let mut out: Vec<(NodeId, usize)> = self
            .dag
            .edges_directed(v.node, Direction::Outgoing)
            .filter(|e| e.weight().output == v.output)
            .map(|e| (e.target(), e.weight().input))
            .collect();
        out.sort();
        out
    }

    /// Whether `v` is one of the graph's outputs.
    pub fn is_graph_output(&self, v: ValueRef) -> bool {
        self.outputs.contains(&v)
    }

    /// Nodes in a topological order (stable: ties broken by insertion order).
    pub fn topo_order(&self) -> Result<Vec<NodeId>, GraphError> {
        let mut indeg: HashMap<NodeId, usize> = self
            .dag
            .node_indices()
            .map(|n| (n, self.dag.edges_directed(n, Direction::Incoming).count()))
            .collect();
        let mut ready: std::collections::BTreeSet<NodeId> = indeg
            .iter()
            .filter(|(_, &d)| d == 0)
            .map(|(&n, _)| n)
            .collect();
        let mut order = Vec::with_capacity(indeg.len());
        while let Some(n) = ready.pop_first() {
            order.push(n);
            for e in self.dag.edges_directed(n, Direction::Outgoing) {
                let d = indeg.get_mut(&e.target()).expect("edge target is a node");
                *d -= 1;
                if *d == 0 {
                    ready.insert(e.target());
                }
            }
        }
        if order.len() != self.dag.node_count() {
            let stuck = self
                .dag
                .node_indices()
                .find(|n| !order.contains(n))
                .expect("some node is on a cycle");
            return Err(GraphError::at(
                &self.dag[stuck].spans,
                "the graph has a cycle through this layer",
            ));
        }
        Ok(order)
    }

    /// Makes every reader of `old` (and the graph outputs) read `new` instead.
    pub fn replace_uses(&mut self, old: ValueRef, new: ValueRef) {
        let edges: Vec<_> = self
            .dag
            .edges_directed(old.node, Direction::Outgoing)
            .filter(|e| e.weight().output == old.output)
            .map(|e| (e.id(), e.target(), e.weight().input))
            .collect();
        for (eid, target, input) in edges {
            self.dag.remove_edge(eid);
            self.dag.add_edge(
                new.node,
                target,
                Port {
                    output: new.output,
                    input,
                },
            );
        }
        for o in &mut self.outputs {
            if *o == old {
                *o = new;
            }
        }
    }

    /// Removes a node and its edges. Its outputs must no longer be graph outputs.
    pub fn remove_node(&mut self, id: NodeId) -> Option<Node> {
        self.inputs.retain(|&n| n != id);
        self.dag.remove_node(id)
    }

    /// Removes the nodes `gone` and their edges at once; every other node
    /// keeps its id. Their outputs must no longer be graph outputs. Removed
    /// one by one, each edge is unlinked from the edge list of the node it
    /// reads (a linked list in petgraph): a weight read by 100k
    /// convolutions, most of which go, made that quadratic. The graph is
    /// rebuilt without them instead, in time linear in its size.
    pub fn remove_nodes(&mut self, gone: &HashSet<NodeId>) {
        if gone.is_empty() {
            return;
        }
        self.inputs.retain(|n| !gone.contains(n));
        self.dag = self.dag.filter_map(
            |id, node| (!gone.contains(&id)).then(|| node.clone()),
            |_, &port| Some(port),
        );
    }

    /// Removes nodes that no graph output depends on (graph inputs are kept).
    pub fn remove_dead_nodes(&mut self) -> usize {
        let mut live = HashSet::new();
        let mut stack: Vec<NodeId> = self.outputs.iter().map(|v| v.node).collect();
        stack.extend(self.inputs.iter().copied());
        while let Some(n) = stack.pop() {
            if live.insert(n) {
                stack.extend(self.dag.neighbors_directed(n, Direction::Incoming));
            }
        }
        let dead: HashSet<NodeId> = self
            .dag
            .node_indices()
            .filter(|n| !live.contains(n))
            .collect();
        self.remove_nodes(&dead);
        dead.len()
    }
}
