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
    DType, GlobalPool, Graph, GraphError, NodeId, Op, Pad, PadMode, PoolKind, Reduce, ReduceKind,
    Reshape, Slice, Transpose, ValueRef,
};

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

/// Rewrites every chain of transposes, reshapes (squeezes and unsqueezes are
/// reshapes) and a constant Pad cut back by a Slice into the one op the chain
/// amounts to, or into nothing when it gives its input back. Converters and
/// exported plans fill models with such chains (NHWC to NCHW and back, a
/// blocked layout spelled out as Pad, Reshape and Transpose); what is left is
/// a single transpose or reshape, which the planner makes a relabelling where
/// the layouts allow. A chain's intermediate values stay while other nodes
/// read them. Returns how many ops were merged away.
pub fn movement_chains(g: &mut Graph) -> Result<usize, GraphError> {
    let mut merged = 0;
    for id in g.topo_order()? {
        let Some((source, op)) = merged_step(g, id) else {
            continue;
        };
        let node = g.node(id);
        let (name, spans) = (node.name.clone(), node.spans.clone());
        let out = ValueRef::new(id, 0);
        let gives_back_input = match &op {
            Op::Transpose(Transpose { perm }) => perm.iter().enumerate().all(|(i, &p)| i == p),
            Op::Reshape(Reshape { shape }) => *shape == g.value_type(source).shape,
            Op::Identity => true,
            _ => false,
        };
        let replacement = if gives_back_input && !g.is_graph_output(out) {
            source
        } else {
            // A graph output keeps its name: an Identity when nothing is left.
            let op = if gives_back_input { Op::Identity } else { op };
            let out_name = node.outputs[0].name.clone();
            ValueRef::new(g.add_node(op, &name, &[source], &[out_name], spans)?, 0)
        };
        g.replace_uses(out, replacement);
        g.remove_node(id);
        merged += 1;
    }
    g.remove_dead_nodes();
    Ok(merged)
}

/// Merges the nodes that compute the same op on the same inputs into the
/// first: its readers then read one value. Importers write such twins where a
/// format repeats a computation per reader (a QOperator model dequantizes a
/// tensor in every op that reads it): as twins, each reader's copy is a step
/// of its own, and a value the twins' readers share (a quantization grid the
/// kernels look for) is two values. Control flow and the nodes whose outputs
/// the graph returns are kept. Returns how many nodes were merged away.
pub fn common_subexpressions(g: &mut Graph) -> Result<usize, GraphError> {
    let mut merged = 0;
    // The nodes kept so far: a twin merges into the one before it.
    let mut kept = std::collections::HashSet::new();
    for id in g.topo_order()? {
        kept.insert(id);
        let node = g.node(id);
        let outputs = node.outputs.len();
        let returned = (0..outputs).any(|k| g.is_graph_output(ValueRef::new(id, k)));
        if returned || matches!(node.op, Op::Input | Op::Constant(_) | Op::Control(_)) {
            continue;
        }
        let ins = g.node_inputs(id);
        let Some(&first) = ins.first() else { continue };
        let twin = g.consumers(first).into_iter().map(|(n, _)| n).find(|&n| {
            let other = g.node(n);
            n != id
                && kept.contains(&n)
                && other.op == node.op
                && other.outputs.len() == outputs
                && other
                    .outputs
                    .iter()
                    .zip(&node.outputs)
                    .all(|(a, b)| a.ty == b.ty)
                && g.node_inputs(n) == ins
        });
        if let Some(twin) = twin {
            for k in 0..outputs {
                g.replace_uses(ValueRef::new(id, k), ValueRef::new(twin, k));
            }
            g.remove_node(id);
            kept.remove(&id);
            merged += 1;
        }
    }
    Ok(merged)
}

/// The value and the one op that node `id` with the movement before it
/// amounts to: a transpose of a transpose, a reshape of a reshape, a slice
/// cutting back exactly a constant pad (nothing: a same-shape reshape), or a
/// transpose, reshape, cast or identity alone that gives its input back. `None` when the node
/// is none of these.
fn merged_step(g: &Graph, id: NodeId) -> Option<(ValueRef, Op)> {
    let x = *g.node_inputs(id).first()?;
    let before = &g.node(x.node).op;
    let before_input = || g.node_inputs(x.node).first().copied();
    match (&g.node(id).op, before) {
        (Op::Transpose(Transpose { perm: second }), Op::Transpose(Transpose { perm: first })) => {
            // Output axis k of the second is axis second[k] of the first's output.
            let perm = second.iter().map(|&k| first[k]).collect();
            Some((before_input()?, Op::Transpose(Transpose { perm })))
        }
        (Op::Reshape(Reshape { shape }), Op::Reshape(_)) => Some((
            before_input()?,
            Op::Reshape(Reshape {
                shape: shape.clone(),
            }),
        )),
        (Op::Slice(slice), Op::Pad(pad)) if cuts_back(slice, pad, &g.value_type(x).shape) => {
            let source = before_input()?;
            let shape = g.value_type(source).shape.clone();
            Some((source, Op::Reshape(Reshape { shape })))
        }
        (Op::Transpose(Transpose { perm }), _) if perm.iter().enumerate().all(|(i, &p)| i == p) => {
            Some((x, g.node(id).op.clone()))
        }
        (Op::Reshape(Reshape { shape }), _) if *shape == g.value_type(x).shape => {
            Some((x, g.node(id).op.clone()))
        }
        // A cast to the type its input has (exporters write them around
        // every type-generic helper) and an identity give their input back;
        // an identity that holds a graph output's name stays.
        (Op::Cast(c), _) if c.to == g.value_type(x).dtype => Some((x, Op::Identity)),
        (Op::Identity, _) if !g.is_graph_output(ValueRef::new(id, 0)) => Some((x, Op::Identity)),
        _ => None,
    }
}

/// Whether `slice` of the output (of shape `padded`) of `pad` keeps exactly
/// the pad's input: a constant pad at the ends only, and a slice from 0 in
/// steps of 1 up to each padded axis's original extent.
fn cuts_back(slice: &Slice, pad: &Pad, padded: &[usize]) -> bool {
    if !matches!(pad.mode, PadMode::Constant(_)) || pad.begins.iter().any(|&b| b != 0) {
        return false;
    }
    (0..padded.len()).all(|a| {
        let end_pad = pad.ends.get(a).copied().unwrap_or(0);
        let original = padded[a] as i64 - end_pad;
        match slice.axes.iter().find(|s| s.axis == a) {
            Some(s) => s.start == 0 && s.step == 1 && s.end == original && end_pad >= 0,
            None => end_pad == 0,
        }
    })
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
