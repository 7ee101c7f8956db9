//! Depthwise 2-D convolution (one filter per channel) from NCHW{x_cb}c data
//! into NCHW{y_cb}c data, the two blocks equal or not, with the same fused
//! epilogue as the dense convolution (bias with batch norm folded in, residual
//! add, relu/clip).
//!
//! A depthwise convolution does few multiply-adds per byte it reads, so the
//! kernel keeps a tile of output pixels of one row in registers and feeds every
//! FMA straight from the input: one load per FMA, no bounds checks inside the
//! image. Channel `c` of the output reads only channel `c` of the input, so
//! the kernel works on slices of `gcd(x_cb, y_cb)` channels: a slice lies in
//! one block of each operand, contiguous in both, and so does every vector of
//! it. Vectors are as wide as the slice allows: full width when both blocks are
//! multiples of the lanes (NCHW8c to NCHW16c, NHWC to NCHW16c for a multiple
//! of 16 channels), one lane otherwise (NCHW on either side, as NCHW to NCHW
//! runs too). Work is split by output rows of each slice, so both threads stay
//! busy whatever the number of blocks.

use super::direct::{fill_channel_pad, valid_taps, ConvGeom};
use super::tile::Epilogue;
use crate::core::par;
use crate::runtime::kernels::simd::{run_vectorized, Isa, Lanes, Vector, VectorKernel};

/// Output pixels one register tile holds.
const DW_TILE: usize = 8;

/// A depthwise convolution ready to run: weights packed per channel slice.
pub struct Depthwise {
    /// Shapes and window.
    pub geom: ConvGeom,
    /// Channels of one slice: `gcd(x_cb, y_cb)`.
    slice: usize,
    lanes: Lanes,
    /// [slices][kh][kw][slice], zero in padding channels.
    w: Vec<f32>,
    /// [slices][slice].
    bias: Vec<f32>,
    epilogue: Epilogue,
    /// What the output's padding channels must hold, if any are there.
    pad_fill: Option<f32>,
}

impl Depthwise {
    /// `w` is logical [C, 1, kh, kw]; the input is blocked by `geom.x_cb`,
    /// the output by `geom.y_cb`.
    pub fn new(
        geom: ConvGeom,
        isa: Isa,
        w: &[f32],
        bias: &[f32],
        epilogue: Epilogue,
        pad_fill: Option<f32>,
    ) -> Depthwise {
        let slice = gcd(geom.x_cb, geom.y_cb);
        let slices = geom.cin.div_ceil(slice);
        let (kh, kw) = geom.k;
        let mut packed = vec![0f32; slices * kh * kw * slice];
        let mut b = vec![0f32; slices * slice];
        for c in 0..geom.cin {
            b[c] = bias[c];
            for y in 0..kh {
                for x in 0..kw {
                    packed[(((c / slice) * kh + y) * kw + x) * slice + c % slice] =
                        w[(c * kh + y) * kw + x];
                }
            }
        }
        let padded = !geom.cin.is_multiple_of(geom.y_cb);
        Depthwise {
            lanes: Lanes::for_block(isa, slice),
            slice,
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
        let rows = g.n * g.cin.div_ceil(self.slice) * g.oh;
        // Raw addresses so rows can be written in parallel: each row writes
        // only its slice's channels of its own output pixels.
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
            fill_channel_pad(y, g.n, g.cin, g.y_cb, g.oh * g.ow, v);
        }
    }
}

/// One output row of one channel slice of one batch item.
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
    /// Packed weights of the slice, at this vector of channels.
    w: *const f32,
    /// Kernel rows and columns inside the input for every pixel of the tile.
    kh: (usize, usize),
    kw: (usize, usize),
    /// Input strides: kernel row, kernel column, output pixel.
    x_kh: isize,
    x_kw: isize,
    x_pixel: isize,
    /// Weight stride of a kernel row (kw * slice) and column (slice).
    w_kh: usize,
    w_kw: usize,
    out: *mut f32,
    res: Option<*const f32>,
    /// Output pixel stride (y_cb).
    y_pixel: usize,
}

impl VectorKernel for Row<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let d = self.d;
        let g = &d.geom;
        let (x_cb, y_cb, slice) = (g.x_cb, g.y_cb, d.slice);
        let slices = g.cin.div_ceil(slice);
        let (image, oh) = (self.row / g.oh, self.row % g.oh);
        let (n, s) = (image / slices, image % slices);
        // The slice's first channel, in its block of each operand.
        let c0 = s * slice;
        let plane_of = |cb: usize, pixels: usize| {
            let blocks = g.cin.div_ceil(cb);
            (n * blocks + c0 / cb) * pixels * cb + c0 % cb
        };
        let (kh, kw) = g.k;
        let (sh, sw) = g.stride;
        let (dh, dw) = g.dilation;
        let (ph, pw) = g.pad;
        let ih0 = (oh * sh) as isize - ph as isize;
        let x_cbi = x_cb as isize;
        // Rows and columns before the image are only addressed, never read:
        // wrapping offsets until a tap lands inside.
        let x_row = self
            .x
            .add(plane_of(x_cb, g.h * g.w))
            .wrapping_offset(ih0 * g.w as isize * x_cbi);
        let y_off = plane_of(y_cb, g.oh * g.ow) + oh * g.ow * y_cb;
        // Output columns whose whole window row lies inside the input.
        let lo = pw.div_ceil(sw).min(g.ow);
        let span = (kw - 1) * dw;
        let hi = if g.w + pw > span {
            ((g.w + pw - span - 1) / sw + 1).clamp(lo, g.ow)
        } else {
            lo
        };
        let w_slice = d.w.as_ptr().add(s * kh * kw * slice);
        let bias = d.bias.as_ptr().add(c0);
        for c in (0..slice).step_by(V::LANES) {
            let mut t = DwTile {
                x: x_row,
                w: w_slice.add(c),
                kh: valid_taps(ih0, dh, kh, g.h),
                kw: (0, kw),
                x_kh: (dh * g.w * x_cb) as isize,
                x_kw: (dw * x_cb) as isize,
                x_pixel: (sw * x_cb) as isize,
                w_kh: kw * slice,
                w_kw: slice,
                out: self.y,
                res: self.res,
                y_pixel: y_cb,
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
                t.x = x_row.wrapping_offset(iw * x_cbi + c as isize);
                let at = y_off + ow * y_cb + c;
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

/// Greatest common divisor: the widest slice of channels that both channel
/// blocks split evenly.
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
