//! Constant folding: a node whose inputs are all constants becomes constants;
//! strength reduction where a constant operand allows it (x^2 is x·x); and a
//! float cast to an integer type and back, where the values are integers that
//! type holds (a quantization round trip), is the float itself.
//! A fold whose result would pass the memory budget's fold limit (64 MiB per
//! value, `core::budget::fold_limit`) is not made: the node stays in the graph
//! and computes its value when the model runs.
//!
//! The importer folds each node as it is added, which is what turns the
//! shape-computation subgraphs exporters emit (Shape → Gather → Unsqueeze → Concat
//! → Reshape) into static attributes; `fold_constants` applies the same step to a
//! whole graph after a pass has produced new constant-only nodes.

use super::{
    checked_size_bytes, BinaryOp, DType, GlobalPool, Graph, GraphError, NodeId, Op, Pad, PadMode,
    Pool, PoolKind, Tensor, UnaryOp, ValueRef, ValueType,
};
use crate::core::budget;
use crate::ops::eval_op;

/// Folds `id` if every input is a constant. Returns the constants that replace
/// its outputs, or `None` when the node is not foldable.
pub fn fold_node(g: &mut Graph, id: NodeId) -> Result<Option<Vec<ValueRef>>, GraphError> {
    if matches!(g.node(id).op, Op::Input | Op::Constant(_)) {
        return Ok(None);
    }
    if let Some(product) = power_as_products(g, id)? {
        return Ok(Some(product));
    }
    if let Some(x) = integer_round_trip(g, id) {
        g.replace_uses(ValueRef::new(id, 0), x);
        g.remove_node(id);
        return Ok(Some(vec![x]));
    }
    if let Some(cast) = cast_sunk_below(g, id)? {
        return Ok(Some(vec![cast]));
    }
    if let Some(grid) = onto_quantization_grid(g, id)? {
        return Ok(Some(vec![grid]));
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

/// Pow(x, 2) and Pow(x, 3) with a constant exponent, as the products x·x and
/// (x·x)·x, without a call to pow. The square is the same correctly rounded
/// value; the cube rounds twice, as onnxruntime's Pow kernel computes it (the
/// tanh form of GELU that converters write cubes its input). The Mul that
/// replaces the node.
fn power_as_products(g: &mut Graph, id: NodeId) -> Result<Option<Vec<ValueRef>>, GraphError> {
    let node = g.node(id);
    let ins = g.node_inputs(id);
    let (Op::Binary(BinaryOp::Pow), [x, e]) = (&node.op, &ins[..]) else {
        return Ok(None);
    };
    let exponent = g
        .constant(*e)
        .filter(|t| t.numel() == 1 && t.dtype().is_float())
        .map(|t| t.data.to_f64()[0]);
    let cube = match exponent {
        Some(2.0) => false,
        Some(3.0) => true,
        _ => return Ok(None),
    };
    if !g.value_type(*x).dtype.is_float() || g.value_type(*x) != &node.outputs[0].ty {
        return Ok(None);
    }
    let (name, spans, x) = (node.name.clone(), node.spans.clone(), *x);
    let out_names = vec![node.outputs[0].name.clone()];
    let mul = Op::Binary(BinaryOp::Mul);
    let product = match cube {
        false => g.add_node(mul, &name, &[x, x], &out_names, spans)?,
        true => {
            let square_name = format!("{name}_square");
            let square = g.add_node(mul.clone(), &square_name, &[x, x], &[], spans.clone())?;
            g.add_node(
                mul,
                &name,
                &[ValueRef::new(square, 0), x],
                &out_names,
                spans,
            )?
        }
    };
    let product = ValueRef::new(product, 0);
    g.replace_uses(ValueRef::new(id, 0), product);
    g.remove_node(id);
    Ok(Some(vec![product]))
}

/// The float `x` when node `id` casts back to its type a cast of it to an
/// integer type that holds every value `x` can have, each an integer: the two
/// casts then change nothing.
fn integer_round_trip(g: &Graph, id: NodeId) -> Option<ValueRef> {
    let Op::Cast(back) = &g.node(id).op else {
        return None;
    };
    let narrowed = g.node_inputs(id)[0];
    let Op::Cast(to_int) = &g.node(narrowed.node).op else {
        return None;
    };
    let x = g.node_inputs(narrowed.node)[0];
    let (lo, hi) = to_int.to.integer_range()?;
    let (x_lo, x_hi) = integer_values(g, x)?;
    (g.value_type(x).dtype == back.to && lo <= x_lo && x_hi <= hi).then_some(x)
}

/// The chain a quantization and its dequantization leave once their casts
/// fold away, `(clip(round(x / s) + z, min, max) - z) * s` with scalar `s`
/// and `z` (`z` absent: 0) and the clip a quantized type's range, as the one
/// op it is: the elementwise kernels and the convolutions' epilogues then run
/// it in one pass. The op replacing node `id` (the product), if it ends one.
fn onto_quantization_grid(g: &mut Graph, id: NodeId) -> Result<Option<ValueRef>, GraphError> {
    let scalar = |g: &Graph, v| scalar_constant(g, v).map(f64::from);
    // The node producing `v` when it is `op` of one use, and its inputs. A
    // consumer whose result nobody reads (the quantization's cast, once the
    // round trip folded) does not count; the product being added does.
    let producer = |g: &Graph, v: ValueRef, op: &dyn Fn(&Op) -> bool| {
        let node = g.node(v.node);
        let read = |(n, _): &(NodeId, usize)| {
            let outs = g.node(*n).outputs.len();
            *n == id
                || (0..outs).any(|k| {
                    let out = ValueRef::new(*n, k);
                    g.is_graph_output(out) || !g.consumers(out).is_empty()
                })
        };
        let uses = g.consumers(v).iter().filter(|c| read(c)).count();
        (op(&node.op) && uses == 1).then(|| g.node_inputs(v.node))
    };
    let is = |want: Op| move |op: &Op| *op == want;
    let binary = |b| is(Op::Binary(b));
    if g.node(id).op != Op::Binary(BinaryOp::Mul) {
        return Ok(None);
    }
    let [centered, s] = g.node_inputs(id)[..] else {
        return Ok(None);
    };
    let Some(scale) = scalar(g, s) else {
        return Ok(None);
    };
    // With a zero point: a Sub of it after the clip and an Add before.
    let (clipped, zero_point) = match producer(g, centered, &binary(BinaryOp::Sub)) {
        Some(ins) => match scalar(g, ins[1]) {
            Some(z) => (ins[0], Some(z)),
            None => return Ok(None),
        },
        None => (centered, None),
    };
    // Value-selecting ops between the clip and the dequantization (a max pool
    // of the quantized integers) commute with the affine dequantization when
    // its scale is positive: the grid goes below them and they select from
    // it. So does a constant pad, its value dequantized.
    let mut selections = Vec::new();
    let mut clipped = clipped;
    let selects_or_pads = |op: &Op| selects_values(op) || padding_value(op).is_some();
    while let Some(ins) = producer(g, clipped, &selects_or_pads) {
        if scale <= 0.0 || g.node(clipped.node).outputs.len() != 1 {
            return Ok(None);
        }
        selections.push(clipped.node);
        clipped = ins[0];
    }
    let Some(ins) = producer(g, clipped, &|op| {
        matches!(op, Op::Unary(UnaryOp::Clip { .. }))
    }) else {
        return Ok(None);
    };
    let Op::Unary(UnaryOp::Clip { min, max }) = g.node(clipped.node).op else {
        return Ok(None);
    };
    if DType::quantized_with_range(f64::from(min), f64::from(max)).is_none() {
        return Ok(None);
    }
    let on_range = |v: f32| v.fract() == 0.0 && (min..=max).contains(&v);
    if selections
        .iter()
        .any(|&n| padding_value(&g.node(n).op).is_some_and(|v| !on_range(v)))
    {
        return Ok(None);
    }
    let mut rounded = ins[0];
    if let Some(z) = zero_point {
        match producer(g, rounded, &binary(BinaryOp::Add)) {
            Some(ins) if scalar(g, ins[1]) == Some(z) => rounded = ins[0],
            _ => return Ok(None),
        }
    }
    let Some(ins) = producer(g, rounded, &is(Op::Unary(UnaryOp::Round))) else {
        return Ok(None);
    };
    let Some(ins) = producer(g, ins[0], &binary(BinaryOp::Div)) else {
        return Ok(None);
    };
    if scalar(g, ins[1]) != Some(scale) || g.value_type(ins[0]).dtype != DType::F32 {
        return Ok(None);
    }
    let op = Op::Unary(UnaryOp::QuantizeDequantize {
        scale: scale as f32,
        zero_point: zero_point.unwrap_or(0.0) as f32,
        min,
        max,
    });
    let node = g.node(id);
    let (name, spans, out) = (
        node.name.clone(),
        node.spans.clone(),
        node.outputs[0].name.clone(),
    );
    let grid_name = match selections.is_empty() {
        true => out.clone(),
        false => format!("{out}/on_grid"),
    };
    let grid = g.add_node(op, &name, &[ins[0]], &[grid_name], spans)?;
    let mut result = ValueRef::new(grid, 0);
    for (k, &sel) in selections.iter().rev().enumerate() {
        let node = g.node(sel);
        let (mut op, sel_name, sel_spans) =
            (node.op.clone(), node.name.clone(), node.spans.clone());
        if let Op::Pad(Pad {
            mode: PadMode::Constant(v),
            ..
        }) = &mut op
        {
            // The padding integer's value on the grid, as dequantized.
            *v = (*v - zero_point.unwrap_or(0.0) as f32) * scale as f32;
        }
        let out_name = match k + 1 == selections.len() {
            true => out.clone(),
            false => format!("{}/on_grid", node.outputs[0].name),
        };
        let mut inputs = g.node_inputs(sel);
        inputs[0] = result;
        let moved = g.add_node(op, &sel_name, &inputs, &[out_name], sel_spans)?;
        result = ValueRef::new(moved, 0);
    }
    g.replace_uses(ValueRef::new(id, 0), result);
    g.remove_node(id);
    Ok(Some(result))
}

/// The QuantizeDequantize whose grid every value of `v` lies on: `v`'s
/// producer, or that of the value it selects from (through data movement,
/// max pooling, constant pads whose value is on the grid and layout
/// transforms, in planned graphs too); or the grid of the integers `v`
/// dequantizes.
pub fn grid_of(g: &Graph, mut v: ValueRef) -> Option<UnaryOp> {
    let mut pad_values = vec![];
    let grid = loop {
        match g.node(v.node).op.logical() {
            Op::Unary(u @ UnaryOp::QuantizeDequantize { .. }) => break *u,
            Op::Binary(BinaryOp::Mul) => break dequantized_grid(g, v.node)?,
            op if selects_values(op) || matches!(op, Op::LayoutTransform(_)) => {
                v = *g.node_inputs(v.node).first()?
            }
            op => {
                pad_values.push(padding_value(op)?);
                v = *g.node_inputs(v.node).first()?
            }
        }
    };
    let UnaryOp::QuantizeDequantize {
        scale,
        zero_point,
        min,
        max,
    } = grid
    else {
        unreachable!("the loop breaks with a grid")
    };
    // A constant pad keeps the grid when its value is on it (within
    // rounding: the kernels round onto the grid).
    let on_grid = |v: f32| {
        let q = (v / scale + zero_point).round();
        (min..=max).contains(&q) && ((q - zero_point) * scale - v).abs() <= scale * 1e-3
    };
    pad_values.into_iter().all(on_grid).then_some(grid)
}

/// The value of `v` when it is a constant of one f32.
fn scalar_constant(g: &Graph, v: ValueRef) -> Option<f32> {
    let t = g.constant(v)?;
    (t.numel() == 1 && t.dtype() == DType::F32).then(|| t.to_f32()[0])
}

/// The grid of a dequantization as the importers write one per tensor:
/// integers of at most 16 bits as f32 (cast from an integer type, or a
/// quantization's clamped rounding whose cast folded away, as where a
/// QOperator model's readers each dequantize one quantized tensor), less a
/// constant zero point or not, times a constant scale. Its values are `(q -
/// zero_point) * scale`, computed as a QuantizeDequantize computes them.
fn dequantized_grid(g: &Graph, mul: NodeId) -> Option<UnaryOp> {
    let scalar = |v| scalar_constant(g, v);
    let [centered, scale] = g.node_inputs(mul)[..] else {
        return None;
    };
    let scale = scalar(scale).filter(|s| s.is_finite() && *s > 0.0)?;
    let (cast, zero_point) = match g.node(centered.node).op.logical() {
        Op::Binary(BinaryOp::Sub) => match g.node_inputs(centered.node)[..] {
            [cast, zero_point] => (cast, scalar(zero_point)?),
            _ => return None,
        },
        _ => (centered, 0.0),
    };
    if g.value_type(cast).dtype != DType::F32 {
        return None;
    }
    let (min, max) = integer_values(g, cast).filter(|(lo, hi)| hi - lo <= 65535.0)?;
    let (min, max) = (min as f32, max as f32);
    (zero_point.fract() == 0.0 && (min..=max).contains(&zero_point)).then_some(
        UnaryOp::QuantizeDequantize {
            scale,
            zero_point,
            min,
            max,
        },
    )
}

/// The value a constant pad adds around its input's, if `op` is one.
fn padding_value(op: &Op) -> Option<f32> {
    match op {
        Op::Pad(Pad {
            mode: PadMode::Constant(v),
            ..
        }) => Some(*v),
        _ => None,
    }
}

/// Whether every output value of `op` is a value of its first input (data
/// movement, max pooling): a cast commutes with it, and it keeps integers.
fn selects_values(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape(_)
            | Op::Transpose(_)
            | Op::Identity
            | Op::Slice(_)
            | Op::Expand(_)
            | Op::Tile(_)
            | Op::Gather(_)
            | Op::Pool(Pool {
                kind: PoolKind::Max,
                ..
            })
            | Op::GlobalPool(GlobalPool {
                kind: PoolKind::Max
            })
            | Op::Pad(Pad {
                mode: PadMode::Reflect | PadMode::Edge | PadMode::Wrap,
                ..
            })
    )
}

/// A value-selecting op (`selects_values`, or a constant pad) of a float cast
/// to an integer type that holds its values exactly, done on the float and
/// cast after, so that
/// the cast meets the next cast back to float (a quantized model's data
/// movement between two quantized ops): the cast of its result.
fn cast_sunk_below(g: &mut Graph, id: NodeId) -> Result<Option<ValueRef>, GraphError> {
    let node = g.node(id);
    let ins = g.node_inputs(id);
    let pad = padding_value(&node.op).map(f64::from);
    if !(selects_values(&node.op) || pad.is_some()) || node.outputs.len() != 1 {
        return Ok(None);
    }
    let Op::Cast(cast) = g.node(ins[0].node).op.clone() else {
        return Ok(None);
    };
    let x = g.node_inputs(ins[0].node)[0];
    let Some((lo, hi)) = cast.to.integer_range() else {
        return Ok(None);
    };
    // A constant pad adds its value: an integer the type holds, the same
    // before the cast as after.
    if pad.is_some_and(|v| v.fract() != 0.0 || v < lo || v > hi) {
        return Ok(None);
    }
    if !integer_values(g, x).is_some_and(|(a, b)| lo <= a && b <= hi) {
        return Ok(None);
    }
    let (op, name, spans) = (node.op.clone(), node.name.clone(), node.spans.clone());
    let out_name = node.outputs[0].name.clone();
    let mut inputs = ins.clone();
    inputs[0] = x;
    let float_name = format!("{out_name}/as_float");
    let moved = g.add_node(op, &name, &inputs, &[float_name], spans.clone())?;
    let cast = g.add_node(
        Op::Cast(cast),
        &format!("{name}/cast"),
        &[ValueRef::new(moved, 0)],
        &[out_name],
        spans,
    )?;
    let cast = ValueRef::new(cast, 0);
    g.replace_uses(ValueRef::new(id, 0), cast);
    g.remove_node(id);
    Ok(Some(cast))
}

/// Bounds `(lo, hi)` of the values of float `v` when each is an integer (or
/// NaN, which every cast keeps or makes undefined): rounded values, clamped to
/// integer bounds, sums and products of such, integer constants and integers
/// converted to float. `None` where that is not known.
fn integer_values(g: &Graph, v: ValueRef) -> Option<(f64, f64)> {
    if !g.value_type(v).dtype.is_float() {
        return None;
    }
    if let Some(t) = g.constant(v) {
        let values = t.data.to_f64();
        let integral = values.iter().all(|x| x.fract() == 0.0 || x.is_nan());
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        return integral.then_some((lo, hi));
    }
    let ins = g.node_inputs(v.node);
    // A planned graph's ops run in layouts (`logical`); a layout transform
    // moves values.
    match g.node(v.node).op.logical() {
        Op::LayoutTransform(_) => integer_values(g, ins[0]),
        Op::Unary(UnaryOp::Round | UnaryOp::Floor | UnaryOp::Ceil) => {
            Some((f64::NEG_INFINITY, f64::INFINITY))
        }
        Op::Unary(UnaryOp::Clip { min, max }) => {
            let (min, max) = (f64::from(*min), f64::from(*max));
            let bound = |b: f64| b.fract() == 0.0 || b.is_infinite();
            let (lo, hi) = integer_values(g, ins[0])?;
            (bound(min) && bound(max)).then_some((lo.max(min), hi.min(max)))
        }
        Op::Cast(_) => g.value_type(ins[0]).dtype.integer_range(),
        op if selects_values(op) => integer_values(g, ins[0]),
        op if padding_value(op).is_some() => {
            let v = f64::from(padding_value(op)?);
            let (lo, hi) = integer_values(g, ins[0])?;
            (v.fract() == 0.0).then_some((lo.min(v), hi.max(v)))
        }
        Op::Concat(_) => ins
            .iter()
            .try_fold((f64::INFINITY, f64::NEG_INFINITY), |r, &v| {
                integer_values(g, v).map(|(lo, hi)| (r.0.min(lo), r.1.max(hi)))
            }),
        // Sums of up to `terms` products of integers (dynamic quantization's
        // integer convolutions and products; padding adds zeros).
        Op::Conv(_) | Op::MatMul if ins.len() == 2 => {
            let (a, b) = (integer_values(g, ins[0])?, integer_values(g, ins[1])?);
            let w = &g.value_type(ins[1]).shape;
            let terms = match g.node(v.node).op.logical() {
                Op::Conv(_) => w[1..].iter().product::<usize>(),
                _ => *g.value_type(ins[0]).shape.last()?,
            } as f64;
            let (lo, hi) = product_range(a, b);
            Some((lo.min(0.0) * terms, hi.max(0.0) * terms))
        }
        Op::Binary(BinaryOp::Add) => {
            let (a, b) = (integer_values(g, ins[0])?, integer_values(g, ins[1])?);
            Some((a.0 + b.0, a.1 + b.1))
        }
        Op::Binary(BinaryOp::Sub) => {
            let (a, b) = (integer_values(g, ins[0])?, integer_values(g, ins[1])?);
            Some((a.0 - b.1, a.1 - b.0))
        }
        Op::Binary(BinaryOp::Mul) => Some(product_range(
            integer_values(g, ins[0])?,
            integer_values(g, ins[1])?,
        )),
        _ => None,
    }
}

/// The bounds of `x · y` for `x` within `a` and `y` within `b`: the least and
/// greatest product of their bounds, unbounded where a bound of 0 meets an
/// infinite one (0 · inf is NaN).
fn product_range(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    let corners = [a.0 * b.0, a.0 * b.1, a.1 * b.0, a.1 * b.1];
    if corners.iter().any(|c| c.is_nan()) {
        return (f64::NEG_INFINITY, f64::INFINITY);
    }
    let lo = corners.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = corners.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
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

    /// A quantization's arithmetic as the ONNX importer leaves it, one node at a
    /// time through `fold_node`, with `between` (if any) applied to the
    /// quantized integers (in float, as the importer runs a QOperator model's
    /// max pool of bytes).
    fn quantize_dequantize_chain(
        g: &mut Graph,
        x: ValueRef,
        zero_point: f32,
        between: Option<Op>,
    ) -> ValueRef {
        let s = g.add_constant("s", Tensor::scalar_f32(0.25), vec![]);
        let z = g.add_constant("z", Tensor::scalar_f32(zero_point), vec![]);
        let add = |g: &mut Graph, op: Op, ins: &[ValueRef]| {
            let id = g.add_node(op, "q", ins, &[], vec![]).unwrap();
            fold_node(g, id)
                .unwrap()
                .map_or(ValueRef::new(id, 0), |v| v[0])
        };
        let v = add(g, Op::Binary(BinaryOp::Div), &[x, s]);
        let v = add(g, Op::Unary(UnaryOp::Round), &[v]);
        let v = add(g, Op::Binary(BinaryOp::Add), &[v, z]);
        let clip = UnaryOp::Clip {
            min: -128.0,
            max: 127.0,
        };
        let v = add(g, Op::Unary(clip), &[v]);
        // The quantized integers and back: the round trip folds away.
        let cast = |to| Op::Cast(crate::ops::Cast { to, saturate: true });
        let q = add(g, cast(DType::I8), &[v]);
        let mut v = add(g, cast(DType::F32), &[q]);
        if let Some(op) = between {
            v = add(g, op, &[v]);
        }
        let v = add(g, Op::Binary(BinaryOp::Sub), &[v, z]);
        add(g, Op::Binary(BinaryOp::Mul), &[v, s])
    }

    #[test]
    fn a_quantization_round_trip_becomes_one_op_computing_the_same() {
        let mut g = Graph::new("qdq");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![7]), vec![]);
        let y = quantize_dequantize_chain(&mut g, x, 3.0, None);
        let op = g.node(y.node).op.clone();
        assert_eq!(
            op,
            Op::Unary(UnaryOp::QuantizeDequantize {
                scale: 0.25,
                zero_point: 3.0,
                min: -128.0,
                max: 127.0
            })
        );
        assert_eq!(g.node_inputs(y.node), vec![x]);
        let input = Tensor::new(
            vec![7],
            TensorData::F32(vec![0.125, 0.375, -0.6, 100.0, -100.0, f32::NAN, 1.1]),
        );
        let got = crate::ops::eval_op(&op, &[&input], &[g.value_type(y).clone()]).unwrap();
        // round(x / 0.25) + 3 to even, clamped to [-128, 127], then back.
        let want = [0.0, 0.5, -0.5, 31.0, -32.75, f32::NAN, 1.0];
        for (g, w) in got[0].data.to_f64().iter().zip(want) {
            assert!(
                *g == f64::from(w) || (g.is_nan() && w.is_nan()),
                "{g} vs {w}"
            );
        }
    }

    #[test]
    fn a_max_pool_of_quantized_integers_selects_from_the_grid() {
        let mut g = Graph::new("qdq_pool");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![1, 1, 5]), vec![]);
        let pool = Op::GlobalPool(GlobalPool {
            kind: PoolKind::Max,
        });
        let y = quantize_dequantize_chain(&mut g, x, -5.0, Some(pool.clone()));
        assert_eq!(g.node(y.node).op, pool);
        let grid = g.node_inputs(y.node)[0];
        let grid_op = g.node(grid.node).op.clone();
        assert!(matches!(
            grid_op,
            Op::Unary(UnaryOp::QuantizeDequantize { scale, zero_point, .. })
                if scale == 0.25 && zero_point == -5.0
        ));
        assert_eq!(g.node_inputs(grid.node), vec![x]);
        let input = Tensor::new(
            vec![1, 1, 5],
            TensorData::F32(vec![0.125, -0.6, 1.1, 0.3, -40.0]),
        );
        let ty = |v| vec![g.value_type(v).clone()];
        let on_grid = crate::ops::eval_op(&grid_op, &[&input], &ty(grid)).unwrap();
        let got = crate::ops::eval_op(&pool, &[&on_grid[0]], &ty(y)).unwrap();
        // The largest value, 1.1, is 4.4 steps: 4 steps, 1.0.
        assert_eq!(got[0].data.to_f64(), vec![1.0]);
    }

    #[test]
    fn a_constant_pad_of_quantized_integers_pads_the_grid_with_its_value() {
        let pad = |v: f32| {
            Op::Pad(Pad {
                begins: vec![0, 0, 1],
                ends: vec![0, 0, 1],
                mode: PadMode::Constant(v),
            })
        };
        let mut g = Graph::new("qdq_pad");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![1, 1, 5]), vec![]);
        let y = quantize_dequantize_chain(&mut g, x, -5.0, Some(pad(2.0)));
        // The integer 2 dequantized: (2 + 5) * 0.25.
        assert_eq!(g.node(y.node).op, pad(1.75));
        let grid = g.node_inputs(y.node)[0];
        assert!(matches!(
            g.node(grid.node).op,
            Op::Unary(UnaryOp::QuantizeDequantize { .. })
        ));
        assert_eq!(g.node_inputs(grid.node), vec![x]);
        assert_eq!(
            grid_of(&g, y),
            Some(UnaryOp::QuantizeDequantize {
                scale: 0.25,
                zero_point: -5.0,
                min: -128.0,
                max: 127.0,
            })
        );
        // A pad value that is no integer of the type stays as it was.
        let mut g = Graph::new("qdq_pad_off");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![1, 1, 5]), vec![]);
        let y = quantize_dequantize_chain(&mut g, x, -5.0, Some(pad(0.5)));
        assert_eq!(g.node(y.node).op, Op::Binary(BinaryOp::Mul));
    }

    #[test]
    fn a_dequantized_integer_input_lies_on_its_grid() {
        // `(q - zero_point) * scale` of an integer input, as the importers
        // write a quantized model input: the grid of the input's type.
        let dequantized = |dtype: DType, zero_point: Option<f32>, scale: Tensor| {
            let mut g = Graph::new("dequantized");
            let q = g.add_input("q", ValueType::new(dtype, vec![1, 4]), vec![]);
            let cast = Op::Cast(crate::ops::Cast {
                to: DType::F32,
                saturate: true,
            });
            let add = |g: &mut Graph, op: Op, ins: &[ValueRef]| {
                ValueRef::new(g.add_node(op, "d", ins, &[], vec![]).unwrap(), 0)
            };
            let mut v = add(&mut g, cast, &[q]);
            if let Some(z) = zero_point {
                let z = g.add_constant("z", Tensor::scalar_f32(z), vec![]);
                v = add(&mut g, Op::Binary(BinaryOp::Sub), &[v, z]);
            }
            let s = g.add_constant("s", scale, vec![]);
            let y = add(&mut g, Op::Binary(BinaryOp::Mul), &[v, s]);
            grid_of(&g, y)
        };
        let grid = |scale, zero_point, min, max| {
            Some(UnaryOp::QuantizeDequantize {
                scale,
                zero_point,
                min,
                max,
            })
        };
        let scalar = Tensor::scalar_f32;
        assert_eq!(
            dequantized(DType::I8, Some(-3.0), scalar(0.5)),
            grid(0.5, -3.0, -128.0, 127.0)
        );
        assert_eq!(
            dequantized(DType::U8, None, scalar(0.02)),
            grid(0.02, 0.0, 0.0, 255.0)
        );
        // A scale per channel, a zero point off the integers or out of the
        // type, a non-positive scale, integers a float may not hold: no grid.
        let per_channel = Tensor::from_f32(vec![1, 4], vec![0.5; 4]);
        assert_eq!(dequantized(DType::I8, Some(1.0), per_channel), None);
        assert_eq!(dequantized(DType::I8, Some(0.5), scalar(0.5)), None);
        assert_eq!(dequantized(DType::U8, Some(-1.0), scalar(0.5)), None);
        assert_eq!(dequantized(DType::I8, None, scalar(0.0)), None);
        assert_eq!(dequantized(DType::I32, None, scalar(0.5)), None);
    }

    #[test]
    fn quantized_integers_dequantized_by_two_readers_lie_on_the_grid() {
        // A QOperator model's quantized output read by two ops, each
        // dequantizing it (one through a reshape): the clamped rounding has
        // two readers, so no QuantizeDequantize replaces the chain, and each
        // reader's dequantization is still on the grid of the clamp.
        let mut g = Graph::new("shared quantized tensor");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![2, 3]), vec![]);
        let (s, z) = (0.25, 3.0);
        let constant = |g: &mut Graph, v: f32| g.add_constant("c", Tensor::scalar_f32(v), vec![]);
        let (sv, zv) = (constant(&mut g, s), constant(&mut g, z));
        let add = |g: &mut Graph, op: Op, ins: &[ValueRef]| {
            ValueRef::new(g.add_node(op, "q", ins, &[], vec![]).unwrap(), 0)
        };
        let v = add(&mut g, Op::Binary(BinaryOp::Div), &[x, sv]);
        let v = add(&mut g, Op::Unary(UnaryOp::Round), &[v]);
        let v = add(&mut g, Op::Binary(BinaryOp::Add), &[v, zv]);
        let clip = UnaryOp::Clip {
            min: 0.0,
            max: 255.0,
        };
        let q = add(&mut g, Op::Unary(clip), &[v]);
        let reshape = Op::Reshape(Reshape { shape: vec![6] });
        let want = Some(UnaryOp::QuantizeDequantize {
            scale: s,
            zero_point: z,
            min: 0.0,
            max: 255.0,
        });
        for reshaped in [false, true] {
            let v = match reshaped {
                true => add(&mut g, reshape.clone(), &[q]),
                false => q,
            };
            let v = add(&mut g, Op::Binary(BinaryOp::Sub), &[v, zv]);
            let y = add(&mut g, Op::Binary(BinaryOp::Mul), &[v, sv]);
            assert_eq!(grid_of(&g, y), want, "reshaped {reshaped}");
        }
        // A clamp to bounds off the integers is no grid.
        let off = add(
            &mut g,
            Op::Unary(UnaryOp::Clip {
                min: 0.5,
                max: 255.0,
            }),
            &[v],
        );
        let v = add(&mut g, Op::Binary(BinaryOp::Sub), &[off, zv]);
        let y = add(&mut g, Op::Binary(BinaryOp::Mul), &[v, sv]);
        assert_eq!(grid_of(&g, y), None);
    }

    #[test]
    fn pow_by_a_constant_two_or_three_becomes_products() {
        let mut g = Graph::new("powers");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![3]), vec![]);
        let constant = |g: &mut Graph, e: f32| g.add_constant("e", Tensor::scalar_f32(e), vec![]);
        let pow = |g: &mut Graph, e| {
            let id = g
                .add_node(Op::Binary(BinaryOp::Pow), "pow", &[x, e], &[], vec![])
                .unwrap();
            fold_node(g, id).unwrap()
        };
        let two = constant(&mut g, 2.0);
        let square = pow(&mut g, two).expect("x^2 is rewritten")[0];
        assert_eq!(g.node(square.node).op, Op::Binary(BinaryOp::Mul));
        assert_eq!(g.node_inputs(square.node), vec![x, x]);
        let three = constant(&mut g, 3.0);
        let cube = pow(&mut g, three).expect("x^3 is rewritten")[0];
        assert_eq!(g.node(cube.node).op, Op::Binary(BinaryOp::Mul));
        let [sq, last] = g.node_inputs(cube.node)[..] else {
            panic!("a product of two")
        };
        assert_eq!(last, x);
        assert_eq!(g.node_inputs(sq.node), vec![x, x]);
        // Another exponent stays a Pow.
        let half = constant(&mut g, 0.5);
        assert!(pow(&mut g, half).is_none());
    }
}
