//! The transformer operators of opsets 23 to 27: Attention, LinearAttention,
//! RMSNormalization and RotaryEmbedding, and ai.onnx.preview's FlexAttention,
//! imported as the ops their specifications are written in (matrix products,
//! Softmax, masks as `Where` over comparisons of positions, a state updated
//! token by token), so that every later stage sees ops it knows and they run
//! on the native kernels.

use super::context::{NodeCtx, Res};
use super::control::graph_attr;
use super::registry::{Registry, AI_ONNX, AI_ONNX_PREVIEW};
use crate::frontend::onnx::dtype_from_onnx;
use crate::graph::{
    broadcast_shapes, BinaryOp, DType, Op, ReduceKind, Tensor, TensorData, UnaryOp, ValueRef,
};
use crate::ops::{
    Cast, Concat, Gather, LayerNorm, Logical, Reduce, Slice, SliceAxis, Softmax, Transpose,
};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Attention", attention);
    reg.add(AI_ONNX, "LinearAttention", linear_attention);
    reg.add(AI_ONNX, "RMSNormalization", rms_norm);
    reg.add(AI_ONNX, "RotaryEmbedding", rotary_embedding);
    reg.add(AI_ONNX_PREVIEW, "FlexAttention", flex_attention);
}

/// The last two axes swapped, of a rank-4 tensor.
const SWAP_LAST: [usize; 4] = [0, 1, 3, 2];
/// (batch, sequence, heads, size) and (batch, heads, sequence, size) into each other.
const SWAP_MIDDLE: [usize; 4] = [0, 2, 1, 3];

impl NodeCtx<'_> {
    /// `x[..., start..end]` along the last axis.
    fn last_axis_range(
        &mut self,
        x: ValueRef,
        start: usize,
        end: usize,
        what: &str,
    ) -> Res<ValueRef> {
        let axis = self.ty(x).shape.len() - 1;
        let slice = Op::Slice(Slice {
            axes: vec![SliceAxis {
                axis,
                start: start as i64,
                end: end as i64,
                step: 1,
            }],
        });
        self.emit_inner(slice, &[x], what)
    }

    fn cast_to(&mut self, x: ValueRef, to: DType, what: &str) -> Res<ValueRef> {
        if self.ty(x).dtype == to {
            return Ok(x);
        }
        let cast = Op::Cast(Cast { to, saturate: true });
        self.emit_inner(cast, &[x], what)
    }
}

/// The heads of one of Attention's inputs, as (batch, heads, sequence, size).
struct Heads {
    batch: usize,
    heads: usize,
    seq: usize,
    size: usize,
}

impl Heads {
    fn of(c: &NodeCtx, value: ValueRef) -> Heads {
        let s = c.ty(value).shape;
        Heads {
            batch: s[0],
            heads: s[1],
            seq: s[2],
            size: s[3],
        }
    }
}

/// A 3-D (batch, sequence, heads · size) input as (batch, heads, sequence, size).
fn split_heads(c: &mut NodeCtx, x: ValueRef, heads: usize, name: &str) -> Res<ValueRef> {
    let s = c.ty(x).shape;
    if !s[2].is_multiple_of(heads) {
        return Err(c.err(format!(
            "{name}'s hidden size {} does not divide into {heads} heads",
            s[2]
        )));
    }
    let split = c.reshape_to(
        x,
        vec![s[0], s[1], heads, s[2] / heads],
        &format!("{name}_heads"),
    )?;
    let perm = SWAP_MIDDLE.to_vec();
    c.emit_inner(
        Op::Transpose(Transpose { perm }),
        &[split],
        &format!("{name}_by_head"),
    )
}

/// Attention (opsets 23 to 25): `softmax(Q·Kᵀ · scale + bias) · V` per head,
/// as its specification's function body. Grouped-query attention multiplies
/// each key/value head with its group of query heads in one matrix product
/// (the query heads of a group are stacked along the sequence axis) rather
/// than repeating the keys and values. The bias adds a float mask, or masks
/// out with −inf where a boolean mask, causality, the sliding window (opset
/// 25) or the padding of `nonpad_kv_seqlen` (opset 24) disallow a key; a
/// query row that may attend no key gives zeros.
///
/// The chain Q·Kᵀ → bias → Softmax → ·V runs as separate native steps; one
/// fused step (scores never stored whole) is left until a measurement against
/// onnxruntime on a BERT-size shape shows it pays.
fn attention(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (q, k, v, dtype) = float_qkv(c)?;
    let ranks = [q, k, v].map(|x| c.ty(x).shape.len());
    let (q_heads_attr, kv_heads_attr) = (c.int("q_num_heads", 0)?, c.int("kv_num_heads", 0)?);
    let (q4, k4, v4) = match ranks {
        [3, 3, 3] => {
            let heads = |n: i64, name: &str| {
                usize::try_from(n)
                    .ok()
                    .filter(|&h| h > 0)
                    .ok_or_else(|| c.err(format!("3-D inputs need a positive {name}, got {n}")))
            };
            let (qh, kvh) = (
                heads(q_heads_attr, "q_num_heads")?,
                heads(kv_heads_attr, "kv_num_heads")?,
            );
            let qs = c.ty(q).shape;
            for x in [k, v] {
                if c.ty(x).shape[0] != qs[0] {
                    return Err(c.err(format!(
                        "K and V have batch {}, Q {}",
                        c.ty(x).shape[0],
                        qs[0]
                    )));
                }
            }
            (
                split_heads(c, q, qh, "Q")?,
                split_heads(c, k, kvh, "K")?,
                split_heads(c, v, kvh, "V")?,
            )
        }
        [4, 4, 4] => (q, k, v),
        _ => {
            return Err(c.err(format!(
                "Q, K and V must be all 3-D or all 4-D, got ranks {ranks:?}"
            )))
        }
    };
    let (qh, kh, vh) = (Heads::of(c, q4), Heads::of(c, k4), Heads::of(c, v4));
    if ranks[0] == 4 {
        for (attr, heads, name) in [
            (q_heads_attr, qh.heads, "q_num_heads"),
            (kv_heads_attr, kh.heads, "kv_num_heads"),
        ] {
            if attr != 0 && attr != heads as i64 {
                return Err(c.err(format!("{name} is {attr}, the 4-D input has {heads} heads")));
            }
        }
    }
    check_heads(c, &qh, &kh, &vh)?;

    // The key/value cache: past and incoming positions, concatenated.
    let (past_key, past_value) = (c.opt_input(4), c.opt_input(5));
    let nonpad = c.opt_input(6);
    let (keys, values, past) = match (past_key, past_value) {
        (None, None) => (k4, v4, 0),
        (Some(pk), Some(pv)) => {
            if nonpad.is_some() {
                return Err(
                    c.err("nonpad_kv_seqlen cannot be combined with past_key and past_value")
                );
            }
            let (pks, pvs) = (c.ty(pk).shape, c.ty(pv).shape);
            let past = pks.get(2).copied().unwrap_or(0);
            let want_k = [qh.batch, kh.heads, past, kh.size];
            let want_v = [qh.batch, kh.heads, past, vh.size];
            if pks != want_k || pvs != want_v {
                return Err(c.err(format!(
                    "past_key {pks:?} and past_value {pvs:?} do not fit keys {want_k:?} and values {want_v:?}"
                )));
            }
            let cat = Op::Concat(Concat { axis: 2 });
            let keys = c.emit_inner(cat.clone(), &[pk, k4], "present_key")?;
            let values = c.emit_inner(cat, &[pv, v4], "present_value")?;
            (keys, values, past)
        }
        _ => return Err(c.err("past_key and past_value must be given together")),
    };
    let total = kh.seq + past;

    let scale = scale_attr(c, qh.size)?;
    let scores = scaled_scores(c, q4, keys, scale, &qh, kh.heads)?;

    let softcap = c.float("softcap", 0.0)?;
    if !(softcap >= 0.0 && softcap.is_finite()) {
        return Err(c.err(format!(
            "softcap {softcap} is not a non-negative finite number"
        )));
    }
    let capped = if softcap > 0.0 {
        let cap = c.scalar("softcap", dtype, softcap as f64);
        let over = c.binary(BinaryOp::Div, scores, cap, "qk_over_softcap")?;
        let tanh = c.emit_inner(Op::Unary(UnaryOp::Tanh), &[over], "qk_tanh")?;
        c.binary(BinaryOp::Mul, tanh, cap, "qk_softcapped")?
    } else {
        scores
    };

    let frame = Frame {
        batch: qh.batch,
        heads: qh.heads,
        q_seq: qh.seq,
        total,
        past,
        dtype,
    };
    let bias = attention_bias(c, &frame, nonpad)?;
    let biased = match bias {
        Some(b) => c.binary(BinaryOp::Add, capped, b, "qk_biased")?,
        None => capped,
    };

    let precision = softmax_precision(c, dtype)?;
    let logits = c.cast_to(biased, precision, "qk_for_softmax")?;
    let mut probs = c.emit_inner(Op::Softmax(Softmax { axis: 3 }), &[logits], "softmax")?;
    if let Some(bias) = bias {
        probs = zero_fully_masked_rows(c, bias, probs, precision)?;
    }
    let probs = c.cast_to(probs, dtype, "probabilities")?;

    let mut y = weighted_values(c, probs, values, &qh, kh.heads)?;
    if ranks[0] == 3 {
        let perm = SWAP_MIDDLE.to_vec();
        let by_seq = c.emit_inner(Op::Transpose(Transpose { perm }), &[y], "y_by_position")?;
        y = c.reshape_to(by_seq, vec![qh.batch, qh.seq, qh.heads * vh.size], "y")?;
    }

    let wanted = |i: usize| c.node.output.get(i).is_some_and(|o| !o.is_empty());
    let mut outputs = vec![Some(y)];
    if wanted(1) || wanted(2) || wanted(3) {
        // Without a cache the present key and value are K and V by head.
        let (pk, pv) = match past_key {
            None => (
                c.emit_inner(Op::Identity, &[keys], "present_key")?,
                c.emit_inner(Op::Identity, &[values], "present_value")?,
            ),
            Some(_) => (keys, values),
        };
        outputs.extend([Some(pk), Some(pv)]);
    }
    if wanted(3) {
        let qk = match c.int("qk_matmul_output_mode", 0)? {
            0 => scores,
            1 => capped,
            2 => biased,
            3 => probs,
            other => {
                return Err(c.err(format!(
                    "qk_matmul_output_mode {other} is not one of 0 to 3"
                )))
            }
        };
        let qk = c.cast_to(qk, dtype, "qk_matmul_output")?;
        outputs.push(Some(qk));
    }
    Ok(outputs)
}

/// Q, K and V (inputs 0 to 2), checked to be of one float type, and that type.
fn float_qkv(c: &NodeCtx) -> Res<(ValueRef, ValueRef, ValueRef, DType)> {
    let (q, k, v) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let dtype = c.ty(q).dtype;
    if !dtype.is_float() {
        return Err(c.err(format!("Q is {}, expected a float tensor", dtype.name())));
    }
    for (x, name) in [(k, "K"), (v, "V")] {
        if c.ty(x).dtype != dtype {
            return Err(c.err(format!(
                "{name} is {}, Q is {}",
                c.ty(x).dtype.name(),
                dtype.name()
            )));
        }
    }
    Ok((q, k, v, dtype))
}

/// Checks that the heads of Q, K and V fit together: one batch, K and V of
/// the same heads and positions, Q's head size K's, and the query heads in
/// whole groups per key/value head.
fn check_heads(c: &NodeCtx, qh: &Heads, kh: &Heads, vh: &Heads) -> Res<()> {
    if kh.batch != qh.batch || vh.batch != qh.batch {
        return Err(c.err(format!(
            "Q, K and V have batches {}, {} and {}",
            qh.batch, kh.batch, vh.batch
        )));
    }
    if kh.heads != vh.heads || kh.seq != vh.seq {
        return Err(c.err(format!(
            "K has {} heads of {} positions, V {} of {}",
            kh.heads, kh.seq, vh.heads, vh.seq
        )));
    }
    if kh.size != qh.size {
        return Err(c.err(format!(
            "K's head size {} differs from Q's {}",
            kh.size, qh.size
        )));
    }
    if kh.heads == 0 || !qh.heads.is_multiple_of(kh.heads) {
        return Err(c.err(format!(
            "{} query heads do not divide into groups of the {} key/value heads",
            qh.heads, kh.heads
        )));
    }
    Ok(())
}

/// The `scale` attribute, 1/√(head size) where it is not given.
fn scale_attr(c: &NodeCtx, head_size: usize) -> Res<f64> {
    let scale = match c.attr("scale") {
        Some(_) => c.float("scale", 0.0)? as f64,
        None => 1.0 / (head_size as f64).sqrt(),
    };
    if !(scale >= 0.0 && scale.is_finite()) {
        return Err(c.err(format!("scale {scale} is not a non-negative finite number")));
    }
    Ok(scale)
}

/// The type softmax runs in: the `softmax_precision` attribute, or `default`.
fn softmax_precision(c: &NodeCtx, default: DType) -> Res<DType> {
    match c.int("softmax_precision", 0)? {
        0 => Ok(default),
        code @ (1 | 10 | 11 | 16) => {
            dtype_from_onnx(code as i32).map_err(|m| c.err(format!("softmax_precision: {m}")))
        }
        other => Err(c.err(format!(
            "softmax_precision {other} is not one of 1, 10, 11, 16 (float, float16, double, bfloat16)"
        ))),
    }
}

/// The scores Q·Kᵀ·scale, (batch, query heads, queries, keys), with Q and K
/// each scaled by √scale, as the specifications do against overflow. The
/// query heads of a group are stacked along the sequence axis, so that one
/// matrix product serves the group's key head (no keys repeated).
fn scaled_scores(
    c: &mut NodeCtx,
    q: ValueRef,
    keys: ValueRef,
    scale: f64,
    qh: &Heads,
    kv_heads: usize,
) -> Res<ValueRef> {
    let total = c.ty(keys).shape[2];
    let root = c.scalar("sqrt_scale", c.ty(q).dtype, scale.sqrt());
    let q_scaled = c.binary(BinaryOp::Mul, q, root, "q_scaled")?;
    let k_scaled = c.binary(BinaryOp::Mul, keys, root, "k_scaled")?;
    let perm = SWAP_LAST.to_vec();
    let k_t = c.emit_inner(
        Op::Transpose(Transpose { perm }),
        &[k_scaled],
        "k_transposed",
    )?;
    let group = qh.heads / kv_heads;
    let grouped_q = c.reshape_to(
        q_scaled,
        vec![qh.batch, kv_heads, group * qh.seq, qh.size],
        "q_grouped",
    )?;
    let scores = c.emit_inner(Op::MatMul, &[grouped_q, k_t], "qk")?;
    c.reshape_to(
        scores,
        vec![qh.batch, qh.heads, qh.seq, total],
        "qk_by_head",
    )
}

/// The probabilities times the values, (batch, query heads, queries, value
/// size), a group's query heads stacked as in `scaled_scores`.
fn weighted_values(
    c: &mut NodeCtx,
    probs: ValueRef,
    values: ValueRef,
    qh: &Heads,
    kv_heads: usize,
) -> Res<ValueRef> {
    let vs = c.ty(values).shape;
    let (total, v_size) = (vs[2], vs[3]);
    let group = qh.heads / kv_heads;
    let grouped_p = c.reshape_to(
        probs,
        vec![qh.batch, kv_heads, group * qh.seq, total],
        "p_grouped",
    )?;
    let y = c.emit_inner(Op::MatMul, &[grouped_p, values], "pv")?;
    c.reshape_to(y, vec![qh.batch, qh.heads, qh.seq, v_size], "y_by_head")
}

/// FlexAttention (ai.onnx.preview): attention over 4-D heads whose scores and
/// probabilities pass through the graphs `score_mod` and `prob_mod` (masks,
/// biases, soft caps written as ops), each inlined here with its one input
/// bound to the scores or probabilities. Softmax, the mods and the product
/// with V run in `softmax_precision`, by default float32 for 16-bit inputs
/// and the input type otherwise; grouped-query heads as Attention's.
fn flex_attention(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (q, k, v, dtype) = float_qkv(c)?;
    let ranks = [q, k, v].map(|x| c.ty(x).shape.len());
    if ranks != [4, 4, 4] {
        return Err(c.err(format!(
            "Q, K and V must be 4-D (batch, heads, sequence, size), got ranks {ranks:?}"
        )));
    }
    let (qh, kh, vh) = (Heads::of(c, q), Heads::of(c, k), Heads::of(c, v));
    check_heads(c, &qh, &kh, &vh)?;
    let scale = scale_attr(c, qh.size)?;
    let scores = scaled_scores(c, q, k, scale, &qh, kh.heads)?;
    let wide = match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    let precision = softmax_precision(c, wide)?;
    let scores = c.cast_to(scores, precision, "qk_for_softmax")?;
    let scores = modded(c, "score_mod", scores)?;
    let probs = c.emit_inner(Op::Softmax(Softmax { axis: 3 }), &[scores], "softmax")?;
    let probs = modded(c, "prob_mod", probs)?;
    let values = c.cast_to(v, precision, "v_for_softmax")?;
    let y = weighted_values(c, probs, values, &qh, kh.heads)?;
    Ok(vec![Some(c.cast_to(y, dtype, "y")?)])
}

/// Graph attribute `name` (one input, one output of the input's shape)
/// applied to `x`: the graph inlined, its layers named `<layer>/<name>/...`,
/// its result cast to `x`'s type. `x` itself where the node has no `name`.
fn modded(c: &mut NodeCtx, name: &str, x: ValueRef) -> Res<ValueRef> {
    if c.attr(name).is_none() {
        return Ok(x);
    }
    let graph = graph_attr(c, name)?;
    if graph.input.len() != 1 || graph.output.len() != 1 {
        return Err(c.err(format!(
            "{name} has {} inputs and {} outputs, expected one of each",
            graph.input.len(),
            graph.output.len()
        )));
    }
    let env = c.env.nested(c.span)?;
    let mut scope = c.scope.clone();
    scope.insert(graph.input[0].name.clone(), x);
    let prefix = format!("{}/{name}", c.layer());
    let out = env.inline_subgraph(graph, &prefix, c.g, &scope)?[0];
    let (want, got) = (c.ty(x), c.ty(out));
    if got.shape != want.shape {
        return Err(c.err(format!(
            "{name} turns {want} into {got}; it must keep the shape"
        )));
    }
    c.cast_to(out, want.dtype, &format!("{name}_out"))
}

/// The extents the attention bias broadcasts to, and what positions mean.
struct Frame {
    batch: usize,
    heads: usize,
    q_seq: usize,
    /// Keys: past and incoming.
    total: usize,
    /// Keys before the first query (the past of the cache).
    past: usize,
    dtype: DType,
}

/// The additive bias of the scores (broadcasting to (batch, heads, queries,
/// keys)), or `None` when nothing is masked: the float mask, or 0, where every
/// rule allows a key, −inf where one does not.
fn attention_bias(c: &mut NodeCtx, f: &Frame, nonpad: Option<ValueRef>) -> Res<Option<ValueRef>> {
    let mask = match c.opt_input(3) {
        Some(m) => Some(mask_bias(c, f, m)?),
        None => None,
    };
    let nonpad = match nonpad {
        Some(n) => Some(nonpad_lengths(c, f, n)?),
        None => None,
    };
    let causal = c.bool_attr("is_causal", false)?;
    let window = |name: &str| -> Res<Option<i64>> {
        match c.int(name, -1)? {
            -1 => Ok(None),
            w if w >= 0 => Ok(Some(w)),
            w => Err(c.err(format!("{name} {w} is neither -1 nor non-negative"))),
        }
    };
    let (left, right) = (window("left_window_size")?, window("right_window_size")?);
    // Key j is allowed to query i when lo <= i + offset - j <= hi.
    let lo = match causal {
        // Causality's 0 is tighter than any right window's -right.
        true => Some(0),
        false => right.map(|r| -r),
    };
    let hi = left;
    let mut allowed = positions_allowed(c, f, nonpad, lo, hi)?;
    if let Some(lengths) = nonpad {
        // Keys past a sample's length are padding.
        let keys = Tensor::from_i64(vec![f.total], (0..f.total as i64).collect());
        let keys = c.inner_constant("key_positions", keys);
        let lengths = c.reshape_to(lengths, vec![f.batch, 1], "nonpad_by_batch")?;
        let inside = c.binary(BinaryOp::Less, keys, lengths, "not_padding")?;
        let inside = c.reshape_to(inside, vec![f.batch, 1, 1, f.total], "not_padding_4d")?;
        allowed = Some(match allowed {
            Some(a) => c.emit_inner(Op::Logical(Logical::And), &[a, inside], "allowed")?,
            None => inside,
        });
    }
    let neg_inf = c.scalar("bias_neg_inf", f.dtype, f64::NEG_INFINITY);
    Ok(match (allowed, mask) {
        (Some(a), Some(m)) => Some(c.emit_inner(Op::Where, &[a, m, neg_inf], "bias")?),
        (Some(a), None) => {
            let zero = c.scalar("bias_zero", f.dtype, 0.0);
            Some(c.emit_inner(Op::Where, &[a, zero, neg_inf], "bias")?)
        }
        (None, m) => m,
    })
}

/// `attn_mask` as an additive bias over all keys: a float mask as it is, a
/// boolean one 0 where true and −inf where false; keys past a shorter mask's
/// end get −inf.
fn mask_bias(c: &mut NodeCtx, f: &Frame, m: ValueRef) -> Res<ValueRef> {
    let ty = c.ty(m);
    let s = ty.shape.clone();
    let full = [f.batch, f.heads, f.q_seq, f.total];
    let fits = !s.is_empty()
        && s.len() <= 4
        && s[s.len() - 1] <= f.total
        && s[..s.len() - 1]
            .iter()
            .rev()
            .zip(full[..3].iter().rev())
            .all(|(&d, &want)| d == 1 || d == want);
    if !fits {
        return Err(c.err(format!(
            "attn_mask of shape {s:?} does not broadcast to (batch, q_num_heads, q_sequence_length, total_sequence_length) = {full:?} (its last axis may be shorter)"
        )));
    }
    let neg_inf = c.scalar("mask_neg_inf", f.dtype, f64::NEG_INFINITY);
    let bias = match ty.dtype {
        DType::Bool => {
            let zero = c.scalar("mask_zero", f.dtype, 0.0);
            c.emit_inner(Op::Where, &[m, zero, neg_inf], "mask_bias")?
        }
        d if d == f.dtype => m,
        d => {
            return Err(c.err(format!(
                "attn_mask is {}, expected bool or Q's {}",
                d.name(),
                f.dtype.name()
            )))
        }
    };
    let short = f.total - s[s.len() - 1];
    if short == 0 {
        return Ok(bias);
    }
    let mut rest = s.clone();
    *rest.last_mut().expect("a non-empty shape") = short;
    c.check_size(f.dtype, &rest)?;
    let n = rest.iter().product();
    let fill = Tensor::new(
        rest,
        TensorData::from_f64(f.dtype, vec![f64::NEG_INFINITY; n]),
    );
    let fill = c.inner_constant("mask_fill", fill);
    let axis = s.len() - 1;
    c.emit_inner(Op::Concat(Concat { axis }), &[bias, fill], "mask_padded")
}

/// `nonpad_kv_seqlen` (opset 24), checked: one int64 length per sample.
fn nonpad_lengths(c: &mut NodeCtx, f: &Frame, n: ValueRef) -> Res<ValueRef> {
    if c.opset < 24 {
        return Err(c.err("nonpad_kv_seqlen is an input of Attention from opset 24"));
    }
    let ty = c.ty(n);
    if ty.shape != [f.batch] || !matches!(ty.dtype, DType::I64 | DType::I32) {
        return Err(c.err(format!(
            "nonpad_kv_seqlen is {} of shape {:?}, expected int64 of shape [{}]",
            ty.dtype.name(),
            ty.shape,
            f.batch
        )));
    }
    c.cast_to(n, DType::I64, "nonpad_i64")
}

/// Where causality and the sliding window allow key j to query i: `lo <= i +
/// offset - j <= hi` for each bound given. The offset is the past of the cache,
/// or per sample `nonpad_kv_seqlen - q_sequence_length`. `None` when neither
/// bound is given.
fn positions_allowed(
    c: &mut NodeCtx,
    f: &Frame,
    nonpad: Option<ValueRef>,
    lo: Option<i64>,
    hi: Option<i64>,
) -> Res<Option<ValueRef>> {
    if lo.is_none() && hi.is_none() {
        return Ok(None);
    }
    let (q, t) = (f.q_seq as i64, f.total as i64);
    let within = |d: i64| lo.is_none_or(|lo| d >= lo) && hi.is_none_or(|hi| d <= hi);
    let Some(lengths) = nonpad else {
        let past = f.past as i64;
        let allowed = (0..q)
            .flat_map(|i| (0..t).map(move |j| within(i + past - j)))
            .collect();
        let t = Tensor::new(vec![f.q_seq, f.total], TensorData::Bool(allowed));
        return Ok(Some(c.inner_constant("positions_allowed", t)));
    };
    // Per sample: (i - q_sequence_length - j) + nonpad_kv_seqlen[b].
    let rel = (0..q)
        .flat_map(|i| (0..t).map(move |j| i - q - j))
        .collect();
    let rel = c.inner_constant(
        "relative_positions",
        Tensor::from_i64(vec![f.q_seq, f.total], rel),
    );
    let lengths = c.reshape_to(lengths, vec![f.batch, 1, 1], "nonpad_by_sample")?;
    let d = c.binary(BinaryOp::Add, rel, lengths, "offset_positions")?;
    let mut allowed = None;
    for (bound, op, what) in [
        (lo, BinaryOp::GreaterOrEqual, "after_lower_bound"),
        (hi, BinaryOp::LessOrEqual, "before_upper_bound"),
    ] {
        let Some(bound) = bound else { continue };
        let b = c.inner_constant(what, Tensor::from_i64(vec![], vec![bound]));
        let ok = c.binary(op, d, b, &format!("{what}_ok"))?;
        allowed = Some(match allowed {
            Some(a) => c.emit_inner(Op::Logical(Logical::And), &[a, ok], "within_window")?,
            None => ok,
        });
    }
    let allowed = allowed.expect("a bound is given");
    Ok(Some(c.reshape_to(
        allowed,
        vec![f.batch, 1, f.q_seq, f.total],
        "positions_allowed",
    )?))
}

/// `probs` with zeros in the query rows whose bias masks every key (their
/// softmax is NaN). Nothing when the bias is a constant that masks no row.
fn zero_fully_masked_rows(
    c: &mut NodeCtx,
    bias: ValueRef,
    probs: ValueRef,
    dtype: DType,
) -> Res<ValueRef> {
    let rank = c.ty(bias).shape.len();
    let row_max = Op::Reduce(Reduce {
        kind: ReduceKind::Max,
        axes: vec![rank - 1],
        keepdims: true,
    });
    let row_max = c.emit_inner(row_max, &[bias], "bias_row_max")?;
    let neg_inf = c.scalar("guard_neg_inf", c.ty(bias).dtype, f64::NEG_INFINITY);
    let masked = c.binary(BinaryOp::Equal, row_max, neg_inf, "row_fully_masked")?;
    if let Some(t) = c.g.constant(masked) {
        if !t.data.to_bool().contains(&true) {
            return Ok(probs);
        }
    }
    let zero = c.scalar("guard_zero", dtype, 0.0);
    c.emit_inner(Op::Where, &[masked, zero, probs], "softmax_guarded")
}

/// Tokens a LinearAttention is unrolled over at most: each token is a handful
/// of nodes, so a sequence longer than this is refused by name rather than
/// made into a graph too large to plan.
const MAX_LINEAR_ATTENTION_TOKENS: usize = 4096;

/// LinearAttention (opset 27): the recurrence of linear-attention decoders
/// (RetNet, GLA, DeltaNet, Gated DeltaNet) over a state S of (batch,
/// kv_num_heads, d_k, d_v), token by token as its specification writes it,
/// unrolled over the sequence (static once shapes are bound) into matrix
/// products and elementwise ops, as the recurrent layers are. Per token t:
/// S ← exp(g_t)·S under the gated rules; v_t ← β_t·(v_t − Sᵀk_t) under the
/// delta rules; S ← S + k_t ⊗ v_t; o_t = scale · q_tᵀS, the query heads of a
/// key/value head's group stacked as the rows of one product (as Attention
/// does). Computed in float32 whatever the inputs' type, as the reference
/// does: the output in the query's type, the present state in the past
/// state's (else the query's). `chunk_size` is a tuning hint and is ignored.
fn linear_attention(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (q, k, v) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let (past, decay, beta) = (c.opt_input(3), c.opt_input(4), c.opt_input(5));
    let rule = c.string("update_rule", "gated_delta")?;
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(c.err(format!(
                "update_rule '{other}' is not one of 'linear', 'gated', 'delta', 'gated_delta'"
            )))
        }
    };
    for (given, wanted, name) in [(decay, gated, "decay"), (beta, delta, "beta")] {
        match (given.is_some(), wanted) {
            (false, true) => return Err(c.err(format!("update_rule '{rule}' needs {name}"))),
            (true, false) => return Err(c.err(format!("update_rule '{rule}' takes no {name}"))),
            _ => {}
        }
    }
    let heads = |name: &str| -> Res<usize> {
        let n = c.int(name, 0)?;
        usize::try_from(n)
            .ok()
            .filter(|&h| h > 0)
            .ok_or_else(|| c.err(format!("{name} must be positive, got {n}")))
    };
    let (hq, hkv) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    if !hq.is_multiple_of(hkv) {
        return Err(c.err(format!(
            "{hq} query heads do not divide into groups of the {hkv} key/value heads"
        )));
    }
    let dtype = c.ty(q).dtype;
    let mut packed = vec![];
    for (x, name, heads) in [(q, "query", hq), (k, "key", hkv), (v, "value", hkv)] {
        let ty = c.ty(x);
        if !ty.dtype.is_float() {
            return Err(c.err(format!("{name} is {}, expected floats", ty.dtype.name())));
        }
        let &[batch, tokens, hidden] = &ty.shape[..] else {
            return Err(c.err(format!(
                "{name} must be (batch, tokens, heads · size), got shape {:?}",
                ty.shape
            )));
        };
        if !hidden.is_multiple_of(heads) {
            return Err(c.err(format!(
                "{name}'s hidden size {hidden} does not divide into {heads} heads"
            )));
        }
        packed.push((batch, tokens, hidden / heads));
    }
    let [(b, t, dk), (kb, kt, kdk), (vb, vt, dv)] = packed[..] else {
        unreachable!("three inputs")
    };
    if (kb, kt, kdk) != (b, t, dk) || (vb, vt) != (b, t) {
        return Err(c.err(format!(
            "query has batch {b}, {t} tokens and heads of {dk}; key {kb}, {kt} and {kdk}; value batch {vb} and {vt} tokens"
        )));
    }
    if !(1..=MAX_LINEAR_ATTENTION_TOKENS).contains(&t) {
        return Err(c.err(format!(
            "{t} tokens: LinearAttention is unrolled token by token at import, for 1 to {MAX_LINEAR_ATTENTION_TOKENS} tokens"
        )));
    }
    // The per-token shape of decay and beta, by their last extent.
    let per_token = |x: ValueRef, name: &str, forms: [(usize, [usize; 4]); 2]| -> Res<[usize; 4]> {
        let s = c.ty(x).shape;
        match &s[..] {
            &[xb, xt, last] if (xb, xt) == (b, t) => forms
                .into_iter()
                .find(|&(n, _)| n == last)
                .map(|(_, shape)| shape)
                .ok_or_else(|| {
                    let allowed = forms.map(|(n, _)| n.to_string()).join(" or ");
                    c.err(format!(
                        "{name}'s last extent is {last}, expected {allowed}"
                    ))
                }),
            _ => Err(c.err(format!("{name} must be ({b}, {t}, ...), got shape {s:?}"))),
        }
    };
    let decay_shape = decay
        .map(|g| {
            per_token(
                g,
                "decay",
                [(hkv, [b, hkv, 1, 1]), (hkv * dk, [b, hkv, dk, 1])],
            )
        })
        .transpose()?;
    let beta_shape = beta
        .map(|x| per_token(x, "beta", [(hkv, [b, hkv, 1, 1]), (1, [b, 1, 1, 1])]))
        .transpose()?;
    let state_shape = vec![b, hkv, dk, dv];
    let state_dtype = match past {
        Some(p) if c.ty(p).shape != state_shape => {
            return Err(c.err(format!(
                "past_state must have shape {state_shape:?}, got {:?}",
                c.ty(p).shape
            )))
        }
        Some(p) => c.ty(p).dtype,
        None => dtype,
    };
    let scale = match c.float("scale", 0.0)? {
        0.0 => 1.0 / (dk as f64).sqrt(),
        s if s.is_finite() => s as f64,
        s => return Err(c.err(format!("scale {s} is not finite"))),
    };

    let q = c.cast_to(q, DType::F32, "query_f32")?;
    let k = c.cast_to(k, DType::F32, "key_f32")?;
    let v = c.cast_to(v, DType::F32, "value_f32")?;
    let decay = (decay.map(|g| c.cast_to(g, DType::F32, "decay_f32"))).transpose()?;
    let beta = (beta.map(|x| c.cast_to(x, DType::F32, "beta_f32"))).transpose()?;
    let mut state = match past {
        Some(p) => c.cast_to(p, DType::F32, "past_state_f32")?,
        None => {
            c.check_size(DType::F32, &state_shape)?;
            let zeros = vec![0f32; state_shape.iter().product()];
            c.inner_constant("state_0", Tensor::from_f32(state_shape, zeros))
        }
    };
    let group = hq / hkv;
    let mut outputs = Vec::with_capacity(t);
    for i in 0..t {
        // Token i of a (batch, tokens, n) input, as `shape`.
        let token = |c: &mut NodeCtx, x: ValueRef, shape: [usize; 4], what: &str| {
            let slice = Op::Slice(Slice {
                axes: vec![SliceAxis {
                    axis: 1,
                    start: i as i64,
                    end: i as i64 + 1,
                    step: 1,
                }],
            });
            let one = c.emit_inner(slice, &[x], &format!("{what}_{i}"))?;
            c.reshape_to(one, shape.to_vec(), &format!("{what}_{i}_heads"))
        };
        let k_row = token(c, k, [b, hkv, 1, dk], "key")?;
        let k_col = c.reshape_to(k_row, vec![b, hkv, dk, 1], &format!("key_{i}_column"))?;
        let mut v_t = token(c, v, [b, hkv, 1, dv], "value")?;
        if let (Some(g), Some(shape)) = (decay, decay_shape) {
            let g_t = token(c, g, shape, "decay")?;
            let factor =
                c.emit_inner(Op::Unary(UnaryOp::Exp), &[g_t], &format!("decay_{i}_exp"))?;
            state = c.binary(BinaryOp::Mul, state, factor, &format!("state_{i}_decayed"))?;
        }
        if let (Some(x), Some(shape)) = (beta, beta_shape) {
            let retrieved = c.emit_inner(Op::MatMul, &[k_row, state], &format!("retrieved_{i}"))?;
            let error = c.binary(BinaryOp::Sub, v_t, retrieved, &format!("error_{i}"))?;
            let beta_t = token(c, x, shape, "beta")?;
            v_t = c.binary(BinaryOp::Mul, beta_t, error, &format!("update_{i}"))?;
        }
        let written = c.emit_inner(Op::MatMul, &[k_col, v_t], &format!("written_{i}"))?;
        state = c.binary(BinaryOp::Add, state, written, &format!("state_{i}"))?;
        let q_t = token(c, q, [b, hkv, group, dk], "query")?;
        let read = c.emit_inner(Op::MatMul, &[q_t, state], &format!("read_{i}"))?;
        outputs.push(c.reshape_to(read, vec![b, 1, hq * dv], &format!("read_{i}_packed"))?);
    }
    let joined = match &outputs[..] {
        [one] => *one,
        all => c.emit_inner(Op::Concat(Concat { axis: 1 }), all, "reads")?,
    };
    let factor = c.scalar("scale", DType::F32, scale);
    let y = c.binary(BinaryOp::Mul, joined, factor, "scaled")?;
    let y = c.cast_to(y, dtype, "output")?;
    let present = c.cast_to(state, state_dtype, "present_state")?;
    Ok(vec![Some(y), Some(present)])
}

/// RMSNormalization (opset 23): `x / sqrt(mean(x²) + epsilon) · scale`, the
/// mean over the axes from `axis` on; float16 and bfloat16 computed in float
/// (`stash_type` 1, the only one defined). One op (a LayerNorm that does not
/// subtract the mean), unless the scale varies along an axis before `axis`:
/// then the ops it is defined by.
fn rms_norm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, scale) = (c.input(0)?, c.input(1)?);
    let ty = c.ty(x);
    if !ty.dtype.is_float() {
        return Err(c.err(format!("X is {}, expected a float tensor", ty.dtype.name())));
    }
    let scale_ty = c.ty(scale);
    if scale_ty.dtype != ty.dtype {
        return Err(c.err(format!(
            "scale is {}, X is {}",
            scale_ty.dtype.name(),
            ty.dtype.name()
        )));
    }
    if broadcast_shapes(&ty.shape, &scale_ty.shape).ok().as_deref() != Some(&ty.shape[..]) {
        return Err(c.err(format!(
            "scale of shape {:?} does not broadcast to X's {:?}",
            scale_ty.shape, ty.shape
        )));
    }
    let rank = ty.shape.len();
    let axis = c.axis(c.int("axis", -1)?, rank)?;
    let epsilon = c.float("epsilon", 1e-5)?;
    match c.int("stash_type", 1)? {
        1 => {}
        other => {
            return Err(c.err(format!(
                "stash_type {other} is not supported (only 1: compute in float)"
            )))
        }
    }
    let compute = match ty.dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    let xc = c.cast_to(x, compute, "x_float")?;
    let scale = c.cast_to(scale, compute, "scale_float")?;
    // The scale's axes before `axis` (when it has them) must all be 1.
    let norm_rank = rank - axis;
    let lead = scale_ty.shape.len().saturating_sub(norm_rank);
    let y = if scale_ty.shape[..lead].iter().all(|&d| d == 1) {
        let per_element = scale_ty.shape[lead..].to_vec();
        let scale = c.reshape_to(scale, per_element, "scale_per_element")?;
        let norm = Op::LayerNorm(LayerNorm {
            axis,
            epsilon,
            centered: false,
        });
        c.emit_inner(norm, &[xc, scale], "normalized")?
    } else {
        let squared = c.binary(BinaryOp::Mul, xc, xc, "squared")?;
        let mean = Op::Reduce(Reduce {
            kind: ReduceKind::Mean,
            axes: (axis..rank).collect(),
            keepdims: true,
        });
        let mean = c.emit_inner(mean, &[squared], "mean_square")?;
        let eps = c.scalar("epsilon", compute, epsilon as f64);
        let mean_eps = c.binary(BinaryOp::Add, mean, eps, "mean_square_eps")?;
        let rms = c.emit_inner(Op::Unary(UnaryOp::Sqrt), &[mean_eps], "rms")?;
        let inv = c.emit_inner(Op::Unary(UnaryOp::Reciprocal), &[rms], "inv_rms")?;
        let normalized = c.binary(BinaryOp::Mul, xc, inv, "normalized")?;
        c.binary(BinaryOp::Mul, normalized, scale, "scaled")?
    };
    Ok(vec![Some(c.cast_to(y, ty.dtype, "y")?)])
}

/// RotaryEmbedding (opset 23): the first `rotary_embedding_dim` features of
/// each head rotated pairwise by the angles of its position (halves paired,
/// or neighbours when `interleaved`), the rest passed on. The input is
/// (batch, heads, sequence, size), or (batch, sequence, heads · size) with
/// `num_heads`; the caches are indexed by `position_ids`, or already per
/// (batch, sequence).
fn rotary_embedding(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, cos, sin) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let ty = c.ty(x);
    if !ty.dtype.is_float() {
        return Err(c.err(format!(
            "input is {}, expected a float tensor",
            ty.dtype.name()
        )));
    }
    let s = ty.shape.clone();
    let num_heads = c.int("num_heads", 0)?;
    // The input as 4-D, and the axis of the caches' (batch, sequence) to
    // broadcast over heads.
    let (x4, batch, seq, size, heads_axis) = match s[..] {
        [b, h, n, d] => {
            if num_heads != 0 && num_heads != h as i64 {
                return Err(c.err(format!(
                    "num_heads is {num_heads}, the 4-D input has {h} heads"
                )));
            }
            (x, b, n, d, 1)
        }
        [b, n, hidden] => {
            let heads = usize::try_from(num_heads)
                .ok()
                .filter(|&h| h > 0 && hidden.is_multiple_of(h))
                .ok_or_else(|| {
                    c.err(format!(
                        "a 3-D input needs num_heads dividing its hidden size {hidden}, got {num_heads}"
                    ))
                })?;
            let x4 = c.reshape_to(x, vec![b, n, heads, hidden / heads], "by_head")?;
            (x4, b, n, hidden / heads, 2)
        }
        _ => return Err(c.err(format!("input of shape {s:?} is neither 3-D nor 4-D"))),
    };
    let rotated = match c.int("rotary_embedding_dim", 0)? {
        0 => size,
        r => usize::try_from(r).unwrap_or(usize::MAX),
    };
    if rotated > size || !rotated.is_multiple_of(2) || rotated == 0 {
        return Err(c.err(format!(
            "rotary_embedding_dim {rotated} must be even, positive and at most the head size {size}"
        )));
    }
    let half = rotated / 2;
    let interleaved = c.bool_attr("interleaved", false)?;

    // cos and sin per (batch, sequence, half), shaped to broadcast over heads
    // (and over the pair axis when interleaved).
    let mut cache_shape = match heads_axis {
        1 => vec![batch, 1, seq, half],
        _ => vec![batch, seq, 1, half],
    };
    if interleaved {
        cache_shape.push(1);
    }
    let position_ids = c.opt_input(3);
    let mut caches = Vec::with_capacity(2);
    for (cache, name) in [(cos, "cos_cache"), (sin, "sin_cache")] {
        let ct = c.ty(cache);
        let want: Vec<usize> = match position_ids {
            Some(_) => vec![ct.shape.first().copied().unwrap_or(0), half],
            None => vec![batch, seq, half],
        };
        if ct.dtype != ty.dtype || ct.shape != want {
            return Err(c.err(format!(
                "{name} is {} of shape {:?}, expected {} of shape {want:?}",
                ct.dtype.name(),
                ct.shape,
                ty.dtype.name()
            )));
        }
        let per_position = match position_ids {
            Some(ids) => {
                let it = c.ty(ids);
                if it.shape != [batch, seq] || !matches!(it.dtype, DType::I64 | DType::I32) {
                    return Err(c.err(format!(
                        "position_ids is {} of shape {:?}, expected int64 of shape [{batch}, {seq}]",
                        it.dtype.name(),
                        it.shape
                    )));
                }
                c.emit_inner(
                    Op::Gather(Gather { axis: 0 }),
                    &[cache, ids],
                    &format!("{name}_at"),
                )?
            }
            None => cache,
        };
        caches.push(c.reshape_to(
            per_position,
            cache_shape.clone(),
            &format!("{name}_by_head"),
        )?);
    }
    let (cos, sin) = (caches[0], caches[1]);

    let x_rot = match rotated < size {
        true => c.last_axis_range(x4, 0, rotated, "rotated_part")?,
        false => x4,
    };
    let rot_shape = c.ty(x_rot).shape;
    let (x1, x2) = if interleaved {
        let mut pairs = rot_shape.clone();
        *pairs.last_mut().expect("4-D") = half;
        pairs.push(2);
        let pairs = c.reshape_to(x_rot, pairs, "pairs")?;
        (
            c.last_axis_range(pairs, 0, 1, "x1")?,
            c.last_axis_range(pairs, 1, 2, "x2")?,
        )
    } else {
        (
            c.last_axis_range(x_rot, 0, half, "x1")?,
            c.last_axis_range(x_rot, half, rotated, "x2")?,
        )
    };
    let cos_x1 = c.binary(BinaryOp::Mul, cos, x1, "cos_x1")?;
    let sin_x2 = c.binary(BinaryOp::Mul, sin, x2, "sin_x2")?;
    let real = c.binary(BinaryOp::Sub, cos_x1, sin_x2, "real")?;
    let sin_x1 = c.binary(BinaryOp::Mul, sin, x1, "sin_x1")?;
    let cos_x2 = c.binary(BinaryOp::Mul, cos, x2, "cos_x2")?;
    let imag = c.binary(BinaryOp::Add, sin_x1, cos_x2, "imag")?;
    let last = c.ty(real).shape.len() - 1;
    let joined = c.emit_inner(Op::Concat(Concat { axis: last }), &[real, imag], "joined")?;
    let mut y = c.reshape_to(joined, rot_shape, "rotated")?;
    if rotated < size {
        let pass = c.last_axis_range(x4, rotated, size, "passed_part")?;
        y = c.emit_inner(Op::Concat(Concat { axis: 3 }), &[y, pass], "with_passed")?;
    }
    Ok(vec![Some(c.reshape_to(y, s, "y")?)])
}
