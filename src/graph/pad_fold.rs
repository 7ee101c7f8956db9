//! Explicit pads folded into the windows that read them.
//!
//! Converters write a padded convolution as `Pad → Conv` with a "valid" window
//! (Keras' `ZeroPadding2D`, TensorFlow's asymmetric "same" padding). A constant
//! Pad of the spatial axes is the window's own padding when its fill is what the
//! window reads there: 0 for a convolution or an average pool that counts pads,
//! −∞ for a max pool — or any fill no larger than every input value, when no
//! window lies wholly in the padding. Folding drops a step that copies the whole
//! tensor. TFLite graphs put a transpose between the two (NHWC → NCHW); the pad
//! is carried through it.

use super::{merge_spans, Graph, GraphError, NodeId, Op, Pad, PadMode, PoolKind, ValueRef};
use crate::ops::Transpose;
use serde::Serialize;

/// One Pad folded into the padding of the window after it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PadFold {
    /// The Pad node.
    pub pad: String,
    /// The convolution or pool that now pads itself.
    pub into: String,
    /// The value the Pad wrote.
    pub fill: f32,
}

/// Folds every Pad it can into the conv or pool reading it (the Pad stays while
/// other nodes read it). Returns the folds, in graph order.
pub fn fold_pads(g: &mut Graph) -> Result<Vec<PadFold>, GraphError> {
    let mut folds = Vec::new();
    for id in g.topo_order()? {
        if let Some(fold) = fold_into(g, id)? {
            folds.push(fold);
        }
    }
    g.remove_dead_nodes();
    Ok(folds)
}

/// The Pad feeding input 0 of `id`, directly or through one transpose: the
/// Pad's node and the transpose's permutation.
fn pad_source(g: &Graph, id: NodeId) -> Option<(NodeId, Option<Vec<usize>>)> {
    let x = *g.node_inputs(id).first()?;
    match &g.node(x.node).op {
        Op::Pad(_) => Some((x.node, None)),
        Op::Transpose(t) => {
            let before = *g.node_inputs(x.node).first()?;
            matches!(g.node(before.node).op, Op::Pad(_))
                .then(|| (before.node, Some(t.perm.clone())))
        }
        _ => None,
    }
}

/// The lowest value `v` can hold, when its producer clamps it from below.
fn lower_bound(g: &Graph, v: ValueRef) -> Option<f32> {
    match &g.node(v.node).op {
        Op::Unary(u) => u.clamp_bounds().map(|(lo, _)| lo),
        _ => None,
    }
}

fn fold_into(g: &mut Graph, id: NodeId) -> Result<Option<PadFold>, GraphError> {
    if !matches!(g.node(id).op, Op::Conv(_) | Op::Pool(_)) {
        return Ok(None);
    }
    let Some((pad_id, perm)) = pad_source(g, id) else {
        return Ok(None);
    };
    let Op::Pad(Pad {
        begins,
        ends,
        mode: PadMode::Constant(fill),
    }) = &g.node(pad_id).op
    else {
        return Ok(None);
    };
    let (fill, pad_input) = (*fill, g.node_inputs(pad_id)[0]);
    // The pads in the window's axis order (a transpose permutes them).
    let axis = |i: usize| perm.as_ref().map_or(i, |p| p[i]);
    let rank = begins.len();
    let (begin, end): (Vec<i64>, Vec<i64>) =
        (0..rank).map(|i| (begins[axis(i)], ends[axis(i)])).unzip();
    if rank < 3 || begin.iter().chain(&end).any(|&p| p < 0) {
        return Ok(None);
    }
    if begin[..2].iter().chain(&end[..2]).any(|&p| p != 0) {
        return Ok(None);
    }
    let spatial = rank - 2;
    let extra = |p: &[i64]| p[2..].iter().map(|&p| p as usize).collect::<Vec<_>>();
    let (extra_begin, extra_end) = (extra(&begin), extra(&end));

    let mut op = g.node(id).op.clone();
    let window = match &mut op {
        Op::Conv(c) if fill == 0.0 => &mut c.window,
        Op::Pool(p) if !p.ceil_mode => {
            let own_pads = p.window.pads.iter().any(|&x| x > 0);
            let fits = match p.kind {
                PoolKind::Avg => fill == 0.0 && (p.count_include_pad || !own_pads),
                // A fill at or below every input value changes no maximum, as long
                // as every window still covers an input element.
                PoolKind::Max => {
                    fill == f32::NEG_INFINITY
                        || (lower_bound(g, pad_input).is_some_and(|lo| fill <= lo)
                            && (0..spatial).all(|i| {
                                let span = p.window.dilations[i] * (p.window.kernel[i] - 1) + 1;
                                p.window.pad_begin(i) + extra_begin[i] < span
                                    && p.window.pad_end(i) + extra_end[i] < span
                            }))
                }
            };
            if !fits {
                return Ok(None);
            }
            if p.kind == PoolKind::Avg {
                p.count_include_pad = true;
            }
            &mut p.window
        }
        _ => return Ok(None),
    };
    if window.spatial_rank() != spatial {
        return Ok(None);
    }
    for i in 0..spatial {
        window.pads[i] += extra_begin[i];
        window.pads[spatial + i] += extra_end[i];
    }

    // The window's new input: the Pad's input, transposed as before if it was.
    let mut x = pad_input;
    if let Some(perm) = perm {
        let t = &g.node(g.node_inputs(id)[0].node);
        let (name, spans) = (format!("{}_unpadded", t.name), t.spans.clone());
        let tid = g.add_node(Op::Transpose(Transpose { perm }), &name, &[x], &[], spans)?;
        x = ValueRef::new(tid, 0);
    }
    let node = g.node(id);
    let (name, pad_name) = (node.name.clone(), g.node(pad_id).name.clone());
    let spans = merge_spans([&g.node(pad_id).spans[..], &node.spans[..]]);
    let out_names: Vec<String> = node.outputs.iter().map(|v| v.name.clone()).collect();
    let mut ins = g.node_inputs(id);
    ins[0] = x;
    let folded = g.add_node(op, &name, &ins, &out_names, spans)?;
    for i in 0..out_names.len() {
        g.replace_uses(ValueRef::new(id, i), ValueRef::new(folded, i));
    }
    g.remove_node(id);
    Ok(Some(PadFold {
        pad: pad_name,
        into: name,
        fill,
    }))
}
