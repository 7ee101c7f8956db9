//! The reference executor: a plain, obviously correct implementation of every op
//! over the graph IR. It is the oracle for every later stage, so it favours clarity
//! over speed: float ops compute in f64 and round once to the output type, integer
//! ops compute exactly in i64, and data movement works on any dtype by computing
//! source indices and gathering them (`TensorData::gather`).
//!
//! `eval_op` checks its inputs against shape inference before computing, so every
//! op implementation may rely on consistent shapes; what inference cannot know
//! (index values, division by zero) the ops check themselves.

mod conv;
mod elementwise;
mod index;
mod matmul;
mod movement;
mod normalize;
mod pool;
mod reduce;
mod resize;

use crate::graph::{
    checked_numel, format_spans, infer_outputs, memory_limit, Graph, GraphError, LaidOut, Op, Span,
    Tensor, ValueRef, ValueType,
};
use std::borrow::Cow;
use std::collections::HashMap;

/// An error running a graph, naming the graph input or the layer at fault.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("the graph has {expected} inputs, {got} were given")]
    InputCount { expected: usize, got: usize },
    #[error("graph input '{name}': {message}")]
    Input { name: String, message: String },
    #[error("{}: {message}", format_spans(spans))]
    AtNode { spans: Vec<Span>, message: String },
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// Runs `graph` on `inputs` (one per graph input, in order) and returns the graph
/// outputs in order. Intermediate values are dropped after their last reader.
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, ExecError> {
    run_with_limit(graph, inputs, memory_limit())
}

/// [`run`], refusing up front a graph whose live values would exceed `limit` bytes.
pub fn run_with_limit(
    graph: &Graph,
    inputs: &[Tensor],
    limit: u64,
) -> Result<Vec<Tensor>, ExecError> {
    graph.check_memory(limit)?;
    if inputs.len() != graph.inputs().len() {
        return Err(ExecError::InputCount {
            expected: graph.inputs().len(),
            got: inputs.len(),
        });
    }
    let mut values: HashMap<ValueRef, Cow<Tensor>> = HashMap::new();
    for (&id, t) in graph.inputs().iter().zip(inputs) {
        let node = graph.node(id);
        check_tensor(t, &node.outputs[0].ty).map_err(|message| ExecError::Input {
            name: node.name.clone(),
            message,
        })?;
        values.insert(ValueRef::new(id, 0), Cow::Borrowed(t));
    }

    let order = graph.topo_order()?;
    // How many reads of each value are still to come.
    let mut reads: HashMap<ValueRef, usize> = HashMap::new();
    for &id in &order {
        for v in graph.node_inputs(id) {
            *reads.entry(v).or_default() += 1;
        }
    }
    let keep = |v: &ValueRef| graph.is_graph_output(*v);

    for &id in &order {
        let node = graph.node(id);
        let at = |message: String| ExecError::AtNode {
            spans: node.spans.clone(),
            message,
        };
        let args = graph.node_inputs(id);
        let results: Vec<Cow<Tensor>> = match &node.op {
            Op::Input => continue,
            Op::Constant(t) => vec![Cow::Borrowed(t)],
            op => {
                let tensors = args
                    .iter()
                    .map(|v| {
                        values.get(v).map(|t| t.as_ref()).ok_or_else(|| {
                            at(format!(
                                "input '{}' has no value (an unfed graph input?)",
                                graph.value(*v).name
                            ))
                        })
                    })
                    .collect::<Result<Vec<&Tensor>, _>>()?;
                let types: Vec<ValueType> = node.outputs.iter().map(|v| v.ty.clone()).collect();
                let out = eval_op(op, &tensors, &types).map_err(at)?;
                out.into_iter().map(Cow::Owned).collect()
            }
        };
        for (i, t) in results.into_iter().enumerate() {
            let v = ValueRef::new(id, i);
            if reads.contains_key(&v) || keep(&v) {
                values.insert(v, t);
            }
        }
        for v in args {
            let left = reads.get_mut(&v).expect("every read was counted");
            *left -= 1;
            if *left == 0 && !keep(&v) {
                values.remove(&v);
            }
        }
    }

    graph
        .outputs()
        .iter()
        .map(|v| {
            values
                .get(v)
                .map(|t| t.clone().into_owned())
                .ok_or_else(|| {
                    ExecError::Graph(GraphError::Graph(format!(
                        "graph output '{}' was not computed",
                        graph.value(*v).name
                    )))
                })
        })
        .collect()
}

/// Checks that a tensor is well formed and has the expected type.
fn check_tensor(t: &Tensor, want: &ValueType) -> Result<(), String> {
    if checked_numel(&t.shape) != Some(t.data.len()) {
        return Err(format!(
            "shape {:?} does not match its {} elements",
            t.shape,
            t.data.len()
        ));
    }
    if t.dtype() != want.dtype || t.shape != want.shape {
        return Err(format!(
            "expected {want}, got {}",
            ValueType::new(t.dtype(), t.shape.clone())
        ));
    }
    Ok(())
}

/// Evaluates one op on concrete inputs. `outputs` are the inferred output types;
/// the results have exactly these types.
pub fn eval_op(op: &Op, inputs: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, String> {
    let op_name = op.kind_name();
    match op {
        Op::Input => return Err("a graph input has no value to evaluate".into()),
        Op::Constant(t) => return Ok(vec![t.clone()]),
        _ => {}
    }
    for (i, t) in inputs.iter().enumerate() {
        if checked_numel(&t.shape) != Some(t.data.len()) {
            return Err(format!(
                "{op_name}: input {i} has shape {:?} but {} elements",
                t.shape,
                t.data.len()
            ));
        }
    }
    let in_types: Vec<ValueType> = inputs
        .iter()
        .map(|t| ValueType::new(t.dtype(), t.shape.clone()))
        .collect();
    let in_refs: Vec<&ValueType> = in_types.iter().collect();
    let inferred = infer_outputs(op, &in_refs).map_err(|m| format!("{op_name}: {m}"))?;
    if inferred != outputs {
        return Err(format!(
            "{op_name}: output types {} differ from the inferred {}",
            list_types(outputs),
            list_types(&inferred)
        ));
    }

    let results = dispatch(op, inputs, outputs).map_err(|m| format!("{op_name}: {m}"))?;

    // Cheap insurance: an op implementation that disagrees with shape inference is a
    // bug, and the oracle must never hand such a tensor to a comparison.
    let well_typed = results.len() == outputs.len()
        && results.iter().zip(outputs).all(|(t, ty)| {
            t.dtype() == ty.dtype && t.shape == ty.shape && t.data.len() == ty.numel()
        });
    if !well_typed {
        return Err(format!(
            "{op_name}: internal error: produced {} where {} was inferred",
            list_types(
                &results
                    .iter()
                    .map(|t| ValueType::new(t.dtype(), t.shape.clone()))
                    .collect::<Vec<_>>()
            ),
            list_types(outputs)
        ));
    }
    Ok(results)
}

fn list_types(types: &[ValueType]) -> String {
    types
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Calls the op implementation. Inputs are already checked against inference.
fn dispatch(op: &Op, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, String> {
    let out = &outputs[0];
    let one = |t: Tensor| vec![t];
    Ok(match op {
        Op::Input | Op::Constant(_) => return Err("sources have nothing to evaluate".into()),
        Op::Conv(c) => one(conv::conv(c, x, out)),
        Op::ConvTranspose(c) => one(conv::conv_transpose(c, x, out)?),
        Op::BatchNorm { epsilon } => one(normalize::batch_norm(*epsilon, x, out)),
        Op::Unary(u) => one(elementwise::unary(*u, x[0])?),
        Op::Binary(b) => one(elementwise::binary(*b, x[0], x[1], out)?),
        Op::Where => one(elementwise::where_(x[0], x[1], x[2], out)?),
        Op::Pool(p) => one(pool::pool(p, x[0], out)),
        Op::GlobalPool(kind) => one(pool::global_pool(*kind, x[0], out)),
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => one(matmul::gemm(*alpha, *beta, *trans_a, *trans_b, x, out)?),
        Op::MatMul => one(matmul::matmul(x[0], x[1], out)?),
        Op::Reshape { .. } => one(Tensor::new(out.shape.clone(), x[0].data.clone())),
        Op::Transpose { perm } => one(movement::transpose(perm, x[0], out)),
        Op::Concat { axis } => one(movement::concat(*axis, x, out)?),
        Op::Split { axis, sizes } => movement::split(*axis, sizes, x[0], outputs)?,
        Op::Slice { axes } => one(movement::slice(axes, x[0], out)?),
        Op::Gather { axis } => one(movement::gather(*axis, x[0], x[1], out)?),
        Op::Pad {
            begins,
            ends: _,
            mode,
        } => one(movement::pad(begins, *mode, x[0], out)?),
        Op::Resize(r) => one(resize::resize(r, x[0], out)?),
        Op::Softmax { axis } => one(normalize::softmax(*axis, false, x[0])),
        Op::LogSoftmax { axis } => one(normalize::softmax(*axis, true, x[0])),
        Op::Reduce { kind, axes, .. } => one(reduce::reduce(*kind, axes, x[0], out)?),
        Op::LayerNorm { axis, epsilon } => one(normalize::layer_norm(*axis, *epsilon, x, out)),
        Op::Cast { to } => one(x[0].cast(*to)),
        Op::Expand { .. } => one(movement::expand(x[0], out)),
        Op::Tile { .. } => one(movement::tile(x[0], out)?),
        Op::Identity => one(x[0].clone()),
        // Transforms, pads and crops; a crop checks the assumption it carries.
        Op::LayoutTransform { .. } | Op::PadWith { .. } | Op::Crop { .. } => {
            one(crate::layout::exec::eval_transform(op, x[0]).expect("a transform op")?)
        }
        Op::InLayout(l) => in_layout(l, x)?,
    })
}

/// Runs a laid-out op on the logical tensors its physical inputs hold, then lays
/// the results out, filling padding with the value the op's pad flow promises.
fn in_layout(l: &LaidOut, x: &[&Tensor]) -> Result<Vec<Tensor>, String> {
    let logical: Vec<Tensor> = x
        .iter()
        .zip(&l.inputs)
        .map(|(t, (layout, shape))| layout.from_physical(t, shape).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let types: Vec<ValueType> = logical
        .iter()
        .map(|t| ValueType::new(t.dtype(), t.shape.clone()))
        .collect();
    let refs: Vec<&ValueType> = types.iter().collect();
    let out_types = infer_outputs(&l.inner, &refs)?;
    let inputs: Vec<&Tensor> = logical.iter().collect();
    eval_op(&l.inner, &inputs, &out_types)?
        .iter()
        .zip(&l.outputs)
        .map(|(t, (layout, pad))| layout.to_physical(t, pad.fill()).map_err(|e| e.to_string()))
        .collect()
}

#[cfg(test)]
pub(crate) mod testutil;
