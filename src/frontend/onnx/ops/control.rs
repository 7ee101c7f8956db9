//! If, Loop and Scan: their subgraphs imported as graphs of their own (or, for
//! an If whose condition is known at import, the branch taken inlined), the
//! values the subgraphs read from enclosing graphs passed in as extra inputs.
//! A Loop whose trip count and conditions are known here and that is small
//! is unrolled instead. Shapes are static, so the branches of an If must agree
//! on their output types, a loop-carried value must keep its type, and a scan
//! output's length must be known here.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::frontend::onnx::{captures, Captured};
use crate::graph::{
    Concat, ControlFlow, ControlFlowOp, DType, Graph, Op, Reshape, Tensor, TensorData, ValueRef,
    ValueType,
};
use crate::reference::control::{If, Loop, Scan, ScanAxis};
use onnx_protobuf::GraphProto;
use std::sync::Arc;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "If", import_if);
    reg.add(AI_ONNX, "Loop", import_loop);
    reg.add(AI_ONNX, "Scan", import_scan);
}

/// ONNX attribute type GRAPH.
const GRAPH: i32 = 5;

pub(super) fn graph_attr<'n>(c: &NodeCtx<'n>, name: &str) -> Res<&'n GraphProto> {
    let node = c.node;
    c.typed_attr(name, GRAPH, "a graph")?;
    (node.attribute.iter())
        .find(|a| a.name == name)
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| c.err(format!("needs attribute '{name}' (a graph)")))
}

/// Checks that input `i`, when given, is a single element of `dtype`.
fn scalar_input(c: &NodeCtx, i: usize, dtype: DType, what: &str) -> Res<Option<ValueRef>> {
    let Some(v) = c.opt_input(i) else {
        return Ok(None);
    };
    let ty = c.ty(v);
    if ty.dtype != dtype || ty.numel() != 1 {
        return Err(c.err(format!("{what} must be one {dtype}, got {ty}")));
    }
    Ok(Some(v))
}

/// The captured values the node feeds its subgraphs (constants are copied
/// into them instead).
fn fed(captured: &[(String, ValueRef, Captured)]) -> impl Iterator<Item = ValueRef> + '_ {
    (captured.iter())
        .filter(|(_, _, k)| matches!(k, Captured::Value(_)))
        .map(|(_, v, _)| *v)
}

/// Adds the node's op, fed `inputs`.
fn emit_control(
    c: &mut NodeCtx,
    op: impl ControlFlowOp + 'static,
    inputs: &[ValueRef],
) -> Res<Vec<Option<ValueRef>>> {
    c.emit(Op::Control(ControlFlow(Arc::new(op))), inputs)
}

fn types(c: &NodeCtx, values: &[ValueRef]) -> Vec<ValueType> {
    values.iter().map(|&v| c.ty(v)).collect()
}

/// The types a subgraph computes.
fn output_types(g: &Graph) -> Vec<ValueType> {
    g.outputs()
        .iter()
        .map(|&v| g.value_type(v).clone())
        .collect()
}

/// The name of output `i` of subgraph `proto`, for errors.
fn output_name(proto: &GraphProto, i: usize) -> &str {
    proto.output.get(i).map_or("", |o| o.name.as_str())
}

fn import_if(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let cond = c.input(0)?;
    let ty = c.ty(cond);
    if ty.dtype != DType::Bool || ty.numel() != 1 {
        return Err(c.err(format!("the condition must be one boolean, got {ty}")));
    }
    let then_branch = graph_attr(c, "then_branch")?;
    let else_branch = graph_attr(c, "else_branch")?;
    let env = c.env.nested(c.span)?;
    if let Some(t) = c.g.constant(cond) {
        // Known at import: the branch taken becomes part of this graph.
        let (name, taken) = match t.data.to_bool()[0] {
            true => ("then_branch", then_branch),
            false => ("else_branch", else_branch),
        };
        let prefix = format!("{}/{name}", c.layer());
        let outputs = env.inline_subgraph(taken, &prefix, c.g, c.scope)?;
        return Ok(outputs.into_iter().map(Some).collect());
    }
    let captured = captures(c.span, c.g, c.scope, &[then_branch, else_branch])?;
    let layer = c.layer();
    let then_g =
        env.import_subgraph(then_branch, &format!("{layer}/then_branch"), &[], &captured)?;
    let else_g =
        env.import_subgraph(else_branch, &format!("{layer}/else_branch"), &[], &captured)?;
    let (then_out, else_out) = (output_types(&then_g), output_types(&else_g));
    if then_out.len() != else_out.len() {
        return Err(c.err(format!(
            "then_branch computes {} outputs, else_branch {}: both must compute the If's outputs",
            then_out.len(),
            else_out.len()
        )));
    }
    for (i, (t, e)) in then_out.iter().zip(&else_out).enumerate() {
        let (tn, en) = (output_name(then_branch, i), output_name(else_branch, i));
        if t.dtype != e.dtype {
            return Err(c.err(format!(
                "output {i} is {} in then_branch ('{tn}') but {} in else_branch ('{en}')",
                t.dtype, e.dtype
            )));
        }
        if t.shape != e.shape {
            return Err(c.err(format!(
                "output {i} has shape {:?} in then_branch ('{tn}') but {:?} in else_branch ('{en}'); \
                 shapes are static here, so both branches must compute the same shape",
                t.shape, e.shape
            )));
        }
    }
    let inputs: Vec<ValueRef> = std::iter::once(cond).chain(fed(&captured)).collect();
    let op = If {
        then_branch: then_g,
        else_branch: else_g,
        inputs: types(c, &inputs),
        outputs: then_out,
    };
    emit_control(c, op, &inputs)
}

fn import_loop(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let body = graph_attr(c, "body")?;
    if c.inputs.len() < 2 {
        return Err(c.err(
            "Loop takes inputs M and cond (either may be empty) before its loop-carried values",
        ));
    }
    let trip_count = scalar_input(c, 0, DType::I64, "the trip count M")?;
    let cond = scalar_input(c, 1, DType::Bool, "the condition")?;
    let initial = (2..c.inputs.len())
        .map(|i| c.input(i))
        .collect::<Res<Vec<_>>>()?;
    let carried = initial.len();
    if body.input.len() != 2 + carried {
        return Err(c.err(format!(
            "the body takes {} inputs; it must take the iteration number, the condition and the {carried} loop-carried value(s)",
            body.input.len()
        )));
    }
    if body.output.len() < 1 + carried {
        return Err(c.err(format!(
            "the body computes {} outputs; it must compute the condition and the {carried} loop-carried value(s), then any scan outputs",
            body.output.len()
        )));
    }
    if let Some(outputs) = unrolled(c, body, &initial)? {
        return Ok(outputs);
    }
    let scanned = body.output.len() > 1 + carried;
    if scanned {
        // Asked before the body is imported: a value a caller can freeze.
        known_trip_count(c)?;
    }
    let env = c.env.nested(c.span)?;
    let captured = captures(c.span, c.g, c.scope, &[body])?;
    let mut formal = vec![
        ValueType::new(DType::I64, vec![]),
        ValueType::new(DType::Bool, vec![]),
    ];
    formal.extend(types(c, &initial));
    let body_g = env.import_subgraph(body, &format!("{}/body", c.layer()), &formal, &captured)?;
    let out = output_types(&body_g);
    if out[0].dtype != DType::Bool || out[0].numel() != 1 {
        return Err(c.err(format!(
            "the body's condition output '{}' must be one boolean, got {}",
            output_name(body, 0),
            out[0]
        )));
    }
    for (j, (before, after)) in formal[2..].iter().zip(&out[1..]).enumerate() {
        if before != after {
            return Err(c.err(format!(
                "loop-carried value {j} ('{}') enters as {before} but the body returns {after} \
                 ('{}'); shapes are static here, so it must keep its type",
                c.node.input[2 + j],
                output_name(body, 1 + j)
            )));
        }
    }
    let mut outputs = out[1..=carried].to_vec();
    if scanned {
        let n = scan_length(c, &body_g)?;
        for element in &out[1 + carried..] {
            let mut shape = vec![n];
            shape.extend(&element.shape);
            outputs.push(ValueType::new(element.dtype, shape));
        }
    }
    let inputs: Vec<ValueRef> = (trip_count.into_iter().chain(cond))
        .chain(initial)
        .chain(fed(&captured))
        .collect();
    let op = Loop {
        body: body_g,
        has_trip_count: trip_count.is_some(),
        has_condition: cond.is_some(),
        carried,
        inputs: types(c, &inputs),
        outputs,
    };
    emit_control(c, op, &inputs)
}

/// A Loop of at most this many iterations is unrolled at import when its
/// trip count and every iteration's condition are known there...
const UNROLL_MAX_ITERATIONS: i64 = 64;
/// ...and its unrolled body has at most this many nodes in all.
const UNROLL_MAX_NODES: usize = 4096;

/// The outputs of the Loop unrolled into this graph, each iteration's body
/// inlined (its layers named `<loop>/iteration<i>/<layer>`) with the iteration
/// number and condition as constants, or `None` when it cannot be: a trip count
/// that is not a small constant, or a condition that does not fold to a
/// constant (the nodes inlined so far are then dead, removed with the others).
fn unrolled(
    c: &mut NodeCtx,
    body: &GraphProto,
    initial: &[ValueRef],
) -> Res<Option<Vec<Option<ValueRef>>>> {
    let Some(m) = c
        .opt_input(0)
        .and_then(|v| c.g.constant(v))
        .map(|t| t.data.to_i64()[0])
    else {
        return Ok(None);
    };
    let nodes = (m.max(0) as usize).saturating_mul(body.node.len());
    if m > UNROLL_MAX_ITERATIONS || nodes > UNROLL_MAX_NODES {
        return Ok(None);
    }
    let mut go = match c.opt_input(1) {
        None => true,
        Some(v) => match c.g.constant(v) {
            Some(t) => t.data.to_bool()[0],
            None => return Ok(None),
        },
    };
    let env = c.env.nested(c.span)?;
    let layer = c.layer();
    let mut carried = initial.to_vec();
    let mut scans: Vec<Vec<ValueRef>> = vec![vec![]; body.output.len() - 1 - initial.len()];
    let mut i = 0;
    while go && i < m {
        let prefix = format!("{layer}/iteration{i}");
        let mut scope = c.scope.clone();
        let bound = [
            Tensor::from_i64(vec![], vec![i]),
            Tensor::new(vec![], TensorData::Bool(vec![true])),
        ];
        for (vi, t) in body.input.iter().zip(bound) {
            let name = format!("{prefix}/{}", vi.name);
            scope.insert(
                vi.name.clone(),
                c.g.add_constant(&name, t, vec![c.span.clone()]),
            );
        }
        for (vi, &v) in body.input[2..].iter().zip(&carried) {
            scope.insert(vi.name.clone(), v);
        }
        let outs = env.inline_subgraph(body, &prefix, c.g, &scope)?;
        let Some(cond) =
            c.g.constant(outs[0])
                .filter(|t| t.dtype() == DType::Bool && t.numel() == 1)
        else {
            return Ok(None);
        };
        go = cond.data.to_bool()[0];
        let next = &outs[1..=initial.len()];
        if next.iter().zip(initial).any(|(&a, &b)| c.ty(a) != c.ty(b)) {
            return Ok(None);
        }
        carried = next.to_vec();
        for (s, &v) in scans.iter_mut().zip(&outs[1 + initial.len()..]) {
            s.push(v);
        }
        i += 1;
    }
    if i == 0 && !scans.is_empty() {
        // The scan outputs' element types are the body's, which no iteration computed.
        return Ok(None);
    }
    let mut outputs: Vec<Option<ValueRef>> = carried.into_iter().map(Some).collect();
    for (k, parts) in scans.iter().enumerate() {
        let mut rows = vec![];
        for (i, &v) in parts.iter().enumerate() {
            let mut shape = vec![1];
            shape.extend(&c.ty(v).shape);
            let row = Op::Reshape(Reshape { shape });
            rows.push(c.emit_inner(row, &[v], &format!("scan{k}/row{i}"))?);
        }
        let stacked = Op::Concat(Concat { axis: 0 });
        outputs.push(Some(c.emit_inner(stacked, &rows, &format!("scan{k}"))?));
    }
    Ok(Some(outputs))
}

/// The trip count of a Loop with scan outputs, which must be a constant, and
/// whether its initial condition (a constant too, where given) lets it run.
fn known_trip_count(c: &NodeCtx) -> Res<(usize, bool)> {
    let Some(m) = c.const_ints(0)? else {
        return Err(c.err(
            "scan outputs need a trip count M: their length must be known at import (shapes are static here)",
        ));
    };
    let m = usize::try_from(m[0].max(0))
        .map_err(|_| c.err(format!("the trip count {} does not fit in memory", m[0])))?;
    let runs = c.const_input(1)?.is_none_or(|cond| cond.data.to_bool()[0]);
    Ok((m, runs))
}

/// How many iterations a Loop with scan outputs runs, which must be known
/// here: its trip count is a constant, and neither the initial condition nor
/// the body's ends it early (the body's condition output is a constant true,
/// or its condition input passed on).
fn scan_length(c: &NodeCtx, body: &Graph) -> Res<usize> {
    let (m, runs) = known_trip_count(c)?;
    if !runs {
        return Ok(0);
    }
    let mut v = body.outputs()[0];
    while let Op::Identity = body.node(v.node).op {
        v = body.node_inputs(v.node)[0];
    }
    let always = match body.constant(v) {
        Some(t) => t.data.to_bool()[0],
        None => v.node == body.inputs()[1],
    };
    if !always {
        return Err(c.err(
            "the body's condition may end the loop before M iterations, so its scan outputs \
             have no length known at import (shapes are static here); only loop-carried values \
             may leave such a loop",
        ));
    }
    Ok(m)
}

fn import_scan(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    if c.opset < 9 {
        return Err(c.err(
            "Scan of opset 8 (a batch axis and sequence_lens) is not supported; opset 9 on is",
        ));
    }
    let body = graph_attr(c, "body")?;
    let inputs = (0..c.inputs.len())
        .map(|i| c.input(i))
        .collect::<Res<Vec<_>>>()?;
    let scanned = c.int("num_scan_inputs", 0)?;
    if scanned < 1 || scanned as usize > inputs.len() {
        return Err(c.err(format!(
            "num_scan_inputs is {scanned}; it must be between 1 and the {} inputs",
            inputs.len()
        )));
    }
    let scanned = scanned as usize;
    let states = inputs.len() - scanned;
    if body.input.len() != inputs.len() {
        return Err(c.err(format!(
            "the body takes {} inputs; it must take the {states} state value(s) and one element of each of the {scanned} scan input(s)",
            body.input.len()
        )));
    }
    if body.output.len() < states {
        return Err(c.err(format!(
            "the body computes {} outputs; it must compute the {states} state value(s), then any scan outputs",
            body.output.len()
        )));
    }
    let scan_outputs = body.output.len() - states;
    let sequences = &inputs[states..];
    let in_ranks: Vec<usize> = sequences.iter().map(|&v| c.ty(v).shape.len()).collect();
    let scan_inputs = scan_axes(c, "scan_input", &in_ranks)?;
    let mut length = None;
    let mut formal = types(c, &inputs[..states]);
    for (i, (&v, at)) in sequences.iter().zip(&scan_inputs).enumerate() {
        let ty = c.ty(v);
        let n = ty.shape[at.axis];
        match length {
            Some((m, first)) if m != n => {
                return Err(c.err(format!(
                    "the scan inputs disagree in length: '{first}' has {m} elements along its scan axis, '{}' has {n}",
                    c.node.input[states + i]
                )))
            }
            _ => length = Some((n, c.node.input[states + i].clone())),
        }
        let mut shape = ty.shape.clone();
        shape.remove(at.axis);
        formal.push(ValueType::new(ty.dtype, shape));
    }
    let length = length.map_or(0, |(n, _)| n);
    let env = c.env.nested(c.span)?;
    let captured = captures(c.span, c.g, c.scope, &[body])?;
    let body_g = env.import_subgraph(body, &format!("{}/body", c.layer()), &formal, &captured)?;
    let out = output_types(&body_g);
    for (j, (before, after)) in formal[..states].iter().zip(&out).enumerate() {
        if before != after {
            return Err(c.err(format!(
                "state value {j} ('{}') enters as {before} but the body returns {after} ('{}'); \
                 shapes are static here, so it must keep its type",
                c.node.input[j],
                output_name(body, j)
            )));
        }
    }
    let out_ranks: Vec<usize> = out[states..].iter().map(|t| t.shape.len() + 1).collect();
    let scan_out_axes = scan_axes(c, "scan_output", &out_ranks)?;
    debug_assert_eq!(scan_out_axes.len(), scan_outputs);
    let mut outputs = out[..states].to_vec();
    for (element, at) in out[states..].iter().zip(&scan_out_axes) {
        let mut shape = element.shape.clone();
        shape.insert(at.axis, length);
        outputs.push(ValueType::new(element.dtype, shape));
    }
    let all_inputs: Vec<ValueRef> = inputs.iter().copied().chain(fed(&captured)).collect();
    let op = Scan {
        body: body_g,
        states,
        scan_inputs,
        scan_outputs: scan_out_axes,
        length,
        inputs: types(c, &all_inputs),
        outputs,
    };
    emit_control(c, op, &all_inputs)
}

/// The axes and directions of `kind` ("scan_input" or "scan_output") for
/// values of the given ranks: `<kind>_axes` (default 0, negative from the end)
/// and `<kind>_directions` (default forward).
fn scan_axes(c: &NodeCtx, kind: &str, ranks: &[usize]) -> Res<Vec<ScanAxis>> {
    let read = |what: &str| -> Res<Vec<i64>> {
        let name = format!("{kind}_{what}");
        match c.ints(&name)? {
            Some(v) if v.len() != ranks.len() => Err(c.err(format!(
                "{name} has {} entries for {} {kind}(s)",
                v.len(),
                ranks.len()
            ))),
            Some(v) => Ok(v),
            None => Ok(vec![0; ranks.len()]),
        }
    };
    let (axes, directions) = (read("axes")?, read("directions")?);
    (axes.iter().zip(&directions).zip(ranks))
        .map(|((&a, &d), &rank)| {
            if !(d == 0 || d == 1) {
                return Err(c.err(format!("{kind}_directions holds {d}; each must be 0 or 1")));
            }
            Ok(ScanAxis {
                axis: c.axis(a, rank)?,
                reverse: d == 1,
            })
        })
        .collect()
}
