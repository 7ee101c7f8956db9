//! Ops rewritten into the equivalent op that has the better kernel.
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
    DType, GlobalPool, Graph, GraphError, Op, PoolKind, Reduce, ReduceKind, Reshape, Transpose,
    ValueRef,
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
