//! Ops rewritten into the equivalent op that has the better kernel.
//!
//! Converters write a global average pool as `ReduceMean` over the spatial axes
//! (squeeze-excite blocks, global pooling heads).
//! As a `GlobalAveragePool` it runs on the pool kernel in any channel blocking,
//! where a reduction is a generic loop nest over row-major data. A reshape of the
//! pooled `N×C×1×1` gives the reduction's shape (with or without kept axes).

use super::{
    DType, GlobalPool, Graph, GraphError, Op, PoolKind, Reduce, ReduceKind, Reshape, ValueRef,
};

/// Rewrites every mean or max of an f32 NCHW-ranked tensor over exactly its
/// spatial axes (2 and 3, the pool kernel's) as a global pool; a reshape gives the reduction's
/// own output shape. Returns how many were rewritten. (A channels-last mean,
/// which tf2onnx writes, stays: a transpose before the pool costs what it saves.)
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
        let kept: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
        if kept != [0, 1] {
            continue;
        }
        if rank != 4 || ty.dtype != DType::F32 {
            continue;
        }
        let node = g.node(id);
        let (name, spans) = (node.name.clone(), node.spans.clone());
        let out_name = node.outputs[0].name.clone();
        let out_shape = node.outputs[0].ty.shape.clone();
        let pool = Op::GlobalPool(GlobalPool { kind });
        let y = match out_shape.len() == rank {
            // Kept axes: the pool's output is the reduction's.
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
