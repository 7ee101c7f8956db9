//! Convolutions with few output channels per group on NCHW data, their vector
//! lanes holding neighbouring output columns of one channel.
//!
//! The direct kernel puts output channels in the lanes, so a convolution with
//! one output channel (a segmentation head, a one-channel mask) keeps one lane
//! of 16 busy, and one with a few channels per group not many more. With
//! stride 1 along the rows, neighbouring output columns read neighbouring
//! input columns, so in NCHW a vector of them is one unaligned load per tap
//! and input channel, multiplied by that tap's weight broadcast. A tile holds
//! `N` vectors of columns for up to `MAX_CHANNELS` output channels of a group,
//! each loaded input vector feeding every channel's FMA. The last columns
//! short of a vector are the last lanes of a vector that ends where the
//! interior does, overlapping the one before (only its new lanes are stored).
//! Columns whose window leaves the input run one lane at a time with only
//! their valid taps. Work is split by output rows of each batch item and chunk
//! of channels.

use super::direct::{valid_taps, ConvGeom};
use super::tile::{ChannelParams, Epilogue};
use crate::runtime::kernels::simd::{
    array_of, run_vectorized, Isa, Lanes, Scalar, Vector, VectorKernel, MAX_LANES,
};

/// Output channels a tile computes at once: with `VECTORS` vectors of
/// columns, 12 accumulators, the loaded inputs and a broadcast weight fit in
/// AVX2's 16 registers.
const MAX_CHANNELS: usize = 4;
/// Vectors of output columns per tile.
const VECTORS: usize = 3;
/// The most output channels per group the kernel is offered for: with more,
/// the direct kernel's channel lanes are full enough.
const MAX_CHANNELS_PER_GROUP: usize = 8;

/// A convolution ready to run with pixels in the lanes.
pub struct PixelLanes {
    geom: ConvGeom,
    lanes: Lanes,
    /// Logical OIHW weights (broadcast one at a time, so kept as they are).
    w: Vec<f32>,
    /// The bias per output channel, then as many PRelu slopes if the
    /// epilogue has them.
    params: Vec<f32>,
    epilogue: Epilogue,
}

impl PixelLanes {
    /// Whether the kernel computes `geom`: NCHW in and out, stride 1 along
    /// the rows, at most `MAX_CHANNELS_PER_GROUP` output channels per group.
    pub fn applies(geom: &ConvGeom) -> bool {
        let g = geom;
        g.x_cb == 1
            && g.y_cb == 1
            && g.stride.1 == 1
            && g.groups > 0
            && g.cin.is_multiple_of(g.groups)
            && g.cout.is_multiple_of(g.groups)
            && g.cout / g.groups <= MAX_CHANNELS_PER_GROUP
    }

    /// `w` is logical OIHW; `applies` must hold.
    pub fn new(
        geom: ConvGeom,
        isa: Isa,
        w: &[f32],
        params: ChannelParams,
        epilogue: Epilogue,
    ) -> PixelLanes {
        debug_assert!(Self::applies(&geom));
        let (params, epilogue) = params.pack(epilogue, |per_channel| per_channel.to_vec());
        PixelLanes {
            // Any lane count divides a row of single channels.
            lanes: Lanes::for_block(isa, isa.lanes()),
            w: w.to_vec(),
            params,
            epilogue,
            geom,
        }
    }

    /// The weights every run reads.
    pub(in crate::runtime) fn weights(&self) -> &[f32] {
        &self.w
    }

    /// Computes `y` from `x` (and the residual, laid out like `y`, if fused).
    pub fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32]) {
        let g = &self.geom;
        assert!(x.len() >= g.x_len() && y.len() >= g.y_len());
        assert!(residual.is_none_or(|r| r.len() >= g.y_len()));
        let chunks = (g.cout / g.groups).div_ceil(MAX_CHANNELS);
        let rows = g.n * g.groups * chunks * g.oh;
        // Each row writes only its own channels' output row.
        super::for_each_piece(rows, x, residual, y, |row, x, res, y| {
            let task = Row {
                k: self,
                row,
                x,
                res,
                y,
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; the row's reads
            // and writes stay inside the buffers checked above.
            unsafe { run_vectorized(self.lanes, &task) };
        });
    }
}

/// One output row of one chunk of a group's channels of one batch item.
struct Row<'a> {
    k: &'a PixelLanes,
    row: usize,
    x: *const f32,
    res: Option<*const f32>,
    y: *mut f32,
}

/// Where one tile reads and writes, offsets in f32 elements.
struct PxTile {
    /// The group's first input channel at kernel tap (0, 0) of the tile's
    /// first column (addressed, maybe outside the image, never read there).
    x: *const f32,
    /// The tile's first channel's weights.
    w: *const f32,
    /// The tile's first channel's bias.
    params: *const f32,
    /// Input channels of the group, and the stride between them.
    cin: usize,
    x_chan: usize,
    /// Kernel rows and columns inside the input for every column of the tile.
    kh: (usize, usize),
    kw: (usize, usize),
    /// Input strides of a kernel row and column.
    x_kh: usize,
    x_kw: usize,
    /// Weight strides of an output channel and an input channel, and the
    /// kernel's width.
    w_out: usize,
    w_in: usize,
    k_w: usize,
    /// Output (and residual) at the tile's first column and channel, and the
    /// stride between channels.
    out: *mut f32,
    res: Option<*const f32>,
    y_chan: usize,
    /// Leading lanes of the tile's first vector not to store: columns an
    /// overlapping tile before it has stored (and, were the residual the
    /// output's own buffer, already added it to).
    skip: usize,
}

impl VectorKernel for Row<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let k = self.k;
        let g = &k.geom;
        let (cin_g, cout_g) = (g.cin / g.groups, g.cout / g.groups);
        let chunks = cout_g.div_ceil(MAX_CHANNELS);
        let oh = self.row % g.oh;
        let rest = self.row / g.oh;
        let (chunk, rest) = (rest % chunks, rest / chunks);
        let (group, n) = (rest % g.groups, rest / g.groups);
        let c0 = chunk * MAX_CHANNELS;
        let channels = (cout_g - c0).min(MAX_CHANNELS);
        let co = group * cout_g + c0;
        let (kh, kw) = g.k;
        let (dh, dw) = g.dilation;
        let ih0 = (oh * g.stride.0) as isize - g.pad.0 as isize;
        let plane = g.h * g.w;
        // Rows and columns before the image are only addressed, never read.
        let x_group = self
            .x
            .add((n * g.cin + group * cin_g) * plane)
            .wrapping_offset(ih0 * g.w as isize - g.pad.1 as isize);
        let y_off = ((n * g.cout + co) * g.oh + oh) * g.ow;
        let mut t = PxTile {
            x: x_group,
            w: k.w.as_ptr().add(co * cin_g * kh * kw),
            params: k.params.as_ptr().add(co),
            cin: cin_g,
            x_chan: plane,
            kh: valid_taps(ih0, dh, kh, g.h),
            kw: (0, kw),
            x_kh: dh * g.w,
            x_kw: dw,
            w_out: cin_g * kh * kw,
            w_in: kh * kw,
            k_w: kw,
            out: self.y.add(y_off),
            res: self.res.map(|r| r.add(y_off)),
            y_chan: g.oh * g.ow,
            skip: 0,
        };
        let at = |t: &mut PxTile, col: usize| {
            t.x = x_group.wrapping_add(col);
            t.out = self.y.add(y_off + col);
            t.res = self.res.map(|r| r.add(y_off + col));
        };
        let ep = k.epilogue;
        let (lo, hi) = g.interior_columns();
        let mut col = lo;
        while hi - col >= V::LANES {
            at(&mut t, col);
            let vectors = match hi - col >= VECTORS * V::LANES {
                true => VECTORS,
                false => 1,
            };
            by_channels::<V>(&t, vectors, channels, ep);
            col += vectors * V::LANES;
        }
        if col < hi && hi - lo >= V::LANES {
            at(&mut t, hi - V::LANES);
            t.skip = V::LANES - (hi - col);
            by_channels::<V>(&t, 1, channels, ep);
            t.skip = 0;
            col = hi;
        }
        // The columns left: one lane each, with only the taps inside the input.
        for col in (0..lo).chain(col..g.ow) {
            at(&mut t, col);
            t.kw = valid_taps(col as isize - g.pad.1 as isize, dw, kw, g.w);
            by_channels::<Scalar>(&t, 1, channels, ep);
        }
    }
}

/// The tile of `vectors` (1 or `VECTORS`) vectors of columns and `channels`
/// (1 to `MAX_CHANNELS`) output channels, each its own compiled body.
#[inline(always)]
unsafe fn by_channels<V: Vector>(t: &PxTile, vectors: usize, channels: usize, ep: Epilogue) {
    macro_rules! dispatch {
        ($($m:literal)*) => {
            match (vectors, channels) {
                $((1, $m) => px_tile::<V, 1, $m>(t, ep),)*
                $((_, $m) => px_tile::<V, VECTORS, $m>(t, ep),)*
                _ => unreachable!("a tile has 1 to {MAX_CHANNELS} channels"),
            }
        };
    }
    dispatch!(1 2 3 4);
}

/// `N` vectors of output columns of `M` output channels: every accumulator in
/// a register, each input vector loaded once per tap and input channel.
// Two-dimensional indexing of the accumulators reads clearest here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn px_tile<V: Vector, const N: usize, const M: usize>(t: &PxTile, ep: Epilogue) {
    let mut acc: [[V; N]; M] = array_of([V::splat(0.0); N], |m| [V::splat(*t.params.add(m)); N]);
    for ci in 0..t.cin {
        let x_chan = t.x.wrapping_add(ci * t.x_chan);
        let w_chan = t.w.add(ci * t.w_in);
        for ky in t.kh.0..t.kh.1 {
            for kx in t.kw.0..t.kw.1 {
                let xp = x_chan.wrapping_add(ky * t.x_kh + kx * t.x_kw);
                let xv: [V; N] = array_of(V::splat(0.0), |v| V::load(xp.add(v * V::LANES)));
                let tap = ky * t.k_w + kx;
                for m in 0..M {
                    let wv = V::splat(*w_chan.add(m * t.w_out + tap));
                    for v in 0..N {
                        acc[m][v] = V::fma(xv[v], wv, acc[m][v]);
                    }
                }
            }
        }
    }
    for m in 0..M {
        for v in 0..N {
            let at = m * t.y_chan + v * V::LANES;
            let mut e = acc[m][v];
            if let Some(r) = t.res {
                e = V::add(e, V::load(r.add(at)));
            }
            let e = ep.apply_to_channel(e, t.params.add(m));
            match (v, t.skip) {
                (0, skip @ 1..) => {
                    let mut lanes = [0f32; MAX_LANES];
                    e.store(lanes.as_mut_ptr());
                    let (from, to) = (lanes[skip..V::LANES].as_ptr(), t.out.add(at + skip));
                    std::ptr::copy_nonoverlapping(from, to, V::LANES - skip);
                }
                _ => e.store(t.out.add(at)),
            }
        }
    }
}
