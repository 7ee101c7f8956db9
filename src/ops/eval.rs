//! Reference evaluation of one op: checks the inputs against shape inference,
//! computes, and checks the results against it too.

use super::*;
use super::{conv, elementwise, matmul, movement, normalize, pool, reduce, resize, transform};
use crate::core::{checked_numel, ValueType};

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
        Op::BatchNorm(BatchNorm { epsilon }) => one(normalize::batch_norm(*epsilon, x, out)),
        Op::Unary(u) => one(elementwise::unary(*u, x[0])?),
        Op::Binary(b) => one(elementwise::binary(*b, x[0], x[1], out)?),
        Op::Where => one(elementwise::where_(x[0], x[1], x[2], out)?),
        Op::Pool(p) => one(pool::pool(p, x[0], out)),
        Op::GlobalPool(GlobalPool { kind }) => one(pool::global_pool(*kind, x[0], out)),
        Op::Gemm(Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        }) => one(matmul::gemm(*alpha, *beta, *trans_a, *trans_b, x, out)?),
        Op::MatMul => one(matmul::matmul(x[0], x[1], out)?),
        Op::Reshape(_) => one(Tensor::new(out.shape.clone(), x[0].data.clone())),
        Op::Transpose(Transpose { perm }) => one(movement::transpose(perm, x[0], out)),
        Op::Concat(Concat { axis }) => one(movement::concat(*axis, x, out)?),
        Op::Split(Split { axis, sizes }) => movement::split(*axis, sizes, x[0], outputs)?,
        Op::Slice(Slice { axes }) => one(movement::slice(axes, x[0], out)?),
        Op::Gather(Gather { axis }) => one(movement::gather(*axis, x[0], x[1], out)?),
        Op::Pad(Pad {
            begins,
            ends: _,
            mode,
        }) => one(movement::pad(begins, *mode, x[0], out)?),
        Op::Resize(r) => one(resize::resize(r, x[0], out)?),
        Op::Softmax(Softmax { axis }) => one(normalize::softmax(*axis, false, x[0])),
        Op::LogSoftmax(LogSoftmax { axis }) => one(normalize::softmax(*axis, true, x[0])),
        Op::Reduce(Reduce { kind, axes, .. }) => one(reduce::reduce(*kind, axes, x[0], out)?),
        Op::LayerNorm(LayerNorm { axis, epsilon }) => {
            one(normalize::layer_norm(*axis, *epsilon, x, out))
        }
        Op::Cast(Cast { to }) => one(x[0].cast(*to)),
        Op::Expand(_) => one(movement::expand(x[0], out)),
        Op::Tile(_) => one(movement::tile(x[0], out)?),
        Op::Identity => one(x[0].clone()),
        // Transforms, pads and crops; a crop checks the assumption it carries.
        Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_) => {
            one(transform::eval_transform(op, x[0]).expect("a transform op")?)
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
