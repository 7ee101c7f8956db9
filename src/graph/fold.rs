//! Constant folding: a node whose inputs are all constants becomes constants.
//!
//! The importer folds each node as it is added, which is what turns the
//! shape-computation subgraphs exporters emit (Shape → Gather → Unsqueeze → Concat
//! → Reshape) into static attributes; `fold_constants` applies the same step to a
//! whole graph after a pass has produced new constant-only nodes.

use super::{Graph, GraphError, NodeId, Op, Tensor, ValueRef};
use crate::ops::eval_op;

/// Folds `id` if every input is a constant. Returns the constants that replace
/// its outputs, or `None` when the node is not foldable.
pub fn fold_node(g: &mut Graph, id: NodeId) -> Result<Option<Vec<ValueRef>>, GraphError> {
    if matches!(g.node(id).op, Op::Input | Op::Constant(_)) {
        return Ok(None);
    }
    let inputs = g.node_inputs(id);
    let Some(tensors) = inputs
        .iter()
        .map(|&v| g.constant(v))
        .collect::<Option<Vec<&Tensor>>>()
    else {
        return Ok(None);
    };
    let node = g.node(id);
    let types: Vec<_> = node.outputs.iter().map(|v| v.ty.clone()).collect();
    let results =
        eval_op(&node.op, &tensors, &types).map_err(|m| GraphError::at(&node.spans, m))?;
    let (spans, names): (Vec<_>, Vec<_>) = (
        node.spans.clone(),
        node.outputs.iter().map(|v| v.name.clone()).collect(),
    );
    let mut replacements = Vec::with_capacity(results.len());
    for (i, t) in results.into_iter().enumerate() {
        let c = g.add_constant(&names[i], t, spans.clone());
        g.replace_uses(ValueRef::new(id, i), c);
        replacements.push(c);
    }
    g.remove_node(id);
    Ok(Some(replacements))
}

/// Folds every foldable node, in topological order; returns how many were folded.
pub fn fold_constants(g: &mut Graph) -> Result<usize, GraphError> {
    let mut folded = 0;
    for id in g.topo_order()? {
        if fold_node(g, id)?.is_some() {
            folded += 1;
        }
    }
    g.remove_dead_nodes();
    Ok(folded)
}
