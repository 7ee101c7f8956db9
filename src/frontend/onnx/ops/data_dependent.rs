//! NonZero, NonMaxSuppression and Unique: ops whose output shapes depend on
//! their inputs' values. With constant inputs they fold to constants here.
//! Otherwise the graph cannot be imported whole: a session cuts the model
//! before the op and runs it in stages (`frontend::onnx::stages`).

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::frontend::onnx::ImportError;
use crate::graph::{Span, Tensor, ValueRef};
use crate::ops::DataDependent;
use onnx_protobuf::NodeProto;

pub(super) fn register(reg: &mut Registry) {
    for op_type in ["NonZero", "NonMaxSuppression", "Unique"] {
        reg.add(AI_ONNX, op_type, fold);
    }
}

/// The data-dependent op a node of the default domain applies, with its
/// attributes; `None` for any other node. An attribute out of range is an
/// error naming the node's layer, `span`.
pub(in crate::frontend::onnx) fn data_dependent_op(
    n: &NodeProto,
    span: &Span,
) -> Result<Option<DataDependent>, ImportError> {
    if !(n.domain.is_empty() || n.domain == "ai.onnx") {
        return Ok(None);
    }
    let int = |name: &str| n.attribute.iter().find(|a| a.name == name).map(|a| a.i);
    let flag = |name: &str, default: i64| match int(name).unwrap_or(default) {
        b @ (0 | 1) => Ok(b == 1),
        b => Err(ImportError::layer(
            span,
            format!("{name} must be 0 or 1, not {b}"),
        )),
    };
    Ok(Some(match n.op_type.as_str() {
        "NonZero" => DataDependent::NonZero,
        "NonMaxSuppression" => DataDependent::NonMaxSuppression {
            center_point_box: flag("center_point_box", 0)?,
        },
        "Unique" => DataDependent::Unique {
            axis: int("axis"),
            sorted: flag("sorted", 1)?,
        },
        _ => return Ok(None),
    }))
}

/// The op applied to its constant inputs, as constants; an input computed at
/// run time is a `DataDependent` error, which tells a session where to cut.
fn fold(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let Some(op) = data_dependent_op(c.node, c.span)? else {
        return Err(c.err("not an op whose output shape depends on values"));
    };
    let mut inputs: Vec<Option<Tensor>> = Vec::with_capacity(c.inputs.len());
    for (i, v) in c.inputs.iter().enumerate() {
        let Some(v) = v else {
            inputs.push(None);
            continue;
        };
        let Some(t) = c.g.constant(*v) else {
            return Err(ImportError::DataDependent {
                spans: vec![c.span.clone()],
                message: format!(
                    "the shape of {}'s output depends on the values of input {i} ('{}'), computed at run time: the model runs in stages cut before this layer (`layoutopt run`, `api::Session`), and cannot be planned as one graph",
                    op.op_type(),
                    c.node.input[i]
                ),
            });
        };
        inputs.push(Some(t.clone()));
    }
    let given: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    let outputs = op.evaluate(&given).map_err(|e| c.err(e.to_string()))?;
    let mut values = Vec::with_capacity(outputs.len());
    for (k, t) in outputs.into_iter().enumerate() {
        c.check_size(t.dtype(), &t.shape)?;
        let name = match c.node.output.get(k) {
            Some(name) if !name.is_empty() => name.clone(),
            _ => format!("{}/output{k}", c.layer()),
        };
        values.push(Some(c.g.add_constant(&name, t, vec![c.span.clone()])));
    }
    Ok(values)
}
