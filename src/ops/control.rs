//! Control flow (ONNX If, Loop, Scan): ops whose meaning is held in subgraphs.
//! A subgraph is a graph, which the graph layer above defines, so the ops
//! themselves live where graphs can be run (`reference::control`); here they
//! are one variant of [`super::Op`] behind this trait, which every stage asks
//! through [`OpDef`] like any other op.

use super::{OpDef, OpError};
use crate::core::{Tensor, ValueType};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// Runs subgraph `i` of a control-flow op on its inputs, returning its
/// outputs: the reference executor, or a compiled model of the subgraph.
pub type RunSubgraph<'a> = dyn FnMut(usize, &[Tensor]) -> Result<Vec<Tensor>, OpError> + 'a;

/// An op that runs subgraphs. Its reference semantics (`OpDef::eval`) run
/// them on the reference executor; `run` lets another executor run them.
pub trait ControlFlowOp: OpDef + Send + Sync {
    /// The op on inputs `x` (checked against `OpDef::infer`), computing
    /// `outputs`, with each subgraph run by `run`.
    fn run(
        &self,
        x: &[&Tensor],
        outputs: &[ValueType],
        run: &mut RunSubgraph,
    ) -> Result<Vec<Tensor>, OpError>;

    /// The concrete op, whose subgraphs the executors reach.
    fn as_any(&self) -> &dyn Any;
}

/// A control-flow op, shared: cloning a graph shares its subgraphs.
#[derive(Clone)]
pub struct ControlFlow(pub Arc<dyn ControlFlowOp>);

/// Two control-flow ops are the same op only when they share their subgraphs
/// (comparing whole subgraphs would cost more than any pass gains by it).
impl PartialEq for ControlFlow {
    fn eq(&self, other: &ControlFlow) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}

/// The op's name and identity: the e-graph hashes ops by their Debug text,
/// which must not walk whole subgraphs.
impl fmt::Debug for ControlFlow {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}@{:p}", self.0.name(), Arc::as_ptr(&self.0))
    }
}
