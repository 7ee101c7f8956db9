//! Inference batch norms folded into the convolution before them, for an
//! export to another runtime (`export --for onnxruntime`). Per-channel `Mul`,
//! `Add` and `Sub` after a convolution fold by the graph rules
//! (`rules/conv_affine.rules`) on every plan; this fold stays in Rust because
//! only that export asks for it (the native compiler fuses a batch norm into
//! the conv kernel itself), and rules run on every plan alike.

use super::{merge_spans, DType, Graph, GraphError, NodeId, Op, Tensor, ValueRef};

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

/// What a batch norm folds into: the conv, and the per-output-channel
/// `y = x * scale + shift` it computes.
struct Affine {
    conv: NodeId,
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
        scale,
        shift,
    })
}

/// The value's producer when it is a single-output node read only once.
fn sole_reader_of(g: &Graph, v: ValueRef) -> Option<NodeId> {
    let only = v.output == 0 && g.consumers(v).len() == 1 && !g.is_graph_output(v);
    only.then_some(v.node)
}

/// Replaces the conv of `a` and the op `id` after it by one conv whose weights
/// and bias compute `conv(x) * scale + shift`.
fn refold(g: &mut Graph, id: NodeId, a: Affine) -> Result<(), GraphError> {
    let Affine { conv, scale, shift } = a;
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
    let folded = g.add_node(conv_op, &name, &[conv_ins[0], w, b], &out_names, spans)?;
    g.replace_uses(ValueRef::new(id, 0), ValueRef::new(folded, 0));
    g.remove_node(id);
    Ok(())
}
