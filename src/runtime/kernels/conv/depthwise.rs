//! Depthwise 2-D convolution (one filter per channel) from NCHW{x_cb}c data
//! into NCHW{y_cb}c data, the two blocks equal or not, with the same fused
//! epilogue as the dense convolution (bias with batch norm folded in, residual
//! add, relu/clip); and its generalization to narrow groups.
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
//! runs too). Work is split by bands of output rows of each slice, so every
//! thread stays busy whatever the number of blocks; a band's border columns
//! run as tiles down the column.
//!
//! A grouped convolution whose groups are narrower than a vector (ResNeXt's 4
//! and 8 channels per group, RegNet's 16) runs the same way: output channel
//! `c` reads the `G` input channels of its group, which lie in the same vector
//! as `c` does, so each input vector is loaded once per tap and lane `j` of
//! every group spread over its group (`Vector::spread`) for the `j`-th FMA.
//! Every lane does useful work, where the dense kernel would broadcast one
//! input channel into a vector of mostly idle lanes.
//!
//! With both operands in NCHW a slice is one channel, one lane: such a
//! convolution runs with output columns in the lanes instead
//! (`pixel_lanes.rs`), where its stride along the rows lets it, unless its
//! outputs go out as bytes.
//!
//! Where the input lies on a grid of bytes, the weights on per-channel grids
//! of signed bytes and the outputs are rounded onto a grid of bytes last, the
//! sums are those of the integers, requantized as onnxruntime's and
//! XNNPACK's integer kernels requantize them (`integer_sums`): the float sum
//! of the input values times the integer weights is within a quarter of the
//! input's step of a whole number of steps, which rounding recovers; the
//! float product of the values put a tie or a near one a step away (a few
//! outputs in 10^5 of a full-integer MobileNetV2's depthwise layers, which
//! every later layer spreads). Where the float sum's error could reach a
//! quarter step (5x5 windows of full-range weights), each input value is
//! rounded to its integer before its multiply-add instead, and the sum is
//! exact (a full-integer EfficientNetB0's 5x5 layers were 96% exact in
//! float).
//!
//! Outputs rounded onto a grid of bytes last may go out as the next integer
//! convolution's staged input (`write_staged`), rounded as its staging
//! would round the floats: a quarter of the bytes written, and the reader
//! skips its staging pass. (Reading bytes too was tried three ways, each
//! paying at 2 threads and losing at 1 on MobileNetV2: widened into floats
//! a band of rows at a time; widened in the tile as each tap is read (a
//! 112x112x96 stride-2 depthwise step 0.137 -> 0.153-0.175 ms, the whole
//! model 4.39 -> 4.51 ms at 1 thread, 2.64 -> 2.55 ms at 2); and each
//! kernel row widened once into L1 per tile (0.135 -> 0.275 ms). The
//! integer convolution before gains nothing from writing bytes: its
//! epilogue, not its stores, bounds it (0.52 ms writing floats, 0.57 ms
//! writing bytes).)

use super::direct::{balanced_tile, fill_channel_pad, valid_taps, ConvGeom};
use super::int8::{as_bytes_mut, integer_bias, IntegerWeights, Scaling, StagedInput};
use super::pixel_lanes::PixelLanes;
use super::tile::{Activate, ChannelParams, Epilogue};
use crate::core::par;
use crate::fusion::Activation;
use crate::runtime::kernels::quantized::Grid;
use crate::runtime::kernels::simd::{
    run_vectorized, store_bytes_part, Isa, Lanes, LookUpTable, Vector, VectorKernel,
};

/// Output pixels one register tile holds.
const DW_TILE: usize = 8;

/// Group widths the kernel is instantiated for.
const GROUP_WIDTHS: [usize; 5] = [1, 2, 4, 8, 16];

/// A depthwise (or narrow-group) convolution ready to run: weights packed per
/// channel slice.
pub struct Depthwise {
    /// Shapes and window.
    pub geom: ConvGeom,
    /// Channels of each convolution group, in and out: 1 for depthwise.
    group: usize,
    /// Channels of one slice: `gcd(x_cb, y_cb)`.
    slice: usize,
    lanes: Lanes,
    /// [slices][kh][kw][group][slice]: lane `c` of row `j` is the weight
    /// output channel `c` gives input channel `j` of its group; zero in
    /// padding channels.
    w: Vec<f32>,
    /// [slices][slice] of biases, then as many of PRelu slopes if the epilogue
    /// has them.
    params: Vec<f32>,
    epilogue: Epilogue,
    /// What the output's padding channels must hold, if any are there.
    pad_fill: Option<f32>,
    /// The outputs as the next convolution's staged bytes (`write_staged`).
    output_bytes: Option<StagedInput>,
    /// The kernel that runs it instead, in NCHW: output columns in the lanes
    /// (`w` kept for `write_staged`, which only the channel lanes serve).
    planar: Option<Box<PixelLanes>>,
    /// The sums of integers requantized, where `integer_sums` made them so.
    integers: Option<IntegerSums>,
}

/// A depthwise convolution's integer sums and their requantization: `w`
/// holds the weights' integers and the biases are 0, so that a tile's sum
/// is its input values times the integers. The requantized integers are
/// the outputs, rounded and clamped already: the epilogue's clamp and
/// rounding are not applied again.
#[derive(Clone, Debug)]
struct IntegerSums {
    /// 1 / the input's step: a value, or a sum of values times integers,
    /// times it is within a quarter of its integer.
    inverse_step: f32,
    /// Whether each input value is rounded to its integer before its
    /// multiply-add (the sum then exact), not the sum after: where the
    /// sum's float error could reach a quarter step (5x5 windows of
    /// full-range weights, as EfficientNet's and MobileNetV3's are).
    taps_rounded: bool,
    /// [slices][slice]: each channel's bias, an integer of its sums' grid.
    biases: Vec<f32>,
    /// [slices][slice]: each channel's multiplier, the input's step times
    /// the weights' over the output's, in f32 as the integer convolution's.
    multipliers: Vec<f32>,
    /// The output's clamp, integers less the zero point.
    lo: f32,
    hi: f32,
    /// The output's step.
    step: f32,
    /// What is stored for each output instead of its value: a table's
    /// result at its integer less the grid's least (`fuse_table`), with
    /// the grid's zero point less its least, which takes an integer less
    /// the zero point there.
    table: Option<(LookUpTable, f32)>,
}

/// Where a tile finds its vector of channels' requantization.
#[derive(Clone, Copy)]
struct Requantize<'a> {
    sums: &'a IntegerSums,
    /// The vector's first channel in the slice-packed arrays.
    at: usize,
}

impl Requantize<'_> {
    /// The requantization's constants as vectors, made once per tile: the
    /// stores through the output pointer could alias its arrays, so loads
    /// in the pixel loop would be made again for every pixel.
    #[inline(always)]
    unsafe fn vectors<V: Vector>(self) -> Requantizing<V> {
        let s = self.sums;
        let (table, zero_byte) = match &s.table {
            Some((results, zero_byte)) => (Some(V::hold(results)), *zero_byte),
            None => (None, 0.0),
        };
        Requantizing {
            inverse_step: V::splat(s.inverse_step),
            bias: V::load(s.biases.as_ptr().add(self.at)),
            multiplier: V::load(s.multipliers.as_ptr().add(self.at)),
            lo: V::splat(s.lo),
            hi: V::splat(s.hi),
            step: V::splat(s.step),
            table,
            zero_byte: V::splat(zero_byte),
        }
    }
}

/// `Requantize`'s constants for one vector of channels.
#[derive(Clone, Copy)]
struct Requantizing<V: Vector> {
    inverse_step: V,
    bias: V,
    multiplier: V,
    lo: V,
    hi: V,
    step: V,
    /// `IntegerSums::table`'s results, held, and zero point less least.
    table: Option<V::Held>,
    zero_byte: V,
}

impl<V: Vector> Requantizing<V> {
    /// The integer sums `sum` with the bias, multiplied, rounded half to
    /// even and clamped: the output's integers less its zero point.
    #[inline(always)]
    unsafe fn integers(self, sum: V) -> V {
        let v = V::mul(V::add(sum, self.bias), self.multiplier);
        V::clamp(V::round(v), self.lo, self.hi)
    }

    /// The floats stored for `integers` (less the zero point): their
    /// values, or the table's results at them.
    #[inline(always)]
    unsafe fn floats(self, integers: V) -> V {
        match self.table {
            None => V::mul(integers, self.step),
            Some(held) => V::look_up_held(held, V::add(integers, self.zero_byte)),
        }
    }
}

/// Per-channel values `per_channel` (the first `cin`) laid out as the
/// kernel's slices: `slices * slice` of them, padding channels 0.
fn sliced(per_channel: &[f32], cin: usize, slice: usize) -> Vec<f32> {
    let mut v = vec![0f32; cin.div_ceil(slice) * slice];
    v[..cin].copy_from_slice(&per_channel[..cin]);
    v
}

impl Depthwise {
    /// Whether the kernel computes `geom` with `isa`: depthwise, or groups of
    /// as many input as output channels, a power of two that divides the
    /// vectors the channel blocks allow.
    pub fn applies(geom: &ConvGeom, isa: Isa) -> bool {
        let g = geom;
        if g.groups == 0 || g.cin != g.cout || !g.cin.is_multiple_of(g.groups) {
            return false;
        }
        let group = g.cin / g.groups;
        let lanes = Lanes::for_block(isa, gcd(g.x_cb, g.y_cb)).count();
        GROUP_WIDTHS.contains(&group) && lanes.is_multiple_of(group)
    }

    /// `w` is logical [C, C / groups, kh, kw]; the input is blocked by
    /// `geom.x_cb`, the output by `geom.y_cb`. `applies` must hold.
    pub fn new(
        geom: ConvGeom,
        isa: Isa,
        w: &[f32],
        params: ChannelParams,
        epilogue: Epilogue,
        pad_fill: Option<f32>,
    ) -> Depthwise {
        debug_assert!(Self::applies(&geom, isa));
        let planar = PixelLanes::applies(&geom)
            .then(|| Box::new(PixelLanes::new(geom.clone(), isa, w, params, epilogue)));
        let group = geom.cin / geom.groups;
        let slice = gcd(geom.x_cb, geom.y_cb);
        let slices = geom.cin.div_ceil(slice);
        let (kh, kw) = geom.k;
        let mut packed = vec![0f32; slices * kh * kw * group * slice];
        let (params, epilogue) =
            params.pack(epilogue, |per_channel| sliced(per_channel, geom.cin, slice));
        for c in 0..geom.cin {
            for j in 0..group {
                for y in 0..kh {
                    for x in 0..kw {
                        let row = (((c / slice) * kh + y) * kw + x) * group + j;
                        packed[row * slice + c % slice] = w[((c * group + j) * kh + y) * kw + x];
                    }
                }
            }
        }
        let padded = !geom.cin.is_multiple_of(geom.y_cb);
        Depthwise {
            lanes: Lanes::for_block(isa, slice),
            group,
            slice,
            geom,
            w: packed,
            params,
            epilogue,
            pad_fill: pad_fill.filter(|_| padded),
            output_bytes: None,
            planar,
            integers: None,
        }
    }

    /// The convolution `new` makes (with `bias` and no PRelu), its sums computed as integers
    /// (`IntegerSums`) where its input lies on `grid`, its weights `w`
    /// (logical, as `new`'s) on per-channel grids of signed bytes and
    /// `bias` on their sums' grids, and `epilogue` ends in a rounding onto
    /// a grid of bytes. A sum's largest magnitude is the input's largest
    /// integer times the channel's weights' absolute sum; where `(taps + 2)
    /// * 2^-24` of it, the float sum's error, stays under a quarter step
    /// for every channel, the sums are rounded, else (up to 2^24, every
    /// window of up to 16x16 taps) each input value is. `None` otherwise.
    pub fn integer_sums(
        geom: ConvGeom,
        isa: Isa,
        grid: Grid,
        w: &[f32],
        bias: &[f32],
        epilogue: Epilogue,
        pad_fill: Option<f32>,
    ) -> Option<Depthwise> {
        let weights = IntegerWeights::recover(w, geom.cout)?;
        let Scaling::Requantized {
            grid: out, lo, hi, ..
        } = Scaling::of(&epilogue, false)
        else {
            return None;
        };
        if !out.fits_a_byte() || !grid.fits_a_byte() || bias.len() != geom.cout {
            return None;
        }
        let per = w.len() / geom.cout;
        let largest_input = (grid.zero_point - grid.min).max(grid.max - grid.zero_point);
        let (mut biases, mut multipliers) = (vec![0f32; geom.cout], vec![0f32; geom.cout]);
        let mut taps_rounded = false;
        for (o, q) in weights.q.chunks_exact(per).enumerate() {
            let largest_sum = largest_input * q.iter().map(|&v| f32::from(v).abs()).sum::<f32>();
            if largest_sum > (1 << 24) as f32 {
                return None;
            }
            taps_rounded |= (per + 2) as f32 * largest_sum > (1 << 22) as f32;
            let sum_step = grid.scale * weights.scale[o];
            biases[o] = integer_bias(bias[o], sum_step)? as f32;
            multipliers[o] = sum_step / out.scale;
        }
        let integers: Vec<f32> = weights.q.iter().map(|&v| f32::from(v)).collect();
        let zero = vec![0f32; geom.cout];
        let mut d = Depthwise::new(
            geom,
            isa,
            &integers,
            ChannelParams::bias_only(&zero),
            epilogue,
            pad_fill,
        );
        let (cin, slice) = (d.geom.cin, d.slice);
        // Only the channel lanes requantize.
        d.planar = None;
        d.integers = Some(IntegerSums {
            inverse_step: 1.0 / grid.scale,
            taps_rounded,
            biases: sliced(&biases, cin, slice),
            multipliers: sliced(&multipliers, cin, slice),
            lo,
            hi,
            step: out.scale,
            table: None,
        });
        Some(d)
    }

    /// Whether the sums are of integers (`integer_sums`).
    pub(in crate::runtime) fn sums_integers(&self) -> bool {
        self.integers.is_some()
    }

    /// Writes the outputs as `to`, the next convolution's staged input,
    /// when the epilogue rounds them onto its grid last and they are its
    /// input's shape; whether it will.
    pub(in crate::runtime) fn write_staged(&mut self, to: StagedInput) -> bool {
        let g = &self.geom;
        let looks_up = self.integers.as_ref().is_some_and(|s| s.table.is_some());
        let fits = !looks_up
            && self.output_grid() == Some(to.grid())
            && to.shape() == [g.n, g.cout, g.oh, g.ow];
        if fits {
            // Only the channel lanes write bytes.
            self.planar = None;
            self.output_bytes = Some(to);
            self.pad_fill = None;
        }
        fits
    }

    /// Stores, for each output of integer sums requantized onto `grid`,
    /// `results` at its integer less the grid's least, as floats: an
    /// elementwise chain of the outputs alone, looked up
    /// (`Elementwise::as_table`); whether it will. The padding gets the
    /// result at the value it held.
    pub(in crate::runtime) fn fuse_table(&mut self, grid: Grid, results: &LookUpTable) -> bool {
        let fits = self.output_bytes.is_none()
            && self.output_grid() == Some(grid)
            && grid.tabulates(results.results());
        let Some(sums) = self.integers.as_mut().filter(|s| fits && s.table.is_none()) else {
            return false;
        };
        sums.table = Some((results.clone(), grid.zero_point - grid.min));
        self.pad_fill = self.pad_fill.map(|v| grid.looked_up(results.results(), v));
        true
    }

    /// The grid the epilogue rounds the outputs onto last, if it does.
    fn output_grid(&self) -> Option<Grid> {
        match self.epilogue.act {
            Some(Activation::Unary(u)) if self.epilogue.slope_at.is_none() => {
                Grid::of(u).filter(Grid::fits_a_byte)
            }
            _ => None,
        }
    }

    /// Elements (f32) of the output slot where the outputs are bytes.
    pub(in crate::runtime) fn output_len(&self) -> Option<usize> {
        self.output_bytes.map(|to| to.bytes().div_ceil(4))
    }

    /// The packed weights every run reads.
    pub(in crate::runtime) fn weights(&self) -> &[f32] {
        match &self.planar {
            Some(p) => p.weights(),
            None => &self.w,
        }
    }

    /// Computes `y` from `x` (and the residual, laid out like `y`, if fused):
    /// floats in their layouts, or `y` the bytes `write_staged` set.
    pub fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32]) {
        let g = &self.geom;
        assert!(x.len() >= g.x_len() && y.len() >= self.output_len().unwrap_or(g.y_len()));
        assert!(residual.is_none_or(|r| r.len() >= g.y_len()));
        assert!(residual.is_none() || (self.output_bytes.is_none() && self.integers.is_none()));
        if let Some(planar) = &self.planar {
            return planar.run(x, residual, y);
        }
        if let Some(to) = self.output_bytes {
            to.fill_padding(as_bytes_mut(y));
        }
        // Bytes lie each pixel's channels side by side, every slice a few
        // of a line's: a band runs all slices of its rows, so that one
        // thread writes each line whole.
        let slices = g.cin.div_ceil(self.slice);
        let together = match self.output_bytes {
            None => 1,
            Some(_) => slices,
        };
        let images = g.n * slices / together;
        // Bands of up to a tile's rows, fewer when that leaves too few tasks
        // to keep every thread busy.
        let band =
            g.oh.div_ceil((par::threads() * 4).div_ceil(images))
                .clamp(1, DW_TILE);
        let bands = g.oh.div_ceil(band);
        // Each band writes only its slices' channels of its own output rows.
        super::for_each_piece(images * bands, x, residual, y, |task, x, res, y| {
            let image = task / bands * together;
            for image in image..image + together {
                let band = Band {
                    d: self,
                    image,
                    rows: task % bands * band..((task % bands + 1) * band).min(g.oh),
                    x,
                    res,
                    y,
                };
                // SAFETY: `lanes` comes from `Lanes::for_block`; the row's
                // reads and writes stay inside the buffers checked above.
                // Each group width is its own kernel: one function holding
                // them all took the compiler minutes to optimize.
                unsafe {
                    match self.group {
                        1 => run_vectorized(self.lanes, &InGroups::<1>(&band)),
                        2 => run_vectorized(self.lanes, &InGroups::<2>(&band)),
                        4 => run_vectorized(self.lanes, &InGroups::<4>(&band)),
                        8 => run_vectorized(self.lanes, &InGroups::<8>(&band)),
                        16 => run_vectorized(self.lanes, &InGroups::<16>(&band)),
                        _ => unreachable!("`applies` admits the GROUP_WIDTHS only"),
                    }
                    // The tiles stored floats clamped (integer sums: their
                    // outputs whole); the rest of the epilogue goes over
                    // them while they are in L1: each
                    // vector of the slice's channels, the band's pixels one
                    // after the other.
                    if self.output_bytes.is_none()
                        && self.integers.is_none()
                        && self.epilogue.activates()
                    {
                        let first =
                            band.plane(g.y_cb, g.oh * g.ow) + band.rows.start * g.ow * g.y_cb;
                        let c0 = band.item_and_channel().1;
                        for c in (0..self.slice).step_by(self.lanes.count()) {
                            let pass = Activate {
                                ep: self.epilogue,
                                at: y.add(first + c),
                                count: band.rows.len() * g.ow,
                                stride: g.y_cb,
                                bias: self.params.as_ptr().add(c0 + c),
                            };
                            run_vectorized(self.lanes, &pass);
                        }
                    }
                }
            }
        });
        if let Some(v) = self.pad_fill {
            fill_channel_pad(y, g.n, g.cin, g.y_cb, g.oh * g.ow, v);
        }
    }
}

/// Output rows of one channel slice of one batch item.
struct Band<'a> {
    d: &'a Depthwise,
    /// Batch item times slices plus slice.
    image: usize,
    rows: std::ops::Range<usize>,
    x: *const f32,
    res: Option<*const f32>,
    y: *mut f32,
}

impl Band<'_> {
    /// The batch item and the slice's first channel.
    fn item_and_channel(&self) -> (usize, usize) {
        let slices = self.d.geom.cin.div_ceil(self.d.slice);
        (self.image / slices, self.image % slices * self.d.slice)
    }

    /// Offset of the slice's first channel at pixel 0 in a plane of `pixels`
    /// pixels stored in channel blocks of `cb`.
    fn plane(&self, cb: usize, pixels: usize) -> usize {
        let (n, c0) = self.item_and_channel();
        let blocks = self.d.geom.cin.div_ceil(cb);
        (n * blocks + c0 / cb) * pixels * cb + c0 % cb
    }
}

/// Where one tile reads and writes, all offsets in elements (f32, or bytes
/// for byte outputs).
struct DwTile<'a> {
    /// Input at kernel tap (0, 0) of the tile's first pixel (perhaps outside
    /// the input: only taps inside it are read).
    x: *const f32,
    /// Packed weights of the slice, at this vector of channels.
    w: *const f32,
    /// Weight stride of one input channel of the group (the slice).
    w_j: usize,
    /// Kernel rows and columns inside the input for every pixel of the tile.
    kh: (usize, usize),
    kw: (usize, usize),
    /// Input strides: kernel row, kernel column, next pixel of the tile (the
    /// next column, or the next row for a tile down a column).
    x_kh: isize,
    x_kw: isize,
    x_pixel: isize,
    /// Weight stride of a kernel row (kw * group * slice) and column
    /// (group * slice).
    w_kh: usize,
    w_kw: usize,
    out: Dest,
    res: Option<*const f32>,
    /// Output stride of the next pixel of the tile.
    y_pixel: usize,
    /// The vector's channels' requantization, where the sums are integers.
    integers: Option<Requantize<'a>>,
}

/// Pixel 0 of a tile's vector of output channels.
#[derive(Clone, Copy)]
enum Dest {
    /// In the output's float layout.
    Floats(*mut f32),
    /// In the next convolution's staged bytes: the first `valid` lanes
    /// (the channels that exist) rounded onto `grid`.
    Bytes {
        at: *mut u8,
        valid: usize,
        onto: Onto,
    },
}

/// A grid's constants for rounding floats onto its bytes.
#[derive(Clone, Copy)]
struct Onto {
    scale: f32,
    /// `zero_point - min`: the byte of 0.
    shift: f32,
    /// `max - min`: the largest byte.
    top: f32,
}

impl Onto {
    fn of(grid: Grid) -> Onto {
        Onto {
            scale: grid.scale,
            shift: grid.zero_point - grid.min,
            top: grid.max - grid.min,
        }
    }

    /// The bytes of `v` (after the epilogue's clamp) on the grid: the
    /// QuantizeDequantize's `round(v / scale) + zero_point`, clamped, less
    /// `min`. NaN becomes byte 0, as the next convolution's staging makes it
    /// (`max` returns its second operand for it).
    #[inline(always)]
    unsafe fn bytes<V: Vector>(self, v: V) -> V {
        let q = V::add(
            V::round(V::div(v, V::splat(self.scale))),
            V::splat(self.shift),
        );
        V::min(V::max(q, V::splat(0.0)), V::splat(self.top))
    }
}

/// The band of a convolution in groups of `G` channels.
struct InGroups<'a, const G: usize>(&'a Band<'a>);

impl<const G: usize> VectorKernel for InGroups<'_, G> {
    /// Rows of tiles across the columns whose windows lie inside the input;
    /// the border columns, whose windows reach into the padding, in tiles
    /// down the column over the rows whose windows lie inside vertically (a
    /// tile of one pixel waits on the latency of its one accumulator: on a
    /// 14x14 plane with a 5x5 window, 4 of 14 columns are border); pixels
    /// on both borders alone.
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        // `applies` keeps a group within a vector: no wider group is compiled.
        if G > V::LANES {
            unreachable!("a group of {G} channels in vectors of {}", V::LANES);
        }
        let Self(band) = self;
        let d = band.d;
        let g = &d.geom;
        let (x_cb, y_cb, slice) = (g.x_cb, g.y_cb, d.slice);
        // The slice's first channel, in its block of each operand.
        let (n, c0) = band.item_and_channel();
        let (kh, kw) = g.k;
        let (sh, sw) = g.stride;
        let (dh, dw) = g.dilation;
        let (ph, pw) = g.pad;
        // Rows and columns before the image are only addressed, never read:
        // wrapping offsets until a tap lands inside.
        let x_plane = band.x.add(band.plane(x_cb, g.h * g.w));
        let (x_row, x_col) = ((g.w * x_cb) as isize, x_cb as isize);
        let at_input = |oh: usize, ow: usize| {
            let (ih, iw) = (
                (oh * sh) as isize - ph as isize,
                (ow * sw) as isize - pw as isize,
            );
            x_plane.wrapping_offset(ih * x_row + iw * x_col)
        };
        // The slice's output pixel (0, 0), and the strides of a column and
        // a row.
        let (y_first, y_col, y_row) = match d.output_bytes {
            None => (band.plane(y_cb, g.oh * g.ow), y_cb, g.ow * y_cb),
            Some(to) => (to.at(n, 0, 0) + c0, to.pixel(), to.cols() * to.pixel()),
        };
        let onto = d.output_bytes.map(|to| Onto::of(to.grid()));
        let range = |(lo, hi)| lo..hi;
        let (cols_inside, rows_inside) = (range(g.interior_columns()), range(g.interior_rows()));
        let border_cols = (0..cols_inside.start).chain(cols_inside.end..g.ow);
        let w_slice = d.w.as_ptr().add(c0 * kh * kw * G);
        let bias = d.params.as_ptr().add(c0);
        // Bytes take only the clamp (the rounding is their activation);
        // floats get the rest from `Activate`, after the band.
        let ep = d.epilogue.clamp_only();
        let mut t = DwTile {
            x: x_plane,
            w: w_slice,
            kh: (0, kh),
            kw: (0, kw),
            x_kh: dh as isize * x_row,
            x_kw: dw as isize * x_col,
            x_pixel: 0,
            w_j: slice,
            w_kh: kw * G * slice,
            w_kw: G * slice,
            out: Dest::Floats(band.y),
            res: band.res,
            y_pixel: 0,
            integers: None,
        };
        for c in (0..slice).step_by(V::LANES) {
            let b = bias.add(c);
            t.w = w_slice.add(c);
            t.integers = d
                .integers
                .as_ref()
                .map(|sums| Requantize { sums, at: c0 + c });
            // The channels of the vector that exist (the rest are padding).
            let valid = g.cin.saturating_sub(c0 + c).min(V::LANES);
            // Points the tile at output pixel (oh, ow). A closure of address
            // arithmetic only: one calling vector intrinsics is compiled
            // without the instruction set's features and calls each.
            let place = |t: &mut DwTile<'_>, oh: usize, ow: usize| {
                t.x = at_input(oh, ow).add(c);
                let at = y_first + oh * y_row + ow * y_col + c;
                t.out = match onto {
                    None => Dest::Floats(band.y.add(at)),
                    Some(onto) => Dest::Bytes {
                        at: band.y.cast::<u8>().add(at),
                        valid,
                        onto,
                    },
                };
                t.res = band.res.map(|r| r.add(at));
            };
            // Along each row: pixels a column apart.
            (t.x_pixel, t.y_pixel) = (sw as isize * x_col, y_col);
            for oh in band.rows.clone() {
                t.kh = valid_taps((oh * sh) as isize - ph as isize, dh, kh, g.h);
                t.kw = (0, kw);
                let mut ow = cols_inside.start;
                while ow < cols_inside.end {
                    let pixels = balanced_tile(cols_inside.end - ow, DW_TILE);
                    place(&mut t, oh, ow);
                    dw_tile_of::<V, G>(&t, pixels, b, ep);
                    ow += pixels;
                }
                if !rows_inside.contains(&oh) {
                    for ow in border_cols.clone() {
                        t.kw = valid_taps((ow * sw) as isize - pw as isize, dw, kw, g.w);
                        place(&mut t, oh, ow);
                        dw_tile::<V, 1, G>(&t, b, ep);
                    }
                }
            }
            // Down each border column: pixels a row apart.
            let rows = band.rows.start.max(rows_inside.start)..band.rows.end.min(rows_inside.end);
            if rows.is_empty() {
                continue;
            }
            (t.x_pixel, t.y_pixel) = (sh as isize * x_row, y_row);
            t.kh = (0, kh);
            for ow in border_cols.clone() {
                t.kw = valid_taps((ow * sw) as isize - pw as isize, dw, kw, g.w);
                place(&mut t, rows.start, ow);
                dw_tile_of::<V, G>(&t, rows.len(), b, ep);
            }
        }
    }
}

/// `dw_tile` of `pixels` (1 to `DW_TILE`) pixels.
#[inline(always)]
unsafe fn dw_tile_of<V: Vector, const G: usize>(
    t: &DwTile<'_>,
    pixels: usize,
    bias: *const f32,
    ep: Epilogue,
) {
    macro_rules! by_pixels {
        ($($n:literal)*) => {
            match pixels {
                $($n => dw_tile::<V, $n, G>(t, bias, ep),)*
                _ => unreachable!("a tile has 1..=DW_TILE pixels"),
            }
        };
    }
    by_pixels!(1 2 3 4 5 6 7 8);
}

/// `N` output pixels of one vector of channels in groups of `G`, stored as
/// floats or bytes, or requantized where the sums are integers. The choice
/// is made once per tile, each way with its own copy of the sums' loop: one
/// loop serving both keeps its accumulators in registers less well (the
/// float kernel ran 7-14% slower so).
#[inline(always)]
unsafe fn dw_tile<V: Vector, const N: usize, const G: usize>(
    t: &DwTile<'_>,
    bias: *const f32,
    ep: Epilogue,
) {
    if let Some(requantize) = t.integers {
        let r = requantize.vectors::<V>();
        let mut sums = match requantize.sums.taps_rounded {
            true => dw_sums::<V, N, G, true>(t, bias, r.inverse_step),
            false => dw_sums::<V, N, G, false>(t, bias, r.inverse_step),
        };
        if !requantize.sums.taps_rounded {
            for s in &mut sums {
                *s = V::round(V::mul(*s, r.inverse_step));
            }
        }
        for (p, sum) in sums.into_iter().enumerate() {
            let at = p * t.y_pixel;
            // Integers whole: no residual, clamp or rounding after them.
            let q = r.integers(sum);
            match t.out {
                Dest::Floats(out) => r.floats(q).store(out.add(at)),
                Dest::Bytes {
                    at: out,
                    valid,
                    onto,
                } => store_bytes_part(V::add(q, V::splat(onto.shift)), out.add(at), valid),
            }
        }
        return;
    }
    let acc = dw_sums::<V, N, G, false>(t, bias, V::splat(1.0));
    for (p, a) in acc.into_iter().enumerate() {
        let at = p * t.y_pixel;
        let v = match t.res {
            Some(r) => V::add(a, V::load(r.add(at))),
            None => a,
        };
        match t.out {
            Dest::Floats(out) => ep.apply(v, bias).store(out.add(at)),
            // `write_staged` took the epilogue's last step, the rounding,
            // for these bytes; only its clamp is left before it.
            Dest::Bytes {
                at: out,
                valid,
                onto,
            } => {
                let v = V::clamp(v, V::splat(ep.min), V::splat(ep.max));
                store_bytes_part(onto.bytes(v), out.add(at), valid);
            }
        }
    }
}

/// The sums of `N` output pixels of one vector of channels in groups of
/// `G`: accumulators in registers, one weight vector per tap and input
/// channel of the group, each input vector loaded (and for groups, spread)
/// into its FMA; with `ROUND`, first rounded to its integer, the value
/// times `inverse_step`.
#[inline(always)]
unsafe fn dw_sums<V: Vector, const N: usize, const G: usize, const ROUND: bool>(
    t: &DwTile<'_>,
    bias: *const f32,
    inverse_step: V,
) -> [V; N] {
    let mut acc = [V::load(bias); N];
    for ky in t.kh.0..t.kh.1 {
        for kx in t.kw.0..t.kw.1 {
            let w = t.w.add(ky * t.w_kh + kx * t.w_kw);
            let x =
                t.x.wrapping_offset(ky as isize * t.x_kh + kx as isize * t.x_kw);
            for j in 0..G {
                let wv = V::load(w.add(j * t.w_j));
                for (p, a) in acc.iter_mut().enumerate() {
                    let at = x.offset(p as isize * t.x_pixel);
                    // A group as wide as the vector reads one input for all
                    // lanes: a broadcast load, which leaves the shuffle unit
                    // that `spread` would occupy to the FMAs' neighbours.
                    let xv = match G == V::LANES {
                        true => V::splat(*at.add(j)),
                        false => V::spread::<G>(V::load(at), j),
                    };
                    let xv = match ROUND {
                        true => V::round(V::mul(xv, inverse_step)),
                        false => xv,
                    };
                    *a = V::fma(xv, wv, *a);
                }
            }
        }
    }
    acc
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
