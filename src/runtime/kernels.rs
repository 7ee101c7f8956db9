//! Kernels other than convolution: elementwise ops, pooling, and layout
//! transforms, all on physical buffers. Loops are written plainly over the
//! innermost channel block and compiled per instruction set (`multiversion!`) so
//! the compiler vectorizes them with the widest registers the CPU has.

use crate::graph::{BinaryOp, PoolKind, UnaryOp};
use crate::layout::Layout;
use rayon::prelude::*;

/// Compiles `$body` (a generic `#[inline(always)]` function call) three times:
/// with AVX-512, with AVX2+FMA, and for the baseline, and runs the best one.
macro_rules! multiversion {
    ($name:ident ( $($arg:ident : $ty:ty),* ) $body:block) => {
        fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn wide($($arg: $ty),*) $body
                #[target_feature(enable = "avx2,fma")]
                unsafe fn narrow($($arg: $ty),*) $body
                if std::arch::is_x86_feature_detected!("avx512f") {
                    return unsafe { wide($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    return unsafe { narrow($($arg),*) };
                }
            }
            $body
        }
    };
}

/// The elementwise function a fused unary applies: clamp covers relu and clip.
pub fn unary_clamp(u: UnaryOp) -> Option<(f32, f32)> {
    match u {
        UnaryOp::Relu => Some((0.0, f32::INFINITY)),
        UnaryOp::Clip { min, max } => Some((min, max)),
        _ => None,
    }
}

multiversion!(clamp_into(x: &[f32], y: &mut [f32], lo: f32, hi: f32) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v.max(lo).min(hi);
    }
});

multiversion!(binary_into(a: &[f32], b: &[f32], y: &mut [f32], op: BinaryOp) {
    macro_rules! each {
        ($f:expr) => {
            for ((o, &p), &q) in y.iter_mut().zip(a).zip(b) {
                *o = $f(p, q);
            }
        };
    }
    match op {
        BinaryOp::Add => each!(|p: f32, q: f32| p + q),
        BinaryOp::Sub => each!(|p: f32, q: f32| p - q),
        BinaryOp::Mul => each!(|p: f32, q: f32| p * q),
        BinaryOp::Div => each!(|p: f32, q: f32| p / q),
        BinaryOp::Max => each!(|p: f32, q: f32| p.max(q)),
        BinaryOp::Min => each!(|p: f32, q: f32| p.min(q)),
        _ => unreachable!("only arithmetic binaries are compiled (see `binary_supported`)"),
    }
});

/// Binary ops with a fast kernel (same-shape operands, f32 result).
pub fn binary_supported(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Max
            | BinaryOp::Min
    )
}

pub fn clamp(x: &[f32], y: &mut [f32], lo: f32, hi: f32) {
    clamp_into(x, y, lo, hi)
}

pub fn binary(op: BinaryOp, a: &[f32], b: &[f32], y: &mut [f32]) {
    binary_into(a, b, y, op)
}

/// Pooling over the spatial axes of an NCHW{cb}c buffer (padding channels are
/// pooled like the others, so their value carries through).
#[derive(Clone, Debug)]
pub struct PoolGeom {
    pub kind: PoolKind,
    /// Batch times channel blocks.
    pub planes: usize,
    pub cb: usize,
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub k: (usize, usize),
    pub stride: (usize, usize),
    pub pad: (usize, usize),
    pub count_include_pad: bool,
}

multiversion!(pool_plane(g: &PoolGeom, x: &[f32], y: &mut [f32]) {
    let cb = g.cb;
    let mut acc = vec![0f32; cb];
    for oh in 0..g.oh {
        for ow in 0..g.ow {
            let init = match g.kind {
                PoolKind::Max => f32::NEG_INFINITY,
                PoolKind::Avg => 0.0,
            };
            acc.fill(init);
            let mut count = 0usize;
            for kh in 0..g.k.0 {
                let ih = (oh * g.stride.0 + kh) as isize - g.pad.0 as isize;
                if ih < 0 || ih >= g.h as isize {
                    continue;
                }
                for kw in 0..g.k.1 {
                    let iw = (ow * g.stride.1 + kw) as isize - g.pad.1 as isize;
                    if iw < 0 || iw >= g.w as isize {
                        continue;
                    }
                    count += 1;
                    let px = &x[(ih as usize * g.w + iw as usize) * cb..][..cb];
                    match g.kind {
                        PoolKind::Max => acc.iter_mut().zip(px).for_each(|(a, &v)| *a = a.max(v)),
                        PoolKind::Avg => acc.iter_mut().zip(px).for_each(|(a, &v)| *a += v),
                    }
                }
            }
            let out = &mut y[(oh * g.ow + ow) * cb..][..cb];
            if g.kind == PoolKind::Avg {
                let n = if g.count_include_pad { g.k.0 * g.k.1 } else { count };
                let inv = 1.0 / n.max(1) as f32;
                out.iter_mut().zip(&acc).for_each(|(o, &a)| *o = a * inv);
            } else {
                out.copy_from_slice(&acc);
            }
        }
    }
});

pub fn pool(g: &PoolGeom, x: &[f32], y: &mut [f32]) {
    let (xs, ys) = (g.h * g.w * g.cb, g.oh * g.ow * g.cb);
    y[..g.planes * ys]
        .par_chunks_mut(ys)
        .zip(x[..g.planes * xs].par_chunks(xs))
        .for_each(|(yp, xp)| pool_plane(g, xp, yp));
}

/// A layout transform as a gather: every output element's source offset, or
/// `None` for padding, which gets `fill`.
pub struct Gather {
    src: Vec<u32>,
    fill: f32,
}

const PAD: u32 = u32::MAX;

impl Gather {
    /// The gather from `from` to `to` for a logical tensor of shape `logical`.
    pub fn new(from: &Layout, to: &Layout, logical: &[usize], fill: f32) -> Result<Gather, String> {
        let phys_to = to.physical_shape(logical).map_err(|e| e.to_string())?;
        let phys_from = from.physical_shape(logical).map_err(|e| e.to_string())?;
        let n: usize = phys_to.iter().product();
        if phys_from.iter().product::<usize>() >= PAD as usize {
            return Err("tensor too large for a 32-bit gather".into());
        }
        let from_strides = crate::graph::strides(&phys_from);
        let mut src = vec![PAD; n];
        let mut idx = vec![0usize; logical.len()];
        let to_strides = crate::graph::strides(&phys_to);
        for _ in 0..crate::graph::numel(logical) {
            let p_to = to.to_physical_index(&idx).map_err(|e| e.to_string())?;
            let p_from = from.to_physical_index(&idx).map_err(|e| e.to_string())?;
            let o: usize = p_to.iter().zip(&to_strides).map(|(a, b)| a * b).sum();
            let s: usize = p_from.iter().zip(&from_strides).map(|(a, b)| a * b).sum();
            src[o] = s as u32;
            for a in (0..idx.len()).rev() {
                idx[a] += 1;
                if idx[a] < logical[a] {
                    break;
                }
                idx[a] = 0;
            }
        }
        Ok(Gather { src, fill })
    }

    pub fn run(&self, x: &[f32], y: &mut [f32]) {
        for (o, &s) in y.iter_mut().zip(&self.src) {
            *o = if s == PAD { self.fill } else { x[s as usize] };
        }
    }
}

/// Depthwise 2-D convolution (one filter per channel) on NCHW{cb}c data, with
/// the same fused epilogue as the dense convolution.
pub struct Depthwise {
    pub geom: super::conv::ConvGeom,
    /// [channel blocks][kh][kw][cb], zero in padding channels.
    w: Vec<f32>,
    /// [channel blocks][cb].
    bias: Vec<f32>,
    lo: f32,
    hi: f32,
    /// What the output's padding channels must hold, if any are there.
    pad_fill: Option<f32>,
}

impl Depthwise {
    /// `w` is logical [C, 1, kh, kw]; input and output share the block `geom.x_cb`.
    pub fn new(
        geom: super::conv::ConvGeom,
        w: &[f32],
        bias: &[f32],
        lo: f32,
        hi: f32,
        pad_fill: Option<f32>,
    ) -> Depthwise {
        let cb = geom.x_cb;
        let blocks = geom.cin.div_ceil(cb);
        let (kh, kw) = geom.k;
        let mut packed = vec![0f32; blocks * kh * kw * cb];
        let mut b = vec![0f32; blocks * cb];
        for c in 0..geom.cin {
            b[c] = bias[c];
            for y in 0..kh {
                for x in 0..kw {
                    packed[(((c / cb) * kh + y) * kw + x) * cb + c % cb] = w[(c * kh + y) * kw + x];
                }
            }
        }
        let padded = !geom.cin.is_multiple_of(cb);
        Depthwise {
            geom,
            w: packed,
            bias: b,
            lo,
            hi,
            pad_fill: pad_fill.filter(|_| padded),
        }
    }

    pub fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32]) {
        let g = &self.geom;
        let cb = g.x_cb;
        let blocks = g.cin.div_ceil(cb);
        let (xs, ys) = (g.h * g.w * cb, g.oh * g.ow * cb);
        let planes = g.n * blocks;
        y[..planes * ys]
            .par_chunks_mut(ys)
            .enumerate()
            .for_each(|(p, yp)| {
                let r = residual.map(|r| &r[p * ys..][..ys]);
                depthwise_plane(self, p % blocks, &x[p * xs..][..xs], r, yp)
            });
        if let Some(v) = self.pad_fill {
            super::conv::fill_channel_pad(y, g.n, g.cin, cb, g.oh * g.ow, v);
        }
    }
}

multiversion!(depthwise_plane(d: &Depthwise, block: usize, x: &[f32], res: Option<&[f32]>, y: &mut [f32]) {
    // Fixed block widths keep the accumulators in registers.
    match d.geom.x_cb {
        16 => depthwise_fixed::<16>(d, block, x, res, y),
        8 => depthwise_fixed::<8>(d, block, x, res, y),
        _ => depthwise_any(d, block, x, res, y),
    }
});

#[inline(always)]
fn depthwise_fixed<const CB: usize>(
    d: &Depthwise,
    block: usize,
    x: &[f32],
    res: Option<&[f32]>,
    y: &mut [f32],
) {
    let g = &d.geom;
    let (kh, kw) = g.k;
    let w = &d.w[block * kh * kw * CB..][..kh * kw * CB];
    let bias: [f32; CB] = d.bias[block * CB..][..CB].try_into().expect("CB lanes");
    for oh in 0..g.oh {
        for ow in 0..g.ow {
            let mut acc = bias;
            for ky in 0..kh {
                let ih = (oh * g.stride.0 + ky * g.dilation.0) as isize - g.pad.0 as isize;
                if ih < 0 || ih >= g.h as isize {
                    continue;
                }
                for kx in 0..kw {
                    let iw = (ow * g.stride.1 + kx * g.dilation.1) as isize - g.pad.1 as isize;
                    if iw < 0 || iw >= g.w as isize {
                        continue;
                    }
                    let px: &[f32; CB] = x[(ih as usize * g.w + iw as usize) * CB..][..CB]
                        .try_into()
                        .expect("CB lanes");
                    let wv: &[f32; CB] =
                        w[(ky * kw + kx) * CB..][..CB].try_into().expect("CB lanes");
                    for l in 0..CB {
                        acc[l] += px[l] * wv[l];
                    }
                }
            }
            let o = (oh * g.ow + ow) * CB;
            if let Some(r) = res {
                for l in 0..CB {
                    acc[l] += r[o + l];
                }
            }
            for (q, a) in y[o..][..CB].iter_mut().zip(acc) {
                *q = a.max(d.lo).min(d.hi);
            }
        }
    }
}

#[inline(always)]
fn depthwise_any(d: &Depthwise, block: usize, x: &[f32], res: Option<&[f32]>, y: &mut [f32]) {
    let g = &d.geom;
    let cb = g.x_cb;
    let (kh, kw) = g.k;
    let w = &d.w[block * kh * kw * cb..][..kh * kw * cb];
    let bias = &d.bias[block * cb..][..cb];
    let mut acc = vec![0f32; cb];
    for oh in 0..g.oh {
        for ow in 0..g.ow {
            acc.copy_from_slice(bias);
            for ky in 0..kh {
                let ih = (oh * g.stride.0 + ky * g.dilation.0) as isize - g.pad.0 as isize;
                if ih < 0 || ih >= g.h as isize {
                    continue;
                }
                for kx in 0..kw {
                    let iw = (ow * g.stride.1 + kx * g.dilation.1) as isize - g.pad.1 as isize;
                    if iw < 0 || iw >= g.w as isize {
                        continue;
                    }
                    let px = &x[(ih as usize * g.w + iw as usize) * cb..][..cb];
                    let wv = &w[(ky * kw + kx) * cb..][..cb];
                    for ((a, &v), &k) in acc.iter_mut().zip(px).zip(wv) {
                        *a += v * k;
                    }
                }
            }
            let o = (oh * g.ow + ow) * cb;
            if let Some(r) = res {
                acc.iter_mut()
                    .zip(&r[o..][..cb])
                    .for_each(|(a, &s)| *a += s);
            }
            for (q, &a) in y[o..][..cb].iter_mut().zip(&acc) {
                *q = a.max(d.lo).min(d.hi);
            }
        }
    }
}

/// A matrix product with a constant right operand: y = alpha * a . b + c, with
/// `b` packed [K][N] (transposed at compile time if the op reads it transposed)
/// and `c` broadcast to [M][N] and scaled by beta at compile time.
pub struct Dense {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    alpha: f32,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl Dense {
    /// `b` logical [K][N] (or [N][K] when `trans_b`); `c` of shape `c_shape`
    /// broadcastable to [M][N], already multiplied by beta.
    pub fn new(
        (m, k, n): (usize, usize, usize),
        alpha: f32,
        b: &[f32],
        trans_b: bool,
        c: Option<(&[f32], &[usize])>,
    ) -> Option<Dense> {
        let mut packed = vec![0f32; k * n];
        for i in 0..k {
            for j in 0..n {
                packed[i * n + j] = if trans_b { b[j * k + i] } else { b[i * n + j] };
            }
        }
        let mut full = vec![0f32; m * n];
        if let Some((c, shape)) = c {
            if shape.len() > 2 {
                return None;
            }
            let rows = if shape.len() == 2 { shape[0] } else { 1 };
            let cols = shape.last().copied().unwrap_or(1);
            if !(rows == 1 || rows == m) || !(cols == 1 || cols == n) {
                return None;
            }
            for i in 0..m {
                for j in 0..n {
                    full[i * n + j] = c[(i % rows) * cols + j % cols];
                }
            }
        }
        Some(Dense {
            m,
            k,
            n,
            alpha,
            b: packed,
            c: full,
        })
    }

    pub fn run(&self, a: &[f32], y: &mut [f32]) {
        y[..self.m * self.n]
            .par_chunks_mut(self.n)
            .zip(a.par_chunks(self.k))
            .enumerate()
            .for_each(|(i, (row, a_row))| dense_row(self, i, a_row, row));
    }
}

multiversion!(dense_row(d: &Dense, i: usize, a: &[f32], y: &mut [f32]) {
    y.copy_from_slice(&d.c[i * d.n..][..d.n]);
    for (kk, &x) in a.iter().enumerate() {
        let s = d.alpha * x;
        for (o, &w) in y.iter_mut().zip(&d.b[kk * d.n..][..d.n]) {
            *o += s * w;
        }
    }
});
