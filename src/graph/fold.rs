//! Constant folding: a node whose inputs are all constants becomes constants;
//! and strength reduction where a constant operand allows it (x^2 is x·x).
//! A fold whose result would pass the memory budget's fold limit (64 MiB per
//! value, `core::budget::fold_limit`) is not made: the node stays in the graph
//! and computes its value when the model runs.
//!
//! The importer folds each node as it is added, which is what turns the
//! shape-computation subgraphs exporters emit (Shape → Gather → Unsqueeze → Concat
//! → Reshape) into static attributes; `fold_constants` applies the same step to a
//! whole graph after a pass has produced new constant-only nodes.

use super::{
    checked_size_bytes, BinaryOp, Graph, GraphError, NodeId, Op, Tensor, ValueRef, ValueType,
};
use crate::core::budget;
use crate::ops::eval_op;

/// Folds `id` if every input is a constant. Returns the constants that replace
/// its outputs, or `None` when the node is not foldable.
pub fn fold_node(g: &mut Graph, id: NodeId) -> Result<Option<Vec<ValueRef>>, GraphError> {
    if matches!(g.node(id).op, Op::Input | Op::Constant(_)) {
        return Ok(None);
    }
    if let Some(square) = square_of_pow(g, id)? {
        return Ok(Some(square));
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
    if !fold_fits(&tensors, node.outputs.iter().map(|v| &v.ty)) {
        return Ok(None);
    }
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

/// Whether folding a node of these constant inputs and output types stays
/// within the memory budget: every output at most [`budget::fold_limit`]
/// bytes (a bigger one stays an op, computed when the model runs), and the
/// inputs, which evaluation may widen to f64, at most a quarter of the limit.
fn fold_fits<'t>(inputs: &[&Tensor], outputs: impl Iterator<Item = &'t ValueType>) -> bool {
    let fold_limit = budget::fold_limit();
    let outputs_fit = outputs
        .into_iter()
        .all(|ty| checked_size_bytes(ty).is_some_and(|b| b <= fold_limit));
    let read: u64 = inputs
        .iter()
        .map(|t| (t.numel() as u64).saturating_mul(8))
        .fold(0, u64::saturating_add);
    outputs_fit && read <= budget::limit() / 4
}

/// Pow(x, 2) with a constant exponent, as the product x·x (the same correctly
/// rounded value, without a call to pow): the Mul that replaces the node.
fn square_of_pow(g: &mut Graph, id: NodeId) -> Result<Option<Vec<ValueRef>>, GraphError> {
    let node = g.node(id);
    let ins = g.node_inputs(id);
    let (Op::Binary(BinaryOp::Pow), [x, e]) = (&node.op, &ins[..]) else {
        return Ok(None);
    };
    let two = g
        .constant(*e)
        .is_some_and(|t| t.numel() == 1 && t.dtype().is_float() && t.data.to_f64()[0] == 2.0);
    if !two || !g.value_type(*x).dtype.is_float() || g.value_type(*x) != &node.outputs[0].ty {
        return Ok(None);
    }
    let (name, spans, x) = (node.name.clone(), node.spans.clone(), *x);
    let out_names = vec![node.outputs[0].name.clone()];
    let mul = g.add_node(Op::Binary(BinaryOp::Mul), &name, &[x, x], &out_names, spans)?;
    let square = ValueRef::new(mul, 0);
    g.replace_uses(ValueRef::new(id, 0), square);
    g.remove_node(id);
    Ok(Some(vec![square]))
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

#[cfg(test)]
mod tests {
    use crate::graph::*;

    #[test]
    fn pow_by_a_constant_two_becomes_a_product() {
        let mut g = Graph::new("square");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![3]), vec![]);
        let two = g.add_constant("two", Tensor::scalar_f32(2.0), vec![]);
        let three = g.add_constant("three", Tensor::scalar_f32(3.0), vec![]);
        let pow = |g: &mut Graph, e| {
            let id = g
                .add_node(Op::Binary(BinaryOp::Pow), "pow", &[x, e], &[], vec![])
                .unwrap();
            fold_node(g, id).unwrap()
        };
        let square = pow(&mut g, two).expect("x^2 is rewritten")[0];
        assert_eq!(g.node(square.node).op, Op::Binary(BinaryOp::Mul));
        assert_eq!(g.node_inputs(square.node), vec![x, x]);
        // Another exponent stays a Pow.
        assert!(pow(&mut g, three).is_none());
    }
}
