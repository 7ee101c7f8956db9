//! Per-channel scales and shifts folded into the convolution before them.
//!
//! Converters often write an inference batch norm as `Conv → Mul(γ') → Add(β')`
//! with per-output-channel constants (tf2onnx does for depthwise convolutions).
//! Folded into the weights and bias, the conv's output is what the Add wrote, and
//! the activation after it can join the conv kernel as an epilogue. A transpose
//! between the conv and the op (tf2onnx's channels-last graphs) is looked
//! through: the constant is then per channel along the axis the channels moved to.

use super::{
    merge_spans, BinaryOp, DType, Graph, GraphError, NodeId, Op, Tensor, Transpose, ValueRef,
};

/// Folds every `Mul`, `Add` or `Sub` of a convolution's output by a constant that
/// is one value per output channel (or one for all) into that convolution, when
/// the conv's output has no other reader. Returns how many were folded.
pub fn fold_conv_affine(g: &mut Graph) -> Result<usize, GraphError> {
    let mut folded = 0;
    for id in g.topo_order()? {
        if g.contains(id) && fold_into_conv(g, id)? {
            folded += 1;
        }
    }
    g.remove_dead_nodes();
    Ok(folded)
}

/// Folds every inference `BatchNormalization` of a convolution's output (NCHW,
/// constant parameters) into that convolution, when the conv's output has no
/// other reader. Returns how many were folded. The native compiler fuses these
/// itself; an ONNX export for another runtime is spared the separate op.
pub fn fold_conv_batchnorm(g: &mut Graph) -> Result<usize, GraphError> {
    let mut folded = 0;
    for id in g.topo_order()? {
        if !g.contains(id) {
            continue;
        }
        if let Some(a) = batchnorm_of(g, id) {
            refold(g, id, a)?;
            folded += 1;
        }
    }
    g.remove_dead_nodes();
    Ok(folded)
}

/// What `id` folds into: the conv, the transpose between them if any, and the
/// per-output-channel `y = x * scale + shift` it computes.
struct Affine {
    conv: NodeId,
    transpose: Option<NodeId>,
    scale: Vec<f32>,
    shift: Vec<f32>,
}

/// The conv a batch norm `id` reads (as its sole reader) and its scale and shift.
fn batchnorm_of(g: &Graph, id: NodeId) -> Option<Affine> {
    let Op::BatchNorm(crate::ops::BatchNorm { epsilon }) = g.node(id).op else {
        return None;
    };
    let ins = g.node_inputs(id);
    let conv_out = ins[0];
    if !matches!(g.node(conv_out.node).op, Op::Conv(_)) || ins.len() != 5 {
        return None;
    }
    sole_reader_of(g, conv_out)?;
    let cout = *g.value_type(conv_out).shape.get(1)?;
    let f32_const = |v: &ValueRef| g.constant(*v).is_some_and(|t| t.dtype() == DType::F32);
    if !g.node_inputs(conv_out.node)[1..].iter().all(f32_const) {
        return None;
    }
    let p: Vec<Vec<f32>> = ins[1..]
        .iter()
        .map(|v| {
            g.constant(*v)
                .filter(|t| t.dtype() == DType::F32 && t.numel() == cout)
        })
        .map(|t| t.map(|t| t.f32s().into_owned()))
        .collect::<Option<_>>()?;
    let scale: Vec<f32> = (0..cout)
        .map(|o| p[0][o] / (p[3][o] + epsilon).sqrt())
        .collect();
    let shift = (0..cout).map(|o| p[1][o] - p[2][o] * scale[o]).collect();
    Some(Affine {
        conv: conv_out.node,
        transpose: None,
        scale,
        shift,
    })
}

/// The value's producer when it is a single-output node read only once.
fn sole_reader_of(g: &Graph, v: ValueRef) -> Option<NodeId> {
    let only = v.output == 0 && g.consumers(v).len() == 1 && !g.is_graph_output(v);
    only.then_some(v.node)
}

/// The conv (through at most one transpose), its per-channel constant and the
/// op, when `id` can fold into it.
fn affine_of(g: &Graph, id: NodeId) -> Option<Affine> {
    let Op::Binary(op @ (BinaryOp::Mul | BinaryOp::Add | BinaryOp::Sub)) = g.node(id).op else {
        return None;
    };
    let ins = g.node_inputs(id);
    // The conv's output, the transpose after it, and the axis the channels are on.
    let conv_side = |v: ValueRef| -> Option<(ValueRef, Option<NodeId>, usize)> {
        match &g.node(v.node).op {
            Op::Conv(_) => Some((v, None, 1)),
            Op::Transpose(Transpose { perm }) => {
                let conv_out = g.node_inputs(v.node)[0];
                matches!(g.node(conv_out.node).op, Op::Conv(_)).then_some(())?;
                sole_reader_of(g, v)?;
                let axis = perm.iter().position(|&a| a == 1)?;
                Some((conv_out, Some(v.node), axis))
            }
            _ => None,
        }
    };
    let (port, (conv_out, transpose, axis)) =
        (0..2).find_map(|p| conv_side(ins[p]).map(|found| (p, found)))?;
    if op == BinaryOp::Sub && port != 0 {
        return None;
    }
    let c = g.constant(ins[1 - port])?;
    sole_reader_of(g, conv_out)?;
    if g.value_type(ValueRef::new(id, 0)) != g.value_type(ins[port]) {
        return None;
    }
    let conv_ins = g.node_inputs(conv_out.node);
    let f32_const = |v: &ValueRef| g.constant(*v).is_some_and(|t| t.dtype() == DType::F32);
    if !conv_ins[1..].iter().all(f32_const) || c.dtype() != DType::F32 {
        return None;
    }
    let rank = g.value_type(conv_out).shape.len();
    let cout = *g.value_type(conv_out).shape.get(1)?;
    let s = per_channel(c, rank, axis, cout)?;
    let (scale, shift) = match op {
        BinaryOp::Mul => (s, vec![0.0; cout]),
        BinaryOp::Add => (vec![1.0; cout], s),
        _ => (vec![1.0; cout], s.iter().map(|k| -k).collect()),
    };
    Some(Affine {
        conv: conv_out.node,
        transpose,
        scale,
        shift,
    })
}

/// The constant as one value per output channel, when it broadcasts so: its
/// shape right-aligned against the output's is 1 everywhere but the channel
/// `axis`, where it is 1 or the channel count.
fn per_channel(c: &Tensor, rank: usize, axis: usize, cout: usize) -> Option<Vec<f32>> {
    if c.rank() > rank {
        return None;
    }
    let lead = rank - c.rank();
    let channel_extent = if axis >= lead {
        c.shape[axis - lead]
    } else {
        1
    };
    let others_one = c
        .shape
        .iter()
        .enumerate()
        .all(|(i, &d)| i + lead == axis || d == 1);
    if !others_one || !(channel_extent == 1 || channel_extent == cout) {
        return None;
    }
    let v = c.f32s();
    if v.is_empty() {
        return None;
    }
    Some((0..cout).map(|o| v[o % v.len()]).collect())
}

fn fold_into_conv(g: &mut Graph, id: NodeId) -> Result<bool, GraphError> {
    let Some(a) = affine_of(g, id) else {
        return Ok(false);
    };
    refold(g, id, a)?;
    Ok(true)
}

/// Replaces the conv of `a` and the op `id` after it by one conv whose weights
/// and bias compute `conv(x) * scale + shift`.
fn refold(g: &mut Graph, id: NodeId, a: Affine) -> Result<(), GraphError> {
    let Affine {
        conv,
        transpose,
        scale,
        shift,
    } = a;
    let conv_ins = g.node_inputs(conv);
    let w = g.constant(conv_ins[1]).expect("checked constant");
    let cout = scale.len();
    let mut bias: Vec<f32> = match conv_ins.get(2) {
        Some(b) => g.constant(*b).expect("checked constant").to_f32(),
        None => vec![0.0; cout],
    };
    let mut weights = w.f32s().into_owned();
    let per_out = weights.len() / cout;
    for (o, (&k, &d)) in scale.iter().zip(&shift).enumerate() {
        // Exact for a pure shift (k = 1) or scale (d = 0), as the ops they replace.
        if k != 1.0 {
            weights[o * per_out..(o + 1) * per_out]
                .iter_mut()
                .for_each(|x| *x *= k);
            bias[o] *= k;
        }
        bias[o] += d;
    }
    let w_shape = w.shape.clone();
    let (conv_node, node) = (g.node(conv), g.node(id));
    let name = node.name.clone();
    let spans = merge_spans([&conv_node.spans[..], &node.spans[..]]);
    let out_names = vec![node.outputs[0].name.clone()];
    let conv_op = conv_node.op.clone();
    let w = g.add_constant(
        &format!("{name}_weights"),
        Tensor::from_f32(w_shape, weights),
        spans.clone(),
    );
    let b = g.add_constant(
        &format!("{name}_bias"),
        Tensor::from_f32(vec![cout], bias),
        spans.clone(),
    );
    let folded = match transpose {
        None => g.add_node(conv_op, &name, &[conv_ins[0], w, b], &out_names, spans)?,
        Some(t) => {
            let t_op = g.node(t).op.clone();
            let conv_name = format!("{name}_conv");
            let c = g.add_node(
                conv_op,
                &conv_name,
                &[conv_ins[0], w, b],
                &[],
                spans.clone(),
            )?;
            g.add_node(t_op, &name, &[ValueRef::new(c, 0)], &out_names, spans)?
        }
    };
    g.replace_uses(ValueRef::new(id, 0), ValueRef::new(folded, 0));
    g.remove_node(id);
    Ok(())
}
