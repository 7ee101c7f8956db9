//! Max and average pooling (windowed and global), computed in f64, one
//! (batch, channel) plane per rayon task. Windowed pooling reads input
//! `o * stride + k * dilation - pad_begin` along each spatial axis, like Conv.

use super::index::{for_each_run, kernel_offsets};
use super::onnx::*;
use super::shape::*;
use super::te::*;
use super::*;
use crate::core::scalar::Scalar;
use crate::core::{numel, strides, Tensor, TensorData, ValueType};
use crate::ops::{MaxPoolIndices, Pool, PoolKind};
use rayon::prelude::*;

impl PoolKind {
    /// The ONNX operator of this pooling over windows, or over whole images
    /// (`global`).
    fn onnx_op(self, global: bool) -> &'static str {
        match (self, global) {
            (PoolKind::Max, false) => "MaxPool",
            (PoolKind::Avg, false) => "AveragePool",
            (PoolKind::Max, true) => "GlobalMaxPool",
            (PoolKind::Avg, true) => "GlobalAveragePool",
        }
    }
}

impl OpDef for Pool {
    fn name(&self) -> &'static str {
        self.kind.onnx_op(false)
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let p = self;

        let x = sole_input(inputs)?;
        // Max pooling compares, so it also takes integers; averaging needs floats.
        if p.kind == PoolKind::Avg || x.dtype == DType::Bool {
            expect_float(x, "input")?;
        }
        check_rank_at_least(x, 3, "input")?;
        let mut shape = x.shape[..2].to_vec();
        shape.extend(window_outputs(&p.window, &x.shape[2..], p.ceil_mode)?);
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let p = self;
        Ok(vec![pool(p, x[0], out)])
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        let spatial_padded = padded.iter().any(|&a| a >= 2);
        let pool = self;

        // Padded channels pool only their own (constant) padding.
        let mut flow = super::pad_flow::pass_through(inputs);
        if spatial_padded {
            flow.inputs[0] = match pool.kind {
                // A window reaching into the padding must not win the max. (No
                // layout family pads spatial axes; -inf there would turn a window
                // of NaN only into -inf, as NaN is skipped.)
                PoolKind::Max => Requirement::Value(f32::NEG_INFINITY),
                // The divisor would count padding positions.
                PoolKind::Avg => Requirement::Unsupported,
            };
        }
        flow
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Source
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.nchw_parts(self.name(), 1..=1)?;
        let refs: Vec<&ValueType> = types.iter().collect();
        let out = self.infer(&refs)?;
        let hw = [out[0].shape[2], out[0].shape[3]];
        let (output, pad) = pool_compute(g, sfx, self, ph[0], &operand_shape(types, 0), hw)?;
        Ok(Defined {
            output,
            // The padded input is read in place, never stored.
            inline: pad.into_iter().collect(),
            per_row: vec![],
        })
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let p = self;

        let is_max = p.kind == PoolKind::Max;
        // AveragePool has dilations only from opset 19 (see `min_opset`).
        let dilated = p.window.dilations.iter().any(|&d| d != 1);
        let mut a = window_attrs(&p.window, is_max || dilated);
        a.push(("ceil_mode", Attr::Int(p.ceil_mode as i64)));
        if !is_max {
            a.push(("count_include_pad", Attr::Int(p.count_include_pad as i64)));
        }
        cx.single(self.name(), cx.inputs, a)
    }

    /// AveragePool has dilations from opset 19.
    fn min_onnx_opset(&self) -> i64 {
        if self.kind == PoolKind::Avg && self.window.dilations.iter().any(|&d| d != 1) {
            19
        } else {
            17
        }
    }
}

impl MaxPoolIndices {
    /// The MaxPool whose maxima these are.
    fn values(&self) -> Pool {
        Pool {
            kind: PoolKind::Max,
            window: self.window.clone(),
            ceil_mode: self.ceil_mode,
            count_include_pad: false,
        }
    }
}

impl OpDef for MaxPoolIndices {
    fn name(&self) -> &'static str {
        "MaxPool"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let values = self.values().infer(inputs)?;
        Ok(vec![ValueType::new(DType::I64, values[0].shape.clone())])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![max_pool_indices(self, x[0], &outputs[0])])
    }

    /// A MaxPool whose values output goes unused.
    fn to_onnx(&self, cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let mut a = window_attrs(&self.window, true);
        a.push(("ceil_mode", Attr::Int(self.ceil_mode as i64)));
        a.push(("storage_order", Attr::Int(self.column_major as i64)));
        let outs = [
            cx.b.fresh(&format!("{}_values", cx.outputs[0])),
            cx.b.fresh(&cx.outputs[0]),
        ];
        cx.b.node_multi("MaxPool", &[cx.input(0)], a, &outs);
        Ok(vec![outs[1].clone()])
    }
}

impl OpDef for GlobalPool {
    fn name(&self) -> &'static str {
        self.kind.onnx_op(true)
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        expect_float(x, "input")?;
        check_rank_at_least(x, 3, "input")?;
        let mut shape = x.shape[..2].to_vec();
        shape.extend(std::iter::repeat_n(1, x.shape.len() - 2));
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let GlobalPool { kind } = self;
        Ok(vec![global_pool(*kind, x[0], out)])
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        let spatial_padded = padded.iter().any(|&a| a >= 2);
        let GlobalPool { kind } = self;

        let mut flow = super::pad_flow::pass_through(inputs);
        if spatial_padded {
            flow.inputs[0] = match kind {
                PoolKind::Max => Requirement::Value(f32::NEG_INFINITY),
                // A mean that divides by the logical count needs 0 there.
                PoolKind::Avg => Requirement::Value(0.0),
            };
        }
        flow
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Source
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.nchw_parts(self.name(), 1..=1)?;
        let GlobalPool { kind } = self;
        let s = operand_shape(types, 0);
        let (h, w) = (s[2], s[3]);
        let x = ph[0];
        let rop = if *kind == PoolKind::Max {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        };
        let out = [e(s[0]), e(s[1]), 1, 1];
        let r = g.reduce(&format!("R{sfx}"), &out, &[e(h), e(w)], rop, |i, r| {
            x.at(&[i[0].clone(), i[1].clone(), r[0].clone(), r[1].clone()])
        })?;
        let y = if *kind == PoolKind::Avg {
            g.compute(&format!("Y{sfx}"), &out, |i| {
                r.at(i) / Expr::Float((h * w) as f64)
            })?
        } else {
            r
        };
        Ok(Defined::output(y))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        cx.single(self.name(), cx.inputs, vec![])
    }
}

pub(super) fn pool(p: &Pool, x: &Tensor, out: &ValueType) -> Tensor {
    let w = &p.window;
    let (in_sp, out_sp) = (&x.shape[2..], &out.shape[2..]);
    let (in_len, out_len) = (numel(in_sp), numel(out_sp));
    let offsets = kernel_offsets(w);
    let s_last = *w.strides.last().expect("rank checked by inference");

    // Average divisor per output position (the same in every plane): the window
    // positions inside the input, or with count_include_pad inside the padded
    // input. Either way a ceil_mode window running past the end counts only what
    // it covers.
    let divisor = (p.kind == PoolKind::Avg).then(|| {
        let (extent, shift): (Vec<usize>, Vec<usize>) = if p.count_include_pad {
            let padded = (0..in_sp.len()).map(|i| in_sp[i] + w.pad_begin(i) + w.pad_end(i));
            (
                padded.collect(),
                (0..in_sp.len()).map(|i| w.pad_begin(i)).collect(),
            )
        } else {
            (in_sp.to_vec(), vec![0; in_sp.len()])
        };
        let mut count = vec![0.0; out_len];
        for off in &offsets {
            let off: Vec<isize> = off
                .iter()
                .zip(&shift)
                .map(|(&o, &s)| o + s as isize)
                .collect();
            for_each_run(out_sp, &extent, &w.strides, &off, |p, _, len| {
                count[p..p + len].iter_mut().for_each(|c| *c += 1.0)
            });
        }
        count
    });

    let xs = x.data.to_f64();
    let mut y = vec![0.0; out.numel()];
    if out_len > 0 {
        y.par_chunks_mut(out_len)
            .enumerate()
            .for_each(|(plane, acc)| {
                let xin = &xs[plane * in_len..][..in_len];
                let init = match p.kind {
                    // NaN: a window of NaN only gives NaN (see below).
                    PoolKind::Max => f64::NAN,
                    PoolKind::Avg => 0.0,
                };
                acc.fill(init);
                for off in &offsets {
                    for_each_run(out_sp, in_sp, &w.strides, off, |p_, q, len| {
                        let pairs = acc[p_..p_ + len]
                            .iter_mut()
                            .zip(xin[q..].iter().step_by(s_last));
                        match p.kind {
                            // A window skips NaN (f64::max is IEEE maximumNumber),
                            // unlike GlobalMaxPool and ReduceMax (ARCHITECTURE.md,
                            // "NaN and infinities").
                            PoolKind::Max => pairs.for_each(|(a, &v)| *a = a.max(v)),
                            PoolKind::Avg => pairs.for_each(|(a, &v)| *a += v),
                        }
                    });
                }
                if let Some(d) = &divisor {
                    acc.iter_mut().zip(d).for_each(|(a, &d)| *a /= d);
                }
            });
    }
    Tensor::new(out.shape.clone(), TensorData::from_f64(out.dtype, y))
}

/// Per output position, the flat input position of the first maximum of its
/// window (NaN loses to any number, as in the values); -1 for a window that
/// lies wholly in the padding, as in the ONNX reference.
fn max_pool_indices(p: &MaxPoolIndices, x: &Tensor, out: &ValueType) -> Tensor {
    let w = &p.window;
    let (in_sp, out_sp) = (&x.shape[2..], &out.shape[2..]);
    let (in_len, out_len) = (numel(in_sp), numel(out_sp));
    let (in_steps, out_steps) = (strides(in_sp), strides(out_sp));
    // How a spatial position is numbered in the indices.
    let place = if p.column_major {
        let mut rev: Vec<usize> = in_sp.to_vec();
        rev.reverse();
        let mut s = strides(&rev);
        s.reverse();
        s
    } else {
        in_steps.clone()
    };
    let taps = kernel_offsets(w);
    let xs = x.data.to_f64();
    let mut y = vec![-1i64; out.numel()];
    for (j, slot) in y.iter_mut().enumerate() {
        let (plane, o) = (j / out_len.max(1), j % out_len.max(1));
        let mut best: Option<(f64, usize)> = None;
        for tap in &taps {
            let mut at = Some((0, 0));
            for a in 0..out_sp.len() {
                let oa = (o / out_steps[a]) % out_sp[a];
                let i = (oa * w.strides[a]) as isize + tap[a];
                at = at
                    .filter(|_| (0..in_sp[a] as isize).contains(&i))
                    .map(|(r, c)| (r + i as usize * in_steps[a], c + i as usize * place[a]));
            }
            let Some((row_major, placed)) = at else {
                continue;
            };
            let v = xs[plane * in_len + row_major];
            let wins = best.is_none_or(|(b, _)| v > b || (b.is_nan() && !v.is_nan()));
            if wins {
                best = Some((v, placed));
            }
        }
        if let Some((_, placed)) = best {
            *slot = (plane * in_len + placed) as i64;
        }
    }
    Tensor::new(out.shape.clone(), TensorData::I64(y))
}

pub(super) fn global_pool(kind: PoolKind, x: &Tensor, out: &ValueType) -> Tensor {
    let plane = numel(&x.shape[2..]);
    let xs = x.data.to_f64();
    let y = (0..out.numel())
        .map(|i| {
            let v = &xs[i * plane..(i + 1) * plane];
            match kind {
                PoolKind::Max => v.iter().copied().fold(f64::NEG_INFINITY, Scalar::max),
                PoolKind::Avg => v.iter().sum::<f64>() / plane as f64,
            }
        })
        .collect();
    Tensor::new(out.shape.clone(), TensorData::from_f64(out.dtype, y))
}

fn pool_compute(
    g: &mut ComputeGraph,
    sfx: &str,
    p: &Pool,
    x: TeTensor,
    xs: &[usize],
    out_hw: [usize; 2],
) -> Result<(TeTensor, Option<TeTensor>), TirError> {
    let w = &p.window;
    let is_max = p.kind == PoolKind::Max;
    // NaN padding: the window's maximum skips it.
    let fill = if is_max { f64::NAN } else { 0.0 };
    let span = |a: usize| w.dilations[a] * (w.kernel[a] - 1) + 1;
    // In ceil mode the last window may run past the end padding: pad further
    // so that every read is inside the padded stage (those positions hold the
    // fill, and the divisor below counts input positions only).
    let mut pads = w.pads.clone();
    for a in 0..2 {
        let needed = (out_hw[a] - 1) * w.strides[a] + span(a);
        let have = xs[a + 2] + w.pads[a] + w.pads[a + 2];
        pads[a + 2] += needed.saturating_sub(have);
    }
    let pad = pad_stage(g, sfx, x, xs, &pads, fill)?;
    let src = pad.unwrap_or(x);
    let out = [e(xs[0]), e(xs[1]), e(out_hw[0]), e(out_hw[1])];
    let (sh, sw, dh, dw) = (w.strides[0], w.strides[1], w.dilations[0], w.dilations[1]);
    let rop = if is_max {
        ReduceOp::MaxNumber
    } else {
        ReduceOp::Sum
    };
    let name = format!("{}{sfx}", if is_max { "Y" } else { "S" });
    let acc = g.reduce(
        &name,
        &out,
        &[e(w.kernel[0]), e(w.kernel[1])],
        rop,
        |i, r| {
            src.at(&[
                i[0].clone(),
                i[1].clone(),
                i[2].clone() * ex(sh) + r[0].clone() * ex(dh),
                i[3].clone() * ex(sw) + r[1].clone() * ex(dw),
            ])
        },
    )?;
    if is_max {
        return Ok((acc, pad));
    }
    // The divisor: the whole window, or only its positions inside the input.
    let (kh, kw) = (w.kernel[0], w.kernel[1]);
    let (pt, pl) = (w.pads[0], w.pads[1]);
    let (h, wd) = (xs[2], xs[3]);
    let include = p.count_include_pad;
    let y = g.compute(&format!("Y{sfx}"), &out, |i| {
        if include {
            return acc.at(i) / Expr::Float((kh * kw) as f64);
        }
        let count = |o: &Expr, s: usize, k: usize, pb: usize, n: usize| {
            let start = o.clone() * ex(s);
            (start.clone() + ex(k)).min(ex(pb + n)) - start.max(ex(pb))
        };
        acc.at(i) / (count(&i[2], sh, kh, pt, h) * count(&i[3], sw, kw, pl, wd))
    })?;
    Ok((y, pad))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::core::Tensor;
    use crate::ops::*;
    use crate::ops::{Op, Pool, PoolKind, Window};

    fn pool(
        kind: PoolKind,
        k: &[usize],
        s: &[usize],
        d: &[usize],
        pads: &[usize],
        ceil: bool,
        incl: bool,
    ) -> Op {
        Op::Pool(Pool {
            kind,
            window: Window {
                kernel: k.to_vec(),
                strides: s.to_vec(),
                dilations: d.to_vec(),
                pads: pads.to_vec(),
            },
            ceil_mode: ceil,
            count_include_pad: incl,
        })
    }

    /// The [1, 2, 5, 6] input of the onnxruntime cases: (7 i) % 11.
    fn ort_input() -> Tensor {
        f32s(
            &[1, 2, 5, 6],
            &(0..60).map(|i| (i * 7 % 11) as f32).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn ceil_mode_onnx_examples() {
        // ONNX maxpool_2d_ceil / averagepool_2d_ceil: 4x4 of 1..16, kernel 3, stride 2.
        let x = f32s(
            &[1, 1, 4, 4],
            &(1..=16).map(|i| i as f32).collect::<Vec<_>>(),
        );
        for (kind, want, tol) in [
            (PoolKind::Max, [11.0, 12.0, 15.0, 16.0], 0.0),
            (PoolKind::Avg, [6.0, 7.5, 12.0, 13.5], 1e-6),
        ] {
            let op = pool(kind, &[3, 3], &[2, 2], &[1, 1], &[0; 4], true, false);
            assert_close(&eval1(op, &[&x]), &[1, 1, 2, 2], &want, tol);
        }
    }

    #[test]
    fn average_pool_divisors_match_onnxruntime() {
        // Expected values: onnxruntime 1.31 AveragePool, kernel [3,2], strides [2,2],
        // pads [1,1,1,0], ceil_mode 1. The last column of windows runs past the padded
        // input and divides by what it covers.
        let counting_pads = [
            1.5, 2.666667, 4.666667, 0.6666667, 3.5, 4.666667, 4.0, 5.333333, 1.333333, 4.166667,
            2.5, 4.0, 1.833333, 3.333333, 3.5, 1.333333, 4.0, 3.833333, 5.0, 6.333333, 1.666667,
            3.0, 3.166667, 4.666667,
        ];
        let not_counting_pads = [
            4.5, 4.0, 7.0, 1.0, 7.0, 4.666667, 4.0, 5.333333, 4.0, 6.25, 3.75, 6.0, 5.5, 5.0, 5.25,
            2.0, 8.0, 3.833333, 5.0, 6.333333, 5.0, 4.5, 4.75, 7.0,
        ];
        let x = ort_input();
        for (include_pad, want) in [(true, counting_pads), (false, not_counting_pads)] {
            let op = pool(
                PoolKind::Avg,
                &[3, 2],
                &[2, 2],
                &[1, 1],
                &[1, 1, 1, 0],
                true,
                include_pad,
            );
            assert_close(&eval1(op, &[&x]), &[1, 2, 3, 4], &want, 1e-5);
        }
    }

    #[test]
    fn dilated_max_pool_matches_onnxruntime() {
        // Expected values: onnxruntime 1.31 MaxPool, kernel [2,2], strides [2,3],
        // pads [1,1,0,1], dilations [2,1], ceil_mode 1.
        let op = pool(
            PoolKind::Max,
            &[2, 2],
            &[2, 3],
            &[2, 1],
            &[1, 1, 0, 1],
            true,
            false,
        );
        let want = [
            9., 8., 0., 9., 8., 7., 5., 8., 7., 10., 9., 1., 10., 9., 8., 6., 9., 8.,
        ];
        assert_close(&eval1(op, &[&ort_input()]), &[1, 2, 3, 3], &want, 0.0);
    }

    #[test]
    fn one_d_pooling_and_global_pooling() {
        let x = f32s(&[1, 1, 5], &[1., 3., 2., 5., 4.]);
        let op = pool(PoolKind::Max, &[2], &[1], &[1], &[0, 0], false, false);
        assert_close(&eval1(op, &[&x]), &[1, 1, 4], &[3., 3., 5., 5.], 0.0);
        // Average with one pad each side, not counting pads: [1, 2, 2.5, 3.5, 4.5].
        let op = pool(PoolKind::Avg, &[2], &[1], &[1], &[1, 1], false, false);
        assert_close(
            &eval1(op, &[&x]),
            &[1, 1, 6],
            &[1., 2., 2.5, 3.5, 4.5, 4.],
            1e-6,
        );
        // Global pools over a 3-D volume: channel c holds 8c .. 8c+7.
        let x = iota(&[1, 2, 2, 2, 2]);
        let y = eval1(
            Op::GlobalPool(GlobalPool {
                kind: PoolKind::Avg,
            }),
            &[&x],
        );
        assert_close(&y, &[1, 2, 1, 1, 1], &[3.5, 11.5], 1e-6);
        let y = eval1(
            Op::GlobalPool(GlobalPool {
                kind: PoolKind::Max,
            }),
            &[&x],
        );
        assert_close(&y, &[1, 2, 1, 1, 1], &[7.0, 15.0], 0.0);
    }

    /// The first maximum of each window, as a flat input position with the
    /// (batch, channel) plane counted in, in either numbering of the plane.
    #[test]
    fn max_pool_indices_number_row_or_column_major() {
        // Two planes of 2x3; the second repeats the first. Windows 2x2, stride 1:
        // the maxima 5 at (0, 1) (the 5 below it comes later) and 6 at (1, 2).
        let plane = [1.0, 5.0, 2.0, 4.0, 5.0, 6.0];
        let x = f32s(&[1, 2, 2, 3], &[plane, plane].concat());
        let indices = |column_major| {
            let op = Op::MaxPoolIndices(MaxPoolIndices {
                window: square_window(2, 1, 0),
                ceil_mode: false,
                column_major,
            });
            eval1(op, &[&x])
        };
        // Row-major: h * 3 + w; column-major: h + w * 2; planes 6 apart.
        assert_i64(&indices(false), &[1, 2, 1, 2], &[1, 5, 7, 11]);
        assert_i64(&indices(true), &[1, 2, 1, 2], &[2, 5, 8, 11]);
    }
}
