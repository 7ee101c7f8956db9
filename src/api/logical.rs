//! The logical view of a planned graph, for passes that run after the planner.
//!
//! A planned graph is physical: an op the planner moved into other layouts is
//! wrapped in `Op::InLayout` (the logical op, with the storage layout of every
//! input and output), and the plan's data movement is explicit: a
//! `LayoutTransform` stores the same logical tensor in another layout, and the
//! e-graph rewriting may leave `PadWith` (padding written with a known value)
//! and `Crop` (padding dropped) around ops that need their padding to hold
//! something. A later pass that reasons about *what* is computed (fusion,
//! quantization, a cost model of its own) reads the graph through this view:
//!
//! - [`LogicalView::op`] is the op as the source model meant it, whatever its storage;
//! - [`LogicalView::storage`] says how its tensors are stored, when not row-major;
//! - a storage node (transform, pad, crop) computes nothing: its output is its
//!   input's logical tensor, and [`LogicalView::producer`] looks through it to
//!   the node that computed the tensor;
//! - [`LogicalView::compute_nodes`] lists the nodes that compute something,
//!   in topological order.
//!
//! A pass that rewrites the graph must keep the physical contract: every op
//! reads its inputs in the layouts its `InLayout` states, so an input rewired to
//! another producer must arrive in the same layout (insert a `LayoutTransform`
//! where it does not). The view itself never changes the graph.

use crate::graph::{Graph, GraphError, LaidOut, NodeId, Op, ValueRef};

/// A read-only logical view of a planned graph.
pub struct LogicalView<'g> {
    graph: &'g Graph,
}

impl<'g> LogicalView<'g> {
    /// The view of `graph` (planned or not: an unplanned graph is its own
    /// logical view).
    pub fn new(graph: &'g Graph) -> LogicalView<'g> {
        LogicalView { graph }
    }

    /// Whether node `id` only stores data differently (a layout transform, a
    /// padding write or crop): its output is its first input's logical tensor.
    pub fn is_storage(&self, id: NodeId) -> bool {
        matches!(
            self.graph.node(id).op,
            Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_)
        )
    }

    /// The logical op of node `id`: the op inside an `InLayout`, else the node's.
    pub fn op(&self, id: NodeId) -> &'g Op {
        self.graph.node(id).op.logical()
    }

    /// The storage layouts of node `id`'s inputs and outputs; `None` when it
    /// reads and writes row-major tensors.
    pub fn storage(&self, id: NodeId) -> Option<&'g LaidOut> {
        match &self.graph.node(id).op {
            Op::InLayout(l) => Some(l),
            _ => None,
        }
    }

    /// The value that computed `v`'s logical tensor: `v` itself, or the input
    /// of the storage nodes it went through.
    pub fn producer(&self, mut v: ValueRef) -> ValueRef {
        while self.is_storage(v.node) {
            match self.graph.node_inputs(v.node).first() {
                Some(&input) => v = input,
                None => break,
            }
        }
        v
    }

    /// The logical inputs of node `id`: each input's [`producer`](Self::producer).
    pub fn inputs(&self, id: NodeId) -> Vec<ValueRef> {
        self.graph
            .node_inputs(id)
            .into_iter()
            .map(|v| self.producer(v))
            .collect()
    }

    /// The nodes that compute something (not inputs, constants or storage
    /// nodes), in topological order.
    pub fn compute_nodes(&self) -> Result<Vec<NodeId>, GraphError> {
        Ok(self
            .graph
            .topo_order()?
            .into_iter()
            .filter(|&id| {
                !self.is_storage(id)
                    && !matches!(self.graph.node(id).op, Op::Input | Op::Constant(_))
            })
            .collect())
    }
}
