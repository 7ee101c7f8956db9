//! Max and average pooling (windowed and global), computed in f64, one
//! (batch, channel) plane per rayon task. Windowed pooling reads input
//! `o * stride + k * dilation - pad_begin` along each spatial axis, like Conv.

use super::index::{for_each_run, kernel_offsets};
use crate::graph::{numel, Pool, PoolKind, Tensor, TensorData, ValueType};
use rayon::prelude::*;

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
                    PoolKind::Max => f64::NEG_INFINITY,
                    PoolKind::Avg => 0.0,
                };
                acc.fill(init);
                for off in &offsets {
                    for_each_run(out_sp, in_sp, &w.strides, off, |p_, q, len| {
                        let pairs = acc[p_..p_ + len]
                            .iter_mut()
                            .zip(xin[q..].iter().step_by(s_last));
                        match p.kind {
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

pub(super) fn global_pool(kind: PoolKind, x: &Tensor, out: &ValueType) -> Tensor {
    let plane = numel(&x.shape[2..]);
    let xs = x.data.to_f64();
    let y = (0..out.numel())
        .map(|i| {
            let v = &xs[i * plane..(i + 1) * plane];
            match kind {
                PoolKind::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                PoolKind::Avg => v.iter().sum::<f64>() / plane as f64,
            }
        })
        .collect();
    Tensor::new(out.shape.clone(), TensorData::from_f64(out.dtype, y))
}
