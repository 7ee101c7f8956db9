//! Convolutions with few output channels per group on NCHW data, their vector
//! lanes holding neighbouring output columns of one channel.
//!
//! The direct kernel puts output channels in the lanes, so a convolution with
//! one output channel (a segmentation head, a one-channel mask) keeps one lane
//! of 16 busy, and one with a few channels per group not many more; the
//! depthwise kernel's channel lanes hold one channel in NCHW. Neighbouring
//! output columns read neighbouring input columns, so in NCHW a vector of them
//! is one unaligned load per tap and input channel at stride 1 along the rows,
//! two loads and an even-lane pick at stride 2, multiplied by that tap's
//! weight broadcast. A tile holds `N` vectors of columns for up to
//! `MAX_CHANNELS` output channels of a group, each loaded input vector feeding
//! every channel's FMA; a group of one output channel (depthwise) takes
//! `ROWS` output rows instead, for as many independent sums.
//!
//! Where they fit on the stack, the input rows a band reads are staged first
//! with zeros around them, so that every vector, borders included, reads
//! whole taps; a last vector past the row's end stores only its columns.
//! Where they do not (many input channels per group), the columns short of a
//! vector are the last lanes of a vector that ends where the interior does,
//! overlapping the one before (only its new lanes are stored), and the
//! border columns run one lane at a time with only their valid taps. Work is
//! split by bands of up to `BAND_ROWS` output rows of each batch item and
//! chunk of channels: a band's setup and staging are paid once for all its
//! rows.

use super::direct::{valid_taps, ConvGeom};
use super::tile::{ChannelParams, Epilogue};
use crate::core::par;
use crate::runtime::kernels::simd::{
    array_of, run_vectorized, Isa, Lanes, Scalar, Vector, VectorKernel, MAX_LANES,
};
use std::mem::MaybeUninit;

/// Output channels a tile computes at once: with `VECTORS` vectors of
/// columns, 12 accumulators, the loaded inputs and a broadcast weight fit in
/// AVX2's 16 registers.
const MAX_CHANNELS: usize = 4;
/// Vectors of output columns per tile.
const VECTORS: usize = 3;
/// The most output channels per group the kernel is offered for: with more,
/// the direct kernel's channel lanes are full enough.
const MAX_CHANNELS_PER_GROUP: usize = 8;
/// Output rows a tile of one channel computes: with `VECTORS` vectors of
/// columns, 12 accumulators, as a tile of `MAX_CHANNELS` channels has.
const ROWS: usize = 4;
/// Output rows of the tallest band a task computes.
const BAND_ROWS: usize = 16;
/// Floats of the largest staged input of a band (16 KB of stack): every
/// input channel of the group, every input row of the band's windows, every
/// column its vectors read (a depthwise 3x3 band of 16 rows of 224 columns).
const STAGED_FLOATS: usize = 4096;

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
    /// Whether the kernel computes `geom`: NCHW in and out, stride 1 or 2
    /// along the rows, at most `MAX_CHANNELS_PER_GROUP` output channels per
    /// group.
    pub fn applies(geom: &ConvGeom) -> bool {
        let g = geom;
        g.x_cb == 1
            && g.y_cb == 1
            && matches!(g.stride.1, 1 | 2)
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
        let planes = g.n * g.groups * chunks;
        // Bands as tall as leaves every thread a few, so that a band's
        // setup and staging are paid over many rows.
        let tasks_per_plane = (par::threads() * 4).div_ceil(planes);
        let rows =
            g.oh.div_ceil(tasks_per_plane)
                .next_multiple_of(ROWS)
                .min(BAND_ROWS);
        let bands = planes * g.oh.div_ceil(rows);
        // Each band writes only its own channels' output rows.
        super::for_each_piece(bands, x, residual, y, |band, x, res, y| {
            let task = Band {
                k: self,
                band,
                rows,
                x,
                res,
                y,
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; the band's reads
            // and writes stay inside the buffers checked above.
            unsafe { run_vectorized(self.lanes, &task) };
        });
    }
}

/// Up to `rows` output rows of one chunk of a group's channels of one batch
/// item.
struct Band<'a> {
    k: &'a PixelLanes,
    band: usize,
    rows: usize,
    x: *const f32,
    res: Option<*const f32>,
    y: *mut f32,
}

/// Where one tile reads and writes, offsets in f32 elements.
#[derive(Clone, Copy)]
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
    /// Input strides of a kernel row and column, and of the tile's next
    /// output row.
    x_kh: usize,
    x_kw: usize,
    x_row: usize,
    /// Weight strides of an output channel and an input channel, and the
    /// kernel's width.
    w_out: usize,
    w_in: usize,
    k_w: usize,
    /// Output (and residual) at the tile's first column and channel, and the
    /// strides between channels and between rows.
    out: *mut f32,
    res: Option<*const f32>,
    y_chan: usize,
    y_row: usize,
    /// Leading lanes of the tile's first vector not to store: columns an
    /// overlapping tile before it has stored (and, were the residual the
    /// output's own buffer, already added it to).
    skip: usize,
    /// Lanes of the tile's first vector to store (all, when at least the
    /// vector's): columns that exist.
    take: usize,
}

impl VectorKernel for Band<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let g = &self.k.geom;
        let first = self.band % g.oh.div_ceil(self.rows) * self.rows;
        let rows = first..(first + self.rows).min(g.oh);
        if self.staged::<V>(rows.clone()) {
            return;
        }
        let (lo, hi) = g.interior_rows();
        let mut oh = rows.start;
        while oh < rows.end {
            // One channel's rows whose windows lie inside the input
            // vertically share one tile; other rows run alone, with their
            // valid taps.
            let tall = self.one_channel() && oh + ROWS <= rows.end.min(hi) && lo <= oh;
            let count = if tall { ROWS } else { 1 };
            self.direct::<V>(oh, count);
            oh += count;
        }
    }
}

impl Band<'_> {
    /// Whether a group has one output channel, whose tiles take `ROWS` rows.
    fn one_channel(&self) -> bool {
        let g = &self.k.geom;
        g.cout == g.groups
    }

    /// The tile of output row `oh`'s first column, reading the input in
    /// place with the row's valid taps; and the band's output channels.
    #[inline(always)]
    unsafe fn tile_at(&self, oh: usize) -> (PxTile, usize) {
        let k = self.k;
        let g = &k.geom;
        let (cin_g, cout_g) = (g.cin / g.groups, g.cout / g.groups);
        let chunks = cout_g.div_ceil(MAX_CHANNELS);
        let rest = self.band / g.oh.div_ceil(self.rows);
        let (chunk, rest) = (rest % chunks, rest / chunks);
        let (group, n) = (rest % g.groups, rest / g.groups);
        let c0 = chunk * MAX_CHANNELS;
        let channels = (cout_g - c0).min(MAX_CHANNELS);
        let co = group * cout_g + c0;
        let (kh, kw) = g.k;
        let ih0 = (oh * g.stride.0) as isize - g.pad.0 as isize;
        let plane = g.h * g.w;
        // Rows and columns before the image are only addressed, never read.
        let x = self
            .x
            .add((n * g.cin + group * cin_g) * plane)
            .wrapping_offset(ih0 * g.w as isize - g.pad.1 as isize);
        let y_off = ((n * g.cout + co) * g.oh + oh) * g.ow;
        let t = PxTile {
            x,
            w: k.w.as_ptr().add(co * cin_g * kh * kw),
            params: k.params.as_ptr().add(co),
            cin: cin_g,
            x_chan: plane,
            kh: valid_taps(ih0, g.dilation.0, kh, g.h),
            kw: (0, kw),
            x_kh: g.dilation.0 * g.w,
            x_kw: g.dilation.1,
            x_row: g.stride.0 * g.w,
            w_out: cin_g * kh * kw,
            w_in: kh * kw,
            k_w: kw,
            out: self.y.add(y_off),
            res: self.res.map(|r| r.add(y_off)),
            y_chan: g.oh * g.ow,
            y_row: g.ow,
            skip: 0,
            take: usize::MAX,
        };
        (t, channels)
    }

    /// Runs the band's `rows` from copies of the input they read, staged
    /// with zeros around them as many rows at a time as fit, every vector
    /// reading whole taps; false, having done nothing, where one row's would
    /// not fit.
    #[inline(always)]
    unsafe fn staged<V: Vector>(&self, rows: std::ops::Range<usize>) -> bool {
        let g = &self.k.geom;
        let (kh, kw) = g.k;
        let (dh, dw) = g.dilation;
        let (sh, sw) = g.stride;
        // Staged column 0 is the left padding's first; the vectors of the
        // last columns read on to a whole vector's.
        let cols = (g.ow.next_multiple_of(V::LANES) - 1) * sw + (kw - 1) * dw + sw;
        let cin_g = g.cin / g.groups;
        let one_row = cin_g * ((kh - 1) * dh + 1) * cols;
        if one_row > STAGED_FLOATS {
            return false;
        }
        let fit = 1 + (STAGED_FLOATS - one_row) / (cin_g * sh * cols);
        let step = match fit >= ROWS {
            true => fit / ROWS * ROWS,
            false => fit,
        };
        let mut buffer = [MaybeUninit::<f32>::uninit(); STAGED_FLOATS];
        for start in rows.clone().step_by(step) {
            self.run_copied::<V>(start..(start + step).min(rows.end), cols, &mut buffer);
        }
        true
    }

    /// Runs `rows` from a copy in `buffer` of the input they read, `cols`
    /// columns wide, which fits.
    #[inline(always)]
    unsafe fn run_copied<V: Vector>(
        &self,
        rows: std::ops::Range<usize>,
        cols: usize,
        buffer: &mut [MaybeUninit<f32>; STAGED_FLOATS],
    ) {
        let g = &self.k.geom;
        let (kh, kw) = g.k;
        let (dh, dw) = g.dilation;
        let (sh, sw) = g.stride;
        let (t, channels) = self.tile_at(rows.start);
        let span = (rows.len() - 1) * sh + (kh - 1) * dh + 1;
        let ih0 = (rows.start * sh) as isize - g.pad.0 as isize;
        // The group's first channel, row 0, column 0.
        let x = t.x.wrapping_offset(-ih0 * g.w as isize + g.pad.1 as isize);
        let pad = g.pad.1.min(cols);
        let inside = pad..(pad + g.w).min(cols);
        for ci in 0..g.cin / g.groups {
            for r in 0..span {
                let row = &mut buffer[(ci * span + r) * cols..][..cols];
                let ih = ih0 + r as isize;
                if !(0..g.h as isize).contains(&ih) {
                    row.fill(MaybeUninit::new(0.0));
                    continue;
                }
                row[..inside.start].fill(MaybeUninit::new(0.0));
                row[inside.end..].fill(MaybeUninit::new(0.0));
                let from = x.add(ci * g.h * g.w + ih as usize * g.w);
                let to = row[inside.clone()].as_mut_ptr().cast::<f32>();
                copy::<V>(from, to, inside.len());
            }
        }
        let staged = PxTile {
            x: buffer.as_ptr().cast::<f32>(),
            x_chan: span * cols,
            kh: (0, kh),
            kw: (0, kw),
            x_kh: dh * cols,
            x_kw: dw,
            x_row: sh * cols,
            ..t
        };
        let ep = self.k.epilogue;
        let mut oh = rows.start;
        while oh < rows.end {
            let count = match self.one_channel() && oh + ROWS <= rows.end {
                true => ROWS,
                false => 1,
            };
            let (down, y_down) = ((oh - rows.start) * sh * cols, (oh - rows.start) * g.ow);
            let mut col = 0;
            while col < g.ow {
                let vectors = match g.ow - col >= VECTORS * V::LANES {
                    true => VECTORS,
                    false => 1,
                };
                let at = PxTile {
                    x: staged.x.add(down + col * sw),
                    out: t.out.add(y_down + col),
                    res: t.res.map(|r| r.add(y_down + col)),
                    take: g.ow - col,
                    ..staged
                };
                tile::<V>(&at, sw, vectors, channels, count, ep);
                col += vectors * V::LANES;
            }
            oh += count;
        }
    }

    /// `count` output rows from `oh` (1, or `ROWS` of one channel inside the
    /// input vertically), reading the input in place: vectors over the
    /// columns whose windows lie inside it, lanes for the others.
    #[inline(always)]
    unsafe fn direct<V: Vector>(&self, oh: usize, count: usize) {
        let g = &self.k.geom;
        let (mut t, channels) = self.tile_at(oh);
        let (kw, dw, stride) = (g.k.1, g.dilation.1, g.stride.1);
        let (x_row, y_row, res_row) = (t.x, t.out, t.res);
        let at = |t: &mut PxTile, col: usize| {
            t.x = x_row.wrapping_add(col * stride);
            t.out = y_row.add(col);
            t.res = res_row.map(|r| r.add(col));
        };
        let ep = self.k.epilogue;
        let (lo, hi) = g.interior_columns();
        // A stride-2 vector loads the odd element after its last column's
        // window too: the columns whose loads stay inside the row.
        let reach = (g.w + g.pad.1)
            .checked_sub(stride + (kw - 1) * dw)
            .map_or(0, |m| m / stride + 1);
        let hi = hi.min(reach).max(lo);
        let mut col = lo;
        while col + V::LANES <= hi {
            at(&mut t, col);
            let vectors = match hi - col >= VECTORS * V::LANES {
                true => VECTORS,
                false => 1,
            };
            tile::<V>(&t, stride, vectors, channels, count, ep);
            col += vectors * V::LANES;
        }
        if col < hi && hi - lo >= V::LANES {
            at(&mut t, hi - V::LANES);
            t.skip = V::LANES - (hi - col);
            tile::<V>(&t, stride, 1, channels, count, ep);
            t.skip = 0;
            col = hi;
        }
        // The columns left: one lane each, row by row, with only the taps
        // inside the input.
        for col in (0..lo).chain(col..g.ow) {
            at(&mut t, col);
            t.kw = valid_taps((col * stride) as isize - g.pad.1 as isize, dw, kw, g.w);
            for _ in 0..count {
                match channels {
                    1 => px_tile::<Scalar, 1, 1, 1, 1>(&t, ep),
                    2 => px_tile::<Scalar, 1, 1, 2, 1>(&t, ep),
                    3 => px_tile::<Scalar, 1, 1, 3, 1>(&t, ep),
                    _ => px_tile::<Scalar, 1, 1, MAX_CHANNELS, 1>(&t, ep),
                }
                t.x = t.x.wrapping_add(t.x_row);
                t.out = t.out.add(t.y_row);
                t.res = t.res.map(|r| r.add(t.y_row));
            }
        }
    }
}

/// Copies `len` floats from `from` to `to` a vector at a time: a row of a
/// few dozen floats, where a call of `memcpy` costs as much as the copy.
#[inline(always)]
unsafe fn copy<V: Vector>(from: *const f32, to: *mut f32, len: usize) {
    let mut i = 0;
    while i + V::LANES <= len {
        V::load(from.add(i)).store(to.add(i));
        i += V::LANES;
    }
    if i < len {
        V::load_first(from.add(i), len - i, 0.0).store_first(to.add(i), len - i);
    }
}

/// The tile of `vectors` (1 or `VECTORS`) vectors of columns `stride` (1 or 2)
/// input columns apart, `channels` (1 to `MAX_CHANNELS`) output channels and
/// `rows` (1, or `ROWS` of one channel) output rows, each its own compiled
/// body.
#[inline(always)]
unsafe fn tile<V: Vector>(
    t: &PxTile,
    stride: usize,
    vectors: usize,
    channels: usize,
    rows: usize,
    ep: Epilogue,
) {
    macro_rules! dispatch {
        ($s:literal: $($m:literal)*) => {
            match (vectors, channels, rows) {
                (1, 1, ROWS) => px_tile::<V, $s, 1, 1, ROWS>(t, ep),
                (_, 1, ROWS) => px_tile::<V, $s, VECTORS, 1, ROWS>(t, ep),
                $((1, $m, 1) => px_tile::<V, $s, 1, $m, 1>(t, ep),)*
                $((_, $m, 1) => px_tile::<V, $s, VECTORS, $m, 1>(t, ep),)*
                _ => unreachable!("a tile has 1 to {MAX_CHANNELS} channels of one row, or one of {ROWS}"),
            }
        };
    }
    match stride {
        1 => dispatch!(1: 1 2 3 4),
        _ => dispatch!(2: 1 2 3 4),
    }
}

/// `N` vectors of output columns `S` input columns apart, of `M` output
/// channels and `R` output rows: every accumulator in a register, each input
/// vector loaded once per tap, input channel and row.
// Multi-dimensional indexing of the accumulators reads clearest here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn px_tile<V: Vector, const S: usize, const N: usize, const M: usize, const R: usize>(
    t: &PxTile,
    ep: Epilogue,
) {
    let mut acc: [[[V; N]; R]; M] = array_of([[V::splat(0.0); N]; R], |m| {
        [[V::splat(*t.params.add(m)); N]; R]
    });
    for ci in 0..t.cin {
        let x_chan = t.x.wrapping_add(ci * t.x_chan);
        let w_chan = t.w.add(ci * t.w_in);
        for ky in t.kh.0..t.kh.1 {
            for kx in t.kw.0..t.kw.1 {
                let tap = ky * t.k_w + kx;
                for r in 0..R {
                    let xp = x_chan.wrapping_add(r * t.x_row + ky * t.x_kh + kx * t.x_kw);
                    let xv: [V; N] = array_of(V::splat(0.0), |v| {
                        let at = xp.add(v * S * V::LANES);
                        match S {
                            1 => V::load(at),
                            _ => V::even(V::load(at), V::load(at.add(V::LANES))),
                        }
                    });
                    for m in 0..M {
                        let wv = V::splat(*w_chan.add(m * t.w_out + tap));
                        for v in 0..N {
                            acc[m][r][v] = V::fma(xv[v], wv, acc[m][r][v]);
                        }
                    }
                }
            }
        }
    }
    for m in 0..M {
        for r in 0..R {
            for v in 0..N {
                let at = m * t.y_chan + r * t.y_row + v * V::LANES;
                // Only the first vector may be cut short, at either end.
                let (skip, take) = match v {
                    0 => (t.skip, t.take.min(V::LANES)),
                    _ => (0, V::LANES),
                };
                let mut e = acc[m][r][v];
                if let Some(res) = t.res {
                    let res = match take {
                        k if k < V::LANES => V::load_first(res.add(at), k, 0.0),
                        _ => V::load(res.add(at)),
                    };
                    e = V::add(e, res);
                }
                let e = ep.apply_to_channel(e, t.params.add(m));
                if skip == 0 && take < V::LANES {
                    e.store_first(t.out.add(at), take);
                } else if skip > 0 {
                    let mut lanes = [0f32; MAX_LANES];
                    e.store(lanes.as_mut_ptr());
                    let (from, to) = (lanes[skip..take].as_ptr(), t.out.add(at + skip));
                    std::ptr::copy_nonoverlapping(from, to, take - skip);
                } else {
                    e.store(t.out.add(at));
                }
            }
        }
    }
}
