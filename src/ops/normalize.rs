//! BatchNormalization (inference), LayerNormalization, Softmax and LogSoftmax, in f64.

use super::index::broadcast_indices;
use super::onnx::*;
use super::pad_flow::*;
use super::shape::*;
use super::te::*;
use super::*;
use crate::core::{numel, Tensor, TensorData, ValueType};

impl OpDef for BatchNorm {
    fn name(&self) -> &'static str {
        "BatchNormalization"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 5, 5)?;
        let x = inputs[0];
        expect_float(x, "input")?;
        check_rank_at_least(x, 2, "input")?;
        for (i, p) in inputs[1..].iter().enumerate() {
            if p.shape != [x.shape[1]] {
                return Err(OpError::Shape(format!(
                    "parameter {} has shape {:?}, expected [{}]",
                    i + 1,
                    p.shape,
                    x.shape[1]
                )));
            }
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let BatchNorm { epsilon } = self;
        Ok(vec![batch_norm(*epsilon, x, out)])
    }

    fn pad_flow(&self, inputs: &[PadValue], _: &[usize]) -> PadFlow {
        // y = (x - mean) / sqrt(var + eps) * scale + bias, per channel; with the
        // parameters padded too, the padded channels compute the same formula.
        let BatchNorm { epsilon } = self;

        let out = match inputs {
            [x, s, b, m, v] => match (x.known(), s.known(), b.known(), m.known(), v.known()) {
                (Some(x), Some(s), Some(b), Some(m), Some(v)) => {
                    PadValue::Known((x - m) / (v + epsilon).sqrt() * s + b)
                }
                _ => PadValue::Undef,
            },
            _ => PadValue::Undef,
        };
        PadFlow {
            inputs: vec![Requirement::Any; inputs.len()],
            output: out,
        }
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.parts();
        match self {
            BatchNorm { epsilon } if types.len() == 5 && types[0].shape.len() >= 2 => {
                let s = extents(&types[0].shape);
                let (x, sc, b, m, v) = (ph[0], ph[1], ph[2], ph[3], ph[4]);
                let eps = *epsilon as f64;
                // An affine map per channel, as the native kernel computes it: its
                // factor and offset are stages of one element per channel, computed
                // once, so that each element costs a multiply and an add rather than
                // a square root and a division.
                let channels = [s[1]];
                let scale = g.compute(&format!("Scale{sfx}"), &channels, |c| {
                    sc.at(c) / Expr::call(Intrinsic::Sqrt, vec![v.at(c) + Expr::Float(eps)])
                })?;
                let shift = g.compute(&format!("Shift{sfx}"), &channels, |c| {
                    b.at(c) - m.at(c) * scale.at(c)
                })?;
                Ok(Defined::output(g.compute(&format!("Y{sfx}"), &s, |i| {
                    let c = [i[1].clone()];
                    x.at(i) * scale.at(&c) + shift.at(&c)
                })?))
            }

            _ => Err(unsupported(self.name(), "only 2-D NCHW is defined")),
        }
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let BatchNorm { epsilon } = self;
        cx.single(
            "BatchNormalization",
            cx.inputs,
            vec![("epsilon", Attr::Float(*epsilon))],
        )
    }
}

/// Softmax and LogSoftmax along `axis`: both keep the shape.
fn softmax_infer(axis: usize, inputs: &[&ValueType]) -> Res<Vec<ValueType>> {
    let x = sole_input(inputs)?;
    expect_float(x, "input")?;
    if axis >= x.shape.len() {
        return Err(OpError::Attribute(format!(
            "axis {axis} out of range for shape {:?}",
            x.shape
        )));
    }
    Ok(vec![x.clone()])
}

/// Padding along the normalised axis must hold -inf (exp(-inf) = 0 adds
/// nothing to the normaliser); the padding of the output along it then holds
/// `out` (the op's value at -inf).
fn softmax_pad_flow(axis: usize, inputs: &[PadValue], padded: &[usize], out: f32) -> PadFlow {
    let mut req = vec![Requirement::Any; inputs.len()];
    let mut output = PadValue::Undef;
    if padded.contains(&axis) {
        req[0] = Requirement::Value(f32::NEG_INFINITY);
        if padded == [axis] {
            output = PadValue::Known(out);
        }
    }
    PadFlow {
        inputs: req,
        output,
    }
}

/// Softmax and LogSoftmax differ only in the log and in what their padding
/// becomes, so one definition serves both.
macro_rules! softmax_op {
    ($op:ident, $name:literal, log: $log:expr, pad: $pad:expr) => {
        impl OpDef for $op {
            fn name(&self) -> &'static str {
                $name
            }

            fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
                softmax_infer(self.axis, inputs)
            }

            fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
                Ok(vec![softmax(self.axis, $log, x[0])])
            }

            fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
                softmax_pad_flow(self.axis, inputs, padded, $pad)
            }

            fn layout_role(&self) -> LayoutRole {
                LayoutRole::Agnostic
            }

            fn runs_in(&self, l: &Layout, _: &[&ValueType]) -> bool {
                unblocked(l, &[self.axis])
            }

            fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
                let (g, ph, types, sfx) = cx.parts();
                check_arity(self.name(), types, 1)?;
                let x = operand_shape(types, 0);
                let (output, per_row) = softmax_compute(g, sfx, ph[0], &x, self.axis, $log)?;
                Ok(Defined {
                    output,
                    inline: vec![],
                    per_row,
                })
            }

            fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
                let axis = vec![("axis", Attr::Int(self.axis as i64))];
                cx.single($name, cx.inputs, axis)
            }
        }
    };
}

softmax_op!(Softmax, "Softmax", log: false, pad: 0.0);
// log(0) = -inf in the padding.
softmax_op!(LogSoftmax, "LogSoftmax", log: true, pad: f32::NEG_INFINITY);

impl OpDef for LayerNorm {
    fn name(&self) -> &'static str {
        match self.centered {
            true => "LayerNormalization",
            false => "RMSNormalization",
        }
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let LayerNorm { axis, .. } = self;

        expect_inputs(inputs, 1, 3)?;
        let x = inputs[0];
        expect_float(x, "input")?;
        if *axis >= x.shape.len() {
            return Err(OpError::Attribute(format!(
                "axis {axis} out of range for shape {:?}",
                x.shape
            )));
        }
        let norm = &x.shape[*axis..];
        for p in &inputs[1..] {
            if broadcast_shapes(&p.shape, norm)? != norm {
                return Err(OpError::Shape(format!(
                    "scale/bias shape {:?} does not broadcast to normalised shape {norm:?}",
                    p.shape
                )));
            }
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![layer_norm(self, x, &outputs[0])])
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.parts();
        check_arity(self.name(), types, 1)?;
        let (output, per_row) = layer_norm_compute(g, sfx, ph, types, self)?;
        Ok(Defined {
            output,
            inline: vec![],
            per_row,
        })
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let LayerNorm { axis, epsilon, .. } = self;
        let mut inputs = cx.inputs.to_vec();
        // ONNX asks for the scale: ones when there is none.
        if inputs.len() == 1 {
            let norm = cx.in_types[0].shape[*axis..].to_vec();
            let ones = vec![1.0; norm.iter().product()];
            let dtype = cx.in_types[0].dtype;
            let ones = Tensor::new(norm, TensorData::from_f64(dtype, ones));
            inputs.push(cx.b.constant("scale", &ones));
        }
        cx.single(
            self.name(),
            &inputs,
            vec![
                ("axis", Attr::Int(*axis as i64)),
                ("epsilon", Attr::Float(*epsilon)),
            ],
        )
    }

    fn min_onnx_opset(&self) -> i64 {
        // RMSNormalization is new in opset 23.
        match self.centered {
            true => 17,
            false => 23,
        }
    }
}

/// y = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c], with c the axis-1 index.
pub(super) fn batch_norm(epsilon: f32, inputs: &[&Tensor], out: &ValueType) -> Tensor {
    let x = inputs[0].data.to_f64();
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| inputs[i].data.to_f64());
    let channels = out.shape[1];
    let inner = numel(&out.shape[2..]);
    let y = x
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let c = (i / inner.max(1)) % channels;
            (v - mean[c]) / (var[c] + epsilon as f64).sqrt() * scale[c] + bias[c]
        })
        .collect();
    Tensor::new(out.shape.clone(), TensorData::from_f64(out.dtype, y))
}

/// Softmax (or its logarithm) along one axis (opset 13 semantics).
pub(super) fn softmax(axis: usize, log: bool, x: &Tensor) -> Tensor {
    let len = x.shape[axis];
    let inner = numel(&x.shape[axis + 1..]);
    let mut v = x.data.to_f64();
    let outer = numel(&x.shape[..axis]);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            // Subtracting the maximum keeps exp() in range; it cancels exactly.
            let max = (0..len).map(|j| v[at(j)]).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..len).map(|j| (v[at(j)] - max).exp()).sum();
            for j in 0..len {
                let d = v[at(j)] - max;
                v[at(j)] = if log { d - sum.ln() } else { d.exp() / sum };
            }
        }
    }
    Tensor::new(x.shape.clone(), TensorData::from_f64(x.dtype(), v))
}

/// Normalises over axes `axis..rank` (population variance), then applies scale and
/// optional bias, both broadcast to the normalised shape.
pub(super) fn layer_norm(op: &LayerNorm, inputs: &[&Tensor], out: &ValueType) -> Tensor {
    let x = inputs[0];
    let norm_shape = &x.shape[op.axis..];
    let inner = numel(norm_shape);
    // Scale and bias expanded to the normalised shape.
    let expand = |t: &Tensor| {
        let v = t.data.to_f64();
        broadcast_indices(&t.shape, norm_shape)
            .into_iter()
            .map(|i| v[i])
            .collect::<Vec<f64>>()
    };
    let scale = match inputs.get(1) {
        Some(s) => expand(s),
        None => vec![1.0; inner],
    };
    let bias = inputs.get(2).map(|b| expand(b));
    let mut v = x.data.to_f64();
    if inner > 0 {
        for row in v.chunks_mut(inner) {
            let mean = match op.centered {
                true => row.iter().sum::<f64>() / inner as f64,
                false => 0.0,
            };
            let var = row.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / inner as f64;
            let inv = 1.0 / (var + op.epsilon as f64).sqrt();
            for (j, a) in row.iter_mut().enumerate() {
                *a = (*a - mean) * inv * scale[j] + bias.as_ref().map_or(0.0, |b| b[j]);
            }
        }
    }
    Tensor::new(out.shape.clone(), TensorData::from_f64(out.dtype, v))
}

/// Softmax (or log-softmax) over `axis`: the row maximum and the row sum of
/// exponentials are stages of their own, computed per row of the output when the
/// axis is the innermost one.
fn softmax_compute(
    g: &mut ComputeGraph,
    sfx: &str,
    x: TeTensor,
    s: &[usize],
    axis: usize,
    log: bool,
) -> Result<(TeTensor, Vec<(TeTensor, usize)>), TirError> {
    let rank = s.len();
    let rows = extents(&{
        let mut r = s.to_vec();
        r.remove(axis);
        r
    });
    let n = e(s[axis]);
    let mx = g.reduce(&format!("Max{sfx}"), &rows, &[n], ReduceOp::Max, |i, r| {
        x.at(&with_axis(i, axis, r[0].clone(), rank))
    })?;
    let exp_of = |i: &[Expr], row: &[Expr]| Expr::call(Intrinsic::Exp, vec![x.at(i) - mx.at(row)]);
    // Along the innermost axis the row of exponentials is kept, so that each is
    // computed once; along another it is computed again rather than stored whole.
    let per_row = axis + 1 == rank && rank >= 2 && !log;
    let ex = if per_row {
        Some(g.compute(&format!("Exp{sfx}"), &extents(s), |i| {
            exp_of(i, &drop_axis(i, axis))
        })?)
    } else {
        None
    };
    let sum = g.reduce(&format!("Sum{sfx}"), &rows, &[n], ReduceOp::Sum, |i, r| {
        let idx = with_axis(i, axis, r[0].clone(), rank);
        match ex {
            Some(e) => e.at(&idx),
            None => exp_of(&idx, i),
        }
    })?;
    let y = g.compute(&format!("Y{sfx}"), &extents(s), |i| {
        let row = drop_axis(i, axis);
        if log {
            x.at(i) - mx.at(&row) - Expr::call(Intrinsic::Log, vec![sum.at(&row)])
        } else {
            let e = match ex {
                Some(e) => e.at(i),
                None => exp_of(i, &row),
            };
            e / sum.at(&row)
        }
    })?;
    let attach = if axis + 1 == rank && rank >= 2 {
        let mut stages = vec![(mx, axis - 1)];
        stages.extend(ex.map(|e| (e, axis - 1)));
        stages.push((sum, axis - 1));
        stages
    } else {
        vec![]
    };
    Ok((y, attach))
}

/// Layer (or RMS) normalization over the axes from `axis` on: row mean and
/// variance (or mean square) as stages computed per row.
fn layer_norm_compute(
    g: &mut ComputeGraph,
    sfx: &str,
    ph: &[TeTensor],
    types: &[ValueType],
    op: &LayerNorm,
) -> Result<(TeTensor, Vec<(TeTensor, usize)>), TirError> {
    let (axis, eps) = (op.axis, op.epsilon as f64);
    let s = extents(&types[0].shape);
    if axis >= s.len() {
        return Err(TirError::Definition(format!(
            "LayerNormalization axis {axis} is out of range for rank {}",
            s.len()
        )));
    }
    let rows: Vec<i64> = if axis == 0 {
        vec![1]
    } else {
        s[..axis].to_vec()
    };
    let norm: Vec<i64> = s[axis..].to_vec();
    let n: i64 = norm.iter().product();
    let x = ph[0];
    let row_of = |i: &[Expr]| -> Vec<Expr> {
        if axis == 0 {
            vec![Expr::Int(0)]
        } else {
            i[..axis].to_vec()
        }
    };
    let full = |i: &[Expr], r: &[Expr]| -> Vec<Expr> {
        let mut idx = if axis == 0 { vec![] } else { i.to_vec() };
        idx.extend(r.iter().cloned());
        idx
    };
    let inv_n = 1.0 / n as f64;
    let mean = match op.centered {
        true => Some(g.reduce(
            &format!("Mean{sfx}"),
            &rows,
            &norm,
            ReduceOp::Sum,
            |i, r| x.at(&full(i, r)) * inv_n,
        )?),
        false => None,
    };
    let deviation = |at: Expr, row: &[Expr]| match &mean {
        Some(mean) => at - mean.at(row),
        None => at,
    };
    let var = g.reduce(&format!("Var{sfx}"), &rows, &norm, ReduceOp::Sum, |i, r| {
        let d = deviation(x.at(&full(i, r)), i);
        d.clone() * d * inv_n
    })?;
    // Scale and bias broadcast to the normalized axes.
    let operand = |k: usize| -> Result<(TeTensor, Vec<usize>), TirError> {
        let s = extents(&types[k].shape);
        if s.len() > norm.len() {
            return Err(TirError::Definition(format!(
                "LayerNormalization operand {k} of shape {:?} has more axes than the normalized {norm:?}",
                types[k].shape
            )));
        }
        Ok((ph[k], s.iter().map(|&d| d as usize).collect()))
    };
    let scale = match ph.len() {
        1 => None,
        _ => Some(operand(1)?),
    };
    let bias = match ph.len() {
        3 => Some(operand(2)?),
        _ => None,
    };
    let y = g.compute(&format!("Y{sfx}"), &s, |i| {
        let row = row_of(i);
        let tail = &i[axis..];
        let inv = Expr::Float(1.0) / Expr::call(Intrinsic::Sqrt, vec![var.at(&row) + eps]);
        let v = deviation(x.at(i), &row) * inv;
        let v = match &scale {
            Some((sc, ss)) => v * sc.at(&broadcast_index(tail, ss)),
            None => v,
        };
        match &bias {
            Some((b, bs)) => v + b.at(&broadcast_index(tail, bs)),
            None => v,
        }
    })?;
    let attach = match axis {
        0 => vec![],
        _ => mean
            .into_iter()
            .chain([var])
            .map(|t| (t, axis - 1))
            .collect(),
    };
    Ok((y, attach))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::ops::Op;
    use crate::ops::*;

    #[test]
    fn batch_norm_onnx_example() {
        // ONNX BatchNormalization example; values from numpy (float64).
        let x = f32s(&[1, 2, 1, 3], &[-1., 0., 1., 2., 3., 4.]);
        let p = |v: [f32; 2]| f32s(&[2], &v);
        let (s, b, m, v) = (p([1.0, 1.5]), p([0.0, 1.0]), p([0.0, 3.0]), p([1.0, 1.5]));
        let y = eval1(
            Op::BatchNorm(BatchNorm { epsilon: 1e-5 }),
            &[&x, &s, &b, &m, &v],
        );
        let want = [-0.999995, 0.0, 0.999995, -0.22474079, 1.0, 2.22474079];
        assert_close(&y, &[1, 2, 1, 3], &want, 1e-6);
    }

    #[test]
    fn softmax_and_log_softmax_along_an_axis() {
        // ONNX Softmax / LogSoftmax example values.
        let x = f32s(&[1, 3], &[-1., 0., 1.]);
        let y = eval1(Op::Softmax(Softmax { axis: 1 }), &[&x]);
        assert_close(&y, &[1, 3], &[0.09003057, 0.24472847, 0.66524096], 1e-7);
        let y = eval1(Op::LogSoftmax(LogSoftmax { axis: 1 }), &[&x]);
        assert_close(&y, &[1, 3], &[-2.40760596, -1.40760596, -0.40760596], 1e-6);
        // Along axis 0 of [2,2]: each column sums to 1; large values do not overflow.
        let x = f32s(&[2, 2], &[1000., 0., 1000., 1.]);
        let y = eval1(Op::Softmax(Softmax { axis: 0 }), &[&x]);
        let e = 1.0 / (1.0 + std::f64::consts::E);
        assert_close(&y, &[2, 2], &[0.5, e, 0.5, 1.0 - e], 1e-7);
    }

    #[test]
    fn layer_norm_over_trailing_axes() {
        // Rows [1,2,3] and [4,6,8]: mean 2 / 6, variance 2/3 and 8/3;
        // normalised [-1,0,1]·k with k = 1/sqrt(var+eps), then scale [1,2,3] and
        // bias [0,0,1]. numpy: 1/sqrt(2/3 + 1e-5) = 1.22473569.
        let x = f32s(&[2, 3], &[1., 2., 3., 4., 6., 8.]);
        let scale = f32s(&[3], &[1., 2., 3.]);
        let bias = f32s(&[3], &[0., 0., 1.]);
        let op = Op::LayerNorm(LayerNorm {
            axis: 1,
            epsilon: 1e-5,
            centered: true,
        });
        let y = eval1(op.clone(), &[&x, &scale, &bias]);
        let k1 = 1.22473569;
        let k2 = 2.0 / (8.0f64 / 3.0 + 1e-5).sqrt();
        let want = [-k1, 0.0, 3.0 * k1 + 1.0, -k2, 0.0, 3.0 * k2 + 1.0];
        assert_close(&y, &[2, 3], &want, 1e-6);
        // Axis 0 normalises everything; a scalar scale broadcasts, bias is optional.
        let y = eval1(
            Op::LayerNorm(LayerNorm {
                axis: 0,
                epsilon: 0.0,
                centered: true,
            }),
            &[&f32s(&[2, 2], &[1., 3., 1., 3.]), &f32s(&[], &[2.0])],
        );
        assert_close(&y, &[2, 2], &[-2., 2., -2., 2.], 1e-6);
        // RMSNormalization: [1, 2, 3] over sqrt(14/3), mean not subtracted.
        let rms = Op::LayerNorm(LayerNorm {
            axis: 1,
            epsilon: 0.0,
            centered: false,
        });
        let y = eval1(rms, &[&f32s(&[1, 3], &[1., 2., 3.]), &scale]);
        let k = 1.0 / (14.0f64 / 3.0).sqrt();
        assert_close(&y, &[1, 3], &[k, 4.0 * k, 9.0 * k], 1e-6);
    }
}
