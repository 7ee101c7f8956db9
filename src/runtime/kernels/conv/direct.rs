//! 2-D convolution on channel-blocked data: NCHW{cb}c covers NCHWxc (cb = x),
//! NHWC (cb = C, one block) and NCHW (cb = 1). Weights are packed once, with
//! batch norm folded in; bias, residual add, relu/clip, another activation or
//! a per-channel PRelu run in the epilogue of the register tile, so a fused
//! conv makes one pass over its output.

use super::tile::{conv_tile, tile_pixels, ChannelParams, Epilogue, Store, Tile};
use crate::core::{par, PageBuf};
use crate::ops::Conv;
use crate::runtime::kernels::simd::Isa;
use std::sync::{Arc, Mutex};

/// Packed weights of one convolution, by what they were packed for. Weights
/// pack the same way at every input shape, so the kernels a session builds
/// for several shapes (and a Winograd kernel's direct border) share one copy.
#[derive(Default)]
pub(in crate::runtime) struct Packs(Mutex<Vec<(PackKey, Arc<PageBuf>)>>);

/// What a packing depends on besides the weights: the instruction set, the
/// block width, a group's input channels, the taps and the output blocks.
#[derive(PartialEq)]
struct PackKey {
    isa: Isa,
    width: usize,
    cin_g: usize,
    taps: usize,
    blocks: Vec<(usize, usize)>,
}

impl Packs {
    /// Drops every packing.
    pub(in crate::runtime) fn clear(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The weights packed for `key`, packed by `pack` when not yet.
    fn get_or_pack(&self, key: PackKey, pack: impl FnOnce() -> PageBuf) -> Arc<PageBuf> {
        let mut done = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = done.iter().find(|(k, _)| *k == key) {
            return p.clone();
        }
        let p = Arc::new(pack());
        done.push((key, p.clone()));
        p
    }
}

/// Shapes and window of one convolution (logical extents).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvGeom {
    /// Batch size.
    pub n: usize,
    /// Input channels.
    pub cin: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output channels.
    pub cout: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Kernel height and width.
    pub k: (usize, usize),
    /// Vertical and horizontal stride.
    pub stride: (usize, usize),
    /// Vertical and horizontal dilation.
    pub dilation: (usize, usize),
    /// Padding at the top and the left.
    pub pad: (usize, usize),
    /// Convolution groups: output channel `o` reads the `cin / groups` input
    /// channels of its group `o / (cout / groups)` (1: dense).
    pub groups: usize,
    /// Channel block of the input storage.
    pub x_cb: usize,
    /// Channel block of the output storage.
    pub y_cb: usize,
}

impl ConvGeom {
    /// The geometry as a cache key (the machine's kernel times): every extent,
    /// the window, the channel block of both operands and the groups.
    pub fn key(&self) -> Vec<usize> {
        vec![
            self.n,
            self.cin,
            self.h,
            self.w,
            self.cout,
            self.oh,
            self.ow,
            self.k.0,
            self.k.1,
            self.stride.0,
            self.stride.1,
            self.dilation.0,
            self.dilation.1,
            self.pad.0,
            self.pad.1,
            self.x_cb,
            self.y_cb,
            self.groups,
        ]
    }

    /// The geometry of a cache key written by [`ConvGeom::key`]; `None` for a
    /// key of another length.
    pub fn from_key(key: &[usize]) -> Option<ConvGeom> {
        let &[n, cin, h, w, cout, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, x_cb, y_cb, groups] = key
        else {
            return None;
        };
        Some(ConvGeom {
            n,
            cin,
            h,
            w,
            cout,
            oh,
            ow,
            k: (kh, kw),
            stride: (sh, sw),
            dilation: (dh, dw),
            pad: (ph, pw),
            groups,
            x_cb,
            y_cb,
        })
    }

    /// The geometry of a 2-D convolution `c` of an input of logical NCHW shape
    /// `xs` into `cout` channels, its operands stored with channel blocks
    /// `x_cb` and `y_cb`; `None` when the window does not fit the input.
    pub fn of(c: &Conv, xs: &[usize], cout: usize, x_cb: usize, y_cb: usize) -> Option<ConvGeom> {
        let w = &c.window;
        if w.spatial_rank() != 2 || xs.len() != 4 {
            return None;
        }
        // The output spatial extents from the window (the physical shape may be blocked).
        let out = |i: usize, extent: usize| {
            let span = w.dilations[i] * (w.kernel[i] - 1) + 1;
            (extent + w.pad_begin(i) + w.pad_end(i))
                .checked_sub(span)
                .map(|d| d / w.strides[i] + 1)
        };
        Some(ConvGeom {
            n: xs[0],
            cin: xs[1],
            h: xs[2],
            w: xs[3],
            cout,
            oh: out(0, xs[2])?,
            ow: out(1, xs[3])?,
            k: (w.kernel[0], w.kernel[1]),
            stride: (w.strides[0], w.strides[1]),
            dilation: (w.dilations[0], w.dilations[1]),
            pad: (w.pad_begin(0), w.pad_begin(1)),
            groups: c.group,
            x_cb,
            y_cb,
        })
    }

    /// Elements of the input buffer (channels padded to the block).
    pub fn x_len(&self) -> usize {
        self.n * self.cin.div_ceil(self.x_cb) * self.x_cb * self.h * self.w
    }
    /// Elements of the output buffer (channels padded to the block).
    pub fn y_len(&self) -> usize {
        self.n * self.cout.div_ceil(self.y_cb) * self.y_cb * self.oh * self.ow
    }
    /// The output columns `lo..hi` whose whole window row lies inside the input.
    pub(super) fn interior_columns(&self) -> (usize, usize) {
        let (ow, w, k, s, d, p) = (
            self.ow,
            self.w,
            self.k.1,
            self.stride.1,
            self.dilation.1,
            self.pad.1,
        );
        interior(ow, w, k, s, d, p)
    }

    /// The output rows `lo..hi` whose whole window column lies inside the input.
    pub(super) fn interior_rows(&self) -> (usize, usize) {
        let (oh, h, k, s, d, p) = (
            self.oh,
            self.h,
            self.k.0,
            self.stride.0,
            self.dilation.0,
            self.pad.0,
        );
        interior(oh, h, k, s, d, p)
    }

    /// Whether this is a 1x1 window every output pixel of which reads an
    /// input pixel (no padding on any side), with any stride.
    pub fn is_pointwise(&self) -> bool {
        let inside =
            |out: usize, stride: usize, extent: usize| out.saturating_sub(1) * stride < extent;
        self.k == (1, 1)
            && self.pad == (0, 0)
            && inside(self.oh, self.stride.0, self.h)
            && inside(self.ow, self.stride.1, self.w)
    }

    /// A 1x1 window's geometry over the pixels it reads, as one row of
    /// output pixels read one by one.
    pub(super) fn as_plane(&self) -> ConvGeom {
        ConvGeom {
            h: 1,
            w: self.oh * self.ow,
            oh: 1,
            ow: self.oh * self.ow,
            stride: (1, 1),
            ..self.clone()
        }
    }

    /// Offset of output channel `c` from the start of a batch item and pixel.
    pub(super) fn y_chan(&self, c: usize) -> usize {
        (c / self.y_cb) * self.oh * self.ow * self.y_cb + c % self.y_cb
    }
}

/// A convolution ready to run: packed weights, bias and epilogue.
pub struct PackedConv {
    /// Shapes and window.
    pub geom: ConvGeom,
    isa: Isa,
    /// Output channels of one block: one or two vectors of lanes.
    width: usize,
    /// The most pixels of a register tile of `width` channels.
    tile: usize,
    /// The output channels each register tile computes, in the order their
    /// weights are packed.
    blocks: Vec<OutBlock>,
    /// Per block, `[kh][kw][cin / groups][width]`, zero beyond its channels.
    w: Arc<PageBuf>,
    /// [blocks][width] of biases, then as many of PRelu slopes if the
    /// epilogue has them.
    params: Vec<f32>,
    /// The clamp and activation applied to every output.
    epilogue: Epilogue,
    /// What the output's padding channels must hold, if any are there.
    pad_fill: Option<f32>,
    /// Set when the input is first copied into scratch in another shape.
    staged: Option<Staging>,
}

/// Consecutive output channels of one convolution group that one register
/// tile computes. A block never spans two groups: with zero weights for the
/// other group's inputs, a NaN there would reach this group's outputs (and
/// the zeros cost as many FMAs as lanes left empty do).
pub(super) struct OutBlock {
    /// The first output channel.
    pub(super) first: usize,
    /// Output channels (at most the kernel's width).
    pub(super) channels: usize,
    /// The first input channel its group reads.
    pub(super) input: usize,
    /// Per lane, the channel's output offset from the first's, when the
    /// channels do not lie side by side in one block of the output storage.
    pub(super) lane_offsets: Option<Vec<isize>>,
}

impl OutBlock {
    /// `per_channel` values as the blocks' lanes, `width` per block: lane l
    /// of a block holds its channel `first + l`, spare lanes 0.
    pub(super) fn lanes_of(blocks: &[OutBlock], width: usize, per_channel: &[f32]) -> Vec<f32> {
        let mut lanes = vec![0f32; blocks.len() * width];
        for (b, block) in blocks.iter().enumerate() {
            lanes[b * width..][..block.channels]
                .copy_from_slice(&per_channel[block.first..][..block.channels]);
        }
        lanes
    }
}

/// How `run` copies its input into scratch before the kernel reads it.
enum Staging {
    /// The input with `left` zero columns before each row and zeros after,
    /// to the kernel's width: every output column's window then lies inside
    /// a row, so border columns run in full register tiles instead of one
    /// pixel at a time (a 1x7 conv on 17x17 ran at half the speed of the 7x1
    /// one). Set when border columns read the horizontal padding.
    Widened {
        /// Width of the input as the kernel receives it.
        source_w: usize,
        /// Zero columns before each row.
        left: usize,
    },
    /// A 1x1 convolution with a stride reads only every `stride`-th pixel:
    /// those pixels, packed side by side, make a plane the pointwise kernel
    /// runs over as one row (read in place, the strided rows cut tiles short
    /// and half of each cache line read went unused).
    Subsampled {
        /// Height and width of the input as the kernel receives it.
        source: (usize, usize),
        /// Output rows and columns (the subsampled plane).
        out: (usize, usize),
        /// Vertical and horizontal stride.
        stride: (usize, usize),
    },
}

impl PackedConv {
    /// Packs logical OIHW weights `w` and the per-channel `params` (already
    /// folded with any batch norm).
    pub fn new(
        geom: ConvGeom,
        isa: Isa,
        w: &[f32],
        params: ChannelParams,
        epilogue: Epilogue,
        pad_fill: Option<f32>,
    ) -> PackedConv {
        let packs = &Packs::default();
        Self::build(geom, isa, w, params, epilogue, (pad_fill, true), packs)
    }

    /// The kernel of `new` that reads its input as it is (never staged),
    /// for computing pieces of the output with `region`.
    pub(in crate::runtime) fn for_regions(
        packs: &Packs,
        geom: ConvGeom,
        isa: Isa,
        w: &[f32],
        params: ChannelParams,
        epilogue: Epilogue,
    ) -> PackedConv {
        Self::build(geom, isa, w, params, epilogue, (None, false), packs)
    }

    /// The kernel of `new` (staging its input when `may_stage`), its packed
    /// weights taken from `packs` or added there.
    pub(super) fn build(
        geom: ConvGeom,
        isa: Isa,
        w: &[f32],
        params: ChannelParams,
        epilogue: Epilogue,
        (pad_fill, may_stage): (Option<f32>, bool),
        packs: &Packs,
    ) -> PackedConv {
        let (cin_g, cout_g) = (geom.cin / geom.groups, geom.cout / geom.groups);
        // Lanes past a group's channels do no work: groups of up to 8 channels
        // (ResNeXt's first stages) fill twice as many of AVX2's 8 lanes as of
        // AVX-512's 16, for as many FMAs per cycle on Zen 4 (it splits a 512-bit
        // FMA in two) and no fewer useful ones anywhere.
        let isa = match isa {
            Isa::Avx512 if cout_g <= Isa::Avx2.lanes() && Isa::Avx2.available() => Isa::Avx2,
            _ => isa,
        };
        let lanes = isa.lanes();
        // Two vectors per tile, when vectors store whole and a group's
        // channels fill them: a broadcast then feeds two FMAs. AVX-512 keeps
        // 2 x 12 accumulators in its registers, AVX2 2 x 6 (`tile_pixels`):
        // 8 loads per 12 FMAs there instead of 13, which made the 1x1
        // convolutions of MobileNetV3 and ResNet 6-25% faster on an AVX2 Zen.
        let width = if isa != Isa::Portable
            && geom.y_cb.is_multiple_of(lanes)
            && cout_g > lanes
            && (geom.groups == 1 || cout_g.is_multiple_of(2 * lanes))
        {
            2 * lanes
        } else {
            lanes
        };
        let blocks: Vec<OutBlock> = (0..geom.groups)
            .flat_map(|grp| (0..cout_g).step_by(width).map(move |c| (grp, c)))
            .map(|(grp, c)| {
                let first = grp * cout_g + c;
                let channels = width.min(cout_g - c);
                // A vector stores whole (all its lanes, a register store) when
                // they fit in one block of the output storage, past the channels
                // only into its padding: not past a group's channels into the
                // next group's, nor, in NHWC, into the next pixel's.
                let whole = (0..channels.div_ceil(lanes)).all(|v| {
                    let start = first + v * lanes;
                    let past_group = geom.groups > 1 && first + channels - start < lanes;
                    start % geom.y_cb + lanes <= geom.y_cb && !past_group
                });
                let lane_offsets = (!whole).then(|| {
                    let base = geom.y_chan(first) as isize;
                    (first..first + channels)
                        .map(|c| geom.y_chan(c) as isize - base)
                        .collect()
                });
                OutBlock {
                    first,
                    channels,
                    input: grp * cin_g,
                    lane_offsets,
                }
            })
            .collect();
        let (kh, kw) = geom.k;
        let taps = kh * kw;
        let per_block = taps * cin_g * width;
        // Lane l of a block is output channel first + l.
        let (packed_params, epilogue) = params.pack(epilogue, |per_channel| {
            OutBlock::lanes_of(&blocks, width, per_channel)
        });
        // A block's packed rows are written whole, reading its channels'
        // weights side by side (one output channel at a time scattered its
        // writes over the block); the blocks on the calling pool's threads
        // (packing was a tenth of a warm compile).
        let key = PackKey {
            isa,
            width,
            cin_g,
            taps,
            blocks: blocks.iter().map(|b| (b.first, b.channels)).collect(),
        };
        let packed = packs.get_or_pack(key, || {
            let mut packed = PageBuf::zeroed(blocks.len() * per_block);
            par::for_each_chunk_mut(&mut packed[..], per_block.max(1), |b, packed| {
                let block = &blocks[b];
                for i in 0..cin_g {
                    for t in 0..taps {
                        let row = &mut packed[(t * cin_g + i) * width..][..block.channels];
                        for (l, p) in row.iter_mut().enumerate() {
                            *p = w[((block.first + l) * cin_g + i) * taps + t];
                        }
                    }
                }
            });
            packed
        });
        let padded = !geom.cout.is_multiple_of(geom.y_cb);
        // A pointwise convolution reads and writes every pixel in order, so the
        // whole plane is one long row: full register tiles even on 7x7 maps.
        // With a stride, it reads the subsampled input staged so.
        let one_by_one = geom.is_pointwise();
        let plane = geom.as_plane();
        let (border_lo, border_hi) = geom.interior_columns();
        let (geom, staged) = if one_by_one && geom.stride == (1, 1) {
            (plane, None)
        } else if may_stage && one_by_one {
            let staged = Staging::Subsampled {
                source: (geom.h, geom.w),
                out: (geom.oh, geom.ow),
                stride: geom.stride,
            };
            (plane, Some(staged))
        } else if may_stage && geom.w > 0 && (border_lo > 0 || border_hi < geom.ow) {
            let span = (geom.k.1 - 1) * geom.dilation.1 + 1;
            let width = (geom.w + geom.pad.1).max((geom.ow - 1) * geom.stride.1 + span);
            let staged = Staging::Widened {
                source_w: geom.w,
                left: geom.pad.1,
            };
            let geom = ConvGeom {
                w: width,
                pad: (geom.pad.0, 0),
                ..geom
            };
            (geom, Some(staged))
        } else {
            (geom, None)
        };
        PackedConv {
            geom,
            isa,
            width,
            tile: tile_pixels(isa, width / lanes),
            blocks,
            w: packed,
            params: packed_params,
            epilogue,
            pad_fill: pad_fill.filter(|_| padded),
            staged,
        }
    }

    /// The packed weights.
    pub(in crate::runtime) fn weights(&self) -> &[f32] {
        &self.w
    }

    /// Elements of working memory `run` needs (the staged input), or 0.
    pub fn scratch_len(&self) -> usize {
        self.staged.as_ref().map_or(0, |_| self.geom.x_len())
    }

    /// Elements of the input buffer `run` reads.
    fn source_len(&self) -> usize {
        let g = &self.geom;
        let planes = g.n * g.cin.div_ceil(g.x_cb) * g.x_cb;
        match self.staged {
            Some(Staging::Widened { source_w, .. }) => planes * g.h * source_w,
            Some(Staging::Subsampled { source, .. }) => planes * source.0 * source.1,
            None => g.x_len(),
        }
    }

    /// Copies `x` into `scratch` in the shape `staging` gives it.
    fn stage(&self, staging: &Staging, x: &[f32], scratch: &mut [f32]) {
        let g = &self.geom;
        let cb = g.x_cb;
        // Scratch is filled row by row: `row_out` elements from the source row
        // of `row_in` elements that `source_row` gives.
        let (row_in, row_out) = match *staging {
            Staging::Widened { source_w, .. } => (source_w * cb, g.w * cb),
            Staging::Subsampled { source, out, .. } => (source.1 * cb, out.1 * cb),
        };
        if row_out == 0 {
            return;
        }
        let source_row = |i: usize| match *staging {
            Staging::Widened { .. } => i * row_in,
            Staging::Subsampled {
                source,
                out,
                stride,
            } => ((i / out.0) * source.0 + (i % out.0) * stride.0) * row_in,
        };
        // 64 rows per task.
        par::for_each_chunk_mut(&mut scratch[..g.x_len()], 64 * row_out, |chunk, rows| {
            for (j, dst) in rows.chunks_mut(row_out).enumerate() {
                let src = &x[source_row(chunk * 64 + j)..][..row_in];
                match *staging {
                    Staging::Widened { left, .. } => {
                        let left = left * cb;
                        dst[..left].fill(0.0);
                        dst[left..left + row_in].copy_from_slice(src);
                        dst[left + row_in..].fill(0.0);
                    }
                    Staging::Subsampled { stride, .. } => {
                        for (px, d) in dst.chunks_exact_mut(cb).enumerate() {
                            d.copy_from_slice(&src[px * stride.1 * cb..][..cb]);
                        }
                    }
                }
            }
        });
    }

    /// Computes `y` from `x` (and the residual, laid out like `y`, if fused);
    /// `scratch` holds at least `scratch_len()` elements.
    pub fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32], scratch: &mut [f32]) {
        let g = &self.geom;
        assert!(x.len() >= self.source_len() && y.len() >= g.y_len());
        assert!(residual.is_none_or(|r| r.len() >= g.y_len()));
        assert!(scratch.len() >= self.scratch_len());
        let x = match &self.staged {
            Some(staging) => {
                self.stage(staging, x, scratch);
                &scratch[..]
            }
            None => x,
        };
        let blocks = self.blocks.len();
        let rows = g.n * blocks * g.oh;
        // Rows are cut into spans of whole tiles when there are too few of them
        // to give every thread several pieces of work.
        let threads = par::threads();
        let tiles = g.ow.div_ceil(self.tile);
        // Small weights stay in L2 whatever the order, so one thread's
        // consecutive pieces then cover all blocks of the same pixels, which
        // reuses the input from L1; large weights are shared within a block.
        let pixels_outer = self.w.len() * 4 <= 64 * 1024;
        // A pointwise plane is one long row: cut it into spans whose input
        // stays in L1 while every block reads it.
        let input_cuts = match pixels_outer && g.k == (1, 1) {
            true => (tiles * self.tile * g.cin * 4).div_ceil(L1_INPUT_BYTES),
            false => 1,
        };
        let cuts = (threads * 8).div_ceil(rows).max(input_cuts).clamp(1, tiles);
        let span = tiles.div_ceil(cuts) * self.tile;
        let cuts = g.ow.div_ceil(span);
        let items = rows * cuts;
        // Each (n, block, oh, span) writes its own output pixels and channels.
        super::for_each_piece(items, x, residual, y, |i, x, res, y| {
            let (r, cut) = match pixels_outer {
                true => {
                    let (px, b) = (i / blocks, i % blocks);
                    let (n, oh) = (px / cuts / g.oh, px / cuts % g.oh);
                    (((n * blocks + b) * g.oh + oh), px % cuts)
                }
                false => (i / cuts, i % cuts),
            };
            let cols = cut * span..((cut + 1) * span).min(g.ow);
            // SAFETY: the buffers were checked to hold the whole input,
            // residual and output.
            unsafe { self.row(r, cols, x, res, y) }
        });
        if let Some(v) = self.pad_fill {
            fill_channel_pad(y, g.n, g.cout, g.y_cb, g.oh * g.ow, v);
        }
    }

    /// Output rows `rows` and columns `cols` of batch item `n`, every channel,
    /// with the bias, residual and epilogue; the channel padding is left as it
    /// is. Only for a kernel of `for_regions`.
    ///
    /// # Safety
    /// `x`, `res` and `y` hold the whole input, residual and output.
    pub(in crate::runtime) unsafe fn region(
        &self,
        x: *const f32,
        res: Option<*const f32>,
        y: *mut f32,
        n: usize,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        debug_assert!(self.staged.is_none());
        let g = &self.geom;
        let blocks = self.blocks.len();
        for b in 0..blocks {
            for oh in rows.clone() {
                self.row((n * blocks + b) * g.oh + oh, cols.clone(), x, res, y);
            }
        }
    }

    /// Output columns `cols` of one output row of one block of one batch item.
    unsafe fn row(
        &self,
        r: usize,
        cols: std::ops::Range<usize>,
        x: *const f32,
        res: Option<*const f32>,
        y: *mut f32,
    ) {
        let g = &self.geom;
        let lanes = self.isa.lanes();
        let width = self.width;
        let blocks = self.blocks.len();
        let (n, rest) = (r / (blocks * g.oh), r % (blocks * g.oh));
        let (b, oh) = (rest / g.oh, rest % g.oh);
        let block = &self.blocks[b];
        let x_batch = (g.cin.div_ceil(g.x_cb) * g.x_cb * g.h * g.w) as isize;
        let y_batch = g.cout.div_ceil(g.y_cb) * g.y_cb * g.oh * g.ow;
        let (kh, kw) = g.k;
        let (sh, sw) = g.stride;
        let (dh, dw) = g.dilation;
        let (ph, pw) = g.pad;
        let ih0 = (oh * sh) as isize - ph as isize;
        let kh_range = valid_taps(ih0, dh, kh, g.h);
        let xcb = g.x_cb as isize;
        let cin_g = g.cin / g.groups;
        let mut tile = Tile {
            pixels: 0,
            kh: kh_range,
            kw: (0, kw),
            x_origin: 0,
            x_pixel: sw as isize * xcb,
            x_kh: (dh * g.w) as isize * xcb,
            x_kw: dw as isize * xcb,
            c_first: block.input,
            cin: cin_g,
            x_cb: g.x_cb,
            x_cblock: (g.h * g.w) as isize * xcb,
            kw_total: kw,
            w_width: width,
            // A block may need only one of its two vectors.
            vectors: block.channels.div_ceil(lanes).min(width / lanes),
        };
        let w = self.w.as_ptr().add(b * kh * kw * cin_g * width);
        let bias = self.params.as_ptr().add(b * width);
        let c0 = block.first;
        let y_row = n * y_batch + g.y_chan(c0) + oh * g.ow * g.y_cb;
        let vector = if block.channels > lanes {
            g.y_chan(c0 + lanes) as isize - g.y_chan(c0) as isize
        } else {
            0
        };
        let x_row = n as isize * x_batch + ih0 * g.w as isize * xcb;
        let (lo, hi) = g.interior_columns();
        let mut ow = cols.start;
        while ow < cols.end {
            let (pixels, kw_range) = if ow >= lo && ow < hi {
                (balanced_tile(hi.min(cols.end) - ow, self.tile), (0, kw))
            } else {
                (1, valid_taps((ow * sw) as isize - pw as isize, dw, kw, g.w))
            };
            tile.pixels = pixels;
            tile.kw = kw_range;
            tile.x_origin = x_row + ((ow * sw) as isize - pw as isize) * xcb;
            let off = (y_row + ow * g.y_cb) as isize;
            let store = Store {
                out: y.offset(off),
                residual: res.map(|p| p.offset(off)),
                pixel: g.y_cb as isize,
                vector,
                lanes_used: block.channels.min(lanes),
                chan_offsets: block.lane_offsets.as_deref(),
            };
            conv_tile(self.isa, x, w, bias, &tile, &store, self.epilogue);
            ow += pixels;
        }
    }
}

/// Pixels of the next register tile when `left` remain in a run of full
/// windows: tiles of at most `most`, as even as they can be (49 pixels as
/// 10+10+10+10+9, not 12+12+12+12+1: a tile of one or two pixels waits on
/// its loads and on the latency of its few accumulators).
pub(in crate::runtime) fn balanced_tile(left: usize, most: usize) -> usize {
    left.div_ceil(left.div_ceil(most))
}

/// Bytes of input one span of a pointwise plane reads: half of a 32 KB L1,
/// the rest left to the weights of the group running over it.
const L1_INPUT_BYTES: usize = 16 * 1024;

/// Along one axis, the outputs `lo..hi` of `outputs` whose whole window of
/// `taps` (with the stride, dilation and padding before given) lies inside
/// an input of `extent`.
fn interior(
    outputs: usize,
    extent: usize,
    taps: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
) -> (usize, usize) {
    let lo = pad.div_ceil(stride).min(outputs);
    let span = (taps - 1) * dilation;
    let hi = if extent + pad > span {
        ((extent + pad - span - 1) / stride + 1).clamp(lo, outputs)
    } else {
        lo
    };
    (lo, hi)
}

/// Kernel taps `k` with `0 <= start + k * dilation < extent`, as a range.
pub(in crate::runtime) fn valid_taps(
    start: isize,
    dilation: usize,
    taps: usize,
    extent: usize,
) -> (usize, usize) {
    let d = dilation as isize;
    let first = if start >= 0 {
        0
    } else {
        ((-start + d - 1) / d) as usize
    };
    let last = if start >= extent as isize {
        0
    } else {
        (((extent as isize - 1 - start) / d) + 1) as usize
    };
    (first.min(taps), last.clamp(first.min(taps), taps))
}

/// Writes `v` into the padding channels (`c >= channels`) of an NCHW{cb}c tensor.
pub fn fill_channel_pad(y: &mut [f32], n: usize, channels: usize, cb: usize, plane: usize, v: f32) {
    let blocks = channels.div_ceil(cb);
    let first_pad = channels % cb;
    if first_pad == 0 {
        return;
    }
    for b in 0..n {
        let block = &mut y[((b * blocks + blocks - 1) * plane) * cb..][..plane * cb];
        for px in block.chunks_exact_mut(cb) {
            px[first_pad..].fill(v);
        }
    }
}
