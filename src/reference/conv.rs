//! Convolution and transposed convolution over 1, 2 or 3 (any number of) spatial
//! axes, computed in f64, one output plane (batch, channel) per rayon task.
//!
//! Both read as one index map per kernel position k: along each spatial axis,
//! convolution reads input `o * stride + k * dilation - pad_begin` for output `o`,
//! and transposed convolution writes output `i * stride + k * dilation - pad_begin`
//! for input `i`. `index::for_each_run` walks the in-bounds part of that map.

use super::index::{for_each_run, kernel_offsets};
use crate::graph::{numel, Conv, ConvTranspose, Tensor, TensorData, ValueType};
use rayon::prelude::*;

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
) -> Result<Tensor, String> {
    let (xs, ws) = (&inputs[0].shape, &inputs[1].shape);
    if ws[2..] != c.window.kernel[..] {
        return Err(format!(
            "kernel_shape {:?} does not match weight shape {ws:?}",
            c.window.kernel
        ));
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
