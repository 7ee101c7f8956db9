//! Ops that pick elements along one axis: by value (ArgMax/ArgMin, TopK) or by
//! an index tensor (GatherElements). Their indices are i64, so they run on the
//! reference semantics here; the values they feed on are any numeric type.

use super::onnx::*;
use super::shape::*;
use super::*;
use crate::core::{numel, Tensor, ValueType};
use std::cmp::Ordering;

/// Which extreme an [`ArgReduce`] finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// The index of the largest element.
    Max,
    /// The index of the smallest element.
    Min,
}

/// ArgMax / ArgMin: x -> i64 indices along `axis`.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgReduce {
    /// Largest or smallest.
    pub kind: ArgKind,
    /// The reduced axis.
    pub axis: usize,
    /// Whether the reduced axis stays (extent 1).
    pub keepdims: bool,
    /// On ties, the last index instead of the first.
    pub select_last_index: bool,
}

/// TopK: x -> (values, i64 indices) of the `k` largest (or smallest) along `axis`,
/// in order; ties go to the lower index.
#[derive(Clone, Debug, PartialEq)]
pub struct TopK {
    /// The axis searched.
    pub axis: usize,
    /// How many elements are kept.
    pub k: usize,
    /// The largest (else the smallest).
    pub largest: bool,
}

/// GatherElements: data, indices (same rank) -> data at each index along `axis`.
#[derive(Clone, Debug, PartialEq)]
pub struct GatherElements {
    /// The indexed axis.
    pub axis: usize,
}

/// A tensor viewed as lines along `axis`: (outer, extent, inner).
fn lines(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        numel(&shape[..axis]),
        shape[axis],
        numel(&shape[axis + 1..]),
    )
}

fn check_axis(x: &ValueType, axis: usize) -> Result<(), OpError> {
    match axis < x.shape.len() {
        true => Ok(()),
        false => Err(OpError::Attribute(format!(
            "axis {axis} is out of range for shape {:?}",
            x.shape
        ))),
    }
}

fn check_numeric(x: &ValueType) -> Result<(), OpError> {
    match x.dtype {
        DType::Bool => Err(OpError::DType("not defined on bool tensors".into())),
        _ => Ok(()),
    }
}

/// Orders two elements so that the wanted one (largest or smallest) comes
/// first; NaN counts as the largest, as in numpy.
fn rank(largest: bool, a: f64, b: f64) -> Ordering {
    let o = match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).expect("neither is NaN"),
    };
    match largest {
        true => o.reverse(),
        false => o,
    }
}

impl OpDef for ArgReduce {
    fn name(&self) -> &'static str {
        match self.kind {
            ArgKind::Max => "ArgMax",
            ArgKind::Min => "ArgMin",
        }
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        check_axis(x, self.axis)?;
        check_numeric(x)?;
        if x.shape[self.axis] == 0 {
            return Err(OpError::Shape(format!("axis {} is empty", self.axis)));
        }
        let mut shape = x.shape.clone();
        match self.keepdims {
            true => shape[self.axis] = 1,
            false => {
                shape.remove(self.axis);
            }
        }
        Ok(vec![ValueType::new(DType::I64, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let v = x[0].data.to_f64();
        let (outer, n, inner) = lines(&x[0].shape, self.axis);
        let largest = self.kind == ArgKind::Max;
        let mut out = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| v[(o * n + k) * inner + i];
                let mut best = 0;
                for k in 1..n {
                    // NaN wins ArgMin as well as ArgMax, as in numpy: the index
                    // is that of the element ReduceMin/ReduceMax give, and they
                    // propagate NaN.
                    let order = match (at(k).is_nan(), at(best).is_nan()) {
                        (true, false) => Ordering::Less,
                        (false, true) => Ordering::Greater,
                        _ => rank(largest, at(k), at(best)),
                    };
                    let better = match order {
                        Ordering::Less => true,
                        Ordering::Equal => self.select_last_index,
                        Ordering::Greater => false,
                    };
                    if better {
                        best = k;
                    }
                }
                out.push(best as i64);
            }
        }
        Ok(vec![Tensor::from_i64(outputs[0].shape.clone(), out)])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let attrs = vec![
            ("axis", Attr::Int(self.axis as i64)),
            ("keepdims", Attr::Int(self.keepdims as i64)),
            (
                "select_last_index",
                Attr::Int(self.select_last_index as i64),
            ),
        ];
        cx.single(self.name(), cx.inputs, attrs)
    }

    fn min_onnx_opset(&self) -> i64 {
        12
    }
}

impl OpDef for TopK {
    fn name(&self) -> &'static str {
        "TopK"
    }

    fn num_outputs(&self) -> usize {
        2
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        check_axis(x, self.axis)?;
        check_numeric(x)?;
        if self.k > x.shape[self.axis] {
            return Err(OpError::Attribute(format!(
                "k = {} is more than the {} elements of axis {}",
                self.k, x.shape[self.axis], self.axis
            )));
        }
        let mut shape = x.shape.clone();
        shape[self.axis] = self.k;
        Ok(vec![
            ValueType::new(x.dtype, shape.clone()),
            ValueType::new(DType::I64, shape),
        ])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let v = x[0].data.to_f64();
        let (outer, n, inner) = lines(&x[0].shape, self.axis);
        let k = self.k;
        let mut picked = vec![0usize; outer * k * inner];
        let mut order: Vec<usize> = Vec::with_capacity(n);
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| v[(o * n + j) * inner + i];
                order.clear();
                order.extend(0..n);
                // A stable sort keeps the lower index first among equals.
                order.sort_by(|&a, &b| rank(self.largest, at(a), at(b)));
                for (r, &j) in order[..k].iter().enumerate() {
                    picked[(o * k + r) * inner + i] = (o * n + j) * inner + i;
                }
            }
        }
        let values = x[0].data.gather(picked.iter().copied());
        let indices = picked.iter().map(|&p| ((p / inner) % n) as i64).collect();
        Ok(vec![
            Tensor::new(outputs[0].shape.clone(), values),
            Tensor::from_i64(outputs[1].shape.clone(), indices),
        ])
    }

    fn to_onnx(&self, cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let (b, inputs, _, outputs) = cx.parts();
        let k = b.ints("k", &[self.k as i64]);
        let outs: Vec<String> = outputs.iter().map(|o| b.fresh(o)).collect();
        let attrs = vec![
            ("axis", Attr::Int(self.axis as i64)),
            ("largest", Attr::Int(self.largest as i64)),
            ("sorted", Attr::Int(1)),
        ];
        b.node_multi("TopK", &[inputs[0].clone(), k], attrs, &outs);
        Ok(outs)
    }

    fn min_onnx_opset(&self) -> i64 {
        11
    }
}

impl OpDef for GatherElements {
    fn name(&self) -> &'static str {
        "GatherElements"
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 2, 2)?;
        let (data, idx) = (inputs[0], inputs[1]);
        check_axis(data, self.axis)?;
        if !matches!(idx.dtype, DType::I64 | DType::I32) {
            return Err(OpError::DType(format!(
                "indices must be int32 or int64, got {}",
                idx.dtype
            )));
        }
        if idx.shape.len() != data.shape.len() {
            return Err(OpError::Shape(format!(
                "indices {:?} and data {:?} differ in rank",
                idx.shape, data.shape
            )));
        }
        if let Some(a) =
            (0..data.shape.len()).find(|&a| a != self.axis && idx.shape[a] > data.shape[a])
        {
            return Err(OpError::Shape(format!(
                "indices {:?} are larger than data {:?} on axis {a}",
                idx.shape, data.shape
            )));
        }
        Ok(vec![ValueType::new(data.dtype, idx.shape.clone())])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let (data, idx) = (x[0], x[1]);
        let extent = data.shape[self.axis] as i64;
        let data_strides = crate::core::strides(&data.shape);
        let shape = &idx.shape;
        let mut coord = vec![0usize; shape.len()];
        let mut picked = Vec::with_capacity(idx.numel());
        for (flat, &j) in idx.data.to_i64().iter().enumerate() {
            let mut rest = flat;
            for a in (0..shape.len()).rev() {
                coord[a] = rest % shape[a];
                rest /= shape[a];
            }
            let j = if j < 0 { j + extent } else { j };
            if !(0..extent).contains(&j) {
                return Err(OpError::Value(format!(
                    "index {} is out of range for axis {} of extent {extent}",
                    idx.data.to_i64()[flat],
                    self.axis
                )));
            }
            coord[self.axis] = j as usize;
            picked.push(coord.iter().zip(&data_strides).map(|(c, s)| c * s).sum());
        }
        let out = data.data.gather(picked.into_iter());
        Ok(vec![Tensor::new(outputs[0].shape.clone(), out)])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let attrs = vec![("axis", Attr::Int(self.axis as i64))];
        cx.single("GatherElements", cx.inputs, attrs)
    }

    fn min_onnx_opset(&self) -> i64 {
        11
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{assert_close, assert_i64, eval, eval1, f32s, i64s};

    #[test]
    fn argmax_and_argmin_break_ties_as_asked() {
        let x = f32s(&[2, 3], &[1.0, 5.0, 5.0, 2.0, 0.0, 2.0]);
        let arg = |kind, keepdims, select_last_index| {
            Op::ArgReduce(ArgReduce {
                kind,
                axis: 1,
                keepdims,
                select_last_index,
            })
        };
        assert_i64(
            &eval1(arg(ArgKind::Max, true, false), &[&x]),
            &[2, 1],
            &[1, 0],
        );
        assert_i64(&eval1(arg(ArgKind::Max, false, true), &[&x]), &[2], &[2, 2]);
        assert_i64(
            &eval1(arg(ArgKind::Min, false, false), &[&x]),
            &[2],
            &[0, 1],
        );
    }

    #[test]
    fn topk_orders_values_and_keeps_lower_indices_first() {
        let x = f32s(&[1, 5], &[3.0, 1.0, 3.0, 7.0, -1.0]);
        let top = |largest| {
            Op::TopK(TopK {
                axis: 1,
                k: 3,
                largest,
            })
        };
        let out = eval(top(true), &[&x]);
        assert_close(&out[0], &[1, 3], &[7.0, 3.0, 3.0], 0.0);
        assert_i64(&out[1], &[1, 3], &[3, 0, 2]);
        let out = eval(top(false), &[&x]);
        assert_close(&out[0], &[1, 3], &[-1.0, 1.0, 3.0], 0.0);
        assert_i64(&out[1], &[1, 3], &[4, 1, 0]);
    }

    #[test]
    fn gather_elements_indexes_one_axis() {
        let data = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let idx = i64s(&[2, 2], &[0, 0, 1, -2]);
        let op = Op::GatherElements(GatherElements { axis: 1 });
        assert_close(
            &eval1(op.clone(), &[&data, &idx]),
            &[2, 2],
            &[1.0, 1.0, 4.0, 3.0],
            0.0,
        );
        let bad = i64s(&[2, 2], &[0, 0, 2, 0]);
        let err = crate::ops::testutil::try_eval(op, &[&data, &bad]).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
    }
}
