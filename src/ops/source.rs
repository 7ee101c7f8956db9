//! Sources: graph inputs and constants. They have no inputs; the graph records
//! their types and the executor supplies their values.

use super::{Input, LayoutRole, OpDef, OpError};
use crate::core::{PadFlow, PadValue};
use crate::core::{Tensor, ValueType};

impl OpDef for Input {
    fn name(&self) -> &'static str {
        "Input"
    }

    fn infer(&self, _: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        Err(OpError::Unsupported(
            "a graph input's type is given, not inferred".into(),
        ))
    }

    fn eval(&self, _: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Err(OpError::Unsupported(
            "a graph input has no value to evaluate".into(),
        ))
    }

    /// A source reads no padding; what its own padding holds is decided where
    /// it is laid out.
    fn pad_flow(&self, _: &[PadValue], _: &[usize]) -> PadFlow {
        PadFlow {
            inputs: vec![],
            output: PadValue::Undef,
        }
    }
}

/// A constant op is its tensor.
impl OpDef for Tensor {
    fn name(&self) -> &'static str {
        "Constant"
    }

    fn infer(&self, _: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![ValueType::new(self.dtype(), self.shape.clone())])
    }

    fn eval(&self, _: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![self.clone()])
    }

    /// A source reads no padding; what its own padding holds is decided where
    /// it is laid out.
    fn pad_flow(&self, _: &[PadValue], _: &[usize]) -> PadFlow {
        PadFlow {
            inputs: vec![],
            output: PadValue::Undef,
        }
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Sink
    }
}
