//! Depthwise 2-D convolution (one filter per channel) on NCHW{cb}c data, with
//! the same fused epilogue as the dense convolution (bias with batch norm
//! folded in, residual add, relu/clip).
//!
//! A depthwise convolution does few multiply-adds per byte it reads, so the
//! kernel keeps a tile of output pixels of one row in registers and feeds every
//! FMA straight from the input: one load per FMA, no bounds checks inside the
//! image. Work is split by output rows of each channel block, so both threads
//! stay busy whatever the number of blocks.

use super::direct::{fill_channel_pad, valid_taps, ConvGeom};
use super::tile::Epilogue;
use crate::core::par;
use crate::runtime::kernels::simd::{run_vectorized, Isa, Lanes, Vector, VectorKernel};

/// Output pixels one register tile holds.
const DW_TILE: usize = 8;

/// A depthwise convolution ready to run: weights packed per channel block.
pub struct Depthwise {
    /// Shapes and window.
    pub geom: ConvGeom,
    lanes: Lanes,
    /// [channel blocks][kh][kw][cb], zero in padding channels.
    w: Vec<f32>,
    /// [channel blocks][cb].
    bias: Vec<f32>,
    epilogue: Epilogue,
    /// What the output's padding channels must hold, if any are there.
    pad_fill: Option<f32>,
}

impl Depthwise {
    /// `w` is logical [C, 1, kh, kw]; input and output share the block `geom.x_cb`.
    pub fn new(
        geom: ConvGeom,
        isa: Isa,
        w: &[f32],
        bias: &[f32],
        epilogue: Epilogue,
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
            lanes: Lanes::for_block(isa, cb),
            geom,
            w: packed,
            bias: b,
            epilogue,
            pad_fill: pad_fill.filter(|_| padded),
        }
    }

    /// Computes `y` from `x` (and the residual, laid out like `y`, if fused).
    pub fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32]) {
        let g = &self.geom;
        assert!(x.len() >= g.x_len() && y.len() >= g.y_len());
        assert!(residual.is_none_or(|r| r.len() >= g.y_len()));
        let rows = g.n * g.cin.div_ceil(g.x_cb) * g.oh;
        // Raw addresses so rows can be written in parallel: each row writes
        // only its own output pixels.
        let (xp, yp) = (x.as_ptr() as usize, y.as_mut_ptr() as usize);
        let rp = residual.map(|r| r.as_ptr() as usize);
        let chunk = (rows / (par::threads() * 4)).max(1);
        par::for_each_grouped(rows, chunk, |row| {
            let task = Row {
                d: self,
                row,
                x: xp as *const f32,
                res: rp.map(|p| p as *const f32),
                y: yp as *mut f32,
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; the row's
            // reads and writes stay inside the buffers checked above.
            unsafe { run_vectorized(self.lanes, &task) }
        });
        if let Some(v) = self.pad_fill {
            fill_channel_pad(y, g.n, g.cin, g.x_cb, g.oh * g.ow, v);
        }
    }
}

/// One output row of one channel block of one batch item.
struct Row<'a> {
    d: &'a Depthwise,
    row: usize,
    x: *const f32,
    res: Option<*const f32>,
    y: *mut f32,
}

/// Where one tile reads and writes, all offsets in f32 elements.
struct DwTile {
    /// Input row of kernel row 0 at output pixel 0's column `ow * stride - pad`.
    x: *const f32,
    /// Packed weights of the block, at this vector of channels.
    w: *const f32,
    /// Kernel rows and columns inside the input for every pixel of the tile.
    kh: (usize, usize),
    kw: (usize, usize),
    /// Input strides: kernel row, kernel column, output pixel.
    x_kh: isize,
    x_kw: isize,
    x_pixel: isize,
    /// Weight stride of a kernel row (kw * cb) and column (cb).
    w_kh: usize,
    w_kw: usize,
    out: *mut f32,
    res: Option<*const f32>,
    /// Output pixel stride (cb).
    y_pixel: usize,
}

impl VectorKernel for Row<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let d = self.d;
        let g = &d.geom;
        let cb = g.x_cb;
        let blocks = g.cin.div_ceil(cb);
        let (plane, oh) = (self.row / g.oh, self.row % g.oh);
        let block = plane % blocks;
        let (kh, kw) = g.k;
        let (sh, sw) = g.stride;
        let (dh, dw) = g.dilation;
        let (ph, pw) = g.pad;
        let ih0 = (oh * sh) as isize - ph as isize;
        let cbi = cb as isize;
        // Rows and columns before the image are only addressed, never read:
        // wrapping offsets until a tap lands inside.
        let x_row = self
            .x
            .add(plane * g.h * g.w * cb)
            .wrapping_offset(ih0 * g.w as isize * cbi);
        let y_off = (plane * g.oh + oh) * g.ow * cb;
        // Output columns whose whole window row lies inside the input.
        let lo = pw.div_ceil(sw).min(g.ow);
        let span = (kw - 1) * dw;
        let hi = if g.w + pw > span {
            ((g.w + pw - span - 1) / sw + 1).clamp(lo, g.ow)
        } else {
            lo
        };
        let w_block = d.w.as_ptr().add(block * kh * kw * cb);
        let bias = d.bias.as_ptr().add(block * cb);
        for c in (0..cb).step_by(V::LANES) {
            let mut t = DwTile {
                x: x_row,
                w: w_block.add(c),
                kh: valid_taps(ih0, dh, kh, g.h),
                kw: (0, kw),
                x_kh: (dh * g.w * cb) as isize,
                x_kw: (dw * cb) as isize,
                x_pixel: (sw * cb) as isize,
                w_kh: kw * cb,
                w_kw: cb,
                out: self.y,
                res: self.res,
                y_pixel: cb,
            };
            let b = V::load(bias.add(c));
            let mut ow = 0;
            while ow < g.ow {
                let iw = (ow * sw) as isize - pw as isize;
                let pixels = if ow >= lo && ow < hi {
                    t.kw = (0, kw);
                    DW_TILE.min(hi - ow)
                } else {
                    t.kw = valid_taps(iw, dw, kw, g.w);
                    1
                };
                t.x = x_row.wrapping_offset(iw * cbi + c as isize);
                let at = y_off + ow * cb + c;
                t.out = self.y.add(at);
                t.res = self.res.map(|r| r.add(at));
                macro_rules! by_pixels {
                    ($($n:literal)*) => {
                        match pixels {
                            $($n => dw_tile::<V, $n>(&t, b, d.epilogue),)*
                            _ => unreachable!("a tile has 1..=DW_TILE pixels"),
                        }
                    };
                }
                by_pixels!(1 2 3 4 5 6 7 8);
                ow += pixels;
            }
        }
    }
}

/// `N` output pixels of one vector of channels: accumulators in registers, one
/// weight vector per tap, each input vector loaded once into its FMA.
#[inline(always)]
unsafe fn dw_tile<V: Vector, const N: usize>(t: &DwTile, bias: V, ep: Epilogue) {
    let mut acc = [bias; N];
    for ky in t.kh.0..t.kh.1 {
        for kx in t.kw.0..t.kw.1 {
            let wv = V::load(t.w.add(ky * t.w_kh + kx * t.w_kw));
            let x =
                t.x.wrapping_offset(ky as isize * t.x_kh + kx as isize * t.x_kw);
            for (p, a) in acc.iter_mut().enumerate() {
                *a = V::fma(V::load(x.offset(p as isize * t.x_pixel)), wv, *a);
            }
        }
    }
    for (p, a) in acc.into_iter().enumerate() {
        let at = p * t.y_pixel;
        let v = match t.res {
            Some(r) => V::add(a, V::load(r.add(at))),
            None => a,
        };
        ep.apply(v).store(t.out.add(at));
    }
}
