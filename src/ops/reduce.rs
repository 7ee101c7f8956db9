//! ReduceSum / ReduceMean / ReduceMax over a set of axes. Floats in f64, integers
//! exactly in i64 (an integer mean truncates, like C division).

use super::index::affine_indices;
use super::onnx::*;
use super::pad_flow::*;
use super::shape::*;
use super::te::*;
use super::*;
use crate::core::scalar::Scalar;
use crate::core::{numel, strides, DType, Tensor, TensorData, ValueType};
use crate::ops::ReduceKind;

impl OpDef for Reduce {
    fn name(&self) -> &'static str {
        self.kind.onnx_name()
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Reduce { axes, keepdims, .. } = self;

        let x = sole_input(inputs)?;
        if axes.iter().any(|&a| a >= x.shape.len()) {
            return Err(OpError::Attribute(format!(
                "axes {axes:?} out of range for shape {:?}",
                x.shape
            )));
        }
        let mut shape = Vec::new();
        for (i, &d) in x.shape.iter().enumerate() {
            if axes.contains(&i) {
                if *keepdims {
                    shape.push(1);
                }
            } else {
                shape.push(d);
            }
        }
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let Reduce { kind, axes, .. } = self;
        Ok(vec![reduce(*kind, axes, x[0], out)?])
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        let mut flow = pass_through(inputs);
        let p = flow.output;
        let padded_in = |axes: &[usize]| padded.iter().any(|a| axes.contains(a));
        let Reduce { kind, axes, .. } = self;

        let identity = match kind {
            ReduceKind::Sum | ReduceKind::Mean => 0.0,
            ReduceKind::Max => f32::NEG_INFINITY,
            ReduceKind::Min => f32::INFINITY,
            ReduceKind::Prod => 1.0,
        };
        if padded_in(axes) {
            flow.inputs[0] = Requirement::Value(identity);
        }
        // Padding positions of kept axes reduce over constant padding: the
        // mean, max and min of p are p, the sum is only known when p is 0, the
        // product when p is 0 or 1.
        flow.output = match kind {
            ReduceKind::Mean | ReduceKind::Max | ReduceKind::Min => p,
            ReduceKind::Sum if p.is(0.0) => p,
            ReduceKind::Prod if p.is(0.0) || p.is(1.0) => p,
            ReduceKind::Sum | ReduceKind::Prod => PadValue::Undef,
        };
        flow
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn runs_in(&self, l: &Layout, _: &[&ValueType]) -> bool {
        let Reduce { axes, keepdims, .. } = self;
        *keepdims && unblocked(l, axes)
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.parts();
        let arity = |n: usize| check_arity(self.name(), types, n);
        let Reduce {
            kind,
            axes,
            keepdims,
        } = self;

        arity(1)?;
        Ok(Defined::output(reduce_compute(
            g,
            sfx,
            ph[0],
            &operand_shape(types, 0),
            *kind,
            axes,
            *keepdims,
        )?))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Reduce {
            kind,
            axes,
            keepdims,
        } = self;

        let op_type = kind.onnx_name();
        let mut attrs = vec![("keepdims", Attr::Int(*keepdims as i64))];
        // Axes became an input at opset 13 for ReduceSum, 18 for the others.
        let as_input = cx.b.opset() >= if *kind == ReduceKind::Sum { 13 } else { 18 };
        let mut ins = vec![cx.input(0)];
        if as_input {
            ins.push(cx.b.ints("axes", &i64s(axes)));
        } else {
            attrs.push(("axes", Attr::Ints(i64s(axes))));
        }
        cx.single(op_type, &ins, attrs)
    }
}

pub(super) fn reduce(
    kind: ReduceKind,
    axes: &[usize],
    x: &Tensor,
    out: &ValueType,
) -> Result<Tensor, OpError> {
    // The output index of every input element: its kept coordinates, with the
    // strides of the kept shape (keepdims only adds extents of 1).
    let kept: Vec<usize> = (0..x.rank())
        .filter(|a| !axes.contains(a))
        .map(|a| x.shape[a])
        .collect();
    let kept_strides = strides(&kept);
    let mut next = kept_strides.iter();
    let steps: Vec<isize> = (0..x.rank())
        .map(|a| {
            if axes.contains(&a) {
                0
            } else {
                *next.next().expect("one stride per kept axis") as isize
            }
        })
        .collect();
    let dst = affine_indices(&x.shape, 0, &steps);
    let n_out = out.numel();
    let count = (x.numel() / n_out.max(1)) as i64;

    let data = match x.dtype() {
        // The maximum of booleans is any, the minimum all.
        DType::Bool if matches!(kind, ReduceKind::Max | ReduceKind::Min) => {
            let all = kind == ReduceKind::Min;
            let mut acc = vec![all; n_out];
            for (o, v) in dst.zip(x.data.to_bool()) {
                acc[o] = if all { acc[o] && v } else { acc[o] || v };
            }
            TensorData::Bool(acc)
        }
        DType::Bool => return Err(OpError::DType("not defined on bool tensors".into())),
        d if d.is_float() => {
            let init = match kind {
                ReduceKind::Max => f64::NEG_INFINITY,
                ReduceKind::Min => f64::INFINITY,
                ReduceKind::Prod => 1.0,
                ReduceKind::Sum | ReduceKind::Mean => 0.0,
            };
            let mut acc = vec![init; n_out];
            for (o, v) in dst.zip(x.data.to_f64()) {
                acc[o] = match kind {
                    // NaN propagates, as in numpy.max.
                    ReduceKind::Max => Scalar::max(acc[o], v),
                    ReduceKind::Min => Scalar::min(acc[o], v),
                    ReduceKind::Prod => acc[o] * v,
                    ReduceKind::Sum | ReduceKind::Mean => acc[o] + v,
                };
            }
            if kind == ReduceKind::Mean {
                acc.iter_mut().for_each(|a| *a /= count as f64);
            }
            TensorData::from_f64(out.dtype, acc)
        }
        _ => {
            let (init, take) = kind.integer_fold();
            let mut acc = vec![init; n_out];
            for (o, v) in dst.zip(x.data.to_i128()) {
                acc[o] = take(acc[o], v);
            }
            if kind == ReduceKind::Mean {
                if count == 0 {
                    return Err(OpError::Value("integer mean over no elements".into()));
                }
                acc.iter_mut().for_each(|a| *a /= count as i128);
            }
            TensorData::from_i128(out.dtype, acc)
        }
    };
    Ok(Tensor::new(out.shape.clone(), data))
}

fn reduce_compute(
    g: &mut ComputeGraph,
    sfx: &str,
    x: TeTensor,
    s: &[usize],
    kind: ReduceKind,
    axes: &[usize],
    keepdims: bool,
) -> Result<TeTensor, TirError> {
    if let Some(a) = axes.iter().find(|&&a| a >= s.len()) {
        return Err(TirError::Definition(format!(
            "reduced axis {a} is out of range for rank {}",
            s.len()
        )));
    }
    let kept: Vec<usize> = (0..s.len()).filter(|a| !axes.contains(a)).collect();
    let reduced: Vec<usize> = (0..s.len()).filter(|a| axes.contains(a)).collect();
    let out: Vec<usize> = if keepdims {
        (0..s.len())
            .map(|a| if axes.contains(&a) { 1 } else { s[a] })
            .collect()
    } else {
        kept.iter().map(|&a| s[a]).collect()
    };
    let rshape: Vec<i64> = reduced.iter().map(|&a| e(s[a])).collect();
    let n: i64 = rshape.iter().product();
    let (rop, scale) = match kind {
        ReduceKind::Sum => (ReduceOp::Sum, None),
        ReduceKind::Mean => (ReduceOp::Sum, Some(1.0 / n as f64)),
        ReduceKind::Max => (ReduceOp::Max, None),
        ReduceKind::Min => (ReduceOp::Min, None),
        ReduceKind::Prod => (ReduceOp::Prod, None),
    };
    g.reduce(&format!("Y{sfx}"), &extents(&out), &rshape, rop, |i, r| {
        let mut idx = vec![Expr::Int(0); s.len()];
        for (k, &a) in kept.iter().enumerate() {
            idx[a] = if keepdims { i[a].clone() } else { i[k].clone() };
        }
        for (k, &a) in reduced.iter().enumerate() {
            idx[a] = r[k].clone();
        }
        match scale {
            Some(c) => x.at(&idx) * c,
            None => x.at(&idx),
        }
    })
}

/// What a running reduction (`Cumulative`) accumulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Running {
    /// CumSum.
    Sum,
    /// CumProd.
    Prod,
}

/// CumSum and CumProd: x -> the running sum or product along `axis`
/// (inclusive unless `exclusive`, from the end when `reverse`).
#[derive(Clone, Debug, PartialEq)]
pub struct Cumulative {
    /// What is accumulated.
    pub op: Running,
    /// The accumulated axis.
    pub axis: usize,
    /// Each result leaves out its own element.
    pub exclusive: bool,
    /// The accumulation runs from the end of the axis.
    pub reverse: bool,
}

impl Cumulative {
    /// The running values of `v` (row-major, of `shape`) with the identity
    /// and the step given: each line along the axis visited in accumulating
    /// order, a row of the inner axes at a time; the running value before or
    /// after taking an element in is its exclusive or inclusive result. The
    /// reference and the native integer kernel both run this.
    pub fn scan<T: Copy>(
        &self,
        v: &[T],
        shape: &[usize],
        (identity, take): (T, impl Fn(T, T) -> T),
    ) -> Vec<T> {
        let (outer, n, inner) = (
            numel(&shape[..self.axis]),
            shape[self.axis],
            numel(&shape[self.axis + 1..]),
        );
        let mut out = vec![identity; v.len()];
        let mut acc = vec![identity; inner];
        for o in 0..outer {
            acc.fill(identity);
            for step in 0..n {
                let k = if self.reverse { n - 1 - step } else { step };
                let at = (o * n + k) * inner;
                let (row, done) = (&v[at..at + inner], &mut out[at..at + inner]);
                for ((a, &x), y) in acc.iter_mut().zip(row).zip(done) {
                    let with = take(*a, x);
                    *y = if self.exclusive { *a } else { with };
                    *a = with;
                }
            }
        }
        out
    }
}

impl OpDef for Cumulative {
    fn name(&self) -> &'static str {
        match self.op {
            Running::Sum => "CumSum",
            Running::Prod => "CumProd",
        }
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        if self.axis >= x.shape.len() {
            return Err(OpError::Attribute(format!(
                "axis {} is out of range for shape {:?}",
                self.axis, x.shape
            )));
        }
        if x.dtype == DType::Bool {
            return Err(OpError::DType("not defined on bool tensors".into()));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let shape = &x[0].shape;
        let data = match x[0].dtype() {
            d if d.is_float() => {
                let op: (f64, fn(f64, f64) -> f64) = match self.op {
                    Running::Sum => (0.0, |a, b| a + b),
                    Running::Prod => (1.0, |a, b| a * b),
                };
                TensorData::from_f64(d, self.scan(&x[0].data.to_f64(), shape, op))
            }
            // Integers wrap at any width: computed in i128, then narrowed.
            d => {
                let op: (i128, fn(i128, i128) -> i128) = match self.op {
                    Running::Sum => (0, i128::wrapping_add),
                    Running::Prod => (1, i128::wrapping_mul),
                };
                TensorData::from_i128(d, self.scan(&x[0].data.to_i128(), shape, op))
            }
        };
        Ok(vec![Tensor::new(outputs[0].shape.clone(), data)])
    }

    /// A reduction over the whole axis, each term guarded by whether it is in
    /// the running value of the output position.
    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.parts();
        check_arity(self.name(), types, 1)?;
        let shape = extents(&operand_shape(types, 0));
        let (x, axis) = (ph[0], self.axis);
        let (reverse, exclusive) = (self.reverse, self.exclusive);
        let rop = match self.op {
            Running::Sum => ReduceOp::Sum,
            Running::Prod => ReduceOp::Prod,
        };
        let y = g.reduce(&format!("Y{sfx}"), &shape, &[shape[axis]], rop, |i, r| {
            let (pos, k) = (i[axis].clone(), r[0].clone());
            let inside = match (reverse, exclusive) {
                (false, false) => k.clone().le(pos),
                (false, true) => k.clone().lt(pos),
                (true, false) => pos.le(k.clone()),
                (true, true) => pos.lt(k.clone()),
            };
            let mut at = i.to_vec();
            at[axis] = k;
            Expr::select(inside, x.at(&at), rop.identity())
        })?;
        Ok(Defined::output(y))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let axis = cx.b.ints("axis", &[self.axis as i64]);
        let attrs = vec![
            ("exclusive", Attr::Int(self.exclusive as i64)),
            ("reverse", Attr::Int(self.reverse as i64)),
        ];
        cx.single(self.name(), &[cx.input(0), axis], attrs)
    }

    fn min_onnx_opset(&self) -> i64 {
        match self.op {
            Running::Sum => 11,
            Running::Prod => 26,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::ops::*;
    use crate::ops::{Op, ReduceKind};

    fn reduce(kind: ReduceKind, axes: &[usize], keepdims: bool) -> Op {
        Op::Reduce(Reduce {
            kind,
            axes: axes.to_vec(),
            keepdims,
        })
    }

    #[test]
    fn running_sums_and_products_in_every_direction() {
        let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let cum = |op, exclusive, reverse| {
            let op = Op::Cumulative(Cumulative {
                op,
                axis: 1,
                exclusive,
                reverse,
            });
            eval1(op, &[&x]).to_f32()
        };
        use Running::{Prod, Sum};
        assert_eq!(cum(Sum, false, false), [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
        assert_eq!(cum(Sum, true, false), [0.0, 1.0, 3.0, 0.0, 4.0, 9.0]);
        assert_eq!(cum(Sum, false, true), [6.0, 5.0, 3.0, 15.0, 11.0, 6.0]);
        assert_eq!(cum(Sum, true, true), [5.0, 3.0, 0.0, 11.0, 6.0, 0.0]);
        assert_eq!(cum(Prod, false, false), [1.0, 2.0, 6.0, 4.0, 20.0, 120.0]);
        assert_eq!(cum(Prod, true, false), [1.0, 1.0, 2.0, 1.0, 4.0, 20.0]);
        assert_eq!(cum(Prod, false, true), [6.0, 6.0, 3.0, 120.0, 30.0, 6.0]);
        assert_eq!(cum(Prod, true, true), [6.0, 3.0, 1.0, 30.0, 6.0, 1.0]);
        let ints = i64s(&[3], &[i64::MAX, 1, 2]);
        let op = Op::Cumulative(Cumulative {
            op: Sum,
            axis: 0,
            exclusive: false,
            reverse: false,
        });
        assert_i64(
            &eval1(op, &[&ints]),
            &[3],
            &[i64::MAX, i64::MIN, i64::MIN + 2],
        );
    }

    #[test]
    fn float_reductions_over_axes() {
        // x[i][j][k] = 12i + 4j + k.
        let x = iota(&[2, 3, 4]);
        // Sum over j: 3(12i + k) + 12.
        let y = eval1(reduce(ReduceKind::Sum, &[1], true), &[&x]);
        assert_close(
            &y,
            &[2, 1, 4],
            &[12., 15., 18., 21., 48., 51., 54., 57.],
            0.0,
        );
        // Mean over i and k: 6 + 4j + 1.5.
        let y = eval1(reduce(ReduceKind::Mean, &[0, 2], false), &[&x]);
        assert_close(&y, &[3], &[7.5, 11.5, 15.5], 1e-6);
        // Max over k: 12i + 4j + 3.
        let y = eval1(reduce(ReduceKind::Max, &[2], false), &[&x]);
        assert_close(&y, &[2, 3], &[3., 7., 11., 15., 19., 23.], 0.0);
        // Every axis.
        let y = eval1(reduce(ReduceKind::Sum, &[0, 1, 2], true), &[&x]);
        assert_close(&y, &[1, 1, 1], &[276.0], 0.0);
    }

    #[test]
    fn integer_reductions_are_exact() {
        let x = i64s(&[2, 2], &[(1 << 60) + 1, 1, 5, -8]);
        let y = eval1(reduce(ReduceKind::Sum, &[1], false), &[&x]);
        assert_i64(&y, &[2], &[(1 << 60) + 2, -3]);
        // Integer mean truncates toward zero: -3 / 2 = -1.
        let y = eval1(reduce(ReduceKind::Mean, &[1], false), &[&x]);
        assert_i64(&y, &[2], &[(1 << 59) + 1, -1]);
        let y = eval1(reduce(ReduceKind::Max, &[0], true), &[&x]);
        assert_i64(&y, &[1, 2], &[(1 << 60) + 1, 1]);
    }
}
