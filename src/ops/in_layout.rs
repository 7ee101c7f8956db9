//! An op placed in storage layouts by the planner: its inputs and outputs are
//! physical tensors; its meaning is the inner op's on the logical tensors.

use super::onnx::*;
use super::shape::*;
use super::*;

impl OpDef for LaidOut {
    fn name(&self) -> &'static str {
        self.inner.kind_name()
    }

    fn num_outputs(&self) -> usize {
        self.inner.num_outputs()
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let l = self;

        if inputs.len() != l.inputs.len() {
            return Err(OpError::Arity(format!(
                "expects {} inputs, got {}",
                l.inputs.len(),
                inputs.len()
            )));
        }
        let mut logical = Vec::with_capacity(inputs.len());
        for (t, (layout, shape)) in inputs.iter().zip(&l.inputs) {
            let want = layout.physical_shape(shape)?;
            if t.shape != want {
                return Err(OpError::Shape(format!(
                    "input shape {:?} is not {shape:?} laid out in {layout} ({want:?})",
                    t.shape
                )));
            }
            logical.push(ValueType::new(t.dtype, shape.clone()));
        }
        let refs: Vec<&ValueType> = logical.iter().collect();
        let outs = infer_outputs(&l.inner, &refs)?;
        if outs.len() != l.outputs.len() {
            return Err(OpError::Arity(format!(
                "{} output layouts for {} outputs",
                l.outputs.len(),
                outs.len()
            )));
        }
        outs.into_iter()
            .zip(&l.outputs)
            .map(|(t, (layout, _))| {
                let shape = layout.physical_shape(&t.shape)?;
                Ok(ValueType::new(t.dtype, shape))
            })
            .collect()
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        in_layout(self, x)
    }

    /// The logical op between a view of each input in its logical shape and a
    /// re-layout of each result.
    fn to_onnx(&self, cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let (b, inputs, in_types, outputs) = cx.parts();
        let logical: Vec<String> = inputs
            .iter()
            .zip(&self.inputs)
            .map(|(v, (layout, shape))| from_physical(b, v, layout, shape))
            .collect();
        let logical_types = self.logical_types(in_types);
        let refs: Vec<&ValueType> = logical_types.iter().collect();
        let inner_types = infer_outputs(&self.inner, &refs)?;
        let inner_names: Vec<String> = outputs.iter().map(|n| format!("{n}/logical")).collect();
        let results = self.inner.def().to_onnx(OnnxCx {
            b: &mut *b,
            inputs: &logical,
            in_types: &logical_types,
            outputs: &inner_names,
        })?;
        Ok(results
            .iter()
            .zip(&self.outputs)
            .zip(&inner_types)
            .map(|((r, (layout, pad)), ty)| to_physical(b, r, layout, &ty.shape, ty.dtype, *pad))
            .collect())
    }

    fn min_onnx_opset(&self) -> i64 {
        self.inner.def().min_onnx_opset()
    }

    /// The inner op's work on the logical tensors: padding the layout adds is
    /// not counted.
    fn flops(&self, ins: &[&ValueType], _: &[&ValueType]) -> f64 {
        let logical = self.logical_types(ins);
        let refs: Vec<&ValueType> = logical.iter().collect();
        let Ok(outs) = infer_outputs(&self.inner, &refs) else {
            return 0.0;
        };
        self.inner
            .def()
            .flops(&refs, &outs.iter().collect::<Vec<_>>())
    }
}

impl LaidOut {
    /// The logical types of physical inputs of these types.
    fn logical_types<T: std::borrow::Borrow<ValueType>>(&self, physical: &[T]) -> Vec<ValueType> {
        physical
            .iter()
            .zip(&self.inputs)
            .map(|(t, (_, shape))| ValueType::new(t.borrow().dtype, shape.clone()))
            .collect()
    }
}

/// Runs a laid-out op on the logical tensors its physical inputs hold, then lays
/// the results out, filling padding with the value the op's pad flow promises.
fn in_layout(l: &LaidOut, x: &[&Tensor]) -> Result<Vec<Tensor>, OpError> {
    let logical: Vec<Tensor> = x
        .iter()
        .zip(&l.inputs)
        .map(|(t, (layout, shape))| layout.from_physical(t, shape))
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
        .map(|(t, (layout, pad))| layout.to_physical(t, pad.fill()).map_err(OpError::from))
        .collect()
}
