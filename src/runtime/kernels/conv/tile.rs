//! Register-blocked convolution micro-kernel, written once over a vector type
//! and instantiated for AVX-512 (16 lanes), AVX2+FMA (8 lanes) and a portable
//! fallback (8 lanes of plain f32 the compiler may vectorize). The instruction
//! set is chosen at run time (`Isa::detect`).
//!
//! The kernel computes a tile of `T` output pixels of one output row times one
//! vector of `LANES` consecutive output channels: every accumulator stays in a
//! register while it runs over the kernel window and the input channels, each
//! step one weight-vector load, then a broadcast and an FMA per pixel.

use crate::core::scalar::UnaryOp;
use crate::fusion::Activation;
use crate::runtime::kernels::activation::{activate, prelu, Lanewise};
use crate::runtime::kernels::simd::{
    array_of, run_vectorized, Isa, Pair, Portable, Scalar, Vector, VectorKernel, MAX_LANES,
};
#[cfg(target_arch = "x86_64")]
use crate::runtime::kernels::simd::{Ymm, Zmm};

/// The most pixels of a register tile: 12 accumulators of one vector leave
/// room for the weight vector and broadcasts in 16 (AVX2) registers.
pub const TILE: usize = 12;

/// The most pixels a tile of `vectors` output-channel vectors keeps in
/// registers on `isa`: `vectors` accumulators per pixel, besides the weight
/// vectors and one broadcast.
pub fn tile_pixels(isa: Isa, vectors: usize) -> usize {
    ((isa.registers() - vectors - 1) / vectors).min(TILE)
}

/// The geometry of one tile call. Offsets and strides are in f32 elements.
#[derive(Clone, Copy, Debug)]
pub struct Tile {
    /// Output pixels in this tile (1..=TILE).
    pub pixels: usize,
    /// Kernel rows and columns to visit (all pixels of the tile have their
    /// whole window inside the input for these).
    pub kh: (usize, usize),
    /// (see `kh`) for the columns.
    pub kw: (usize, usize),
    /// Input offset of pixel 0 at kernel position (0, 0) (may be "negative"
    /// for a border tile; only in-range positions are visited).
    pub x_origin: isize,
    /// Input stride between neighbouring output pixels (stride_w * pixel).
    pub x_pixel: isize,
    /// Input strides of a kernel row and a kernel column (dilated).
    pub x_kh: isize,
    /// (see `x_kh`) for a kernel column.
    pub x_kw: isize,
    /// The first input channel read (of its group; 0 for a dense convolution).
    pub c_first: usize,
    /// Input channels read from `c_first` on, and their split into blocks of
    /// `x_cb` that lie `x_cblock` apart.
    pub cin: usize,
    /// Channels per input block.
    pub x_cb: usize,
    /// Distance between input channel blocks.
    pub x_cblock: isize,
    /// Packed weights of this output-channel group: `[kh][kw][cin][w_width]`,
    /// of which the tile uses the first `vectors * LANES` of each row.
    pub kw_total: usize,
    /// Width of a packed weight row (lanes of output channels).
    pub w_width: usize,
    /// Output-channel vectors the tile computes (1 or 2).
    pub vectors: usize,
}

/// What the epilogue applies to each accumulator before the store.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epilogue {
    /// Lower bound of the clamp (`-inf`: none).
    pub min: f32,
    /// Upper bound of the clamp (`inf`: none).
    pub max: f32,
    /// The activation after the clamp.
    pub act: Option<Activation>,
    /// A PRelu last, its slope per channel: each channel's slope lies this
    /// many floats after the channel's bias in the kernel's packed array
    /// (`ChannelParams::pack` sets it).
    pub slope_at: Option<usize>,
}

impl Epilogue {
    /// The epilogue applying `act`: a relu or clip as the clamp, anything else
    /// after it. A PRelu's slopes come with the kernel's `ChannelParams`.
    pub fn of(act: Option<Activation>) -> Epilogue {
        if let Some(Activation::Clamped { clamp, then }) = act {
            return Epilogue {
                act: Some(Activation::Unary(then)),
                ..Epilogue::of(Some(Activation::Unary(clamp)))
            };
        }
        let clamp = act.and_then(|a| match a {
            Activation::Unary(u) => u.clamp_bounds(),
            Activation::Swish | Activation::PRelu | Activation::Clamped { .. } => None,
        });
        let (min, max) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        Epilogue {
            min,
            max,
            act: act.filter(|a| clamp.is_none() && *a != Activation::PRelu),
            slope_at: None,
        }
    }

    /// Applies the epilogue to `v` (after the bias and residual), whose lanes'
    /// biases `bias` points at.
    ///
    /// # Safety
    /// `V`'s instruction set must be available; with `slope_at`, `bias` must
    /// point into the packed array the kernel was built with.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn apply<V: Vector>(self, v: V, bias: *const f32) -> V {
        self.finish(v, |at| V::load(bias.add(at)))
    }

    /// `apply` to lanes that are pixels of one channel, whose bias `bias`
    /// points at.
    ///
    /// # Safety
    /// As for `apply`.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn apply_to_channel<V: Vector>(
        self,
        v: V,
        bias: *const f32,
    ) -> V {
        self.finish(v, |at| V::splat(*bias.add(at)))
    }

    /// The epilogue up to its clamp: the part a tile applies where a pass
    /// over the stored outputs (`activate_run`) applies the rest.
    pub(in crate::runtime) fn clamp_only(self) -> Epilogue {
        Epilogue {
            act: None,
            slope_at: None,
            ..self
        }
    }

    /// Whether the epilogue does more than clamp.
    pub(in crate::runtime) fn activates(self) -> bool {
        self.act.is_some() || self.slope_at.is_some()
    }

    /// The epilogue after its clamp (the activation, then the PRelu), in
    /// place on `count` vectors `stride` floats apart from `at`, whose
    /// channels' biases `bias` points at. The activation is matched once
    /// and each arm loops with its op known: a tile of few multiply-adds
    /// (a depthwise one) that applied the whole epilogue to each pixel
    /// spent a quarter of its time dispatching it and spilling around it.
    ///
    /// # Safety
    /// As for `apply`; the vectors must be readable and writable.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn activate_run<V: Vector>(
        self,
        at: *mut f32,
        count: usize,
        stride: usize,
        bias: *const f32,
    ) {
        // A loop, not a closure: a closure is compiled without the vector
        // instructions, so the vector operations in it would be calls. Two
        // vectors at a time, as a `Pair`: a sigmoid or tanh of one vector is
        // bound by its latency. An odd last vector is computed twice.
        macro_rules! each {
            ($v:ident => $f:expr) => {
                for p in (0..count).step_by(2) {
                    let (q, r) = (at.add(p * stride), at.add((p + 1).min(count - 1) * stride));
                    let $v = Pair {
                        lo: V::load(q),
                        hi: V::load(r),
                    };
                    let y = $f;
                    y.lo.store(q);
                    y.hi.store(r);
                }
            };
        }
        match self.act {
            Some(Activation::Unary(u)) => {
                macro_rules! go {
                    ($u:ident) => {
                        each!(v => $u.apply(Lanewise(v)).0)
                    };
                }
                match u {
                    u @ UnaryOp::HardSwish => go!(u),
                    u @ UnaryOp::HardSigmoid { .. } => go!(u),
                    u @ UnaryOp::LeakyRelu { .. } => go!(u),
                    u @ UnaryOp::Sigmoid => go!(u),
                    u @ UnaryOp::Tanh => go!(u),
                    u @ UnaryOp::Gelu { .. } => go!(u),
                    u @ UnaryOp::Elu { .. } => go!(u),
                    // Rare in an epilogue: one loop for all.
                    u => go!(u),
                }
            }
            Some(Activation::Swish) => each!(v => activate(Activation::Swish, v)),
            Some(a) => unreachable!("`Epilogue::of` keeps {a:?} out of `act`"),
            None => {}
        }
        if let Some(s) = self.slope_at {
            let slope = V::load(bias.add(s));
            let slope = Pair {
                lo: slope,
                hi: slope,
            };
            each!(v => prelu(v, slope));
        }
    }

    /// The clamp, the activation, then a PRelu of the slopes `slope(slope_at)`.
    #[inline(always)]
    unsafe fn finish<V: Vector>(self, v: V, slope: impl FnOnce(usize) -> V) -> V {
        let v = V::clamp(v, V::splat(self.min), V::splat(self.max));
        let v = match self.act {
            Some(a) => activate(a, v),
            None => v,
        };
        match self.slope_at {
            Some(at) => prelu(v, slope(at)),
            None => v,
        }
    }
}

/// The per-channel values of a convolution's epilogue, in logical channel order.
#[derive(Clone, Copy, Debug)]
pub struct ChannelParams<'a> {
    /// The bias (batch norm folded in).
    pub bias: &'a [f32],
    /// The slopes of a PRelu the epilogue ends in.
    pub slope: Option<&'a [f32]>,
}

impl<'a> ChannelParams<'a> {
    /// A bias and no PRelu.
    pub fn bias_only(bias: &'a [f32]) -> Self {
        ChannelParams { bias, slope: None }
    }

    /// The bias and then the slopes, each laid out by the kernel's `place`,
    /// in one array, and `ep` told where the slopes lie.
    pub fn pack(&self, ep: Epilogue, place: impl Fn(&[f32]) -> Vec<f32>) -> (Vec<f32>, Epilogue) {
        let mut packed = place(self.bias);
        let slope_at = self.slope.map(|s| {
            let at = packed.len();
            packed.extend(place(s));
            at
        });
        (packed, Epilogue { slope_at, ..ep })
    }
}

/// `Epilogue::activate_run` on stored vectors: a tile's, a depthwise band's.
pub(in crate::runtime) struct Activate {
    pub ep: Epilogue,
    pub at: *mut f32,
    pub count: usize,
    pub stride: usize,
    pub bias: *const f32,
}

impl VectorKernel for Activate {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        (self.ep).activate_run::<V>(self.at, self.count, self.stride, self.bias)
    }
}

/// Where one tile's results go. `out` and `residual` point at pixel 0 of the
/// tile's first output channel; a pixel is `pixel` elements further. When the
/// output-channel block is a multiple of the lanes, a vector's channels are
/// contiguous (`chan_offsets` is None); otherwise each lane has its own offset.
#[derive(Clone, Copy)]
pub struct Store<'a> {
    /// Pixel 0 of the tile's first output channel.
    pub out: *mut f32,
    /// The residual added before the clamp, laid out like `out`.
    pub residual: Option<*const f32>,
    /// Elements between neighbouring pixels.
    pub pixel: isize,
    /// Offset of the second vector's channels from the first's.
    pub vector: isize,
    /// Lanes holding real channels (the others are not stored).
    pub lanes_used: usize,
    /// Per-lane channel offsets, when a vector's channels are not contiguous.
    pub chan_offsets: Option<&'a [isize]>,
}

/// Input channels ahead of the current one whose weights a tile prefetches:
/// a group's weights are read in order, and beyond a few hundred input
/// channels they come from L2 or memory for every tile (64 ahead, 8 KB of a
/// two-vector group, made the 1024- and 2048-channel 1x1 convs of ResNet50
/// 5-12% faster and its Winograd products 4-7%; 32 ahead half that, 128 no more).
const PF_AHEAD: usize = 64;

/// Asks for the cache line holding `p` to be brought into L1.
#[inline(always)]
fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// One tile of exactly `N` pixels times `M` vectors of output channels: constant
/// trip counts keep the `N * M` accumulators in registers. `XP`, when not 0, is
/// the input's pixel stride (`t.x_pixel`) known at compile time: the pixels'
/// loads then address from one register (12 pixel offsets held in registers
/// spilled three of them to the stack in the inner loop). 16 and 32 are
/// NCHW16c at strides 1 and 2 (ResNet's 7x7 stride-2 stem, 3 to 64 channels
/// at 224x224: 5.9 ms with the stride in a register, 3.6 ms as a constant).
// Two-dimensional indexing of the accumulators reads clearest here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile_n<V: Vector, const N: usize, const M: usize, const XP: usize, const S: usize>(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    let off = |p: usize, m: usize| p as isize * st.pixel + m as isize * st.vector;
    if let (None, Some(r)) = (st.chan_offsets, st.residual) {
        // The residual is read only after the whole reduction: fetched now,
        // its lines arrive while the tile computes.
        for m in 0..M {
            for p in 0..N {
                prefetch(r.offset(off(p, m)));
            }
        }
    }
    let x_pixel = match XP {
        0 => t.x_pixel,
        _ => XP as isize,
    };
    // `S` sums per accumulator (`sums_per_accumulator`): sum 0 starts from
    // the bias, the others from zero.
    let mut sums: [[[V; N]; M]; S] = [[[V::splat(0.0); N]; M]; S];
    sums[0] = array_of([V::splat(0.0); N], |m| [V::load(bias.add(m * V::LANES)); N]);
    // Where the channels start within the input's blocks is the same at every
    // tap: divided out once (a division per tap and block took ResNet's 7x7
    // stem from 5.9 to 8.8 ms, a grouped 1x1 from 0.43 to 0.62 ms).
    let first_block = (t.c_first / t.x_cb) as isize * t.x_cblock;
    let within = t.c_first % t.x_cb;
    let first_run = (t.x_cb - within).min(t.cin);
    for kh in t.kh.0..t.kh.1 {
        for kw in t.kw.0..t.kw.1 {
            let mut wp = w.add(((kh * t.kw_total + kw) * t.cin) * t.w_width);
            let base = x.offset(t.x_origin + kh as isize * t.x_kh + kw as isize * t.x_kw);
            // Runs of channels within one input block: the first from the
            // group's first channel, each next from the start of a block.
            let mut block_start = base.offset(first_block);
            let (mut block, mut inner, mut left) = (block_start.add(within), first_run, t.cin);
            loop {
                // Each next input channel into the next sum.
                let mut ci = 0;
                while ci + S <= inner {
                    for sum in sums.iter_mut() {
                        tile_channel(wp, block.add(ci), x_pixel, t.w_width, sum);
                        (wp, ci) = (wp.add(t.w_width), ci + 1);
                    }
                }
                for sum in sums.iter_mut().take(S - 1) {
                    if ci < inner {
                        tile_channel(wp, block.add(ci), x_pixel, t.w_width, sum);
                        (wp, ci) = (wp.add(t.w_width), ci + 1);
                    }
                }
                left -= inner;
                if left == 0 {
                    break;
                }
                block_start = block_start.offset(t.x_cblock);
                block = block_start;
                inner = t.x_cb.min(left);
            }
        }
    }
    for s in 1..S {
        for m in 0..M {
            for p in 0..N {
                sums[0][m][p] = V::add(sums[0][m][p], sums[s][m][p]);
            }
        }
    }
    let acc = sums[0];
    // Only loops of constant trip count and small bodies touch the
    // accumulators, so they unroll with the accumulators still in registers
    // (one loop over every case kept them on the stack and cost a tile of 64
    // input channels a fifth of its time).
    match st.chan_offsets {
        None => {
            let (lo, hi) = (V::splat(ep.min), V::splat(ep.max));
            for m in 0..M {
                for p in 0..N {
                    let mut v = acc[m][p];
                    if let Some(r) = st.residual {
                        v = V::add(v, V::load(r.offset(off(p, m))));
                    }
                    V::clamp(v, lo, hi).store(st.out.offset(off(p, m)));
                }
            }
            if ep.activates() {
                // On the stored tile, still in L1; compiled once for the
                // instruction set, not into every tile shape.
                for m in 0..M {
                    let pass = Activate {
                        ep,
                        at: st.out.offset(off(0, m)),
                        count: N,
                        stride: st.pixel as usize,
                        bias: bias.add(m * V::LANES),
                    };
                    // `V`'s instruction set is available: this code runs on it.
                    run_vectorized(V::KIND, &pass);
                }
            }
        }
        Some(offs) => {
            let mut lanes = [[0f32; MAX_LANES]; 2 * TILE];
            for m in 0..M {
                for p in 0..N {
                    acc[m][p].store(lanes[m * N + p].as_mut_ptr());
                }
            }
            for (i, lanes) in lanes.iter().enumerate().take(N * M) {
                let (p, m) = (i % N, i / N);
                let at = off(p, m);
                for (l, &co) in offs.iter().enumerate().take(st.lanes_used) {
                    let mut y = lanes[l];
                    if let Some(r) = st.residual {
                        y += *r.offset(at + co);
                    }
                    let lane_bias = bias.add(m * V::LANES + l);
                    *st.out.offset(at + co) = ep.apply(Scalar(y), lane_bias).0;
                }
            }
        }
    }
}

/// Independent sums per accumulator of a tile of `nm` pixel-vectors: an FMA
/// waits on the one before it into the same register, and about 8 in flight
/// keep the FMA units busy. A tile of one pixel (a 1x1 convolution on a 1x1
/// map: squeeze-excite and classifier layers) summed hundreds of input
/// channels in one chain.
const fn sums_per_accumulator(nm: usize) -> usize {
    match nm {
        1 => 4,
        2 => 3,
        3 => 2,
        _ => 1,
    }
}

/// One input channel of a tile: its `M` weight vectors at `wp` (the next
/// rows prefetched, a packed row being `w_width` floats) times each pixel's
/// value at `xp`, `x_pixel` apart, into `acc`.
// Two-dimensional indexing of the accumulators reads clearest here.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile_channel<V: Vector, const N: usize, const M: usize>(
    wp: *const f32,
    xp: *const f32,
    x_pixel: isize,
    w_width: usize,
    acc: &mut [[V; N]; M],
) {
    let wv: [V; M] = array_of(V::splat(0.0), |m| V::load(wp.add(m * V::LANES)));
    for m in 0..M {
        prefetch(wp.add(PF_AHEAD * w_width + m * V::LANES));
    }
    for p in 0..N {
        let xv = V::splat(*xp.offset(p as isize * x_pixel));
        for m in 0..M {
            acc[m][p] = V::fma(xv, wv[m], acc[m][p]);
        }
    }
}

#[inline(always)]
unsafe fn tile_generic<V: Vector>(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    macro_rules! by_pixels {
        ($($n:literal)*) => {
            match (t.pixels, t.vectors, t.x_pixel) {
                $(($n, 1, _) => tile_n::<V, $n, 1, 0, { sums_per_accumulator($n) }>(x, w, bias, t, st, ep),)*
                $(($n, _, 8) => tile_n::<V, $n, 2, 8, { sums_per_accumulator(2 * $n) }>(x, w, bias, t, st, ep),)*
                $(($n, _, 16) => tile_n::<V, $n, 2, 16, { sums_per_accumulator(2 * $n) }>(x, w, bias, t, st, ep),)*
                $(($n, _, 32) => tile_n::<V, $n, 2, 32, { sums_per_accumulator(2 * $n) }>(x, w, bias, t, st, ep),)*
                $(($n, _, _) => tile_n::<V, $n, 2, 0, { sums_per_accumulator(2 * $n) }>(x, w, bias, t, st, ep),)*
                _ => unreachable!("a tile has 1..=TILE pixels"),
            }
        };
    }
    by_pixels!(1 2 3 4 5 6 7 8 9 10 11 12)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    tile_generic::<Zmm>(x, w, bias, t, st, ep)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    tile_generic::<Ymm>(x, w, bias, t, st, ep)
}

/// Runs one tile.
///
/// # Safety
/// `isa` must be available on this CPU, and every address the tile reads or
/// writes (from `t` and `st`) must lie inside live buffers; `w` holds
/// `kh_total * kw_total * cin * t.w_width` floats and `bias` `t.w_width`.
pub unsafe fn conv_tile(
    isa: Isa,
    x: *const f32,
    w: *const f32,
    bias: *const f32,
    t: &Tile,
    st: &Store,
    ep: Epilogue,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => tile_avx512(x, w, bias, t, st, ep),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => tile_avx2(x, w, bias, t, st, ep),
        _ => tile_generic::<Portable>(x, w, bias, t, st, ep),
    }
}
