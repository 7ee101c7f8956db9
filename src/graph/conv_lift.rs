//! Convolutions and pools over one spatial axis lifted to two, over an axis of
//! extent 1, so that they run on the 2-D kernels (direct, 1x1 GEMM, Winograd,
//! depthwise, pooling) instead of a generic path: `[n, c, l]` is reshaped to
//! `[n, c, 1, l]`, the window gains a tap-1, stride-1, unpadded leading axis,
//! and the result is reshaped back. The reshapes keep every byte where it is,
//! so the planner makes them relabellings (`NCW16c` of `[n, c, l]` is
//! `NCHW16c` of `[n, c, 1, l]`). Audio and sequence models (STFT front ends,
//! temporal convolutions) are mostly such layers.

use super::{DType, Graph, GraphError, NodeId, Op, Reshape, ValueRef};
use crate::ops::Window;

/// Lifts every 1-D convolution and pool of f32 data to 2-D. Returns how many
/// were lifted.
pub fn lift_1d_windows(g: &mut Graph) -> Result<usize, GraphError> {
    let mut lifted = 0;
    for id in g.topo_order()? {
        let Some(op) = lifted_op(&g.node(id).op) else {
            continue;
        };
        let x = g.node_inputs(id)[0];
        if g.value_type(x).dtype == DType::F32 && g.node(id).outputs.len() == 1 {
            lift(g, id, op)?;
            lifted += 1;
        }
    }
    g.remove_dead_nodes();
    Ok(lifted)
}

/// A 1-D convolution or pool over two axes, the first of one tap, stride and
/// dilation 1 and no pads.
fn lifted_op(op: &Op) -> Option<Op> {
    let lifted = |w: &Window| Window {
        kernel: vec![1, w.kernel[0]],
        strides: vec![1, w.strides[0]],
        dilations: vec![1, w.dilations[0]],
        pads: vec![0, w.pads[0], 0, w.pads[1]],
    };
    match op {
        Op::Conv(c) if c.window.spatial_rank() == 1 => {
            let mut c = c.clone();
            c.window = lifted(&c.window);
            Some(Op::Conv(c))
        }
        Op::Pool(p) if p.window.spatial_rank() == 1 => {
            let mut p = p.clone();
            p.window = lifted(&p.window);
            Some(Op::Pool(p))
        }
        _ => None,
    }
}

/// `[a, b, l]` as `[a, b, 1, l]`.
fn with_unit_axis(shape: &[usize]) -> Vec<usize> {
    vec![shape[0], shape[1], 1, shape[2]]
}

fn lift(g: &mut Graph, id: NodeId, op: Op) -> Result<(), GraphError> {
    let node = g.node(id);
    let (name, spans) = (node.name.clone(), node.spans.clone());
    let out_name = node.outputs[0].name.clone();
    let out_shape = node.outputs[0].ty.shape.clone();
    let mut ins = g.node_inputs(id);
    // The data and (for a convolution) the weights gain the unit axis; a
    // constant's reshape folds into a new constant.
    for (i, what) in ins.iter_mut().take(2).zip(["x", "w"]) {
        let shape = with_unit_axis(&g.value_type(*i).shape);
        *i = match g.constant(*i) {
            Some(t) => {
                let t = t.reshaped(shape);
                g.add_constant(&format!("{name}/{what}_2d"), t, spans.clone())
            }
            None => {
                let reshape = Op::Reshape(Reshape { shape });
                let r = g.add_node(
                    reshape,
                    &format!("{name}/{what}_2d"),
                    &[*i],
                    &[],
                    spans.clone(),
                )?;
                ValueRef::new(r, 0)
            }
        };
    }
    let y = g.add_node(op, &format!("{name}/2d"), &ins, &[], spans.clone())?;
    let back = Op::Reshape(Reshape { shape: out_shape });
    let y = g.add_node(back, &name, &[ValueRef::new(y, 0)], &[out_name], spans)?;
    g.replace_uses(ValueRef::new(id, 0), ValueRef::new(y, 0));
    g.remove_node(id);
    Ok(())
}
