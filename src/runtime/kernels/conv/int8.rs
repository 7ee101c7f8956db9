//! Quantized convolution with exact integer accumulation, as QLinearConv and
//! TFLite's int8 CONV_2D define it: an input whose values lie on one
//! quantization grid, weights on a grid per output channel, each output the
//! exact integer sum of products, scaled once.
//!
//! The input is staged once per run as unsigned bytes, its padding
//! materialized as the byte that stands for 0, so the tile reads no bounds.
//! The weights are packed as signed bytes, four input channels per 32-bit
//! lane, 32 output channels per block. A register tile of pixels times 16 or
//! 32 output channels accumulates in i32: `vpdpbusd` on AVX-512 VNNI (64
//! products per instruction, four times the multiply-adds of an f32 FMA),
//! plain integer arithmetic elsewhere. Where a QuantizeDequantize follows
//! (and no residual), the exact sums are requantized onto the output's grid
//! as the peers' integer kernels do (`Scaling::Requantized`); otherwise they
//! go through the float kernels' bias, residual and epilogue. Requantized
//! outputs that only the next integer convolution reads are written as its
//! staged input, bytes with their padding (`write_staged`), which it then
//! reads without staging (`read_staged`).

use super::direct::{balanced_tile, fill_channel_pad, ConvGeom, OutBlock};
use super::spec::ConvSpec;
use super::tile::{ChannelParams, Epilogue, TILE};
use crate::core::{par, PageBuf};
use crate::fusion::Activation;
use crate::graph::UnaryOp;
use crate::ops::DynamicQuantize;
use crate::runtime::kernels::quantized::{fitted_grid, Grid, QuantizedAdd, ToBytes};
use crate::runtime::kernels::simd::{
    amx, array_of, load_bytes_part, load_part, run_vectorized, store_bytes_part, store_part, Isa,
    Lanes, LookUpTable, Portable, Vector, VectorKernel, MAX_LANES,
};
#[cfg(target_arch = "x86_64")]
use crate::runtime::kernels::simd::{Ymm, Zmm};

/// Output channels of one packed block: two vectors of 16 i32 lanes.
const WIDTH: usize = 32;
/// Lanes of one i32 accumulator vector.
const LANES: usize = 16;
/// Packed weights up to this size are read for every output row; larger
/// ones once per block of output channels (ResNet50's 3x3 convolutions of
/// 7x7 and 14x14 pixels, 0.6-2.4 MB, were read from L3 once per row).
const PIXELS_OUTER_WEIGHT_BYTES: usize = 64 * 1024;
/// Bytes of input, output and fused operand a piece of pixels passes to
/// every block of output channels in turn (`QuantConv::run`).
const PIECE_BYTES: usize = 32 * 1024;
/// Weights off their grid by at most this share of the channel's largest
/// are on it: a grid recovered from the float values may be off the
/// quantizer's own scale by a few ulps.
const GRID_TOLERANCE: f32 = 1.0 / (1 << 18) as f32;

/// Convolution weights as integers: output channel `o`'s weights are
/// `q * scale[o]` for the signed bytes `q`.
#[derive(Clone, Debug)]
pub(in crate::runtime) struct IntegerWeights {
    /// Logical OIHW, as the float weights.
    pub(super) q: Vec<i8>,
    /// Per output channel.
    pub(super) scale: Vec<f32>,
}

impl IntegerWeights {
    /// The float weights `w` of `cout` output channels as integers, when
    /// every channel lies on a grid of signed bytes (how a per-channel or
    /// per-tensor symmetric quantization, or any zero point whose centered
    /// values fit, leaves them); `None` otherwise.
    pub(in crate::runtime) fn recover(w: &[f32], cout: usize) -> Option<IntegerWeights> {
        if cout == 0 || !w.len().is_multiple_of(cout) || !w.iter().all(|v| v.is_finite()) {
            return None;
        }
        let per = w.len() / cout;
        let mut q = vec![0i8; w.len()];
        let mut scale = vec![1f32; cout];
        for (o, channel) in w.chunks_exact(per).enumerate() {
            let largest = channel.iter().fold(0f32, |m, v| m.max(v.abs()));
            if largest == 0.0 {
                continue;
            }
            // Symmetric quantizers map the largest weight to 127 (or -128);
            // anything else is found by trying every step count, the
            // coarsest grid first (integral steps stay integral).
            let tolerance = largest * GRID_TOLERANCE;
            let steps = [127, 128].into_iter().chain(1..127);
            let step = steps
                .map(|k| largest / k as f32)
                .find(|&s| channel.iter().all(|&v| on_grid(v, s, tolerance).is_some()))?;
            let ints = &mut q[o * per..][..per];
            for (i, &v) in ints.iter_mut().zip(channel) {
                *i = on_grid(v, step, tolerance)?;
            }
            // The step by least squares over the channel: the quantizer's
            // own scale more closely than the largest weight over its count.
            let (wq, qq) = ints
                .iter()
                .zip(channel)
                .fold((0f64, 0f64), |(a, b), (&i, &v)| {
                    (a + v as f64 * i as f64, b + i as f64 * i as f64)
                });
            let fit = (wq / qq) as f32;
            // The quantizer's own step reproduces every weight as its f32
            // product (how dequantization computes them); the fit lies
            // within a few ulps of it. Requantizing as the peers do needs
            // that step, bit for bit.
            let exact = (0..=8u32)
                .flat_map(|k| [fit.to_bits() + k, fit.to_bits().saturating_sub(k)])
                .map(f32::from_bits)
                .find(|&s| {
                    ints.iter()
                        .zip(channel)
                        .all(|(&i, &v)| f32::from(i) * s == v)
                });
            scale[o] = exact.unwrap_or(fit);
        }
        Some(IntegerWeights { q, scale })
    }
}

/// The signed byte `q` with `q * step` within `tolerance` of `v`, if any.
fn on_grid(v: f32, step: f32, tolerance: f32) -> Option<i8> {
    let q = (v / step).round();
    ((-128.0..=127.0).contains(&q) && (q * step - v).abs() <= tolerance).then_some(q as i8)
}

/// Whether a convolution of this geometry may accumulate exactly in i32:
/// every sum of products of bytes stays below 2^31.
pub(in crate::runtime) fn sums_fit(g: &ConvGeom) -> bool {
    let terms = g.k.0 * g.k.1 * (g.cin / g.groups).next_multiple_of(4);
    terms * 255 * 128 < i32::MAX as usize
}

/// How the integer products are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dots {
    /// AMX tiles: 16 or 32 pixels times 16 or 32 channels per call, 64
    /// input bytes (16 lanes of four) per step, the packed weights' lanes
    /// padded to whole steps with zero weights.
    Amx,
    /// `vpdpbusd` (AVX-512 VNNI).
    Vnni,
    /// Plain integer arithmetic, on the vectors of the instruction set.
    Plain(Isa),
}

/// How the staged input is laid out and filled: `rows` x `cols` pixels per
/// batch item, `pixel` bytes each (every group's channels, each group's
/// padded to whole lanes of four).
struct Staging {
    rows: usize,
    cols: usize,
    pixel: usize,
    /// Where staged pixel (row, col) reads the input from.
    source: Source,
    /// The input channels in runs that lie side by side on both sides.
    runs: Vec<Run>,
}

/// Input channels whose values lie side by side in an input pixel's
/// storage (within a channel block) and whose bytes lie side by side in a
/// staged pixel (within a group).
struct Run {
    /// Offset of the first value from the pixel's first channel.
    elem: usize,
    /// Byte of the first channel in a staged pixel.
    byte: usize,
    len: usize,
}

impl Run {
    /// The runs of `cin` channels in blocks of `cb` of `plane` pixels,
    /// groups of `cin_g` channels staged `group_bytes` apart.
    fn all(cin: usize, cb: usize, plane: usize, cin_g: usize, group_bytes: usize) -> Vec<Run> {
        let mut runs: Vec<Run> = vec![];
        for c in 0..cin {
            let elem = (c / cb) * plane * cb + c % cb;
            let byte = (c / cin_g) * group_bytes + c % cin_g;
            // A run never crosses a channel block, even where a plane of one
            // pixel puts the next block right after it.
            let same_block = c % cb != 0;
            match runs.last_mut() {
                Some(r) if same_block && r.elem + r.len == elem && r.byte + r.len == byte => {
                    r.len += 1
                }
                _ => runs.push(Run { elem, byte, len: 1 }),
            }
        }
        runs
    }
}

/// Where staged pixels come from.
enum Source {
    /// The input with `top` rows and `left` columns of padding before it,
    /// and as many after as the window needs.
    Padded { top: usize, left: usize },
    /// A 1x1 window without padding: the pixels it reads (every `stride`-th),
    /// side by side in one row of `out` = (rows, columns) of output.
    Subsampled {
        out: (usize, usize),
        stride: (usize, usize),
    },
}

/// A quantized convolution ready to run.
pub struct QuantConv {
    /// Shapes and window as the tile runs them (a 1x1 window: one row).
    geom: ConvGeom,
    /// The geometry as the caller stores input and output.
    outer: ConvGeom,
    dots: Dots,
    /// The vectors the input is staged with.
    lanes: Lanes,
    grid: Grid,
    staging: Staging,
    blocks: Vec<OutBlock>,
    /// Per block, `side_by_side_runs` of its lane offsets.
    lane_runs: Vec<[u8; WIDTH]>,
    /// Lanes of four input bytes per group.
    quads: usize,
    /// Lanes of four weight bytes per tap: `quads`, padded for AMX.
    packed_quads: usize,
    /// Byte offsets of the window's taps from a pixel's first.
    taps: Vec<usize>,
    /// Per block `[tap][quad][WIDTH][4]` signed bytes, held in f32 storage.
    w: PageBuf,
    /// Per block and lane: the zero byte times the channel's weight sum,
    /// taken off each sum (the staged bytes are the integers plus it), less
    /// the bias where it is an integer of the sums (`Requantized`).
    zero_sums: Vec<i32>,
    /// Per block and lane: the input's step times the channel's (over the
    /// output's step where `Requantized`).
    scales: Vec<f32>,
    /// Bias per block and lane, then as many PRelu slopes if any.
    params: Vec<f32>,
    epilogue: Epilogue,
    scaling: Scaling,
    pad_fill: Option<f32>,
    /// The input slot holds the staged bytes, written by the convolution
    /// before (`write_staged`): nothing to stage.
    input_staged: bool,
    /// The fused add's other operand, read as the staged bytes of another
    /// convolution's input (`read_residual_staged`) instead of floats laid
    /// out like the output.
    residual_staged: Option<StagedInput>,
    /// Where the outputs go.
    output: Output,
    /// What is stored for each requantized output instead of its value: a
    /// table's result at its integer less the grid's least (`fuse_table`).
    table: Option<LookUpTable>,
    /// Where the input is quantized at every run (`ConvSpec::dynamic`):
    /// `grid`, `zero_sums` and `scales` are then made by each run.
    dynamic: Option<Box<DynamicInput>>,
}

/// What a convolution quantizing its own input makes its grid's constants
/// from, per block and lane.
struct DynamicInput {
    op: DynamicQuantize,
    /// The channel's weights' sum.
    weight_sums: Vec<i32>,
    /// The channel's weights' step.
    weight_steps: Vec<f32>,
}

/// The input's grid and what depends on it, per block and lane: the zero
/// byte times the weights' sum, and the grid's step times the weights'.
struct Constants<'a> {
    grid: Grid,
    zero_sums: &'a [i32],
    scales: &'a [f32],
}

/// Where a quantized convolution's outputs go.
#[derive(Clone, Debug, PartialEq)]
enum Output {
    /// Floats in the output's layout.
    Floats,
    /// The grid's bytes, as the next convolution stages its input.
    Staged(StagedInput),
}

/// A convolution's staged input as the convolution before it can write it
/// (the bytes `stage` would write from the floats): channel `c` of pixel
/// (`n`, `y`, `x`) at byte `((n * rows + top + y) * cols + left + x) *
/// pixel + c`, the `q - min` of its integer `q` on `grid`; every other byte
/// (padding rows and columns, spare channels) the grid's zero byte.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::runtime) struct StagedInput {
    grid: Grid,
    /// The input's batch, channels, height and width.
    shape: [usize; 4],
    rows: usize,
    cols: usize,
    top: usize,
    left: usize,
    pixel: usize,
    /// Bytes after the pixels that the reader's tiles may read (into
    /// pixels whose sums they drop), of any value.
    slack: usize,
}

impl StagedInput {
    /// Values of `shape` (batch, channels, height, width) on `grid` as
    /// bytes with nothing around them: pixel after pixel, each pixel's
    /// channels side by side.
    pub(in crate::runtime) fn compact(grid: Grid, shape: [usize; 4]) -> StagedInput {
        StagedInput {
            grid,
            shape,
            rows: shape[2],
            cols: shape[3],
            top: 0,
            left: 0,
            pixel: shape[1],
            slack: 0,
        }
    }

    /// The staged input both `self` and `other` read, when they stage the
    /// same bytes: the larger slack.
    pub(in crate::runtime) fn shared_with(&self, other: &StagedInput) -> Option<StagedInput> {
        let slack = self.slack.max(other.slack);
        let (a, b) = (
            StagedInput { slack, ..*self },
            StagedInput { slack, ..*other },
        );
        (a == b).then_some(a)
    }

    /// The bytes, with what the reader may read past the pixels.
    pub(super) fn bytes(&self) -> usize {
        self.shape[0] * self.rows * self.cols * self.pixel + self.slack
    }

    /// The grid the bytes are the integers of, less its `min`.
    pub(super) fn grid(&self) -> Grid {
        self.grid
    }

    /// The values' batch, channels, height and width.
    pub(super) fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Bytes from one pixel to the next in a row.
    pub(super) fn pixel(&self) -> usize {
        self.pixel
    }

    /// Pixels from one row to the next, padding included.
    pub(super) fn cols(&self) -> usize {
        self.cols
    }

    /// Where pixel (`n`, `y`, `x`) starts.
    pub(super) fn at(&self, n: usize, y: usize, x: usize) -> usize {
        ((n * self.rows + self.top + y) * self.cols + self.left + x) * self.pixel
    }

    /// Writes the zero byte everywhere but the pixels' channels.
    pub(super) fn fill_padding(&self, bytes: &mut [u8]) {
        let [n, c, h, w] = self.shape;
        let zero = self.grid.zero_byte();
        if self.pixel > c {
            return bytes.fill(zero);
        }
        let row = self.cols * self.pixel;
        for (r, staged) in bytes.chunks_exact_mut(row).enumerate().take(n * self.rows) {
            match (r % self.rows).checked_sub(self.top) {
                Some(y) if y < h => {
                    staged[..self.left * self.pixel].fill(zero);
                    staged[(self.left + w) * self.pixel..].fill(zero);
                }
                _ => staged.fill(zero),
            }
        }
    }
}

/// How a channel's integer sums become outputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Scaling {
    /// `sum * in_step * w_step + bias`, then the epilogue, in float.
    Float,
    /// The epilogue rounds onto an output grid of step `step` and nothing
    /// but the bias is added to the sums: requantized as onnxruntime's and
    /// XNNPACK's integer kernels do (and so bit for bit as they are). The sum
    /// with the bias, when that is an integer of the sum's grid, is
    /// multiplied in f32 by `in_step * w_step / step`, rounded half to even,
    /// clamped to `lo..=hi` (the grid's integers less its zero point, within
    /// the epilogue's clamp) and scaled back by `step` (or, written as the
    /// next convolution's staged input, shifted onto its bytes).
    ///
    /// With `add`, the requantized integers are then added to the residual,
    /// the other operand of a quantized add (on its own grid), as
    /// `QuantizedAdd` computes it from the integers; the flag says whether
    /// the convolution is the add's operand `a`.
    Requantized {
        grid: Grid,
        lo: f32,
        hi: f32,
        add: Option<(QuantizedAdd, bool)>,
    },
}

impl Scaling {
    /// The grid the outputs are rounded onto: the fused add's sum's where
    /// there is one; `None` for float outputs.
    fn grid(&self) -> Option<Grid> {
        match *self {
            Scaling::Requantized { grid, add, .. } => {
                Some(add.map_or(grid, |(add, _)| add.output_grid()))
            }
            Scaling::Float => None,
        }
    }

    /// The scaling of a kernel with `epilogue`, a residual or not.
    pub(super) fn of(epilogue: &Epilogue, residual: bool) -> Scaling {
        match epilogue.act {
            Some(Activation::Unary(UnaryOp::QuantizeDequantize {
                scale,
                zero_point,
                min,
                max,
            })) if !residual && epilogue.slope_at.is_none() && scale.is_finite() && scale > 0.0 => {
                let grid = Grid {
                    scale,
                    zero_point,
                    min,
                    max,
                };
                let (lo, hi) = grid.rounded_clamp(epilogue.min, epilogue.max);
                Scaling::Requantized {
                    grid,
                    lo: lo - zero_point,
                    hi: hi - zero_point,
                    add: None,
                }
            }
            _ => Scaling::Float,
        }
    }
}

/// `bias` as an integer of the grid of step `step` (how quantizers store a
/// quantized convolution's bias: i32 at the input's step times the
/// weights'), when it is one and small enough to add to any sum.
pub(super) fn integer_bias(bias: f32, step: f32) -> Option<i32> {
    let q = (f64::from(bias) / f64::from(step)).round();
    let on_grid = (q * f64::from(step) - f64::from(bias)).abs() <= f64::from(bias.abs()) * 1e-6;
    (q.abs() < f64::from(1 << 24) && on_grid).then_some(q as i32)
}

impl QuantConv {
    /// The kernel of convolution `spec` over an input on `grid`, with its
    /// weights as the integers `w`; `None` when the grid is not of bytes or
    /// the sums may overflow.
    pub(in crate::runtime) fn new(
        spec: &ConvSpec,
        grid: Grid,
        w: &IntegerWeights,
    ) -> Option<QuantConv> {
        QuantConv::with_tiles(spec, grid, w, amx::available())
    }

    /// As `new`, with AMX tiles used where `tiles` and worthwhile.
    pub(super) fn with_tiles(
        spec: &ConvSpec,
        grid: Grid,
        w: &IntegerWeights,
        tiles: bool,
    ) -> Option<QuantConv> {
        let ConvSpec {
            ref geom,
            isa,
            params,
            epilogue,
            residual,
            pad_fill,
            ..
        } = *spec;
        let scaling = Scaling::of(&epilogue, residual);
        // A grid fitted per run leaves no integer bias to requantize with.
        let requantized = scaling != Scaling::Float;
        if !grid.fits_a_byte()
            || !sums_fit(geom)
            || w.scale.len() != geom.cout
            || (spec.dynamic.is_some() && requantized)
        {
            return None;
        }
        let outer = geom.clone();
        let (cin_g, cout_g) = (geom.cin / geom.groups, geom.cout / geom.groups);
        let quads = cin_g.div_ceil(4);
        let dots = Dots::of(isa, tiles, quads, geom.k.0 * geom.k.1);
        let packed_quads = match dots {
            Dots::Amx => quads.next_multiple_of(AMX_QUADS),
            Dots::Vnni | Dots::Plain(_) => quads,
        };
        let pixel = geom.groups * quads * 4;
        let runs = Run::all(geom.cin, geom.x_cb, geom.h * geom.w, cin_g, quads * 4);
        // A 1x1 window reading no padding (at either end) reads the input's
        // pixels; any other window, the padded input.
        let (geom, rows, cols, source) = if geom.is_pointwise() {
            let plane = geom.as_plane();
            let out = (geom.oh, geom.ow);
            let source = Source::Subsampled {
                out,
                stride: geom.stride,
            };
            (plane, 1, out.0 * out.1, source)
        } else {
            let span = |k: usize, d: usize| (k - 1) * d + 1;
            let rows = (geom.h + geom.pad.0)
                .max((geom.oh - 1) * geom.stride.0 + span(geom.k.0, geom.dilation.0));
            let cols = (geom.w + geom.pad.1)
                .max((geom.ow - 1) * geom.stride.1 + span(geom.k.1, geom.dilation.1));
            let source = Source::Padded {
                top: geom.pad.0,
                left: geom.pad.1,
            };
            (geom.clone(), rows, cols, source)
        };
        let taps = (0..geom.k.0)
            .flat_map(|ky| (0..geom.k.1).map(move |kx| (ky, kx)))
            .map(|(ky, kx)| (ky * geom.dilation.0 * cols + kx * geom.dilation.1) * pixel)
            .collect();
        let blocks: Vec<OutBlock> = (0..geom.groups)
            .flat_map(|grp| (0..cout_g).step_by(WIDTH).map(move |c| (grp, c)))
            .map(|(grp, c)| {
                let first = grp * cout_g + c;
                let channels = WIDTH.min(cout_g - c);
                let base = geom.y_chan(first) as isize;
                let offsets: Vec<isize> = (first..first + channels)
                    .map(|c| geom.y_chan(c) as isize - base)
                    .collect();
                let side_by_side = offsets.iter().enumerate().all(|(l, &o)| o == l as isize);
                OutBlock {
                    first,
                    channels,
                    input: grp * cin_g,
                    lane_offsets: (!side_by_side).then_some(offsets),
                }
            })
            .collect();
        let taps_n = geom.k.0 * geom.k.1;
        let per_block = taps_n * packed_quads * WIDTH * 4;
        let mut packed = PageBuf::zeroed((blocks.len() * per_block).div_ceil(4));
        let bytes = as_bytes_mut(&mut packed);
        let mut zero_sums = vec![0i32; blocks.len() * WIDTH];
        let mut scales = vec![0f32; blocks.len() * WIDTH];
        let zero = i32::from(grid.zero_byte());
        let mut weight_sums = vec![0i32; blocks.len() * WIDTH];
        let mut weight_steps = vec![0f32; blocks.len() * WIDTH];
        let mut bias = params.bias.to_vec();
        for (b, block) in blocks.iter().enumerate() {
            for l in 0..block.channels {
                let o = block.first + l;
                let mut sum = 0i32;
                for i in 0..cin_g {
                    for t in 0..taps_n {
                        let q = w.q[(o * cin_g + i) * taps_n + t];
                        let at =
                            b * per_block + ((t * packed_quads + i / 4) * WIDTH + l) * 4 + i % 4;
                        bytes[at] = q as u8;
                        sum += i32::from(q);
                    }
                }
                let sum_step = grid.scale * w.scale[o];
                let mut zero_sum = zero * sum;
                scales[b * WIDTH + l] = match scaling {
                    Scaling::Float => sum_step,
                    Scaling::Requantized { grid: out, .. } => {
                        match integer_bias(bias[o], sum_step) {
                            Some(q) => {
                                zero_sum -= q;
                                bias[o] = 0.0;
                            }
                            None => bias[o] /= out.scale,
                        }
                        sum_step / out.scale
                    }
                };
                zero_sums[b * WIDTH + l] = zero_sum;
                weight_sums[b * WIDTH + l] = sum;
                weight_steps[b * WIDTH + l] = w.scale[o];
            }
        }
        let dynamic = spec.dynamic.map(|op| {
            Box::new(DynamicInput {
                op,
                weight_sums,
                weight_steps,
            })
        });
        let params = ChannelParams {
            bias: &bias,
            ..params
        };
        let (params, epilogue) = params.pack(epilogue, |per_channel| {
            OutBlock::lanes_of(&blocks, WIDTH, per_channel)
        });
        let padded = !outer.cout.is_multiple_of(outer.y_cb);
        let lane_runs = blocks
            .iter()
            .map(|b| side_by_side_runs(b.lane_offsets.as_deref().unwrap_or(&[])))
            .collect();
        Some(QuantConv {
            geom,
            dots,
            lanes: Lanes::for_block(isa, MAX_LANES),
            grid,
            staging: Staging {
                rows,
                cols,
                pixel,
                source,
                runs,
            },
            outer,
            blocks,
            lane_runs,
            quads,
            packed_quads,
            taps,
            w: packed,
            zero_sums,
            scales,
            params,
            epilogue,
            scaling,
            pad_fill: pad_fill.filter(|_| padded),
            input_staged: false,
            residual_staged: None,
            output: Output::Floats,
            table: None,
            dynamic,
        })
    }

    /// How this convolution stages its input, for the convolution before it
    /// to write: `None` where its staged pixels are not the input's pixels
    /// in order (a strided 1x1 window) or its channels not the bytes in
    /// order (groups of channels padded to lanes of four).
    pub(in crate::runtime) fn staged_input(&self) -> Option<StagedInput> {
        // Nothing before writes bytes on a grid fitted per run.
        if self.dynamic.is_some() {
            return None;
        }
        let (o, s) = (&self.outer, &self.staging);
        let channels_in_order = o.groups == 1 || (o.cin / o.groups).is_multiple_of(4);
        let (rows, cols, top, left) = match s.source {
            Source::Padded { top, left } => (s.rows, s.cols, top, left),
            Source::Subsampled { stride: (1, 1), .. } => (o.h, o.w, 0, 0),
            Source::Subsampled { .. } => return None,
        };
        channels_in_order.then_some(StagedInput {
            grid: self.grid,
            shape: [o.n, o.cin, o.h, o.w],
            rows,
            cols,
            top,
            left,
            pixel: s.pixel,
            slack: self.read_past_pixels(),
        })
    }

    /// Writes the outputs as `to`, the next convolution's staged input,
    /// when they are rounded onto its grid and are its input's shape (and
    /// a fused add reads its operand as bytes, `read_residual_staged`);
    /// whether it will.
    pub(in crate::runtime) fn write_staged(&mut self, to: StagedInput) -> bool {
        let o = &self.outer;
        let fits = self.table.is_none()
            && match self.scaling {
                // A fused add's operand is read as floats laid out like the
                // output, or as bytes: only the second go with byte outputs.
                Scaling::Requantized { add: Some(_), .. } if self.residual_staged.is_none() => {
                    false
                }
                Scaling::Requantized { .. } => {
                    self.scaling.grid() == Some(to.grid) && to.shape == [o.n, o.cout, o.oh, o.ow]
                }
                Scaling::Float => false,
            };
        if fits {
            self.output = Output::Staged(to);
            self.pad_fill = None;
        }
        fits
    }

    /// Adds the requantized outputs to the other operand of `add` (read as
    /// the residual) when they are its operand `a` (where `first`, else
    /// `b`): when they lie on that operand's grid, go out as floats and
    /// fill whole channel blocks (no padding channels to fill); whether
    /// they will.
    pub(in crate::runtime) fn fuse_add(&mut self, add: QuantizedAdd, first: bool) -> bool {
        let o = &self.outer;
        let whole_blocks = o.cout.is_multiple_of(o.y_cb);
        let floats = self.output == Output::Floats && self.table.is_none();
        match &mut self.scaling {
            Scaling::Requantized {
                grid, add: fused, ..
            } if fused.is_none() && *grid == add.operand_grid(first) && whole_blocks && floats => {
                *fused = Some((add, first));
                true
            }
            _ => false,
        }
    }

    /// Its outputs as compact bytes (`StagedInput::compact`), for readers
    /// that take any staging of them (fused adds); `None` where they are
    /// not rounded onto a grid.
    pub(in crate::runtime) fn compact_output(&self) -> Option<StagedInput> {
        let o = &self.outer;
        let grid = self.scaling.grid().filter(|_| self.table.is_none())?;
        Some(StagedInput::compact(grid, [o.n, o.cout, o.oh, o.ow]))
    }

    /// Stores, for each output requantized onto `grid` (with no fused add),
    /// `results` at its integer less the grid's least, as floats in the
    /// output's layout: an elementwise chain of the outputs alone, looked
    /// up (`Elementwise::as_table`); whether it will. The padding gets the
    /// result at the value it held.
    pub(in crate::runtime) fn fuse_table(&mut self, grid: Grid, results: &LookUpTable) -> bool {
        let fits = match self.scaling {
            Scaling::Requantized { grid: g, add, .. } => g == grid && add.is_none(),
            Scaling::Float => false,
        };
        let free = self.output == Output::Floats && self.table.is_none();
        if !fits || !free || !grid.tabulates(results.results()) {
            return false;
        }
        self.pad_fill = self.pad_fill.map(|v| grid.looked_up(results.results(), v));
        self.table = Some(results.clone());
        true
    }

    /// Whether it quantizes its input itself, onto a grid fitted at every
    /// run (`ConvSpec::dynamic`): it then reads the values before that
    /// quantization.
    pub(in crate::runtime) fn quantizes_input(&self) -> bool {
        self.dynamic.is_some()
    }

    /// Reads the input as the staged bytes the convolution before writes.
    pub(in crate::runtime) fn read_staged(&mut self) {
        self.input_staged = true;
    }

    /// Reads the fused add's other operand as `from`, the staged input of
    /// another convolution, when it is on the add's grid for it and of the
    /// output's shape; whether it will.
    pub(in crate::runtime) fn read_residual_staged(&mut self, from: StagedInput) -> bool {
        let fits = self.residual_fits(&from);
        if fits {
            self.residual_staged = Some(from);
        }
        fits
    }

    /// Whether `read_residual_staged(from)` would.
    pub(in crate::runtime) fn residual_fits(&self, from: &StagedInput) -> bool {
        let o = &self.outer;
        match self.scaling {
            Scaling::Requantized {
                add: Some((add, first)),
                ..
            } => from.grid == add.operand_grid(!first) && from.shape == [o.n, o.cout, o.oh, o.ow],
            Scaling::Requantized { add: None, .. } | Scaling::Float => false,
        }
    }

    /// Elements (f32) of the output slot where the outputs are the next
    /// convolution's staged bytes.
    pub(in crate::runtime) fn output_len(&self) -> Option<usize> {
        match &self.output {
            Output::Staged(to) => Some(to.bytes().div_ceil(4)),
            Output::Floats => None,
        }
    }

    /// The packed weights every run reads.
    pub(in crate::runtime) fn weights(&self) -> &[f32] {
        &self.w
    }

    /// Elements (f32) of working memory `run` needs: the staged bytes,
    /// unless the input holds them.
    pub fn scratch_len(&self) -> usize {
        let staged = match self.input_staged {
            true => 0,
            false => self.staged_bytes().div_ceil(4),
        };
        self.constants_len() + staged
    }

    /// Elements of working memory for the grid's constants, where each run
    /// makes them (`zero_sums` then `scales`).
    fn constants_len(&self) -> usize {
        match self.dynamic {
            Some(_) => 2 * self.zero_sums.len(),
            None => 0,
        }
    }

    /// The input's grid and its constants: those made at compile time, or,
    /// where the convolution quantizes its input, those of the grid fitted
    /// to `x`, made in `scratch` (`constants_len` elements).
    fn constants<'a>(&'a self, x: &[f32], scratch: &'a mut [f32]) -> Constants<'a> {
        let Some(d) = &self.dynamic else {
            return Constants {
                grid: self.grid,
                zero_sums: &self.zero_sums,
                scales: &self.scales,
            };
        };
        let grid = fitted_grid(&d.op, &x[..self.outer.x_len()], self.lanes);
        let zero = i32::from(grid.zero_byte());
        let (zero_sums, scales) = scratch.split_at_mut(self.zero_sums.len());
        for (to, &sum) in zero_sums.iter_mut().zip(&d.weight_sums) {
            *to = f32::from_bits((zero * sum) as u32);
        }
        for (to, &step) in scales.iter_mut().zip(&d.weight_steps) {
            *to = grid.scale * step;
        }
        // SAFETY: i32 and f32 have the same size and alignment, and every
        // bit pattern is an i32.
        let zero_sums = unsafe {
            std::slice::from_raw_parts(zero_sums.as_ptr().cast::<i32>(), zero_sums.len())
        };
        Constants {
            grid,
            zero_sums,
            scales,
        }
    }

    /// Bytes of the staged input, with what the tiles read past its pixels.
    fn staged_bytes(&self) -> usize {
        self.pixel_bytes() + self.read_past_pixels()
    }

    fn pixel_bytes(&self) -> usize {
        let s = &self.staging;
        self.geom.n * s.rows * s.cols * s.pixel
    }

    /// Bytes the tiles may read past the last staged pixel: AMX reads 32
    /// pixels where fewer are left in a row, and whole steps of 16 lanes.
    fn read_past_pixels(&self) -> usize {
        match self.dots {
            Dots::Amx => AMX_PIXELS * self.geom.stride.1 * self.staging.pixel + AMX_QUADS * 4,
            Dots::Vnni | Dots::Plain(_) => 0,
        }
    }

    /// Whether the tiles run flat rows (`flat_rows`).
    #[cfg(test)]
    pub(super) fn runs_flat(&self) -> bool {
        self.flat_cols().is_some()
    }

    /// Staged pixels per row where the tiles run each batch item's output
    /// rows as one flat row over the staged rows (`flat_rows`).
    fn flat_cols(&self) -> Option<usize> {
        flat_rows(&self.geom, self.dots).then_some(self.staging.cols)
    }

    /// The rows the tiles run and their width: each output row, or each
    /// batch item's rows as one flat row (`flat_cols`).
    fn tile_rows(&self) -> (usize, usize) {
        let g = &self.geom;
        match self.flat_cols() {
            Some(cols) => (g.n, (g.oh - 1) * cols + g.ow),
            None => (g.n * g.oh, g.ow),
        }
    }

    /// Computes `y` from `x` (and the residual, laid out like `y`, if fused);
    /// `scratch` holds at least `scratch_len()` elements.
    pub fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32], scratch: &mut [f32]) {
        let g = &self.geom;
        let y_len = self.output_len().unwrap_or(self.outer.y_len());
        assert!(y.len() >= y_len && scratch.len() >= self.scratch_len());
        let residual_len = match &self.residual_staged {
            Some(from) => from.bytes().div_ceil(4),
            None => self.outer.y_len(),
        };
        assert!(residual.is_none_or(|r| r.len() >= residual_len));
        let adds = matches!(self.scaling, Scaling::Requantized { add: Some(_), .. });
        assert!(residual.is_some() || !adds, "a fused add reads its operand");
        let (constants, scratch) = scratch.split_at_mut(self.constants_len());
        let constants = self.constants(x, constants);
        let staged = match self.input_staged {
            true => &as_bytes(x)[..self.staged_bytes()],
            false => {
                assert!(x.len() >= self.outer.x_len());
                let staged = &mut as_bytes_mut(scratch)[..self.staged_bytes()];
                self.stage(x, &constants.grid, &mut staged[..self.pixel_bytes()]);
                staged
            }
        };
        if let Output::Staged(to) = &self.output {
            to.fill_padding(as_bytes_mut(y));
        }
        let staged = staged.as_ptr() as usize;
        let blocks = self.blocks.len();
        let (rows, width) = self.tile_rows();
        let step = match self.dots {
            Dots::Amx => AMX_PIXELS,
            Dots::Vnni | Dots::Plain(_) => TILE,
        };
        let tiles = width.div_ceil(step);
        let cuts = (par::threads() * 8)
            .div_ceil(rows * blocks)
            .clamp(1, tiles.max(1));
        let mut span = tiles.div_ceil(cuts) * step;
        // Small weights stay in L2 whatever the order: consecutive pieces
        // then cover every block of the same pixels, whose staged bytes stay
        // in L1. Larger weights would be read from L3 for every row; there
        // consecutive pieces cover every pixel of one block instead.
        let pixels_outer = self.w.len() * 4 <= PIXELS_OUTER_WEIGHT_BYTES;
        if pixels_outer {
            // A piece's staged bytes (input, and outputs and fused operand
            // where bytes) stay in L1 while every block reads and writes
            // them: they keep a pixel's channels side by side, so each block
            // reads and writes a few bytes of every pixel's line (a 1x1
            // window runs its whole plane as one row: 3136 pixels). Float
            // outputs lie block after block.
            let output = usize::from(self.output != Output::Floats);
            let operand = usize::from(self.residual_staged.is_some());
            let per_pixel = self.staging.pixel + g.cout * (output + operand);
            span = span.min((PIECE_BYTES / per_pixel).max(step) / step * step);
        }
        let cuts = width.div_ceil(span);
        let pieces = rows * cuts;
        super::for_each_piece(pieces * blocks, x, residual, y, |i, _, res, y| {
            let (piece, b) = match pixels_outer {
                true => (i / blocks, i % blocks),
                false => (i % pieces, i / pieces),
            };
            let (row, cut) = (piece / cuts, piece % cuts);
            let cols = cut * span..((cut + 1) * span).min(width);
            // SAFETY: the staged bytes, residual and output were checked to
            // hold the whole of their tensors.
            unsafe { self.row(row, b, cols, staged as *const u8, res, y, &constants) }
        });
        if let Some(v) = self.pad_fill {
            let o = &self.outer;
            fill_channel_pad(y, o.n, o.cout, o.y_cb, o.oh * o.ow, v);
        }
    }

    /// Writes the input as bytes on `grid` (`q - min` for each value `(q -
    /// zero_point) * scale`), padding and spare channels as the zero byte.
    fn stage(&self, x: &[f32], grid: &Grid, staged: &mut [u8]) {
        let row_bytes = self.staging.cols * self.staging.pixel;
        if row_bytes == 0 {
            return;
        }
        par::for_each_chunk_mut(staged, row_bytes, |r, row| {
            row.fill(grid.zero_byte());
            let kernel = StageRow {
                conv: self,
                grid,
                x,
                row: r,
                bytes: row.as_mut_ptr(),
            };
            // SAFETY: `lanes` came from `Lanes::for_block`; `run` checked
            // that `x` holds the whole input, and `bytes` is a staged row.
            unsafe { run_vectorized(self.lanes, &kernel) }
        });
    }

    /// Output columns `cols` of output row `r` (batch item and row) of block
    /// `b`, with the input grid's `constants`.
    ///
    /// # Safety
    /// `x` holds the staged input, `res` and `y` the whole residual and output.
    #[allow(clippy::too_many_arguments)]
    unsafe fn row(
        &self,
        r: usize,
        b: usize,
        cols: std::ops::Range<usize>,
        x: *const u8,
        res: Option<*const f32>,
        y: *mut f32,
        constants: &Constants,
    ) {
        let g = &self.geom;
        let s = &self.staging;
        // A flat row's position `j` is output pixel (`j / period`, `j %
        // period`), valid where that column is within the row.
        let (n, oy, period) = match self.flat_cols() {
            Some(cols) => (r, 0, cols),
            None => (r / g.oh, r % g.oh, usize::MAX),
        };
        let block = &self.blocks[b];
        // The group's bytes in a staged pixel: `quads` lanes of four per group.
        let group_byte = block.input / (g.cin / g.groups) * self.quads * 4;
        let x_row = (n * s.rows + oy * g.stride.0) * s.cols * s.pixel + group_byte;
        let x_pixel = g.stride.1 * s.pixel;
        let per_block = self.taps.len() * self.packed_quads * WIDTH * 4;
        let w = as_bytes(&self.w).as_ptr().add(b * per_block).cast::<i8>();
        #[cfg(target_arch = "x86_64")]
        let _tiles = (self.dots == Dots::Amx).then(|| amx::Tiles::configure());
        let mut sums: Sums = [[0.0; WIDTH]; AMX_PIXELS];
        let mut ox = cols.start;
        while ox < cols.end {
            let pixels = match self.dots {
                Dots::Amx => (cols.end - ox).min(AMX_PIXELS),
                Dots::Vnni | Dots::Plain(_) => balanced_tile(cols.end - ox, TILE),
            };
            let call = TileCall {
                x: x.add(x_row + ox * x_pixel),
                x_pixel,
                taps: &self.taps,
                quads: self.packed_quads,
                w,
                zero_sums: constants.zero_sums.as_ptr().add(b * WIDTH),
                pixels,
                vectors: block.channels.div_ceil(LANES),
                start: ox,
                period,
                valid: g.ow,
            };
            let out = |first: usize, pixels: usize| {
                let j = ox + first;
                let scales = constants.scales.as_ptr().add(b * WIDTH);
                self.out(n, oy + j / period, b, j % period, pixels, res, y, scales)
            };
            self.dots.tile(&call, &mut sums, out);
            ox += pixels;
        }
    }

    /// Where the sums of `pixels` output pixels from column `ox` of output
    /// row `oy` of batch item `n`, block `b`, go, scaled by `scales`.
    ///
    /// # Safety
    /// As `row`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn out(
        &self,
        n: usize,
        oy: usize,
        b: usize,
        ox: usize,
        pixels: usize,
        res: Option<*const f32>,
        y: *mut f32,
        scales: *const f32,
    ) -> Out<'_> {
        let g = &self.geom;
        let block = &self.blocks[b];
        let y_batch = g.cout.div_ceil(g.y_cb) * g.y_cb * g.oh * g.ow;
        let y_row = n * y_batch + g.y_chan(block.first) + oy * g.ow * g.y_cb;
        let mut pixel_at = [0isize; TILE];
        let residual = match &self.residual_staged {
            Some(from) => res.map(|r| {
                let (at, origin) = staged_offsets(from, &self.outer, n, oy * g.ow + ox, pixels);
                let min = from.grid.min;
                Residual::Bytes(r.cast::<u8>().add(origin + block.first), at, min)
            }),
            None => res.map(|r| Residual::Floats(r.add(y_row + ox * g.y_cb))),
        };
        let (y, lane_offsets, lane_runs) = match &self.output {
            Output::Floats => {
                for (p, at) in pixel_at.iter_mut().enumerate() {
                    *at = (p * g.y_cb) as isize;
                }
                let y = y.add(y_row + ox * g.y_cb);
                let runs = &self.lane_runs[b];
                let y = match &self.table {
                    Some(table) => Dest::Table(y, table),
                    None => Dest::Floats(y),
                };
                (y, block.lane_offsets.as_deref(), runs)
            }
            Output::Staged(to) => {
                let origin;
                (pixel_at, origin) = staged_offsets(to, &self.outer, n, oy * g.ow + ox, pixels);
                let y = y.cast::<u8>().add(origin + block.first);
                (Dest::Bytes(y), None, &self.lane_runs[b])
            }
        };
        Out {
            y,
            residual,
            pixel_at,
            channels: block.channels,
            lane_offsets,
            lane_runs,
            scales,
            bias: self.params.as_ptr().add(b * WIDTH),
            epilogue: self.epilogue,
            scaling: self.scaling,
        }
    }
}

/// Per lane `l` of `offsets` (one per lane, or none), the end of the run
/// of lanes from `l` whose outputs lie side by side (`offsets[j] ==
/// offsets[l] + j - l`): a tile's epilogue then knows which vectors of
/// lanes store whole without comparing offsets, which took 8% of a
/// MobileNetV2 expand convolution's tiles (NCHW16c, 32-lane blocks).
fn side_by_side_runs(offsets: &[isize]) -> [u8; WIDTH] {
    let mut runs = [0u8; WIDTH];
    let mut end = offsets.len();
    for l in (0..offsets.len()).rev() {
        if l + 1 < offsets.len() && offsets[l + 1] != offsets[l] + 1 {
            end = l + 1;
        }
        runs[l] = end as u8;
    }
    runs
}

/// The offsets in staged bytes `to` of `pixels` output pixels from pixel
/// `first` of batch item `n` (counted along the rows of `outer`'s output:
/// a 1x1 window runs as one row, and staged rows may have padding between
/// them) from the first's, and where the first starts.
fn staged_offsets(
    to: &StagedInput,
    outer: &ConvGeom,
    n: usize,
    first: usize,
    pixels: usize,
) -> ([isize; TILE], usize) {
    let ow = outer.ow;
    let (mut py, mut px) = (first / ow, first % ow);
    let origin = to.at(n, py, px);
    let mut offsets = [0isize; TILE];
    for at in offsets.iter_mut().take(pixels) {
        *at = (to.at(n, py, px) - origin) as isize;
        px += 1;
        if px == ow {
            (py, px) = (py + 1, 0);
        }
    }
    (offsets, origin)
}

/// Staged row `row` (batch item and row) of a convolution's input, written
/// to `bytes`.
struct StageRow<'a> {
    conv: &'a QuantConv,
    grid: &'a Grid,
    x: &'a [f32],
    row: usize,
    bytes: *mut u8,
}

/// Bytes of quantized channel blocks `StageRow::by_segments` passes
/// through at a time.
const SEGMENT_BYTES: usize = 4096;

/// Quantizes the `k` floats at `from` to the bytes at `to`.
#[inline(always)]
unsafe fn stage_part<V: Vector>(to_bytes: ToBytes<V>, from: *const f32, to: *mut u8, k: usize) {
    store_bytes_part(to_bytes.byte(load_part::<V>(from, k, 0.0)), to, k);
}

impl VectorKernel for StageRow<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let s = &self.conv.staging;
        let o = &self.conv.outer;
        let to_bytes = ToBytes::<V>::of(self.grid);
        if o.x_cb <= SEGMENT_BYTES && s.runs.iter().all(|r| r.len < V::LANES) {
            return self.by_segments(to_bytes);
        }
        let (h, w, cb) = (o.h, o.w, o.x_cb);
        let image = o.cin.next_multiple_of(cb) * h * w;
        let (n, sr) = (self.row / s.rows, self.row % s.rows);
        for sc in 0..s.cols {
            let Some((iy, ix)) = s.source.pixel(sr, sc, h, w) else {
                continue;
            };
            let from = self.x[n * image + (iy * w + ix) * cb..].as_ptr();
            let to = self.bytes.add(sc * s.pixel);
            for run in &s.runs {
                for i in (0..run.len).step_by(V::LANES) {
                    let k = (run.len - i).min(V::LANES);
                    stage_part(to_bytes, from.add(run.elem + i), to.add(run.byte + i), k);
                }
            }
        }
    }
}

impl StageRow<'_> {
    /// Stages the row where every run of channels is shorter than a vector
    /// (few channels, planar or narrow blocks: a network's first
    /// convolution, staged a pixel and a partial vector at a time, took 1 of
    /// MobileNetV3's 6 ms). Staged pixels whose input pixels lie side by
    /// side have their channel blocks side by side too: these are quantized
    /// whole, whole vectors at a time, then each run's bytes are placed.
    #[inline(always)]
    unsafe fn by_segments<V: Vector>(&self, to_bytes: ToBytes<V>) {
        let s = &self.conv.staging;
        let o = &self.conv.outer;
        let (h, w, cb) = (o.h, o.w, o.x_cb);
        let block = h * w * cb;
        let image = o.cin.div_ceil(cb) * block;
        let (n, sr) = (self.row / s.rows, self.row % s.rows);
        let chunk = SEGMENT_BYTES / cb;
        let mut quantized = [0u8; SEGMENT_BYTES];
        let mut sc = 0;
        while sc < s.cols {
            let Some((iy, ix)) = s.source.pixel(sr, sc, h, w) else {
                sc += 1;
                continue;
            };
            let mut len = 1;
            while sc + len < s.cols && s.source.pixel(sr, sc + len, h, w) == Some((iy, ix + len)) {
                len += 1;
            }
            for first in (0..len).step_by(chunk) {
                let pixels = chunk.min(len - first);
                let to = self.bytes.add((sc + first) * s.pixel);
                // The runs are in channel order, each within one block: the
                // block's are the next ones up to its end (one pass over
                // them, not one per block: 240 planar channels took 1.2 ms).
                let mut next = 0;
                for b in 0..o.cin.div_ceil(cb) {
                    let at = n * image + b * block + (iy * w + ix + first) * cb;
                    let from = self.x[at..at + pixels * cb].as_ptr();
                    for i in (0..pixels * cb).step_by(V::LANES) {
                        let k = (pixels * cb - i).min(V::LANES);
                        stage_part(to_bytes, from.add(i), quantized.as_mut_ptr().add(i), k);
                    }
                    let first_run = next;
                    while next < s.runs.len() && s.runs[next].elem < (b + 1) * block {
                        next += 1;
                    }
                    for run in &s.runs[first_run..next] {
                        let from = quantized.as_ptr().add(run.elem % block);
                        for p in 0..pixels {
                            copy_short(from.add(p * cb), to.add(p * s.pixel + run.byte), run.len);
                        }
                    }
                }
            }
            sc += len;
        }
    }
}

/// Copies `len` (below 16) bytes without a call to `memcpy`.
#[inline(always)]
unsafe fn copy_short(from: *const u8, to: *mut u8, len: usize) {
    let mut at = 0;
    if len & 8 != 0 {
        to.cast::<u64>()
            .write_unaligned(from.cast::<u64>().read_unaligned());
        at = 8;
    }
    if len & 4 != 0 {
        let (from, to) = (from.add(at).cast::<u32>(), to.add(at).cast::<u32>());
        to.write_unaligned(from.read_unaligned());
        at += 4;
    }
    if len & 2 != 0 {
        let (from, to) = (from.add(at).cast::<u16>(), to.add(at).cast::<u16>());
        to.write_unaligned(from.read_unaligned());
        at += 2;
    }
    if len & 1 != 0 {
        *to.add(at) = *from.add(at);
    }
}

impl Source {
    /// The input pixel staged pixel (`row`, `col`) holds, `None` for padding.
    fn pixel(&self, row: usize, col: usize, h: usize, w: usize) -> Option<(usize, usize)> {
        match *self {
            Source::Padded { top, left } => {
                let (iy, ix) = (row.checked_sub(top)?, col.checked_sub(left)?);
                (iy < h && ix < w).then_some((iy, ix))
            }
            Source::Subsampled { out, stride } => {
                let (oy, ox) = (col / out.1, col % out.1);
                Some((oy * stride.0, ox * stride.1))
            }
        }
    }
}

/// One register tile's reads: `pixels` output pixels `x_pixel` bytes apart
/// in the staged input, each reading `quads` lanes of four bytes at every
/// tap; `w` the block's packed weights.
struct TileCall<'a> {
    x: *const u8,
    x_pixel: usize,
    taps: &'a [usize],
    quads: usize,
    w: *const i8,
    /// The block's zero-byte parts of each lane's sums.
    zero_sums: *const i32,
    pixels: usize,
    /// Accumulator vectors of 16 channels (1 or 2).
    vectors: usize,
    /// The call's first position in its row, the positions per output
    /// row, and how many of each row's are output pixels (the rest are
    /// computed and dropped): a flat row's (`QuantConv::flat_cols`), or a
    /// row's own (`usize::MAX` positions per row).
    start: usize,
    period: usize,
    valid: usize,
}

/// Pixel 0 of a tile's first output channel.
#[derive(Clone, Copy)]
enum Dest {
    /// In the output's float layout.
    Floats(*mut f32),
    /// In the next convolution's staged bytes.
    Bytes(*mut u8),
    /// In the output's float layout, each a table's result at the output's
    /// integer less the grid's least.
    Table(*mut f32, *const LookUpTable),
}

/// Where a tile's fused-add operand lies: pixel 0 of its first channel.
#[derive(Clone, Copy)]
enum Residual {
    /// Laid out like the float output.
    Floats(*const f32),
    /// Bytes of a staged input, each pixel's channels side by side at the
    /// given offsets from the first's, the integers less `min`.
    Bytes(*const u8, [isize; TILE], f32),
}

/// Where one tile's sums go, and what they pass through on the way.
struct Out<'a> {
    y: Dest,
    residual: Option<Residual>,
    /// Each pixel's offset (elements or bytes) from the first's.
    pixel_at: [isize; TILE],
    channels: usize,
    lane_offsets: Option<&'a [isize]>,
    /// `side_by_side_runs` of `lane_offsets`.
    lane_runs: &'a [u8; WIDTH],
    /// Per lane (`WIDTH` of each).
    scales: *const f32,
    /// Per lane, with the PRelu slopes where the epilogue says.
    bias: *const f32,
    /// Applied where the scaling is `Float`.
    epilogue: Epilogue,
    scaling: Scaling,
}

/// Each tile pixel's exact sums less their zero-byte parts, per lane, in
/// f32: one buffer for every tile of a row (`QuantConv::row`), each tile
/// writing the pixels and lanes its epilogue reads (zeroing it per tile
/// took 5% of a MobileNetV2 block's time in `memset`).
type Sums = [[f32; WIDTH]; AMX_PIXELS];

impl Dots {
    /// The dots of `isa`, with AMX `tiles` where allowed, no more than half
    /// the products of a convolution of `quads` lanes per tap (of `taps`)
    /// would be on the lanes padding it to whole tile steps, and there are
    /// at least `AMX_MIN_STEPS` steps.
    fn of(isa: Isa, tiles: bool, quads: usize, taps: usize) -> Dots {
        #[cfg(target_arch = "x86_64")]
        {
            let vnni = std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni");
            if isa == Isa::Avx512 && vnni {
                let few_padded = quads.next_multiple_of(AMX_QUADS) <= 2 * quads;
                let steps = taps * quads.div_ceil(AMX_QUADS);
                return match tiles && few_padded && steps >= AMX_MIN_STEPS {
                    true => Dots::Amx,
                    false => Dots::Vnni,
                };
            }
        }
        let _ = (tiles, quads, taps);
        Dots::Plain(isa)
    }

    /// Computes one call's pixels and stores them through the epilogue;
    /// `out(first, pixels)` says where the call's pixels from `first` go
    /// (at most `TILE` of them).
    ///
    /// # Safety
    /// As `QuantConv::row`: every address of `t` and `out` lies in its
    /// buffer; AMX tiles are configured where the dots are `Amx`.
    unsafe fn tile<'a>(self, t: &TileCall, sums: &mut Sums, out: impl Fn(usize, usize) -> Out<'a>) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Dots::Amx => tile_amx(t, sums, out),
            #[cfg(target_arch = "x86_64")]
            Dots::Vnni => tile_vnni(t, sums, &out(0, t.pixels)),
            #[cfg(target_arch = "x86_64")]
            Dots::Plain(Isa::Avx512) => tile_avx512(t, sums, &out(0, t.pixels)),
            #[cfg(target_arch = "x86_64")]
            Dots::Plain(Isa::Avx2) => tile_avx2(t, sums, &out(0, t.pixels)),
            _ => {
                plain_dots(t, sums);
                finish::<Portable>(t.pixels, sums, &out(0, t.pixels));
            }
        }
    }
}

/// Input lanes of four bytes per AMX tile row.
const AMX_QUADS: usize = amx::ROW_BYTES / 4;
/// Steps of 64 input bytes (over all taps) below which `vpdpbusd` is
/// faster: AMX sums go through memory to the epilogue, and with one or two
/// steps that round trip outweighs the products. ResNet50's 1x1
/// convolutions with their fused adds, 64 to 256 channels at 56x56 pixels:
/// 0.92 ms on tiles, 0.59 ms by `vpdpbusd`; 128 to 512 at 28x28: 0.43 and
/// 0.37 ms; 256 to 1024 at 14x14 (four steps): 0.24 ms either way.
const AMX_MIN_STEPS: usize = 3;
/// Pixels of one AMX call: two tiles of rows.
const AMX_PIXELS: usize = 2 * amx::ROWS;

/// Whether the tiles run each batch item's output rows of `geom` as one
/// flat row: the padded staged rows lie end to end, so with a stride of 1
/// output pixel (`y`, `x`) reads staged pixel `y * cols + x` at each tap,
/// and consecutive positions `j = y * cols + x` are a constant stride apart
/// across rows. The `cols - ow` positions past each row's end are computed
/// and dropped. AMX only: a 7x7 image's rows fill 7 of a tile's 16 rows;
/// flat, 49 pixels of 63 positions fill four tiles.
fn flat_rows(geom: &ConvGeom, dots: Dots) -> bool {
    dots == Dots::Amx && !geom.is_pointwise() && geom.stride == (1, 1)
}

/// Up to 32 pixels times 32 channels by AMX, stored `TILE` pixels at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn tile_amx<'a>(t: &TileCall, sums: &mut Sums, out: impl Fn(usize, usize) -> Out<'a>) {
    match (t.pixels > amx::ROWS, t.vectors) {
        (false, 1) => amx_dots::<1, 1>(t, sums),
        (false, _) => amx_dots::<1, 2>(t, sums),
        (true, 1) => amx_dots::<2, 1>(t, sums),
        (true, _) => amx_dots::<2, 2>(t, sums),
    }
    let mut first = 0;
    while first < t.pixels {
        let col = (t.start + first) % t.period;
        if col >= t.valid {
            first += t.period - col;
            continue;
        }
        let pixels = TILE.min(t.pixels - first).min(t.valid - col);
        finish::<Zmm>(pixels, &sums[first..], &out(first, pixels));
        first += pixels;
    }
}

/// `A` tiles of 16 pixels times `B` tiles of 16 channels by `tdpbusd`: each
/// step loads 16 pixels' next 64 input bytes at a tap (one tile row per
/// pixel, `x_pixel` apart) and 16 lanes of four weights for each of 16
/// channels, and accumulates in tiles 0-3 (pixels 16-31 in 2 and 3).
/// Pixels past the call's (to fill a tile) are computed and dropped.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn amx_dots<const A: usize, const B: usize>(t: &TileCall, sums: &mut Sums) {
    use std::arch::asm;
    use std::arch::x86_64::*;
    asm!(
        "tilezero tmm0",
        "tilezero tmm1",
        "tilezero tmm2",
        "tilezero tmm3",
        options(nostack, nomem)
    );
    // A row of packed weights holds all `WIDTH` channels' lane: channels
    // 16-31 start 64 bytes in.
    let w_row = WIDTH * 4;
    let next_pixels = amx::ROWS * t.x_pixel;
    let mut wp = t.w;
    for &tap in t.taps {
        for q in (0..t.quads).step_by(AMX_QUADS) {
            let xp = t.x.add(tap + 4 * q);
            asm!(
                "tileloadd tmm4, [{x} + {x_pixel}]",
                "tileloadd tmm6, [{w} + {w_row}]",
                "tdpbusd tmm0, tmm4, tmm6",
                x = in(reg) xp,
                x_pixel = in(reg) t.x_pixel,
                w = in(reg) wp,
                w_row = in(reg) w_row,
                options(nostack)
            );
            if B == 2 {
                asm!(
                    "tileloadd tmm7, [{w} + {w_row}]",
                    "tdpbusd tmm1, tmm4, tmm7",
                    w = in(reg) wp.add(amx::ROW_BYTES),
                    w_row = in(reg) w_row,
                    options(nostack)
                );
            }
            if A == 2 {
                asm!(
                    "tileloadd tmm5, [{x} + {x_pixel}]",
                    "tdpbusd tmm2, tmm5, tmm6",
                    x = in(reg) xp.add(next_pixels),
                    x_pixel = in(reg) t.x_pixel,
                    options(nostack)
                );
                if B == 2 {
                    asm!("tdpbusd tmm3, tmm5, tmm7", options(nostack, nomem));
                }
            }
            wp = wp.add(AMX_QUADS * w_row);
        }
    }
    let mut c = [[[0i32; LANES]; amx::ROWS]; 4];
    let row = amx::ROW_BYTES;
    asm!("tilestored [{c} + {row}], tmm0", c = in(reg) c[0].as_mut_ptr(), row = in(reg) row, options(nostack));
    if B == 2 {
        asm!("tilestored [{c} + {row}], tmm1", c = in(reg) c[1].as_mut_ptr(), row = in(reg) row, options(nostack));
    }
    if A == 2 {
        asm!("tilestored [{c} + {row}], tmm2", c = in(reg) c[2].as_mut_ptr(), row = in(reg) row, options(nostack));
        if B == 2 {
            asm!("tilestored [{c} + {row}], tmm3", c = in(reg) c[3].as_mut_ptr(), row = in(reg) row, options(nostack));
        }
    }
    for m in 0..B {
        let zero = _mm512_loadu_si512(t.zero_sums.add(m * LANES).cast());
        for a in 0..A {
            for p in 0..amx::ROWS {
                // Exact in i32; one rounding to f32.
                let exact =
                    _mm512_sub_epi32(_mm512_loadu_si512(c[a * 2 + m][p].as_ptr().cast()), zero);
                let to = sums[a * amx::ROWS + p][m * LANES..].as_mut_ptr();
                _mm512_storeu_ps(to, _mm512_cvtepi32_ps(exact));
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_vnni(t: &TileCall, sums: &mut Sums, out: &Out) {
    macro_rules! by_pixels {
        ($($n:literal)*) => {
            match (t.pixels, t.vectors) {
                $(($n, 1) => vnni_dots::<$n, 1>(t, sums),)*
                $(($n, _) => vnni_dots::<$n, 2>(t, sums),)*
                _ => unreachable!("a tile has 1..=TILE pixels"),
            }
        };
    }
    by_pixels!(1 2 3 4 5 6 7 8 9 10 11 12);
    finish::<Zmm>(t.pixels, sums, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(t: &TileCall, sums: &mut Sums, out: &Out) {
    plain_dots(t, sums);
    finish::<Zmm>(t.pixels, sums, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(t: &TileCall, sums: &mut Sums, out: &Out) {
    plain_dots(t, sums);
    finish::<Ymm>(t.pixels, sums, out);
}

/// `N` pixels times `M` vectors of 16 channels by `vpdpbusd`: each step
/// broadcasts a pixel's four input bytes against 16 channels' four weights.
#[cfg(target_arch = "x86_64")]
// Two-dimensional indexing of the accumulators reads clearest here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn vnni_dots<const N: usize, const M: usize>(t: &TileCall, sums: &mut Sums) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_si512(); M]; N];
    let mut wp = t.w;
    for &tap in t.taps {
        let xp = t.x.add(tap);
        for q in 0..t.quads {
            let wv: [__m512i; M] = array_of(_mm512_setzero_si512(), |m| {
                _mm512_loadu_si512(wp.add(m * 64).cast())
            });
            for p in 0..N {
                let four = xp.add(p * t.x_pixel + 4 * q).cast::<i32>().read_unaligned();
                let xv = _mm512_set1_epi32(four);
                for m in 0..M {
                    acc[p][m] = _mm512_dpbusd_epi32(acc[p][m], xv, wv[m]);
                }
            }
            wp = wp.add(WIDTH * 4);
        }
    }
    let zero: [__m512i; M] = array_of(_mm512_setzero_si512(), |m| {
        _mm512_loadu_si512(t.zero_sums.add(m * LANES).cast())
    });
    for p in 0..N {
        for m in 0..M {
            // Exact in i32; one rounding to f32.
            let exact = _mm512_sub_epi32(acc[p][m], zero[m]);
            _mm512_storeu_ps(sums[p][m * LANES..].as_mut_ptr(), _mm512_cvtepi32_ps(exact));
        }
    }
}

/// The tile's sums by plain integer arithmetic (the compiler vectorizes
/// the lanes as the instruction set it is inlined into allows).
#[inline(always)]
unsafe fn plain_dots(t: &TileCall, out: &mut Sums) {
    let lanes = t.vectors * LANES;
    let mut sums = [[0i32; WIDTH]; TILE];
    let mut wp = t.w;
    for &tap in t.taps {
        for q in 0..t.quads {
            let w = std::slice::from_raw_parts(wp, WIDTH * 4);
            for (p, sum) in sums.iter_mut().enumerate().take(t.pixels) {
                let x = std::slice::from_raw_parts(t.x.add(tap + p * t.x_pixel + 4 * q), 4);
                for (l, s) in sum.iter_mut().enumerate().take(lanes) {
                    let four = &w[l * 4..][..4];
                    *s += (0..4)
                        .map(|j| i32::from(x[j]) * i32::from(four[j]))
                        .sum::<i32>();
                }
            }
            wp = wp.add(WIDTH * 4);
        }
    }
    for (to, from) in out.iter_mut().zip(&sums).take(t.pixels) {
        for (l, (v, &s)) in to.iter_mut().zip(from).enumerate().take(lanes) {
            *v = (s - *t.zero_sums.add(l)) as f32;
        }
    }
}

/// What a tile's epilogue does with its sums, one compiled loop per kind
/// (`finish_as`): where the loop matched on the scaling, residual and
/// destination per vector of outputs, those branches and the constants
/// they kept spilled took two thirds of `tile_vnni`'s time.
mod kind {
    /// `Scaling::Float`.
    pub const FLOAT: u8 = 0;
    /// `Scaling::Requantized` without an add.
    pub const REQUANTIZED: u8 = 1;
    /// `Scaling::Requantized` with a fused add.
    pub const ADDED: u8 = 2;
    /// No residual.
    pub const NONE: u8 = 0;
    /// `Residual::Floats`.
    pub const FLOATS: u8 = 1;
    /// `Residual::Bytes`.
    pub const BYTES: u8 = 2;
    /// `Residual::Floats` or none, decided per vector.
    pub const FLOATS_IF_ANY: u8 = 3;
}

/// Scales each sum, adds the bias, then either requantizes it or adds the
/// residual and applies the epilogue, and stores the tile's channels.
#[inline(always)]
unsafe fn finish<V: Vector>(pixels: usize, sums: &[[f32; WIDTH]], out: &Out) {
    use kind::*;
    use Scaling::Requantized as Rq;
    // Direct calls: each is inlined with the caller's instruction set.
    match (out.scaling, out.residual, out.y) {
        // One loop with or without the residual: each inlines the whole
        // epilogue (every activation).
        (Scaling::Float, None | Some(Residual::Floats(_)), Dest::Floats(_)) => {
            finish_as::<V, FLOAT, FLOATS_IF_ANY, false, false>(pixels, sums, out)
        }
        (Rq { add: None, .. }, None, Dest::Floats(_)) => {
            finish_as::<V, REQUANTIZED, NONE, false, false>(pixels, sums, out)
        }
        (Rq { add: None, .. }, None, Dest::Bytes(_)) => {
            finish_as::<V, REQUANTIZED, NONE, true, false>(pixels, sums, out)
        }
        (Rq { add: None, .. }, None, Dest::Table(..)) => {
            finish_as::<V, REQUANTIZED, NONE, true, true>(pixels, sums, out)
        }
        (Rq { add: Some(_), .. }, Some(Residual::Floats(_)), Dest::Floats(_)) => {
            finish_as::<V, ADDED, FLOATS, false, false>(pixels, sums, out)
        }
        (Rq { add: Some(_), .. }, Some(Residual::Bytes(..)), Dest::Floats(_)) => {
            finish_as::<V, ADDED, BYTES, false, false>(pixels, sums, out)
        }
        (Rq { add: Some(_), .. }, Some(Residual::Bytes(..)), Dest::Bytes(_)) => {
            finish_as::<V, ADDED, BYTES, true, false>(pixels, sums, out)
        }
        _ => unreachable!(
            "only requantized outputs are bytes or looked up; a fused add reads its \
             operand, as bytes where it writes bytes; a residual without one is float"
        ),
    }
}

/// `finish` for one kind of scaling (`kind::FLOAT`, `REQUANTIZED`,
/// `ADDED`), of residual (`kind::NONE`, `FLOATS`, `BYTES`,
/// `FLOATS_IF_ANY`) and of destination (bytes, floats, or with `LOOK_UP`
/// a table's floats at the bytes), which `out` must be.
// `match`, not `Option::map`: a closure is compiled without the vector
// instructions, so the vector operations in it would be calls.
#[allow(clippy::manual_map)]
#[inline(always)]
unsafe fn finish_as<
    V: Vector,
    const SCALING: u8,
    const RESIDUAL: u8,
    const TO_BYTES: bool,
    const LOOK_UP: bool,
>(
    pixels: usize,
    sums: &[[f32; WIDTH]],
    out: &Out,
) {
    use kind::*;
    // Each vector's channels, from its first lane's offset when they lie
    // side by side in the output (a 32-channel block over two blocks of
    // NCHW16c is two such vectors); `None` where they are scattered (NCHW,
    // a block across a group's end) and go lane by lane.
    let offs = out.lane_offsets.unwrap_or(&[]);
    let mut starts = [None; WIDTH];
    for c in (0..out.channels).step_by(V::LANES) {
        let k = (out.channels - c).min(V::LANES);
        let side_by_side = offs.is_empty() || usize::from(out.lane_runs[c]) >= c + k;
        starts[c / V::LANES] = side_by_side.then(|| offs.get(c).copied().unwrap_or(c as isize));
    }
    // Everything the loop reads of `out`, as locals: the stores through the
    // output pointer could alias `out`, so its fields would be read again
    // for every vector.
    let (y_floats, y_bytes, table) = match out.y {
        Dest::Floats(y) => (y, std::ptr::null_mut(), std::ptr::null()),
        Dest::Bytes(y) => (std::ptr::null_mut(), y, std::ptr::null()),
        Dest::Table(y, table) => (y, std::ptr::null_mut(), table),
    };
    let held = match LOOK_UP {
        true => Some(V::hold(&*table)),
        false => None,
    };
    let store_bytes = TO_BYTES && !LOOK_UP;
    let (r_floats, r_bytes, r_at, r_min) = match out.residual {
        Some(Residual::Floats(r)) => (r, std::ptr::null(), [0; TILE], 0.0),
        Some(Residual::Bytes(r, at, min)) => (std::ptr::null(), r, at, min),
        None => (std::ptr::null(), std::ptr::null(), [0; TILE], 0.0),
    };
    let ends = Ends::<V>::of(out.scaling, TO_BYTES);
    let (scales, bias, epilogue) = (out.scales, out.bias, out.epilogue);
    let pixel_at = out.pixel_at;
    // Channels outer: each vector's scales, biases and start are loaded
    // once for the tile's pixels.
    for c in (0..out.channels).step_by(V::LANES) {
        let k = (out.channels - c).min(V::LANES);
        let start = starts[c / V::LANES];
        let (scale, add) = (V::load(scales.add(c)), V::load(bias.add(c)));
        for (p, sum) in sums.iter().enumerate().take(pixels) {
            let at = pixel_at[p];
            // Lane `l`'s offset where the channels are scattered.
            let offset = |l: usize| at + offs[c + l];
            let mut lanes = [0f32; MAX_LANES];
            let r = match RESIDUAL {
                FLOATS | FLOATS_IF_ANY if !r_floats.is_null() => Some(match start {
                    Some(start) => load_part::<V>(r_floats.offset(at + start), k, 0.0),
                    None => {
                        for (l, v) in lanes.iter_mut().enumerate().take(k) {
                            *v = *r_floats.offset(offset(l));
                        }
                        V::load(lanes.as_ptr())
                    }
                }),
                BYTES => Some(staged_integers(
                    r_bytes.offset(r_at[p] + c as isize),
                    k,
                    r_min,
                )),
                _ => None,
            };
            let v = V::fma(V::load(sum[c..].as_ptr()), scale, add);
            let v = ends.output::<SCALING, RESIDUAL, TO_BYTES>(v, bias.add(c), epilogue, r);
            let v = match held {
                Some(held) => V::look_up_held(held, v),
                None => v,
            };
            match (start, store_bytes) {
                (Some(start), true) => store_bytes_part(v, y_bytes.offset(at + start), k),
                (Some(start), false) => store_part(v, y_floats.offset(at + start), k),
                (None, _) => {
                    v.store(lanes.as_mut_ptr());
                    for (l, &v) in lanes.iter().enumerate().take(k) {
                        match store_bytes {
                            true => *y_bytes.offset(offset(l)) = v as u8,
                            false => *y_floats.offset(offset(l)) = v,
                        }
                    }
                }
            }
        }
    }
}

/// The integers of the `k` staged bytes at `p`, whose grid's least
/// integer is `min`.
#[inline(always)]
unsafe fn staged_integers<V: Vector>(p: *const u8, k: usize, min: f32) -> V {
    V::add(load_bytes_part::<V>(p, k), V::splat(min))
}

/// A requantizing epilogue's constants, as vectors made once per tile.
struct Ends<V> {
    /// The integers' clamp, less the zero point.
    lo: V,
    hi: V,
    /// The convolution's grid's zero point.
    zero_point: V,
    /// The fused add's sum's zero point.
    sum_zero_point: V,
    /// What the integers less the final grid's zero point become: plus
    /// `zero_point - min` as bytes, times `scale` as floats.
    to_output: V,
    add: Option<(QuantizedAdd, bool)>,
}

impl<V: Vector> Ends<V> {
    /// The constants of `scaling` (unused for `Scaling::Float`), writing
    /// bytes or floats.
    #[inline(always)]
    unsafe fn of(scaling: Scaling, bytes: bool) -> Ends<V> {
        let Scaling::Requantized { grid, lo, hi, add } = scaling else {
            let zero = V::splat(0.0);
            return Ends {
                lo: zero,
                hi: zero,
                zero_point: zero,
                sum_zero_point: zero,
                to_output: zero,
                add: None,
            };
        };
        let last = add.map_or(grid, |(add, _)| add.output_grid());
        Ends {
            lo: V::splat(lo),
            hi: V::splat(hi),
            zero_point: V::splat(grid.zero_point),
            sum_zero_point: V::splat(last.zero_point),
            to_output: V::splat(match bytes {
                true => last.zero_point - last.min,
                false => last.scale,
            }),
            add,
        }
    }

    /// The outputs of a vector `v` of sums, scaled and biased, whose
    /// channels' biases `bias` points at, as `finish_as` computes them:
    /// with the residual `r` where there is one, its values, or its
    /// integers where read as staged bytes.
    #[inline(always)]
    unsafe fn output<const SCALING: u8, const RESIDUAL: u8, const TO_BYTES: bool>(
        &self,
        v: V,
        bias: *const f32,
        epilogue: Epilogue,
        r: Option<V>,
    ) -> V {
        if SCALING == kind::FLOAT {
            let v = match r {
                Some(r) => V::add(v, r),
                None => v,
            };
            return epilogue.apply(v, bias);
        }
        let q = V::min(V::max(V::round(v), self.lo), self.hi);
        let q = match (SCALING == kind::ADDED, self.add, r) {
            // `run` checked that the add's operand is there.
            (true, Some((add, first)), Some(r)) => {
                let r = match RESIDUAL == kind::BYTES {
                    true => r,
                    false => add.operand_integers(r, !first),
                };
                let sum = add.add_integers(V::add(q, self.zero_point), r, first);
                V::sub(sum, self.sum_zero_point)
            }
            _ => q,
        };
        // The byte of `q + zero_point` is its distance from `min`.
        match TO_BYTES {
            true => V::add(q, self.to_output),
            false => V::mul(q, self.to_output),
        }
    }
}

/// The bytes of f32 storage.
fn as_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: u8 has no alignment or validity requirement; the length is in bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 4) }
}

/// The bytes of f32 storage, to write.
pub(super) fn as_bytes_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: as `as_bytes`; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), v.len() * 4) }
}
