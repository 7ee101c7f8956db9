//! The reference executor: a plain, obviously correct implementation of every op
//! over the graph IR. It is the oracle for every later stage.

use crate::graph::{Op, Tensor, ValueType};

/// Evaluates one op on concrete inputs. `outputs` are the inferred output types.
pub fn eval_op(
    op: &Op,
    _inputs: &[&Tensor],
    _outputs: &[ValueType],
) -> Result<Vec<Tensor>, String> {
    Err(format!(
        "{} is not implemented in the reference executor yet",
        op.kind_name()
    ))
}

/// An execution error naming the layer at fault.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ExecError {
    pub message: String,
}

/// Runs a whole graph (placeholder until the executor lands).
pub fn run(_graph: &crate::graph::Graph, _inputs: &[Tensor]) -> Result<Vec<Tensor>, ExecError> {
    Err(ExecError {
        message: "not yet".into(),
    })
}
