//! Discrete Fourier transforms: DFT as a matrix product with its constant
//! matrix of cosines and sines along the transformed axis, and STFT as a
//! strided 1-D convolution whose filters are that matrix times the window.
//! Both run on the dense kernels; a length-n transform costs n² multiply-adds
//! per signal, which the lengths models use (frames of a few hundred samples)
//! afford. MelWeightMatrix, the filter bank that maps a spectrum onto mel
//! bins, is a constant.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{Op, Tensor, TensorData, ValueRef, Window};
use crate::ops::{Conv, Reshape, Transpose};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "DFT", dft);
    reg.add(AI_ONNX, "STFT", stft);
    reg.add(AI_ONNX, "MelWeightMatrix", mel_weight_matrix);
}

/// MelWeightMatrix: (dft_length / 2 + 1, num_mel_bins) triangular filters
/// between the mel scale points of the band [lower, upper] hertz, each
/// rising from its left point to its centre and falling to its right one,
/// the points snapped down to spectrum bins. The specification spaces the
/// points by the band over num_mel_bins + 2 (not + 1), so the last point
/// stops short of `upper`; its reference does so too.
fn mel_weight_matrix(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let scalar = |c: &NodeCtx, i: usize, what: &str| -> Res<f64> {
        match c.const_input(i)?.map(|t| t.data.to_f64()).as_deref() {
            Some(&[v]) => Ok(v),
            _ => Err(c.err(format!(
                "MelWeightMatrix needs {what} as one constant value"
            ))),
        }
    };
    let bins = scalar(c, 0, "num_mel_bins")?;
    let length = scalar(c, 1, "dft_length")?;
    let rate = scalar(c, 2, "sample_rate")?;
    let (lower, upper) = (
        scalar(c, 3, "lower_edge_hertz")?,
        scalar(c, 4, "upper_edge_hertz")?,
    );
    if bins < 1.0 || length < 1.0 || rate <= 0.0 || !(0.0..=upper).contains(&lower) {
        return Err(c.err(format!(
            "{bins} mel bins of a {length}-point spectrum at {rate} Hz between {lower} and {upper} Hz do not form a filter bank"
        )));
    }
    let (bins, length) = (bins as usize, length as usize);
    let spectrum = length / 2 + 1;
    let dtype = crate::frontend::onnx::dtype_from_onnx(c.int("output_datatype", 1)? as i32)
        .map_err(|m| c.err(format!("output_datatype: {m}")))?;
    c.check_size(dtype, &[spectrum, bins])?;
    let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / std::f64::consts::LN_10;
    let step = (mel(upper) - mel(lower)) / (bins + 2) as f64;
    let points: Vec<usize> = (0..bins + 2)
        .map(|k| {
            let hz = 700.0
                * ((k as f64 * step + mel(lower)) / 2595.0 * std::f64::consts::LN_10).exp_m1();
            ((length + 1) as f64 * hz / rate).floor() as usize
        })
        .collect();
    if let Some(&beyond) = points.iter().find(|&&p| p >= spectrum) {
        return Err(c.err(format!(
            "a mel point falls on bin {beyond}, past the {spectrum} bins of the spectrum"
        )));
    }
    let mut matrix = vec![0.0; spectrum * bins];
    for (i, p) in points.windows(3).enumerate() {
        let (left, centre, right) = (p[0], p[1], p[2]);
        if centre == left {
            matrix[centre * bins + i] = 1.0;
        } else {
            for j in left..=centre {
                matrix[j * bins + i] = (j - left) as f64 / (centre - left) as f64;
            }
        }
        for j in centre..right {
            matrix[j * bins + i] = (right - j) as f64 / (right - centre) as f64;
        }
    }
    let t = Tensor::new(vec![spectrum, bins], TensorData::from_f64(dtype, matrix));
    Ok(c.constant(t))
}

/// Which transform a coefficient matrix computes.
#[derive(Clone, Copy)]
enum Direction {
    /// Complex (or real) samples to complex frequencies.
    Forward,
    /// Complex frequencies to complex samples, divided by the length.
    Inverse,
    /// The first half of a Hermitian spectrum to real samples (numpy's irfft):
    /// the bins between the first and the middle count twice.
    InverseOfReal,
}

/// The transform of length `length` as a matrix: row `(t, ci)` for input
/// position `t < inputs` and part `ci` (real, imaginary), column `(j, co)` for
/// output position `j < outputs` and part `co`; each row scaled by
/// `window[t]`. Inputs past the length drop out (the transform truncates);
/// missing ones are zero (it pads).
struct Transform {
    direction: Direction,
    length: usize,
    inputs: usize,
    parts_in: usize,
    outputs: usize,
    parts_out: usize,
}

impl Transform {
    fn matrix(&self, window: Option<&[f64]>) -> Vec<f64> {
        let (n, cols) = (self.length as f64, self.outputs * self.parts_out);
        let mut m = vec![0.0; self.inputs * self.parts_in * cols];
        for t in 0..self.inputs {
            let w = window.map_or(1.0, |w| w[t]);
            for j in 0..self.outputs {
                // Frequency k of sample s, whichever is the input.
                let (k, s) = match self.direction {
                    Direction::Forward => (j, t),
                    Direction::Inverse | Direction::InverseOfReal => (t, j),
                };
                let theta = 2.0 * std::f64::consts::PI * ((k * s) % self.length) as f64 / n;
                let (cos, sin) = (theta.cos(), theta.sin());
                // (re, im) of input part ci times e^(-i theta) forward, e^(i theta) back.
                let terms: [[f64; 2]; 2] = match self.direction {
                    Direction::Forward => [[cos, -sin], [sin, cos]],
                    Direction::Inverse => [[cos / n, sin / n], [-sin / n, cos / n]],
                    Direction::InverseOfReal => {
                        let twice = k != 0 && 2 * k != self.length;
                        let f = if twice { 2.0 / n } else { 1.0 / n };
                        [[cos * f, 0.0], [-sin * f, 0.0]]
                    }
                };
                for (ci, part) in terms.iter().enumerate().take(self.parts_in) {
                    let row = t * self.parts_in + ci;
                    for (co, term) in part.iter().enumerate().take(self.parts_out) {
                        m[row * cols + j * self.parts_out + co] = w * term;
                    }
                }
            }
        }
        m
    }
}

impl NodeCtx<'_> {
    /// A scalar integer input that must be a constant, or `default` when absent.
    fn const_scalar(&self, i: usize, what: &str, default: Option<i64>) -> Res<i64> {
        match (self.const_ints(i)?.as_deref(), default) {
            (Some(&[v]), _) => Ok(v),
            (None, Some(d)) => Ok(d),
            _ => Err(self.err(format!("{what} must be one integer"))),
        }
    }

    /// The input's last axis: 1 (real) or 2 (real, imaginary) parts.
    fn complex_parts(&self, x: ValueRef) -> Res<usize> {
        match self.ty(x).shape.last() {
            Some(&c @ (1 | 2)) => Ok(c),
            _ => Err(self.err(format!(
                "input of shape {:?}: its last axis must hold 1 (real) or 2 (real, imaginary) parts",
                self.ty(x).shape
            ))),
        }
    }
}

/// DFT of opset 17 (axis an attribute, default 1) and 20 (axis input 2,
/// default -2): the transformed axis moved next to the parts, both flattened
/// into rows of a matrix product with the transform's matrix, then moved back.
fn dft(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let shape = c.ty(x).shape;
    let parts_in = c.complex_parts(x)?;
    let rank = shape.len();
    if rank < 3 {
        return Err(c.err(format!(
            "input of shape {shape:?} needs a batch axis, a signal axis and the parts"
        )));
    }
    let axis = match c.opset {
        ..=19 => c.int("axis", 1)?,
        _ => c.const_scalar(2, "axis", Some(-2))?,
    };
    let axis = c.axis(axis, rank)?;
    if axis == 0 || axis == rank - 1 {
        return Err(c.err(format!(
            "axis {axis} is the batch or the parts axis; the transform runs along a signal axis"
        )));
    }
    let (inverse, onesided) = (
        c.bool_attr("inverse", false)?,
        c.bool_attr("onesided", false)?,
    );
    let inputs = shape[axis];
    let length = match c.opt_input(1) {
        Some(_) => c.const_scalar(1, "dft_length", None)?,
        None if inverse && onesided => 2 * (inputs as i64 - 1),
        None => inputs as i64,
    };
    let length = usize::try_from(length)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| c.err(format!("dft_length {length} is not positive")))?;
    let (direction, outputs, parts_out) = match (inverse, onesided) {
        (false, false) => (Direction::Forward, length, 2),
        (false, true) => (Direction::Forward, length / 2 + 1, 2),
        (true, false) => (Direction::Inverse, length, 2),
        (true, true) => (Direction::InverseOfReal, length, 1),
    };
    // Inputs past the length are dropped (the bins past the half as well for
    // a real inverse); fewer are padded with zeros.
    let used = match direction {
        Direction::InverseOfReal => inputs.min(length / 2 + 1),
        _ => inputs.min(length),
    };
    let transform = Transform {
        direction,
        length,
        inputs,
        parts_in,
        outputs,
        parts_out,
    };
    // Refused before it is built (each extent apart, so that no product
    // overflows): the matrix grows with the square of the length.
    c.check_size(c.ty(x).dtype, &[inputs, parts_in, outputs, parts_out])?;
    let cols = outputs * parts_out;
    let mut m = transform.matrix(None);
    m[used * parts_in * cols..].fill(0.0);
    let m = Tensor::new(
        vec![inputs * parts_in, cols],
        TensorData::from_f64(c.ty(x).dtype, m),
    );
    let matrix = c.inner_constant("dft_matrix", m);
    // The signal axis next to the parts, as rows of (position, part).
    let perm: Vec<usize> = (0..rank - 1)
        .filter(|&a| a != axis)
        .chain([axis, rank - 1])
        .collect();
    let moved_shape: Vec<usize> = perm.iter().map(|&a| shape[a]).collect();
    let identity = perm.iter().enumerate().all(|(i, &a)| i == a);
    let moved = if identity {
        x
    } else {
        c.emit_inner(
            Op::Transpose(Transpose { perm: perm.clone() }),
            &[x],
            "moved",
        )?
    };
    let mut rows_shape = moved_shape[..rank - 2].to_vec();
    rows_shape.push(inputs * parts_in);
    let rows = c.emit_inner(Op::Reshape(Reshape { shape: rows_shape }), &[moved], "rows")?;
    let product = c.emit_inner(Op::MatMul, &[rows, matrix], "transformed")?;
    let mut out_shape = moved_shape[..rank - 2].to_vec();
    out_shape.extend([outputs, parts_out]);
    if identity {
        return c.emit(Op::Reshape(Reshape { shape: out_shape }), &[product]);
    }
    let split = c.emit_inner(
        Op::Reshape(Reshape { shape: out_shape }),
        &[product],
        "split",
    )?;
    let mut back = vec![0; rank];
    for (i, &a) in perm.iter().enumerate() {
        back[a] = i;
    }
    c.emit(Op::Transpose(Transpose { perm: back }), &[split])
}

/// STFT: frames of `frame_length` samples every `frame_step`, each times the
/// window, transformed; as a 1-D convolution of the signal (its parts as
/// channels) with one filter per output frequency and part.
fn stft(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let shape = c.ty(x).shape;
    let parts_in = c.complex_parts(x)?;
    let &[batch, samples, _] = &shape[..] else {
        return Err(c.err(format!(
            "signal of shape {shape:?} is not [batch, samples, parts]"
        )));
    };
    let step = c.const_scalar(1, "frame_step", None)?;
    let window = c.const_input(2)?.map(|t| t.data.to_f64());
    let length = match (c.opt_input(3), &window) {
        (Some(_), _) => c.const_scalar(3, "frame_length", None)?,
        (None, Some(w)) => w.len() as i64,
        (None, None) => {
            return Err(c.err("STFT needs a window or a frame_length"));
        }
    };
    let (Ok(step), Ok(length)) = (usize::try_from(step), usize::try_from(length)) else {
        return Err(c.err(format!(
            "frame_step {step} and frame_length {length} must not be negative"
        )));
    };
    if step == 0 || length == 0 || length > samples {
        return Err(c.err(format!(
            "frame_step {step} and frame_length {length} do not fit {samples} samples"
        )));
    }
    if window.as_ref().is_some_and(|w| w.len() != length) {
        return Err(c.err(format!(
            "the window holds {} values for frames of {length}",
            window.as_ref().map_or(0, Vec::len)
        )));
    }
    let onesided = c.bool_attr("onesided", true)?;
    if onesided && parts_in == 2 {
        return Err(c.err("a one-sided transform needs a real signal"));
    }
    let outputs = if onesided { length / 2 + 1 } else { length };
    let transform = Transform {
        direction: Direction::Forward,
        length,
        inputs: length,
        parts_in,
        outputs,
        parts_out: 2,
    };
    c.check_size(c.ty(x).dtype, &[outputs, 2, parts_in, length])?;
    let cols = outputs * 2;
    let m = transform.matrix(window.as_deref());
    // Filters [outputs * 2][parts][length] from the matrix's rows (t, part).
    let mut filters = vec![0.0; cols * parts_in * length];
    for t in 0..length {
        for p in 0..parts_in {
            for j in 0..cols {
                filters[(j * parts_in + p) * length + t] = m[(t * parts_in + p) * cols + j];
            }
        }
    }
    let filters = Tensor::new(
        vec![cols, parts_in, length],
        TensorData::from_f64(c.ty(x).dtype, filters),
    );
    let filters = c.inner_constant("filters", filters);
    // [batch, samples, parts] and [batch, filters, frames] swap their last axes.
    let swapped = Op::Transpose(Transpose {
        perm: vec![0, 2, 1],
    });
    let channels = c.emit_inner(swapped.clone(), &[x], "channels")?;
    let conv = Op::Conv(Conv {
        window: Window {
            kernel: vec![length],
            strides: vec![step],
            dilations: vec![1],
            pads: vec![0, 0],
        },
        group: 1,
    });
    let framed = c.emit_inner(conv, &[channels, filters], "frames")?;
    let frames = (samples - length) / step + 1;
    let by_frame = c.emit_inner(swapped, &[framed], "by_frame")?;
    c.emit(
        Op::Reshape(Reshape {
            shape: vec![batch, frames, outputs, 2],
        }),
        &[by_frame],
    )
}
