//! Reference evaluation of one op: checks the inputs against shape inference,
//! computes, and checks the results against it too.

use super::*;
use crate::core::{checked_numel, ValueType};

/// Evaluates one op on concrete inputs. `outputs` are the inferred output types;
/// the results have exactly these types.
pub fn eval_op(op: &Op, inputs: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
    let op_name = op.kind_name();
    match op {
        Op::Input => {
            return Err(OpError::Unsupported(
                "a graph input has no value to evaluate".into(),
            ))
        }
        Op::Constant(t) => return Ok(vec![t.clone()]),
        _ => {}
    }
    for (i, t) in inputs.iter().enumerate() {
        if checked_numel(&t.shape) != Some(t.data.len()) {
            return Err(OpError::Shape(format!(
                "{op_name}: input {i} has shape {:?} but {} elements",
                t.shape,
                t.data.len()
            )));
        }
    }
    let in_types: Vec<ValueType> = inputs
        .iter()
        .map(|t| ValueType::new(t.dtype(), t.shape.clone()))
        .collect();
    let in_refs: Vec<&ValueType> = in_types.iter().collect();
    let inferred = infer_outputs(op, &in_refs).map_err(|e| e.in_op(op_name))?;
    if inferred != outputs {
        return Err(OpError::Shape(format!(
            "{op_name}: output types {} differ from the inferred {}",
            list_types(outputs),
            list_types(&inferred)
        )));
    }

    let results = dispatch(op, inputs, outputs).map_err(|e| e.in_op(op_name))?;

    // Cheap insurance: an op implementation that disagrees with shape inference is a
    // bug, and the oracle must never hand such a tensor to a comparison.
    let well_typed = results.len() == outputs.len()
        && results.iter().zip(outputs).all(|(t, ty)| {
            t.dtype() == ty.dtype && t.shape == ty.shape && t.data.len() == ty.numel()
        });
    if !well_typed {
        return Err(OpError::Internal(format!(
            "{op_name}: internal error: produced {} where {} was inferred",
            list_types(
                &results
                    .iter()
                    .map(|t| ValueType::new(t.dtype(), t.shape.clone()))
                    .collect::<Vec<_>>()
            ),
            list_types(outputs)
        )));
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
fn dispatch(op: &Op, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
    op.def().eval(x, outputs)
}
