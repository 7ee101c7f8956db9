//! Convolution and transposed convolution over 1, 2 or 3 (any number of) spatial
//! axes, computed in f64, one output plane (batch, channel) per rayon task.
//!
//! Both read as one index map per kernel position k: along each spatial axis,
//! convolution reads input `o * stride + k * dilation - pad_begin` for output `o`,
//! and transposed convolution writes output `i * stride + k * dilation - pad_begin`
//! for input `i`. `index::for_each_run` walks the in-bounds part of that map.

use super::index::{for_each_run, kernel_offsets};
use super::onnx::*;
use super::shape::*;
use super::te::*;
use super::*;
use crate::core::{numel, Tensor, TensorData, ValueType};
use crate::ops::{Conv, ConvTranspose};
use rayon::prelude::*;

/// The data and weight operands of a convolution (x: float, N C spatial...),
/// after checking there are two or three operands.
fn data_and_weight<'a>(inputs: &[&'a ValueType]) -> Res<(&'a ValueType, &'a ValueType)> {
    expect_inputs(inputs, 2, 3)?;
    let (x, w) = (inputs[0], inputs[1]);
    expect_float(x, "input")?;
    check_rank_at_least(x, 3, "input")?;
    Ok((x, w))
}

impl OpDef for Conv {
    fn name(&self) -> &'static str {
        "Conv"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let c = self;
        let (x, w) = data_and_weight(inputs)?;
        if w.shape.len() != x.shape.len() {
            return Err(OpError::Shape(format!(
                "weight shape {:?} does not match input shape {:?}",
                w.shape, x.shape
            )));
        }
        let (cin, cout) = (x.shape[1], w.shape[0]);
        if c.group == 0 || cin % c.group != 0 || cout % c.group != 0 {
            return Err(OpError::Attribute(format!(
                "group {} does not divide input channels {cin} and output channels {cout}",
                c.group
            )));
        }
        if w.shape[1] * c.group != cin {
            return Err(OpError::Shape(format!(
                "weight shape {:?} expects {} input channels, input has {cin}",
                w.shape,
                w.shape[1] * c.group
            )));
        }
        if w.shape[2..] != c.window.kernel[..] {
            return Err(OpError::Attribute(format!(
                "kernel_shape {:?} does not match weight shape {:?}",
                c.window.kernel, w.shape
            )));
        }
        if let Some(b) = inputs.get(2) {
            if b.shape != [cout] {
                return Err(OpError::Shape(format!(
                    "bias shape {:?} is not [{cout}]",
                    b.shape
                )));
            }
        }
        let mut shape = vec![x.shape[0], cout];
        shape.extend(window_outputs(&c.window, &x.shape[2..], false)?);
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let c = self;
        Ok(vec![conv(c, x, out)])
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        // Padded input channels meet weights that must be 0 there, so the input
        // padding must be finite (0 * inf is NaN). Padded output channels see
        // only padded weights: they hold the bias padding (or 0).
        let mut flow = super::pad_flow::pass_through(inputs);
        let p = flow.output;
        let n = inputs.len();
        let spatial_padded = padded.iter().any(|&a| a >= 2);

        if spatial_padded {
            flow.inputs[0] = Requirement::Unsupported;
        } else if padded.contains(&1) {
            flow.inputs[0] = Requirement::Finite;
            if n > 1 {
                flow.inputs[1] = Requirement::Value(0.0);
            }
        }
        let w = inputs.get(1).copied().unwrap_or(PadValue::Undef);
        let bias = inputs.get(2).copied().unwrap_or(PadValue::Known(0.0));
        flow.output = if w.is(0.0) && (p.is_finite() || padded.is_empty()) {
            bias
        } else {
            PadValue::Undef
        };
        flow
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Source
    }

    /// One multiply-add per output element, input channel of its group and
    /// kernel position.
    fn flops(&self, ins: &[&ValueType], outs: &[&ValueType]) -> f64 {
        2.0 * numel(&outs[0].shape) as f64 * numel(&ins[1].shape[1..]) as f64
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.nchw_parts(self.name(), 2..)?;
        // The padded copy stays a stage of its own (computed once), so the
        // convolution's inner loop reads it without guards and vectorizes.
        Ok(Defined::output(conv_compute(
            g,
            sfx,
            self,
            ph,
            &operand_shape(types, 0),
            &operand_shape(types, 1),
        )?))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let c = self;

        let mut a = window_attrs(&c.window, true);
        a.push(("group", Attr::Int(c.group as i64)));
        cx.single("Conv", cx.inputs, a)
    }
}

impl OpDef for ConvTranspose {
    fn name(&self) -> &'static str {
        "ConvTranspose"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let c = self;
        let (x, w) = data_and_weight(inputs)?;
        if w.shape.len() != x.shape.len() || w.shape[0] != x.shape[1] {
            return Err(OpError::Shape(format!(
                "weight shape {:?} does not match input shape {:?}",
                w.shape, x.shape
            )));
        }
        if c.group == 0 || x.shape[1] % c.group != 0 {
            return Err(OpError::Attribute(format!(
                "group {} does not divide input channels {}",
                c.group, x.shape[1]
            )));
        }
        let cout = w.shape[1] * c.group;
        if let Some(b) = inputs.get(2) {
            if b.shape != [cout] {
                return Err(OpError::Shape(format!(
                    "bias shape {:?} is not [{cout}]",
                    b.shape
                )));
            }
        }
        check_window(&c.window, &x.shape[2..])?;
        let mut shape = vec![x.shape[0], cout];
        for i in 0..x.shape.len() - 2 {
            let w_ = &c.window;
            let full = w_.strides[i]
                .checked_mul(x.shape[i + 2].max(1) - 1)
                .and_then(|f| f.checked_add(c.output_padding.get(i).copied().unwrap_or(0)))
                .and_then(|f| {
                    f.checked_add(w_.kernel[i].checked_sub(1)?.checked_mul(w_.dilations[i])?)
                })
                .and_then(|f| f.checked_add(1))
                .ok_or_else(|| {
                    OpError::TooLarge(format!("output extents overflow (window {w_:?})"))
                })?;
            let pads = w_
                .pad_begin(i)
                .checked_add(w_.pad_end(i))
                .ok_or_else(|| OpError::TooLarge(format!("pads {:?} overflow", w_.pads)))?;
            if full <= pads {
                return Err(OpError::Attribute(format!(
                    "pads {:?} remove the whole output",
                    w_.pads
                )));
            }
            shape.push(full - pads);
        }
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let c = self;
        Ok(vec![conv_transpose(c, x, out)?])
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Source
    }

    /// One multiply-add per input element and weight of its group.
    fn flops(&self, ins: &[&ValueType], _: &[&ValueType]) -> f64 {
        2.0 * numel(&ins[0].shape) as f64 * numel(&ins[1].shape[1..]) as f64
    }

    /// Each output element gathers the input elements whose window covers it:
    /// along each axis, tap k of input position i lands on o = i·s + k·d − pad,
    /// so i = (o + pad − k·d) / s where that divides exactly and lies inside.
    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.nchw_parts(self.name(), 2..)?;
        let refs: Vec<&ValueType> = types.iter().collect();
        let out = self.infer(&refs)?;
        let (xs, ws) = (operand_shape(types, 0), operand_shape(types, 1));
        let (x, weight, w) = (ph[0], ph[1], &self.window);
        let (in_per_group, out_per_group) = (xs[1] / self.group, ws[1]);
        let shape = extents(&out[0].shape);
        let name = format!("{}{sfx}", if ph.len() > 2 { "convt" } else { "Y" });
        let acc = g.reduce(
            &name,
            &shape,
            &[e(in_per_group), e(w.kernel[0]), e(w.kernel[1])],
            ReduceOp::Sum,
            |i, r| {
                let group = i[1].clone().floordiv(ex(out_per_group));
                let ic = group * ex(in_per_group) + r[0].clone();
                let oc = i[1].clone().floormod(ex(out_per_group));
                let mut at = vec![i[0].clone(), ic.clone()];
                let mut inside = vec![];
                for a in 0..2 {
                    let t = i[a + 2].clone() + ex(w.pad_begin(a))
                        - r[a + 1].clone() * ex(w.dilations[a]);
                    let pos = t.clone().floordiv(ex(w.strides[a]));
                    inside.push(t.clone().ge(0));
                    inside.push(t.floormod(ex(w.strides[a])).le(0));
                    inside.push(pos.clone().lt(ex(xs[a + 2])));
                    at.push(pos.max(0).min(ex(xs[a + 2] - 1)));
                }
                let inside = inside.into_iter().reduce(Expr::and).expect("two axes");
                let tap = weight.at(&[ic, oc, r[1].clone(), r[2].clone()]);
                Expr::select(inside, x.at(&at) * tap, 0.0)
            },
        )?;
        let y = match ph.get(2) {
            Some(b) => g.compute(&format!("Y{sfx}"), &shape, |i| {
                acc.at(i) + b.at(&[i[1].clone()])
            })?,
            None => acc,
        };
        Ok(Defined::output(y))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let c = self;

        let mut a = window_attrs(&c.window, true);
        a.push(("group", Attr::Int(c.group as i64)));
        a.push(("output_padding", Attr::Ints(i64s(&c.output_padding))));
        cx.single("ConvTranspose", cx.inputs, a)
    }
}

/// Shared plumbing: converts inputs to f64, fills each output plane with its bias,
/// calls `plane(batch, out_channel, acc)` for every plane in parallel, and converts
/// the result to the output dtype.
fn per_plane(
    inputs: &[&Tensor],
    out: &ValueType,
    plane: impl Fn(&[f64], &[f64], usize, usize, &mut [f64]) + Sync,
) -> Tensor {
    let (x, w) = (inputs[0].data.to_f64(), inputs[1].data.to_f64());
    let bias = inputs.get(2).map(|b| b.data.to_f64());
    let cout = out.shape[1];
    let plane_len = numel(&out.shape[2..]);
    let mut y = vec![0.0; out.numel()];
    if plane_len > 0 {
        y.par_chunks_mut(plane_len)
            .enumerate()
            .for_each(|(i, acc)| {
                let (b, m) = (i / cout, i % cout);
                acc.fill(bias.as_ref().map_or(0.0, |bias| bias[m]));
                plane(&x, &w, b, m, acc);
            });
    }
    Tensor::new(out.shape.clone(), TensorData::from_f64(out.dtype, y))
}

/// ONNX Conv: x [N, C, in...], w [M, C/group, k...], bias [M].
pub(super) fn conv(c: &Conv, inputs: &[&Tensor], out: &ValueType) -> Tensor {
    let (xs, ws) = (&inputs[0].shape, &inputs[1].shape);
    let (in_sp, out_sp) = (&xs[2..], &out.shape[2..]);
    let (cin_g, cout_g) = (ws[1], out.shape[1] / c.group);
    let (in_len, k_len) = (numel(in_sp), numel(&c.window.kernel));
    let offsets = kernel_offsets(&c.window);
    let s_last = *c.window.strides.last().expect("rank checked by inference");
    per_plane(inputs, out, |x, w, b, m, acc| {
        let g = m / cout_g;
        for ci in 0..cin_g {
            let xin = &x[(b * xs[1] + g * cin_g + ci) * in_len..][..in_len];
            let wk = &w[(m * cin_g + ci) * k_len..][..k_len];
            for (&wv, off) in wk.iter().zip(&offsets) {
                for_each_run(out_sp, in_sp, &c.window.strides, off, |p, q, len| {
                    let src = xin[q..].iter().step_by(s_last);
                    for (a, &v) in acc[p..p + len].iter_mut().zip(src) {
                        *a += wv * v;
                    }
                });
            }
        }
    })
}

/// ONNX ConvTranspose: x [N, C, in...], w [C, M/group, k...], bias [M].
/// Output padding only adds extent at the end (already in the output shape).
pub(super) fn conv_transpose(
    c: &ConvTranspose,
    inputs: &[&Tensor],
    out: &ValueType,
) -> Result<Tensor, OpError> {
    let (xs, ws) = (&inputs[0].shape, &inputs[1].shape);
    if ws[2..] != c.window.kernel[..] {
        return Err(OpError::Attribute(format!(
            "kernel_shape {:?} does not match weight shape {ws:?}",
            c.window.kernel
        )));
    }
    let (in_sp, out_sp) = (&xs[2..], &out.shape[2..]);
    let (cin_g, cout_g) = (xs[1] / c.group, ws[1]);
    let (in_len, k_len) = (numel(in_sp), numel(&c.window.kernel));
    let offsets = kernel_offsets(&c.window);
    let s_last = *c.window.strides.last().expect("rank checked by inference");
    Ok(per_plane(inputs, out, |x, w, b, m, acc| {
        let (g, mm) = (m / cout_g, m % cout_g);
        for ci in 0..cin_g {
            let cin = g * cin_g + ci;
            let xin = &x[(b * xs[1] + cin) * in_len..][..in_len];
            let wk = &w[(cin * cout_g + mm) * k_len..][..k_len];
            for (&wv, off) in wk.iter().zip(&offsets) {
                for_each_run(in_sp, out_sp, &c.window.strides, off, |p, q, len| {
                    let dst = acc[q..].iter_mut().step_by(s_last);
                    for (a, &v) in dst.zip(&xin[p..p + len]) {
                        *a += wv * v;
                    }
                });
            }
        }
    }))
}

fn conv_compute(
    g: &mut ComputeGraph,
    sfx: &str,
    c: &Conv,
    ph: &[TeTensor],
    xs: &[usize],
    ws: &[usize],
) -> Result<TeTensor, TirError> {
    let w = &c.window;
    let pad = pad_stage(g, sfx, ph[0], xs, &w.pads, 0.0)?;
    let src = pad.unwrap_or(ph[0]);
    let oh =
        (xs[2] + w.pads[0] + w.pads[2] - w.dilations[0] * (w.kernel[0] - 1) - 1) / w.strides[0] + 1;
    let ow =
        (xs[3] + w.pads[1] + w.pads[3] - w.dilations[1] * (w.kernel[1] - 1) - 1) / w.strides[1] + 1;
    let out = [e(xs[0]), e(ws[0]), e(oh), e(ow)];
    let cin_per_group = ws[1];
    let oc_per_group = ws[0] / c.group.max(1);
    let weight = ph[1];
    let (sh, sw, dh, dw) = (w.strides[0], w.strides[1], w.dilations[0], w.dilations[1]);
    let name = format!("{}{sfx}", if ph.len() > 2 { "conv" } else { "Y" });
    let acc = g.reduce(
        &name,
        &out,
        &[e(cin_per_group), e(w.kernel[0]), e(w.kernel[1])],
        ReduceOp::Sum,
        |i, r| {
            // The input channel: the group's first channel plus the reduced one.
            let ic = if c.group == 1 {
                r[0].clone()
            } else {
                i[1].clone().floordiv(ex(oc_per_group)) * ex(cin_per_group) + r[0].clone()
            };
            src.at(&[
                i[0].clone(),
                ic,
                i[2].clone() * ex(sh) + r[1].clone() * ex(dh),
                i[3].clone() * ex(sw) + r[2].clone() * ex(dw),
            ]) * weight.at(&[i[1].clone(), r[0].clone(), r[1].clone(), r[2].clone()])
        },
    )?;
    match ph.get(2) {
        Some(b) => g.compute(&format!("Y{sfx}"), &out, |i| {
            acc.at(i) + b.at(&[i[1].clone()])
        }),
        None => Ok(acc),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::core::Tensor;
    use crate::ops::{Conv, ConvTranspose, Op, Window};

    fn window(kernel: &[usize], strides: &[usize], dilations: &[usize], pads: &[usize]) -> Window {
        Window {
            kernel: kernel.to_vec(),
            strides: strides.to_vec(),
            dilations: dilations.to_vec(),
            pads: pads.to_vec(),
        }
    }

    /// f32 tensor with the given values, each value computed from its flat index.
    fn from_index(shape: &[usize], f: impl Fn(usize) -> f32) -> Tensor {
        let n: usize = shape.iter().product();
        f32s(shape, &(0..n).map(f).collect::<Vec<_>>())
    }

    #[test]
    fn conv2d_onnx_example_with_padding() {
        // ONNX Conv example: 5x5 iota, 3x3 ones, pads 1.
        let op = Op::Conv(Conv {
            window: window(&[3, 3], &[1, 1], &[1, 1], &[1, 1, 1, 1]),
            group: 1,
        });
        let y = eval1(op, &[&iota(&[1, 1, 5, 5]), &f32s(&[1, 1, 3, 3], &[1.0; 9])]);
        let want = [
            12., 21., 27., 33., 24., 33., 54., 63., 72., 51., 63., 99., 108., 117., 81., 93., 144.,
            153., 162., 111., 72., 111., 117., 123., 84.,
        ];
        assert_close(&y, &[1, 1, 5, 5], &want, 1e-4);
    }

    #[test]
    fn conv1d_and_conv3d_by_hand() {
        // [1,2,3,4,5] * [1,-1], stride 2: [1-2, 3-4].
        let op = Op::Conv(Conv {
            window: window(&[2], &[2], &[1], &[0, 0]),
            group: 1,
        });
        let y = eval1(
            op,
            &[
                &f32s(&[1, 1, 5], &[1., 2., 3., 4., 5.]),
                &f32s(&[1, 1, 2], &[1., -1.]),
            ],
        );
        assert_close(&y, &[1, 1, 2], &[-1.0, -1.0], 0.0);
        // 3x3x3 iota with a 2x2x2 box: out(a,b,c) = 52 + 8 * (9a + 3b + c).
        let op = Op::Conv(Conv {
            window: window(&[2, 2, 2], &[1, 1, 1], &[1, 1, 1], &[0; 6]),
            group: 1,
        });
        let y = eval1(
            op,
            &[&iota(&[1, 1, 3, 3, 3]), &f32s(&[1, 1, 2, 2, 2], &[1.0; 8])],
        );
        let want: Vec<f64> = (0..8)
            .map(|i| 52.0 + 8.0 * (9 * (i / 4) + 3 * (i / 2 % 2) + i % 2) as f64)
            .collect();
        assert_close(&y, &[1, 1, 2, 2, 2], &want, 1e-4);
    }

    #[test]
    fn conv2d_grouped_strided_dilated_matches_onnxruntime() {
        // Expected values: onnxruntime 1.31 Conv (group 2, pads [1,0,1,2], strides
        // [2,1], dilations [1,2]) on x = (i % 7) / 10, w = ((i % 5) - 2) / 4,
        // bias [0.5, -1, 0, 2].
        let x = from_index(&[1, 2, 4, 5], |i| (i % 7) as f32 / 10.0);
        let w = from_index(&[4, 1, 3, 3], |i| ((i % 5) as f32 - 2.0) / 4.0);
        let b = f32s(&[4], &[0.5, -1.0, 0.0, 2.0]);
        let op = Op::Conv(Conv {
            window: window(&[3, 3], &[2, 1], &[1, 2], &[1, 0, 1, 2]),
            group: 2,
        });
        let y = eval1(op, &[&x, &w, &b]);
        let want = [
            0.325, 0.525, 0.75, 0.675, 0.525, 0.5, -1.0, -1.25, -0.95, -0.8, -0.8, -1.375, -0.2,
            0.25, 0.225, 0.25, -0.05, 0.0, 2.025, 2.075, 2.075, 1.9, 1.9, 1.925,
        ];
        assert_close(&y, &[1, 4, 2, 3], &want, 1e-5);
    }

    #[test]
    fn conv_transpose_onnx_example() {
        // ONNX ConvTranspose example: 3x3 iota, ones [1, 2, 3, 3] → two 5x5 planes.
        let op = Op::ConvTranspose(ConvTranspose {
            window: window(&[3, 3], &[1, 1], &[1, 1], &[0; 4]),
            group: 1,
            output_padding: vec![0, 0],
        });
        let y = eval1(
            op,
            &[&iota(&[1, 1, 3, 3]), &f32s(&[1, 2, 3, 3], &[1.0; 18])],
        );
        let plane = [
            0., 1., 3., 3., 2., 3., 8., 15., 12., 7., 9., 21., 36., 27., 15., 9., 20., 33., 24.,
            13., 6., 13., 21., 15., 8.,
        ];
        let want: Vec<f64> = plane.iter().chain(&plane).copied().collect();
        assert_close(&y, &[1, 2, 5, 5], &want, 1e-4);
    }

    #[test]
    fn conv_transpose_grouped_padded_matches_onnxruntime() {
        // Expected values: onnxruntime 1.31 ConvTranspose, group 2, strides [2,3],
        // pads [1,0,0,2], output_padding [1,2], dilations [2,1]; x = (i % 5) / 4,
        // w = ((i % 7) - 3) / 2, bias [1, 0, -1, 0.5, 0.25, 2].
        let x = from_index(&[1, 4, 2, 3], |i| (i % 5) as f32 / 4.0);
        let w = from_index(&[4, 3, 2, 3], |i| ((i % 7) as f32 - 3.0) / 2.0);
        let b = f32s(&[6], &[1.0, 0.0, -1.0, 0.5, 0.25, 2.0]);
        let op = Op::ConvTranspose(ConvTranspose {
            window: window(&[2, 3], &[2, 3], &[2, 1], &[1, 0, 0, 2]),
            group: 2,
            output_padding: vec![1, 2],
        });
        let y = eval1(op, &[&x, &w, &b]);
        let want = [
            1., 1., 1., 1., 1., 1., 1., 1., 1., 0., 1., 2., -1.25, -0.375, 0.5, 0., 0.75, 1.5, 1.,
            1., 1., 1., 1., 1., 1., 1., 1., -0.5, 0.375, 1.25, 1., 1.5, 2., 0.625, 0.75, 0.875, 1.,
            1., 1., 1., 1., 1., 1., 1., 1., 0., 0., 0., 0., 0., 0., 0., 0., 0., 1.5, -1., 0.,
            2.125, -2.25, -1.375, 0.875, -1., -0.25, 0., 0., 0., 0., 0., 0., 0., 0., 0., 1.125,
            -1.5, -0.625, -0.5, 0., 0.5, 0.375, -0.375, -0.25, 0., 0., 0., 0., 0., 0., 0., 0., 0.,
            -1., -1., -1., -1., -1., -1., -1., -1., -1., -0.5, 0.5, -2., 0.25, 1.125, -3.25,
            -0.875, -0.125, -2., -1., -1., -1., -1., -1., -1., -1., -1., -1., -0.75, 0.125, -2.5,
            -2., -1.5, -1., -0.75, -0.625, -1.375, -1., -1., -1., -1., -1., -1., -1., -1., -1.,
            0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 1., 0.875, 0.125, 1.375, 0.875,
            1.25, 2.375, 0.875, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.375, 0.5,
            0.125, 0.5, 0.875, 0., 0.625, 1.25, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25,
            0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, -0.75, 0., 0.75, -1.375, -0.125, 1.125,
            -0.125, 1., 2.125, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, -0.125, 0.,
            0.125, -0.5, -0.125, 0.25, -0.875, -0.25, 0.375, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25,
            0.25, 0.25, 0.25, 2., 2., 2., 2., 2., 2., 2., 2., 2., 2.875, 1., 1.75, 3.5, 0.375,
            1.625, 2.25, 1.625, 2.75, 2., 2., 2., 2., 2., 2., 2., 2., 2., 2.375, 1.625, 1.75,
            2.625, 1.25, 1.625, 2.875, 0.875, 1.5, 2., 2., 2., 2., 2., 2., 2., 2., 2.,
        ];
        assert_close(&y, &[1, 6, 5, 9], &want, 1e-5);
    }

    #[test]
    fn conv_transpose_1d_matches_onnxruntime() {
        // Expected values: onnxruntime 1.31 ConvTranspose, strides [3], pads [1,1],
        // dilations [2]; x = (i % 4) - 1.5 of shape [2,3,7], w = (i % 3) - 1 of [3,3,2].
        let x = from_index(&[2, 3, 7], |i| (i % 4) as f32 - 1.5);
        let w = from_index(&[3, 3, 2], |i| (i % 3) as f32 - 1.0);
        let op = Op::ConvTranspose(ConvTranspose {
            window: window(&[2], &[3], &[2], &[1, 1]),
            group: 1,
            output_padding: vec![0],
        });
        let y = eval1(op, &[&x, &w]);
        let want = [
            0., 0., 0.5, 0., 0., 1.5, 0., 0., -1.5, 0., 0., -0.5, 0., 0., 0.5, 0., 0., 1.5, 0., 0.,
            -0.5, -0.5, 0., 0.5, -1.5, 0., 1.5, 1.5, 0., -1.5, 0.5, 0., -0.5, -0.5, 0., 0.5, -1.5,
            0., 0., 0.5, 0., 0., -0.5, 0., 0., -1.5, 0., 0., 1.5, 0., 0., 0.5, 0., 0., -0.5, 0.,
            0., 0., 0., 1.5, 0., 0., -1.5, 0., 0., -0.5, 0., 0., 0.5, 0., 0., 1.5, 0., 0., -1.5,
            0., 0., 0.5, -1.5, 0., 1.5, 1.5, 0., -1.5, 0.5, 0., -0.5, -0.5, 0., 0.5, -1.5, 0., 1.5,
            1.5, 0., 0., -0.5, 0., 0., -1.5, 0., 0., 1.5, 0., 0., 0.5, 0., 0., -0.5, 0., 0., -1.5,
            0., 0.,
        ];
        assert_close(&y, &[2, 3, 19], &want, 1e-6);
    }

    #[test]
    fn conv_transpose_rejects_a_kernel_that_does_not_match_the_weights() {
        let op = Op::ConvTranspose(ConvTranspose {
            window: window(&[3], &[1], &[1], &[0, 0]),
            group: 1,
            output_padding: vec![0],
        });
        let err = try_eval(op, &[&iota(&[1, 1, 4]), &iota(&[1, 1, 2])]).unwrap_err();
        assert!(err.to_string().contains("kernel_shape"), "{err}");
    }
}
