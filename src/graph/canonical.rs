//! Ops rewritten into the equivalent op that has the better kernel, and chains
//! of data movement into the one step they amount to.
//!
//! Converters write a global average pool as `ReduceMean` over the spatial axes
//! (squeeze-excite blocks, global pooling heads).
//! As a `GlobalAveragePool` it runs on the pool kernel in any channel blocking,
//! where a reduction is a generic loop nest over row-major data. A reshape of the
//! pooled `N×C×1×1` gives the reduction's shape (with or without kept axes).
//! A channels-last mean (tf2onnx and TFLite write them) first gets a transpose
//! to channels-first, which the planner relabels when the data is already
//! stored channel-blocked.

use super::{
    DType, GlobalPool, Graph, GraphError, NodeId, Op, PoolKind, Reduce, ReduceKind, Reshape,
    Transpose, ValueRef,
};
use std::collections::{HashMap, HashSet};

/// Rewrites every mean or max of an f32 rank-4 tensor over all axes but the
/// batch and one other (the channels: axis 1, or 3 when channels-last) as a
/// global pool, after a transpose that brings the channels to axis 1 when they
/// are elsewhere; a reshape gives the reduction's own output shape. Returns how
/// many were rewritten.
pub fn reductions_as_global_pools(g: &mut Graph) -> Result<usize, GraphError> {
    let mut rewritten = 0;
    for id in g.topo_order()? {
        let Op::Reduce(Reduce { kind, axes, .. }) = &g.node(id).op else {
            continue;
        };
        let kind = match kind {
            ReduceKind::Mean => PoolKind::Avg,
            ReduceKind::Max => PoolKind::Max,
            _ => continue,
        };
        let x = g.node_inputs(id)[0];
        let ty = g.value_type(x);
        let rank = ty.shape.len();
        let (kept, reduced): (Vec<usize>, Vec<usize>) = (0..rank).partition(|a| !axes.contains(a));
        let [0, channels] = kept[..] else {
            continue;
        };
        if rank != 4 || ty.dtype != DType::F32 {
            continue;
        }
        let node = g.node(id);
        let (name, spans) = (node.name.clone(), node.spans.clone());
        let out_name = node.outputs[0].name.clone();
        let out_shape = node.outputs[0].ty.shape.clone();
        let pooled_shape = [ty.shape[0], ty.shape[channels], 1, 1];
        let x = match channels {
            1 => x,
            _ => {
                let perm = [0, channels, reduced[0], reduced[1]];
                let to_nchw = Op::Transpose(Transpose {
                    perm: perm.to_vec(),
                });
                let t = g.add_node(
                    to_nchw,
                    &format!("{name}_to_nchw"),
                    &[x],
                    &[],
                    spans.clone(),
                )?;
                ValueRef::new(t, 0)
            }
        };
        let pool = Op::GlobalPool(GlobalPool { kind });
        let y = match out_shape == pooled_shape {
            // The pool's output is the reduction's.
            true => g.add_node(pool, &name, &[x], &[out_name], spans)?,
            false => {
                let pooled = g.add_node(pool, &format!("{name}_pool"), &[x], &[], spans.clone())?;
                let reshape = Op::Reshape(Reshape { shape: out_shape });
                g.add_node(
                    reshape,
                    &name,
                    &[ValueRef::new(pooled, 0)],
                    &[out_name],
                    spans,
                )?
            }
        };
        g.replace_uses(ValueRef::new(id, 0), ValueRef::new(y, 0));
        g.remove_node(id);
        rewritten += 1;
    }
    Ok(rewritten)
}

/// Drops the ops that give their input back: a Cast to the type its input
/// has (exporters write them around every type-generic helper) and an
/// Identity; a graph output keeps its name (a Cast there becomes an
/// Identity). The e-graph language has no node kind for these, and a rule over
/// its generic `op` node would bring the whole graph into every rewriting.
/// Chains of transposes and reshapes, and a slice of a pad, are rules
/// (`rules/transposes.rules`, `rules/movement.rules`). Returns how many ops
/// were dropped.
pub fn drop_identities(g: &mut Graph) -> Result<usize, GraphError> {
    let mut dropped = 0;
    for id in g.topo_order()? {
        let Some(&x) = g.node_inputs(id).first() else {
            continue;
        };
        let out = ValueRef::new(id, 0);
        let returned = g.is_graph_output(out);
        let gives_back = match &g.node(id).op {
            Op::Cast(c) => c.to == g.value_type(x).dtype,
            Op::Identity => !returned,
            _ => false,
        };
        if !gives_back {
            continue;
        }
        let replacement = match returned {
            false => x,
            true => {
                let node = g.node(id);
                let (name, spans) = (node.name.clone(), node.spans.clone());
                let out_name = node.outputs[0].name.clone();
                ValueRef::new(
                    g.add_node(Op::Identity, &name, &[x], &[out_name], spans)?,
                    0,
                )
            }
        };
        g.replace_uses(out, replacement);
        g.remove_node(id);
        dropped += 1;
    }
    g.remove_dead_nodes();
    Ok(dropped)
}

/// Merges the nodes that compute the same op on the same inputs into the
/// first: its readers then read one value. Importers write such twins where a
/// format repeats a computation per reader (a QOperator model dequantizes a
/// tensor in every op that reads it): as twins, each reader's copy is a step
/// of its own, and a value the twins' readers share (a quantization grid the
/// kernels look for) is two values. Control flow and the nodes whose outputs
/// the graph returns are kept. Returns how many nodes were merged away.
pub fn common_subexpressions(g: &mut Graph) -> Result<usize, GraphError> {
    // The nodes kept so far, by their inputs: a twin merges into the one
    // before it. Looked up by inputs, not among the readers of an input, so
    // that a value read by thousands costs no scan of them per reader.
    let mut kept: HashMap<Vec<ValueRef>, Vec<NodeId>> = HashMap::new();
    let mut merged = HashSet::new();
    for id in g.topo_order()? {
        let node = g.node(id);
        if matches!(node.op, Op::Input | Op::Constant(_) | Op::Control(_)) {
            continue;
        }
        let ins = g.node_inputs(id);
        if ins.is_empty() {
            continue;
        }
        let outputs = node.outputs.len();
        let returned = (0..outputs).any(|k| g.is_graph_output(ValueRef::new(id, k)));
        let alike = kept.entry(ins).or_default();
        let twin = alike.iter().copied().find(|&n| {
            let other = g.node(n);
            !returned
                && other.op == node.op
                && other.outputs.len() == outputs
                && (other.outputs.iter().zip(&node.outputs)).all(|(a, b)| a.ty == b.ty)
        });
        match twin {
            Some(twin) => {
                for k in 0..outputs {
                    g.replace_uses(ValueRef::new(id, k), ValueRef::new(twin, k));
                }
                merged.insert(id);
            }
            None => alike.push(id),
        }
    }
    // Removed at once: the twins of a hub's readers are removed in linear time.
    g.remove_nodes(&merged);
    Ok(merged.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{BinaryOp, DType, UnaryOp, ValueType};

    /// Twins merge into one node whose value both readers read; nodes that
    /// differ in their op or their inputs, and returned values, stay.
    #[test]
    fn twins_merge_and_different_nodes_stay() {
        let mut g = Graph::new("twins");
        let ty = ValueType::new(DType::F32, vec![4]);
        let x = g.add_input("x", ty.clone(), vec![]);
        let y = g.add_input("y", ty, vec![]);
        let qdq = Op::Unary(UnaryOp::QuantizeDequantize {
            scale: 0.5,
            zero_point: 0.0,
            min: -128.0,
            max: 127.0,
        });
        let node = |g: &mut Graph, op: &Op, ins: &[ValueRef]| {
            ValueRef::new(g.add_node(op.clone(), "n", ins, &[], vec![]).unwrap(), 0)
        };
        let first = node(&mut g, &qdq, &[x]);
        let twin = node(&mut g, &qdq, &[x]);
        let other_input = node(&mut g, &qdq, &[y]);
        let other_op = node(&mut g, &Op::Unary(UnaryOp::Relu), &[x]);
        let add = Op::Binary(BinaryOp::Add);
        let sums = [
            node(&mut g, &add, &[first, twin]),
            node(&mut g, &add, &[other_input, other_op]),
        ];
        let returned = node(&mut g, &qdq, &[x]);
        g.set_outputs(vec![sums[0], sums[1], returned]);

        assert_eq!(common_subexpressions(&mut g).unwrap(), 1);
        assert!(!g.contains(twin.node));
        assert_eq!(g.node_inputs(sums[0].node), vec![first, first]);
        assert_eq!(g.node_inputs(sums[1].node), vec![other_input, other_op]);
        assert_eq!(g.outputs()[2], returned);
    }
}
