//! Winograd convolution F(m×m, 3×3) for 3x3 stride-1 convolutions on the
//! channel-blocked layouts of `direct.rs`. Each m×m tile of the output needs an
//! α×α patch of the input (α = m + 2); the patch goes to the transformed
//! domain (Bᵀ d B), where the convolution becomes α² independent matrix
//! products over the channels, against weights transformed once at compile
//! time (G g Gᵀ). The output transform (Aᵀ M A) adds the bias and the
//! residual and applies the epilogue as it stores, so a fused conv still
//! writes its output once. The products run the convolution's register tile,
//! as 1x1 convolutions over the tiles.
//!
//! The matrices are those of Lavin and Gray, "Fast Algorithms for
//! Convolutional Neural Networks" (2015): points 0, ±1 for F(2x2, 3x3) (2.25x
//! fewer multiplies than direct), 0, ±1, ±2, ∞ for F(4x4, 3x3) (4x fewer, with
//! larger coefficients and so a larger rounding error).
//!
//! The transforms mix a whole patch, so a NaN or infinite input would reach
//! outputs whose window does not hold it. The output transform therefore
//! checks each tile (in registers, before the epilogue, which may clamp an
//! infinity) and recomputes a tile holding a non-finite value with the direct
//! kernel, which gives IEEE propagation exactly: finite data pays the check
//! only.

use super::direct::{fill_channel_pad, ConvGeom, PackedConv, Packs};
use super::tile::{conv_tile, tile_pixels, ChannelParams, Epilogue, Store, Tile};
use crate::core::{par, PageBuf};
use crate::runtime::kernels::simd::{
    multiversion, run_vectorized, Isa, Lanes, Vector, VectorKernel,
};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The output tile of a Winograd convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WinogradTile {
    /// F(2x2, 3x3): 4x4 patches.
    F2,
    /// F(4x4, 3x3): 6x6 patches.
    F4,
}

impl WinogradTile {
    /// Output pixels per tile side (m).
    pub fn m(self) -> usize {
        match self {
            WinogradTile::F2 => 2,
            WinogradTile::F4 => 4,
        }
    }

    /// Input pixels per patch side (α = m + 2).
    fn alpha(self) -> usize {
        self.m() + 2
    }
}

/// The weight transform G (α × 3) of one F(m×m, 3×3), applied in f64 at
/// compile time.
type WeightTransform<const A: usize> = [[f64; 3]; A];

const F2_G: WeightTransform<4> = [
    [1.0, 0.0, 0.0],
    [0.5, 0.5, 0.5],
    [0.5, -0.5, 0.5],
    [0.0, 0.0, 1.0],
];

const F4_G: WeightTransform<6> = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// The input (Bᵀ) or output (Aᵀ) transform of one F(m×m, 3×3) along one
/// axis of a patch, `A` values in, `R` out, written out with the common
/// terms shared. Products with the matrices left to the compiler kept a
/// compare and a branch per coefficient: the transforms took twice the time
/// of the products of an F(4x4) convolution.
pub(in crate::runtime) trait Line<const A: usize, const R: usize> {
    /// # Safety
    /// `V`'s instruction set is available.
    unsafe fn apply<V: Vector>(x: &[V; A]) -> [V; R];
}

/// Bᵀ of F(2x2, 3x3).
pub(in crate::runtime) struct F2Input;
/// Aᵀ of F(2x2, 3x3).
pub(in crate::runtime) struct F2Output;
/// Bᵀ of F(4x4, 3x3).
pub(in crate::runtime) struct F4Input;
/// Aᵀ of F(4x4, 3x3).
pub(in crate::runtime) struct F4Output;

impl Line<4, 4> for F2Input {
    #[inline(always)]
    unsafe fn apply<V: Vector>(d: &[V; 4]) -> [V; 4] {
        [
            V::sub(d[0], d[2]),
            V::add(d[1], d[2]),
            V::sub(d[2], d[1]),
            V::sub(d[1], d[3]),
        ]
    }
}

impl Line<4, 2> for F2Output {
    #[inline(always)]
    unsafe fn apply<V: Vector>(m: &[V; 4]) -> [V; 2] {
        [
            V::add(V::add(m[0], m[1]), m[2]),
            V::sub(V::sub(m[1], m[2]), m[3]),
        ]
    }
}

impl Line<6, 6> for F4Input {
    #[inline(always)]
    unsafe fn apply<V: Vector>(d: &[V; 6]) -> [V; 6] {
        let (four, minus_four, minus_five) = (V::splat(4.0), V::splat(-4.0), V::splat(-5.0));
        // Rows 1 and 2 are a ± b, rows 3 and 4 are c ± e.
        let a = V::fma(minus_four, d[2], d[4]);
        let b = V::fma(minus_four, d[1], d[3]);
        let c = V::sub(d[4], d[2]);
        let half_e = V::sub(d[3], d[1]);
        let e = V::add(half_e, half_e);
        [
            V::fma(four, d[0], V::fma(minus_five, d[2], d[4])),
            V::add(a, b),
            V::sub(a, b),
            V::add(c, e),
            V::sub(c, e),
            V::fma(four, d[1], V::fma(minus_five, d[3], d[5])),
        ]
    }
}

impl Line<6, 4> for F4Output {
    #[inline(always)]
    unsafe fn apply<V: Vector>(m: &[V; 6]) -> [V; 4] {
        let (s1, d1) = (V::add(m[1], m[2]), V::sub(m[1], m[2]));
        let (s2, d2) = (V::add(m[3], m[4]), V::sub(m[3], m[4]));
        [
            V::add(V::add(m[0], s1), s2),
            V::fma(V::splat(2.0), d2, d1),
            V::fma(V::splat(4.0), s2, s1),
            V::add(V::fma(V::splat(8.0), d2, d1), m[5]),
        ]
    }
}

/// Transformed-domain floats one block of tiles may use, input and products
/// together: half of a 1 MiB L2, so a block's three phases run in cache.
const BLOCK_FLOATS: usize = 128 * 1024;

/// Whether a convolution has a Winograd kernel: dense, 3x3, stride 1, no dilation.
pub fn applies(g: &ConvGeom) -> bool {
    g.k == (3, 3) && g.stride == (1, 1) && g.dilation == (1, 1) && g.groups == 1
}

/// A Winograd convolution ready to run: transformed weights, bias, epilogue.
pub struct WinogradConv {
    /// Shapes and window.
    pub geom: ConvGeom,
    isa: Isa,
    tile: WinogradTile,
    /// Output channels of one product's register tile: one or two vectors.
    width: usize,
    /// The most rows of one product's register tile.
    tile_rows: usize,
    /// [α²][cout / width][cin][width], zero beyond `cout`.
    u: Arc<PageBuf>,
    /// Bias per output channel, zero beyond `cout`, `cout_r` long; then as
    /// many PRelu slopes if the epilogue has them.
    params: Vec<f32>,
    epilogue: Epilogue,
    /// What the output's padding channels must hold, if any are there.
    pad_fill: Option<f32>,
    /// Tiles down and across one output plane.
    tiles: (usize, usize),
    /// Tiles per block: the rows of the products.
    block: usize,
    /// One block of all tiles, each phase spread over the threads (few
    /// tiles), or blocks spread over the threads, each in its own scratch.
    whole: bool,
    /// Workers with their own scratch when blocks are spread.
    workers: usize,
    /// Row lengths of the transformed input and of the products.
    cin_r: usize,
    cout_r: usize,
    /// Vectors of the input and of the output transforms.
    x_lanes: Lanes,
    y_lanes: Lanes,
    /// The direct kernel of the same convolution, for tiles whose Winograd
    /// result holds NaN or an infinity.
    direct: Box<PackedConv>,
}

/// One block of tiles and its transformed-domain buffers, `[α²][block][cin_r]`
/// and `[α²][block][cout_r]`.
#[derive(Clone, Copy)]
struct Block {
    /// Index of its first tile among all tiles of the batch.
    first: usize,
    /// Tiles in it.
    tiles: usize,
    v: *mut f32,
    m: *mut f32,
}

// SAFETY: a block's buffers are written by one phase at a time, and within a
// phase each task writes its own rows (tiles) or columns (products).
unsafe impl Send for Block {}
unsafe impl Sync for Block {}

impl WinogradConv {
    /// Its transformed weights (shared with it, not copied).
    pub fn transformed(&self) -> TransformedWeights {
        TransformedWeights {
            tile: self.tile,
            isa: self.isa,
            cin: self.geom.cin,
            cout: self.geom.cout,
            width: self.width,
            u: self.u.clone(),
        }
    }

    /// The convolution of logical OIHW weights `w` (3x3), transformed as
    /// `u`, and the per-channel `params` (both already folded with any batch
    /// norm);
    /// `threads` is the number of workers `run` may be called on.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        geom: ConvGeom,
        isa: Isa,
        u: &TransformedWeights,
        w: &[f32],
        params: ChannelParams,
        epilogue: Epilogue,
        pad_fill: Option<f32>,
        threads: usize,
    ) -> WinogradConv {
        let direct =
            PackedConv::for_regions(&Packs::default(), geom.clone(), isa, w, params, epilogue);
        WinogradConv::with_border(geom, isa, u, direct, params, epilogue, pad_fill, threads)
    }

    /// [`Self::new`], with `direct` (a `PackedConv::for_regions` of the same
    /// weights) for the tiles at the border and those to recompute.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::runtime) fn with_border(
        geom: ConvGeom,
        isa: Isa,
        u: &TransformedWeights,
        direct: PackedConv,
        params: ChannelParams,
        epilogue: Epilogue,
        pad_fill: Option<f32>,
        threads: usize,
    ) -> WinogradConv {
        debug_assert!(applies(&geom));
        assert!(
            (u.isa, u.cin, u.cout) == (isa, geom.cin, geom.cout),
            "transformed weights of another convolution"
        );
        let (tile, width) = (u.tile, u.width);
        let groups = geom.cout.div_ceil(width);
        let (x_lanes, y_lanes) = (
            Lanes::for_block(isa, geom.x_cb),
            Lanes::for_block(isa, geom.y_cb),
        );
        let cin_r = geom.cin.next_multiple_of(x_lanes.count());
        let cout_r = groups * width;
        let u = u.u.clone();
        let (padded_params, padded_epilogue) = params.pack(epilogue, |per_channel| {
            let mut padded = vec![0f32; cout_r];
            padded[..geom.cout].copy_from_slice(&per_channel[..geom.cout]);
            padded
        });
        let m = tile.m();
        let tiles = (geom.oh.div_ceil(m), geom.ow.div_ceil(m));
        let count = geom.n * tiles.0 * tiles.1;
        let per_tile = tile.alpha().pow(2) * (cin_r + cout_r);
        let tile_rows = tile_pixels(isa, width / isa.lanes());
        let mut block = (BLOCK_FLOATS / per_tile).max(1);
        if block > tile_rows {
            block -= block % tile_rows;
        }
        let workers = threads.max(1);
        let blocks = count.div_ceil(block);
        // One block, whose phases spread their rows and products over the
        // threads, when there are too few blocks to keep every thread busy,
        // or when the transformed weights are so large that reading them
        // once per block costs more than writing and reading all tiles'
        // transformed data beyond L2 (layers of many channels on small maps:
        // the F(2x2) weights of a 512-channel layer are 16 MB).
        let whole = blocks < 2 * workers || (blocks - 1) * u.len() > 2 * count * per_tile;
        if whole {
            block = count.max(1);
        }
        WinogradConv {
            pad_fill: pad_fill.filter(|_| !geom.cout.is_multiple_of(geom.y_cb)),
            direct: Box::new(direct),
            geom,
            isa,
            tile,
            width,
            tile_rows,
            u,
            params: padded_params,
            epilogue: padded_epilogue,
            tiles,
            block,
            whole,
            workers,
            cin_r,
            cout_r,
            x_lanes,
            y_lanes,
        }
    }

    /// The output tile.
    pub fn tile(&self) -> WinogradTile {
        self.tile
    }

    /// The transformed weights.
    pub(in crate::runtime) fn weights(&self) -> &[f32] {
        &self.u
    }

    /// Floats of one block's transformed input and products.
    fn block_len(&self) -> usize {
        self.tile.alpha().pow(2) * self.block * (self.cin_r + self.cout_r)
    }

    /// Elements of working memory `run` needs.
    pub fn scratch_len(&self) -> usize {
        match self.whole {
            true => self.block_len(),
            false => self.workers * self.block_len(),
        }
    }

    /// Computes `y` from `x` (and the residual, laid out like `y`, if fused);
    /// `scratch` holds at least `scratch_len()` elements.
    pub fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32], scratch: &mut [f32]) {
        let g = &self.geom;
        assert!(x.len() >= g.x_len() && y.len() >= g.y_len());
        assert!(residual.is_none_or(|r| r.len() >= g.y_len()));
        assert!(scratch.len() >= self.scratch_len());
        let count = g.n * self.tiles.0 * self.tiles.1;
        let io = Io {
            x: x.as_ptr() as usize,
            res: residual.map(|r| r.as_ptr() as usize),
            y: y.as_mut_ptr() as usize,
        };
        let split = self.tile.alpha().pow(2) * self.block * self.cin_r;
        if self.whole {
            let (v, m) = scratch.split_at_mut(split);
            let b = Block {
                first: 0,
                tiles: count,
                v: v.as_mut_ptr(),
                m: m.as_mut_ptr(),
            };
            // SAFETY: lengths checked above; each task writes its own tiles
            // or its own columns of the products.
            par::for_each(count, |t| unsafe { self.input(&io, &b, t..t + 1) });
            // A task takes all rows of one product's channel group, so each
            // slice of the transformed weights is read by one thread only
            // (rows handed out one register tile at a time had both threads
            // stream nearly all of them: F(4x4) on 128 channels at 28x28 took
            // 0.34-0.39 ms on 2 threads, 0.31 ms so). Rows are cut only when
            // there are too few slices to share out.
            let slices = self.tile.alpha().pow(2) * self.groups();
            let row_tiles = count.div_ceil(self.tile_rows);
            let cuts = (par::threads() * 8).div_ceil(slices).clamp(1, row_tiles);
            let rows = row_tiles.div_ceil(cuts) * self.tile_rows;
            let cuts = count.div_ceil(rows);
            par::for_each(slices * cuts, |i| unsafe {
                let (xi, grp) = (i / cuts / self.groups(), i / cuts % self.groups());
                let first = i % cuts * rows;
                self.product(&b, xi, grp, first..(first + rows).min(count));
            });
            par::for_each(count, |t| unsafe { self.output(&io, &b, t..t + 1) });
        } else {
            // Each worker takes the next block until none is left.
            let next = AtomicUsize::new(0);
            let blocks = count.div_ceil(self.block);
            par::for_each_chunk_mut(
                &mut scratch[..self.scratch_len()],
                self.block_len(),
                |_, own| {
                    let (v, m) = own.split_at_mut(split);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= blocks {
                            break;
                        }
                        let first = i * self.block;
                        let b = Block {
                            first,
                            tiles: self.block.min(count - first),
                            v: v.as_mut_ptr(),
                            m: m.as_mut_ptr(),
                        };
                        // SAFETY: the block's buffers are this worker's own;
                        // its tiles write their own output pixels.
                        unsafe { self.run_block(&io, &b) }
                    }
                },
            );
        }
        if let Some(v) = self.pad_fill {
            fill_channel_pad(y, g.n, g.cout, g.y_cb, g.oh * g.ow, v);
        }
    }

    fn groups(&self) -> usize {
        self.cout_r / self.width
    }

    /// All three phases of one block, on this thread.
    unsafe fn run_block(&self, io: &Io, b: &Block) {
        self.input(io, b, 0..b.tiles);
        for xi in 0..self.tile.alpha().pow(2) {
            for grp in 0..self.groups() {
                self.product(b, xi, grp, 0..b.tiles);
            }
        }
        self.output(io, b, 0..b.tiles);
    }

    /// The input transform of tiles `tiles` (indices within the block).
    unsafe fn input(&self, io: &Io, b: &Block, tiles: Range<usize>) {
        let k = Phase {
            c: self,
            io,
            b,
            tiles,
            output: false,
        };
        run_vectorized(self.x_lanes, &k)
    }

    /// The output transform of tiles `tiles` (indices within the block).
    unsafe fn output(&self, io: &Io, b: &Block, tiles: Range<usize>) {
        let k = Phase {
            c: self,
            io,
            b,
            tiles,
            output: true,
        };
        run_vectorized(self.y_lanes, &k)
    }

    /// Rows `rows` of product `xi` for output-channel group `grp`: a 1x1
    /// convolution of the transformed tiles, one register tile at a time.
    unsafe fn product(&self, b: &Block, xi: usize, grp: usize, rows: Range<usize>) {
        for r0 in rows.clone().step_by(self.tile_rows) {
            let end = (r0 + self.tile_rows).min(rows.end);
            self.product_tile(b, xi, grp, r0..end);
        }
    }

    /// `product` of at most `tile_rows` rows: one register tile.
    unsafe fn product_tile(&self, b: &Block, xi: usize, grp: usize, rows: Range<usize>) {
        let lanes = self.isa.lanes();
        let cin = self.geom.cin;
        let row0 = xi * self.block + rows.start;
        let tile = Tile {
            pixels: rows.len(),
            kh: (0, 1),
            kw: (0, 1),
            x_origin: (row0 * self.cin_r) as isize,
            x_pixel: self.cin_r as isize,
            x_kh: 0,
            x_kw: 0,
            c_first: 0,
            cin,
            x_cb: cin,
            x_cblock: 0,
            kw_total: 1,
            w_width: self.width,
            vectors: (self.geom.cout - grp * self.width)
                .div_ceil(lanes)
                .min(self.width / lanes),
        };
        let store = Store {
            out: b.m.add(row0 * self.cout_r + grp * self.width),
            residual: None,
            pixel: self.cout_r as isize,
            vector: lanes as isize,
            lanes_used: lanes,
            chan_offsets: None,
        };
        let u = self
            .u
            .as_ptr()
            .add((xi * self.groups() + grp) * cin * self.width);
        let zeros = [0f32; 32];
        conv_tile(
            self.isa,
            b.v,
            u,
            zeros.as_ptr(),
            &tile,
            &store,
            Epilogue::of(None),
        );
    }
}

/// The tensors of one run, as addresses that may cross threads.
struct Io {
    x: usize,
    res: Option<usize>,
    y: usize,
}

/// The input or output transform of some tiles of a block, written once over
/// the vector type.
struct Phase<'a> {
    c: &'a WinogradConv,
    io: &'a Io,
    b: &'a Block,
    tiles: Range<usize>,
    output: bool,
}

impl VectorKernel for Phase<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        match (self.c.tile, self.output) {
            (WinogradTile::F2, false) => self.input::<V, F2Input, 4>(),
            (WinogradTile::F4, false) => self.input::<V, F4Input, 6>(),
            (WinogradTile::F2, true) => self.output::<V, F2Output, 4, 2>(),
            (WinogradTile::F4, true) => self.output::<V, F4Output, 6, 4>(),
        }
    }
}

impl Phase<'_> {
    /// Batch item and top-left output pixel of tile `t` of the block.
    fn origin(&self, t: usize) -> (usize, usize, usize) {
        let (th, tw) = self.c.tiles;
        let t = self.b.first + t;
        let m = self.c.tile.m();
        (t / (th * tw), t / tw % th * m, t % tw * m)
    }

    /// Bᵀ d B of each tile's input patch, per vector of input channels.
    #[inline(always)]
    unsafe fn input<V: Vector, L: Line<A, A>, const A: usize>(&self) {
        let c = self.c;
        let g = &c.geom;
        let x = self.io.x as *const f32;
        let xcb = g.x_cb;
        let batch = g.cin.div_ceil(xcb) * xcb * g.h * g.w;
        let (ph, pw) = (g.pad.0 as isize, g.pad.1 as isize);
        for t in self.tiles.clone() {
            let (n, oy, ox) = self.origin(t);
            for c0 in (0..g.cin).step_by(V::LANES) {
                let base = x.add(n * batch + (c0 / xcb) * g.h * g.w * xcb + c0 % xcb);
                let mut d = [[V::splat(0.0); A]; A];
                for (i, row) in d.iter_mut().enumerate() {
                    let ih = (oy + i) as isize - ph;
                    if ih < 0 || ih >= g.h as isize {
                        continue;
                    }
                    for (j, v) in row.iter_mut().enumerate() {
                        let iw = (ox + j) as isize - pw;
                        if iw >= 0 && iw < g.w as isize {
                            *v = V::load(base.add((ih as usize * g.w + iw as usize) * xcb));
                        }
                    }
                }
                let dt = both_axes::<V, L, A, A>(&d);
                let v = self.b.v.add(t * c.cin_r + c0);
                for (xi, &e) in dt.iter().flatten().enumerate() {
                    e.store(v.add(xi * c.block * c.cin_r));
                }
            }
        }
    }

    /// Aᵀ M A of each tile's products, per vector of output channels, with
    /// the bias, the residual and the epilogue; pixels past the output's edge
    /// are not stored. A tile whose Aᵀ M A holds NaN or an infinity in any
    /// stored pixel is computed again by the direct kernel.
    #[inline(always)]
    unsafe fn output<V: Vector, L: Line<A, M>, const A: usize, const M: usize>(&self) {
        let c = self.c;
        let g = &c.geom;
        let (y, res) = (self.io.y as *mut f32, self.io.res.map(|r| r as *const f32));
        let ycb = g.y_cb;
        let batch = g.cout.div_ceil(ycb) * ycb * g.oh * g.ow;
        for t in self.tiles.clone() {
            let (n, oy, ox) = self.origin(t);
            // x - x is 0 for a finite x and NaN otherwise.
            let mut nonfinite = V::splat(0.0);
            for o0 in (0..g.cout).step_by(V::LANES) {
                let mp = self.b.m.add(t * c.cout_r + o0);
                let mut prods = [[V::splat(0.0); A]; A];
                for (xi, p) in prods.iter_mut().flatten().enumerate() {
                    *p = V::load(mp.add(xi * c.block * c.cout_r));
                }
                let out = both_axes::<V, L, A, M>(&prods);
                let params = c.params.as_ptr().add(o0);
                let bias = V::load(params);
                let chan = n * batch + (o0 / ycb) * g.oh * g.ow * ycb + o0 % ycb;
                for (i, row) in out.iter().enumerate().take(g.oh - oy) {
                    for (j, &e) in row.iter().enumerate().take(g.ow - ox) {
                        let at = chan + ((oy + i) * g.ow + ox + j) * ycb;
                        nonfinite = V::add(nonfinite, V::sub(e, e));
                        let mut e = V::add(e, bias);
                        if let Some(r) = res {
                            e = V::add(e, V::load(r.add(at)));
                        }
                        c.epilogue.apply(e, params).store(y.add(at));
                    }
                }
            }
            let mut lanes = [0f32; 16];
            debug_assert!(V::LANES <= lanes.len());
            nonfinite.store(lanes.as_mut_ptr());
            if lanes[..V::LANES].iter().any(|v| v.is_nan()) {
                let (rows, cols) = (oy..(oy + M).min(g.oh), ox..(ox + M).min(g.ow));
                let x = self.io.x as *const f32;
                c.direct.region(x, res, y, n, rows, cols);
            }
        }
    }
}

/// `L · x · Lᵀ` for a square `x`: the line transform down every column,
/// then along every row of the result. Plain loops, no closures: a closure
/// is compiled without the caller's target features, and its vector
/// operations would stay calls.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn both_axes<V: Vector, L: Line<A, R>, const A: usize, const R: usize>(
    x: &[[V; A]; A],
) -> [[V; R]; R] {
    let zero = V::splat(0.0);
    // cols[j][i] = (L · x)[i][j]
    let mut cols = [[zero; R]; A];
    let mut line = [zero; A];
    for j in 0..A {
        for k in 0..A {
            line[k] = x[k][j];
        }
        cols[j] = L::apply(&line);
    }
    let mut out = [[zero; R]; R];
    for i in 0..R {
        for k in 0..A {
            line[k] = cols[k][i];
        }
        out[i] = L::apply(&line);
    }
    out
}

/// G g Gᵀ of one convolution's weights for one Winograd size, packed for its
/// products. It depends on the channels only, not on the layouts, so every
/// kernel built from the same weights shares it (the planner measures a
/// convolution in several layouts).
#[derive(Clone)]
pub struct TransformedWeights {
    tile: WinogradTile,
    isa: Isa,
    cin: usize,
    cout: usize,
    /// Output channels of one product's register tile: one or two vectors.
    width: usize,
    /// [α²][cout / width][cin][width], zero beyond `cout`.
    u: Arc<PageBuf>,
}

impl TransformedWeights {
    /// Transforms the logical OIHW 3x3 weights `w` of `cout` output and
    /// `cin` input channels, in f64.
    pub fn new(tile: WinogradTile, isa: Isa, cin: usize, cout: usize, w: &[f32]) -> Self {
        let lanes = isa.lanes();
        // Two vectors per register tile as in the direct kernel (`direct.rs`).
        let width = if isa != Isa::Portable && cout > lanes {
            2 * lanes
        } else {
            lanes
        };
        let u = match tile {
            WinogradTile::F2 => transform_weights(&F2_G, cin, cout, w, width),
            WinogradTile::F4 => transform_weights(&F4_G, cin, cout, w, width),
        };
        TransformedWeights {
            tile,
            isa,
            cin,
            cout,
            width,
            u: Arc::new(u),
        }
    }

    /// The Winograd size.
    pub fn tile(&self) -> WinogradTile {
        self.tile
    }

    /// Whether `other` holds the very same transformed weights (not a copy).
    pub fn shares_with(&self, other: &TransformedWeights) -> bool {
        Arc::ptr_eq(&self.u, &other.u)
    }

    /// Whether these are weights of `cin` to `cout` channels transformed for
    /// `tile` on `isa`.
    pub fn fits(&self, tile: WinogradTile, isa: Isa, cin: usize, cout: usize) -> bool {
        (self.tile, self.isa, self.cin, self.cout) == (tile, isa, cin, cout)
    }
}

/// G g Gᵀ of every (output, input) channel pair, in f64, packed as
/// `[α²][cout / width][cin][width]` with zeros beyond `cout`, the groups of
/// output channels spread over the threads.
fn transform_weights<const A: usize>(
    g: &WeightTransform<A>,
    cin: usize,
    cout: usize,
    w: &[f32],
    width: usize,
) -> PageBuf {
    let groups = cout.div_ceil(width);
    let mut u = PageBuf::zeroed(A * A * groups * cin * width);
    let at = u.as_mut_ptr() as usize;
    let stride = groups * cin * width;
    par::for_each(groups, |grp| {
        let first = grp * width;
        let lanes = width.min(cout - first);
        let group_at = at + first * cin * size_of::<f32>();
        // SAFETY: the group's rows lie inside `u` (`stride` apart, `width`
        // floats per input channel), and only this task writes them.
        unsafe {
            transform_group(
                g,
                &w[first * cin * 9..],
                cin,
                lanes,
                width,
                group_at,
                stride,
            )
        };
    });
    u
}

/// Output channels transformed side by side: a fixed count, so that the f64
/// arithmetic over them compiles to whole vectors.
const SIDE: usize = 8;

/// The largest α of the Winograd sizes (F(4x4, 3x3)).
const MAX_ALPHA: usize = 6;

// The `lanes` output channels of one packed group (OIHW weights `w` from
// its first), against every input channel: row (r, c) of the transform for
// input channel i goes to `at` (a `*mut f32`) + (r α + c) `stride` + i
// `width` floats. The arithmetic is the same (G g) Gᵀ sequence on every
// instruction set (no fused multiply-adds), so every CPU packs the same bits.
//
// Safety: those rows, for `lanes` floats each, lie inside one live buffer
// that nothing else touches meanwhile.
multiversion!(
    unsafe fn transform_group(
        g: &[[f64; 3]],
        w: &[f32],
        cin: usize,
        lanes: usize,
        width: usize,
        at: usize,
        stride: usize,
    ) {
        let alpha = g.len();
        for i in 0..cin {
            for side in 0..lanes.div_ceil(SIDE) {
                let n = (lanes - side * SIDE).min(SIDE);
                // k[s][l]: tap s of lane l.
                let mut k = [[0f64; SIDE]; 9];
                for l in 0..n {
                    let taps = &w[((side * SIDE + l) * cin + i) * 9..][..9];
                    for (s, &t) in taps.iter().enumerate() {
                        k[s][l] = t as f64;
                    }
                }
                // gk[r][c][l]: (G g)[r][c] of lane l.
                let mut gk = [[[0f64; SIDE]; 3]; MAX_ALPHA];
                for (gr, row) in g.iter().zip(&mut gk) {
                    for (c, out) in row.iter_mut().enumerate() {
                        for (l, o) in out.iter_mut().enumerate() {
                            *o = gr[0] * k[c][l] + gr[1] * k[3 + c][l] + gr[2] * k[6 + c][l];
                        }
                    }
                }
                for (r, row) in gk.iter().take(alpha).enumerate() {
                    for (c, gc) in g.iter().enumerate() {
                        let mut v = [0f32; SIDE];
                        for (l, v) in v.iter_mut().enumerate() {
                            *v = (row[0][l] * gc[0] + row[1][l] * gc[1] + row[2][l] * gc[2]) as f32;
                        }
                        let start = (r * alpha + c) * stride + i * width + side * SIDE;
                        // SAFETY: the caller's rows.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                v.as_ptr(),
                                (at as *mut f32).add(start),
                                n,
                            )
                        };
                    }
                }
            }
        }
    }
);
