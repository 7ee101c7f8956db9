//! BatchNormalization (inference), LayerNormalization, Softmax and LogSoftmax, in f64.

use super::index::broadcast_indices;
use crate::graph::{numel, Tensor, TensorData, ValueType};

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
pub(super) fn layer_norm(axis: usize, epsilon: f32, inputs: &[&Tensor], out: &ValueType) -> Tensor {
    let x = inputs[0];
    let norm_shape = &x.shape[axis..];
    let inner = numel(norm_shape);
    // Scale and bias expanded to the normalised shape.
    let expand = |t: &Tensor| {
        let v = t.data.to_f64();
        broadcast_indices(&t.shape, norm_shape)
            .into_iter()
            .map(|i| v[i])
            .collect::<Vec<f64>>()
    };
    let scale = expand(inputs[1]);
    let bias = inputs.get(2).map(|b| expand(b));
    let mut v = x.data.to_f64();
    if inner > 0 {
        for row in v.chunks_mut(inner) {
            let mean = row.iter().sum::<f64>() / inner as f64;
            let var = row.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / inner as f64;
            let inv = 1.0 / (var + epsilon as f64).sqrt();
            for (j, a) in row.iter_mut().enumerate() {
                *a = (*a - mean) * inv * scale[j] + bias.as_ref().map_or(0.0, |b| b[j]);
            }
        }
    }
    Tensor::new(out.shape.clone(), TensorData::from_f64(out.dtype, v))
}
