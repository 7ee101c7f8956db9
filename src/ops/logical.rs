//! Boolean logic: And, Or, Xor (broadcast) and Not, on bool tensors.

use super::index::broadcast_indices;
use super::onnx::*;
use super::shape::*;
use super::*;
use crate::core::{Tensor, TensorData, ValueType};

/// A logical op on bool tensors: And, Or, Xor take a, b (broadcast); Not takes x.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Logical {
    /// a ∧ b.
    And,
    /// a ∨ b.
    Or,
    /// a ⊕ b.
    Xor,
    /// ¬x.
    Not,
}

impl Logical {
    fn arity(self) -> usize {
        match self {
            Logical::Not => 1,
            _ => 2,
        }
    }

    fn apply(self, a: bool, b: bool) -> bool {
        match self {
            Logical::And => a && b,
            Logical::Or => a || b,
            Logical::Xor => a != b,
            Logical::Not => !a,
        }
    }
}

impl OpDef for Logical {
    fn name(&self) -> &'static str {
        match self {
            Logical::And => "And",
            Logical::Or => "Or",
            Logical::Xor => "Xor",
            Logical::Not => "Not",
        }
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, self.arity(), self.arity())?;
        if let Some(t) = inputs.iter().find(|t| t.dtype != DType::Bool) {
            return Err(OpError::DType(format!(
                "operands must be bool, got {}",
                t.dtype
            )));
        }
        let mut shape = inputs[0].shape.clone();
        for t in &inputs[1..] {
            shape = broadcast_shapes(&shape, &t.shape)?;
        }
        Ok(vec![ValueType::new(DType::Bool, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let a = x[0].data.to_bool();
        let ai = broadcast_indices(&x[0].shape, &out.shape);
        let v: Vec<bool> = match x.get(1) {
            None => ai.iter().map(|&i| self.apply(a[i], false)).collect(),
            Some(y) => {
                let b = y.data.to_bool();
                let bi = broadcast_indices(&y.shape, &out.shape);
                ai.iter()
                    .zip(&bi)
                    .map(|(&i, &j)| self.apply(a[i], b[j]))
                    .collect()
            }
        };
        Ok(vec![Tensor::new(out.shape.clone(), TensorData::Bool(v))])
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        cx.single(self.name(), cx.inputs, vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::eval1;

    #[test]
    fn truth_tables_with_broadcasting() {
        let a = Tensor::new(vec![4], TensorData::Bool(vec![false, false, true, true]));
        let b = Tensor::new(vec![4], TensorData::Bool(vec![false, true, false, true]));
        let table = |op| eval1(Op::Logical(op), &[&a, &b]).data.to_bool();
        assert_eq!(table(Logical::And), [false, false, false, true]);
        assert_eq!(table(Logical::Or), [false, true, true, true]);
        assert_eq!(table(Logical::Xor), [false, true, true, false]);
        let not = eval1(Op::Logical(Logical::Not), &[&a]).data.to_bool();
        assert_eq!(not, [true, true, false, false]);
        let one = Tensor::new(vec![1], TensorData::Bool(vec![true]));
        let and = eval1(Op::Logical(Logical::And), &[&a, &one]).data.to_bool();
        assert_eq!(and, [false, false, true, true]);
    }
}
