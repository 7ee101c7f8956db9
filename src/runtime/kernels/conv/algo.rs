//! Which algorithm computes each convolution: the direct register-tiled kernel
//! (`direct.rs`; a 1x1 convolution runs there as one matrix product over the
//! plane), a Winograd transform (`winograd.rs`, 3x3 stride-1 only) or, for
//! groups narrower than a vector, the depthwise kernel's lanes (`depthwise.rs`,
//! every output channel in its own lane reading its group's) or, for few
//! output channels per group in NCHW, output columns in the lanes
//! (`pixel_lanes.rs`). A convolution whose input lies on a quantization grid
//! and whose weights on per-channel ones sums its integers exactly
//! (`int8.rs`) under `auto`, as its quantized source layer specifies. Under
//! `auto`, each candidate runs a few times at the layer's shape on the model's
//! threads, its weights flushed from the caches as a whole model leaves them,
//! and the fastest wins; the times are cached per CPU model,
//! instruction set, thread count and geometry (`measure/conv_times.rs` and
//! `measure/kernel_times.rs`, which the planner's measured costs share), so a
//! second compile measures nothing.
//! A Winograd size whose error on the layer's own weights exceeds
//! [`WINOGRAD_TOLERANCE`] is never chosen.

use super::depthwise::Depthwise;
use super::direct::{ConvGeom, PackedConv, Packs};
use super::int8::{sums_fit, IntegerWeights, QuantConv};
use super::pixel_lanes::PixelLanes;
pub use super::spec::ConvSpec;
use super::tile::{ChannelParams, Epilogue};
use super::winograd::{self, TransformedWeights, WinogradConv, WinogradTile};
use crate::core::{parse_choice, UnknownChoice};
use crate::graph::Span;
use crate::runtime::kernels::quantized::Grid;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

/// The algorithm `--conv-algo` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvAlgoChoice {
    /// Measure the candidates, run the fastest accurate one; a quantized
    /// convolution sums its integers exactly.
    #[default]
    Auto,
    /// The direct kernel everywhere.
    Direct,
    /// Winograd wherever it applies and is accurate enough: F(4x4), else F(2x2).
    Winograd,
}

impl ConvAlgoChoice {
    /// Every choice, in the order `--help` lists them.
    pub const ALL: [ConvAlgoChoice; 3] = [
        ConvAlgoChoice::Direct,
        ConvAlgoChoice::Winograd,
        ConvAlgoChoice::Auto,
    ];

    /// The choice as `--conv-algo` spells it.
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgoChoice::Auto => "auto",
            ConvAlgoChoice::Direct => "direct",
            ConvAlgoChoice::Winograd => "winograd",
        }
    }
}

impl std::str::FromStr for ConvAlgoChoice {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        parse_choice(s, "a convolution algorithm", &Self::ALL, Self::name)
    }
}

/// The algorithm a convolution runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvAlgo {
    /// The register-tiled direct kernel.
    Direct,
    /// A 1x1 convolution without padding: the direct kernel as one matrix
    /// product over the whole plane (with a stride, over the pixels it reads).
    Pointwise,
    /// One filter per channel.
    Depthwise,
    /// Narrow groups, each output channel in a lane of its own (the
    /// depthwise kernel spreading its group's input channels over it).
    LaneGroups,
    /// Few output channels per group in NCHW, output columns in the lanes.
    PixelLanes,
    /// Winograd with this output tile.
    Winograd(WinogradTile),
    /// Exact integer sums of a quantized input and weights.
    Int8,
}

impl ConvAlgo {
    /// The kernel that runs it, as the kernel times cache names it.
    pub(in crate::runtime) fn kernel(self) -> &'static str {
        match self {
            ConvAlgo::Depthwise => "depthwise",
            _ => "conv",
        }
    }
}

impl fmt::Display for ConvAlgo {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            ConvAlgo::Direct => "direct",
            ConvAlgo::Pointwise => "1x1-gemm",
            ConvAlgo::Depthwise => "depthwise",
            ConvAlgo::LaneGroups => "lane-groups",
            ConvAlgo::PixelLanes => "pixel-lanes",
            ConvAlgo::Int8 => "int8",
            ConvAlgo::Winograd(WinogradTile::F2) => "winograd-f2",
            ConvAlgo::Winograd(WinogradTile::F4) => "winograd-f4",
        })
    }
}

/// The most relative error (max abs error over max magnitude, against an f64
/// convolution) a Winograd size may show on a layer. Errors of consecutive
/// layers add up, so this is well below the 1e-4 a whole model is held to.
pub const WINOGRAD_TOLERANCE: f64 = 1e-5;

/// Where the measured times are cached, and whether to measure at all.
#[derive(Clone, Debug, Default)]
pub struct ConvAlgoOptions {
    /// What to run.
    pub choice: ConvAlgoChoice,
    /// The cache folder (`roofline::cache_dir`); `None`: measure every time.
    pub cache: Option<PathBuf>,
    /// Algorithms already decided for these layers (at another input shape of
    /// the same model): each is run again wherever it is still a candidate,
    /// without measuring.
    pub decided: Option<Arc<DecidedAlgos>>,
}

/// What a compile of the same model at another input shape takes from one
/// compiled before: the algorithm of each convolution step, by the step's
/// source layers, and what was made from each step's weights (packed and
/// transformed weights), which does not depend on the extents. The weights
/// are checked to be the same by a fingerprint. A layer's best algorithm
/// depends on its extents, but less than it costs to measure every layer at
/// every shape.
#[derive(Clone, Default)]
pub struct DecidedAlgos {
    algos: HashMap<Vec<Span>, ConvAlgo>,
    weights: HashMap<Vec<Span>, KeptWeights>,
}

/// What was made from one convolution step's weights, and the fingerprint
/// ([`weights_print`]) of those weights.
#[derive(Clone)]
pub(in crate::runtime) struct KeptWeights {
    pub layer: Vec<Span>,
    pub print: u64,
    pub shared: Arc<SharedWeights>,
}

impl DecidedAlgos {
    /// What `layers` run, with what `kept` made from their weights.
    pub(in crate::runtime) fn new(layers: &[LayerAlgo], kept: &[KeptWeights]) -> DecidedAlgos {
        DecidedAlgos {
            algos: (layers.iter())
                .map(|l| (l.spans.clone(), l.decision.algo))
                .collect(),
            weights: kept.iter().map(|k| (k.layer.clone(), k.clone())).collect(),
        }
    }

    /// The algorithm decided for the step of these source layers.
    pub fn get(&self, layer: &[Span]) -> Option<ConvAlgo> {
        self.algos.get(layer).copied()
    }

    /// What was made from the weights of the step of these source layers,
    /// if the spec has the same weights (`print`, its [`weights_print`]).
    pub(in crate::runtime) fn shared(
        &self,
        layer: &[Span],
        print: u64,
    ) -> Option<Arc<SharedWeights>> {
        let kept = self.weights.get(layer)?;
        (kept.print == print).then(|| kept.shared.clone())
    }
}

impl fmt::Debug for DecidedAlgos {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "DecidedAlgos({} layers, {} with their weights' packings)",
            self.algos.len(),
            self.weights.len()
        )
    }
}

/// A fingerprint of weights (length and every bit), to know the same weights
/// again: four independent FNV-style lanes, so it runs near memory speed.
pub(in crate::runtime) fn weights_print(w: &[f32]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut lanes = [0xcbf2_9ce4_8422_2325u64 ^ w.len() as u64; 4];
    let chunks = w.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        for (h, x) in lanes.iter_mut().zip(c) {
            *h = (*h ^ x.to_bits() as u64).wrapping_mul(PRIME);
        }
    }
    for (h, x) in lanes.iter_mut().zip(tail) {
        *h = (*h ^ x.to_bits() as u64).wrapping_mul(PRIME);
    }
    lanes
        .iter()
        .fold(0, |a, &h| (a ^ h).wrapping_mul(PRIME).rotate_left(29))
}

/// How one convolution's algorithm was chosen, for `plan` and the profile.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvDecision {
    /// The algorithm run.
    pub algo: ConvAlgo,
    /// Each candidate's measured milliseconds (auto only).
    pub millis: Vec<(ConvAlgo, f64)>,
    /// Each Winograd size's relative error on the layer.
    pub errors: Vec<(ConvAlgo, f64)>,
}

impl fmt::Display for ConvDecision {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.algo)?;
        let times: Vec<String> = self
            .millis
            .iter()
            .map(|(a, ms)| format!("{a} {ms:.3} ms"))
            .collect();
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(a, e)| format!("{a} error {e:.1e}"))
            .collect();
        let details: Vec<String> = [times.join(", "), errors.join(", ")]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if !details.is_empty() {
            write!(f, " ({})", details.join("; "))?;
        }
        Ok(())
    }
}

impl ConvDecision {
    /// The measured milliseconds of the algorithm taken, if it was measured.
    pub fn measured_ms(&self) -> Option<f64> {
        let (_, ms) = self.millis.iter().find(|(a, _)| *a == self.algo)?;
        Some(*ms)
    }
}

impl From<ConvAlgo> for ConvDecision {
    /// An algorithm taken without measuring or checking anything.
    fn from(algo: ConvAlgo) -> ConvDecision {
        ConvDecision {
            algo,
            millis: vec![],
            errors: vec![],
        }
    }
}

/// The algorithm of one convolution step of a compiled model.
#[derive(Clone, Debug)]
pub struct LayerAlgo {
    /// The step's name (its last node's).
    pub name: String,
    /// The source layers of the step.
    pub spans: Vec<Span>,
    /// The algorithm and how it was chosen.
    pub decision: ConvDecision,
}

/// A dense convolution's kernel.
pub enum ConvKernel {
    /// The register-tiled direct kernel.
    Direct(Box<PackedConv>),
    /// A Winograd transform.
    Winograd(Box<WinogradConv>),
    /// Narrow groups in the lanes of the depthwise kernel.
    LaneGroups(Box<Depthwise>),
    /// Output columns in the lanes.
    PixelLanes(Box<PixelLanes>),
    /// Exact integer sums of quantized values.
    Int8(Box<QuantConv>),
}

impl ConvKernel {
    /// Elements of working memory `run` needs.
    pub fn scratch_len(&self) -> usize {
        match self {
            ConvKernel::Direct(c) => c.scratch_len(),
            ConvKernel::Winograd(c) => c.scratch_len(),
            ConvKernel::Int8(c) => c.scratch_len(),
            ConvKernel::LaneGroups(_) | ConvKernel::PixelLanes(_) => 0,
        }
    }

    /// The packed weights every run reads.
    pub(in crate::runtime) fn weights(&self) -> &[f32] {
        match self {
            ConvKernel::Direct(c) => c.weights(),
            ConvKernel::Winograd(c) => c.weights(),
            ConvKernel::LaneGroups(c) => c.weights(),
            ConvKernel::PixelLanes(c) => c.weights(),
            ConvKernel::Int8(c) => c.weights(),
        }
    }

    /// Computes `y` from `x` (and the residual, laid out like `y`).
    pub fn run(&self, x: &[f32], residual: Option<&[f32]>, y: &mut [f32], scratch: &mut [f32]) {
        match self {
            ConvKernel::Direct(c) => c.run(x, residual, y, scratch),
            ConvKernel::Winograd(c) => c.run(x, residual, y, scratch),
            ConvKernel::LaneGroups(c) => c.run(x, residual, y),
            ConvKernel::PixelLanes(c) => c.run(x, residual, y),
            ConvKernel::Int8(c) => c.run(x, residual, y, scratch),
        }
    }
}

impl ConvSpec<'_> {
    fn direct(&self, shared: &SharedWeights) -> PackedConv {
        let (g, w) = (self.geom.clone(), self.w);
        let staged = (self.pad_fill, true);
        PackedConv::build(
            g,
            self.isa,
            w,
            self.params,
            self.epilogue,
            staged,
            &shared.packs,
        )
    }

    fn winograd(&self, u: &TransformedWeights, shared: &SharedWeights) -> WinogradConv {
        let (g, w) = (self.geom.clone(), self.w);
        let border =
            PackedConv::for_regions(&shared.packs, g, self.isa, w, self.params, self.epilogue);
        WinogradConv::with_border(
            self.geom.clone(),
            self.isa,
            u,
            border,
            self.params,
            self.epilogue,
            self.pad_fill,
            self.threads,
        )
    }

    /// The kernel of `algo` (a Winograd tile, lane groups, else the direct
    /// kernel), its transformed weights taken from `shared`.
    pub(in crate::runtime) fn kernel(&self, algo: ConvAlgo, shared: &SharedWeights) -> ConvKernel {
        match algo {
            ConvAlgo::Winograd(t) => ConvKernel::Winograd(Box::new(
                self.winograd(&shared.transformed(self, t), shared),
            )),
            ConvAlgo::LaneGroups => ConvKernel::LaneGroups(Box::new(Depthwise::new(
                self.geom.clone(),
                self.isa,
                self.w,
                self.params,
                self.epilogue,
                self.pad_fill,
            ))),
            ConvAlgo::PixelLanes => ConvKernel::PixelLanes(Box::new(PixelLanes::new(
                self.geom.clone(),
                self.isa,
                self.w,
                self.params,
                self.epilogue,
            ))),
            ConvAlgo::Int8 => {
                let k = self
                    .quantized(shared)
                    .and_then(|(grid, w)| QuantConv::new(self, grid, w));
                match k {
                    Some(k) => ConvKernel::Int8(Box::new(k)),
                    // Never offered then (`candidates` asks `quantized` too).
                    None => ConvKernel::Direct(Box::new(self.direct(shared))),
                }
            }
            _ => ConvKernel::Direct(Box::new(self.direct(shared))),
        }
    }

    /// The input's grid and the integer weights, when the input lies on a
    /// grid of bytes, the weights on grids of signed bytes and their sums
    /// fit in i32: what the integer kernel needs.
    fn quantized<'s>(&self, shared: &'s SharedWeights) -> Option<(Grid, &'s IntegerWeights)> {
        let grid = match self.dynamic {
            Some(op) => Grid::any_fitted(&op),
            None => self.grid.filter(Grid::fits_a_byte)?,
        };
        sums_fit(&self.geom).then_some(())?;
        Some((grid, shared.integer(self)?))
    }
}

/// What every kernel built from one convolution's weights shares, computed
/// once: each Winograd size's error on the layer and its transformed weights,
/// neither of which depends on the layouts. The planner keeps one per weight
/// tensor over the layouts it measures the convolution in.
#[derive(Default)]
pub(in crate::runtime) struct SharedWeights {
    errors: OnceLock<Vec<(ConvAlgo, f64)>>,
    transformed: Mutex<Vec<TransformedWeights>>,
    integer: OnceLock<Option<IntegerWeights>>,
    packs: Packs,
}

impl SharedWeights {
    /// The spec's weights as integers, if they lie on grids of signed bytes.
    fn integer(&self, spec: &ConvSpec) -> Option<&IntegerWeights> {
        self.integer
            .get_or_init(|| IntegerWeights::recover(spec.w, spec.geom.cout))
            .as_ref()
    }

    /// Each Winograd size's relative error on the spec's weights.
    fn errors(&self, spec: &ConvSpec, store: &mut dyn ErrorsStore) -> Vec<(ConvAlgo, f64)> {
        self.errors
            .get_or_init(|| winograd_errors(spec, &TILES, store))
            .clone()
    }

    /// The spec's weights transformed for `tile`.
    fn transformed(&self, spec: &ConvSpec, tile: WinogradTile) -> TransformedWeights {
        let mut done = self.transformed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(u) = done.iter().find(|u| u.tile() == tile) {
            return u.clone();
        }
        let g = &spec.geom;
        let u = TransformedWeights::new(tile, spec.isa, g.cin, g.cout, spec.w);
        done.push(u.clone());
        u
    }

    /// Drops what `algo`'s kernel does not use: what measuring the other
    /// candidates made, kept from one compile to the next. The direct
    /// packing serves the direct kernels and Winograd's border.
    pub(in crate::runtime) fn keep_for(&self, algo: ConvAlgo) {
        let mut done = self.transformed.lock().unwrap_or_else(|e| e.into_inner());
        done.retain(|u| algo == ConvAlgo::Winograd(u.tile()));
        let packed = matches!(
            algo,
            ConvAlgo::Direct | ConvAlgo::Pointwise | ConvAlgo::Winograd(_)
        );
        if !packed {
            self.packs.clear();
        }
    }

    /// Drops the transformed weights (1.8x or 4x the weights) and packed
    /// ones, keeping the errors: once the planner has measured a
    /// convolution in every layout.
    pub(in crate::runtime) fn release_made(&self) {
        self.transformed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.packs.clear();
    }
}

/// The Winograd sizes tried, the larger (faster, less accurate) first.
const TILES: [WinogradTile; 2] = [WinogradTile::F4, WinogradTile::F2];

/// The algorithms `options` leaves to choose from for the spec (one: no
/// choice to measure), and each Winograd size's error on the layer.
#[allow(clippy::type_complexity)]
pub(in crate::runtime) fn candidates(
    spec: &ConvSpec,
    options: &ConvAlgoOptions,
    shared: &SharedWeights,
    store: &mut dyn ErrorsStore,
) -> (Vec<ConvAlgo>, Vec<(ConvAlgo, f64)>) {
    let direct = match spec.geom.is_pointwise() {
        true => ConvAlgo::Pointwise,
        false => ConvAlgo::Direct,
    };
    if options.choice == ConvAlgoChoice::Direct {
        return (vec![direct], vec![]);
    }
    let auto = options.choice == ConvAlgoChoice::Auto;
    // A quantized layer's outputs are exact sums of integers, not whatever
    // is fastest (which `direct` and `winograd` still ask for).
    let integers = spec.quantized(shared).is_some();
    if auto && integers && spec.dynamic.is_none() {
        return (vec![ConvAlgo::Int8], vec![]);
    }
    // Measured against the direct kernel where they apply: narrow groups in
    // the channel lanes (with 16-channel groups either may win, by CPU and
    // shape), few output channels with pixels in the lanes, and integer
    // sums where the input is quantized at every run (the float kernels then
    // read the quantized values; few input channels are faster that way).
    let lanes = [
        (spec.geom.groups > 1 && Depthwise::applies(&spec.geom, spec.isa))
            .then_some(ConvAlgo::LaneGroups),
        PixelLanes::applies(&spec.geom).then_some(ConvAlgo::PixelLanes),
        integers.then_some(ConvAlgo::Int8),
    ]
    .into_iter()
    .flatten()
    .filter(|_| auto);
    if !winograd::applies(&spec.geom) {
        return (std::iter::once(direct).chain(lanes).collect(), vec![]);
    }
    let errors = shared.errors(spec, store);
    let accurate = errors
        .iter()
        .filter(|(_, e)| *e <= WINOGRAD_TOLERANCE)
        .map(|&(a, _)| a);
    let candidates = match options.choice {
        ConvAlgoChoice::Winograd => vec![accurate.take(1).next().unwrap_or(ConvAlgo::Direct)],
        _ => std::iter::once(ConvAlgo::Direct)
            .chain(accurate)
            .chain(lanes)
            .collect(),
    };
    (candidates, errors)
}

/// Output channels whose error is checked: the error of a channel depends on
/// its own weights only, so a few spread over the layer stand for all.
const CHECKED_CHANNELS: usize = 8;
/// Side of the input patch the error is checked on: a few tiles of either
/// size, with the layer's padding on both sides.
const CHECKED_SIDE: usize = 10;

/// Where the errors of [`winograd_errors`] are kept from one process to the
/// next (the machine's measured kernel times), by a key of what they are
/// computed from: each costs about a millisecond on 512 channels, and
/// computing them again was most of a warm plan of ResNet50.
pub(in crate::runtime) trait ErrorsStore {
    /// The error of `algo` kept under `key`.
    fn error(&self, key: &[usize], algo: ConvAlgo) -> Option<f64>;
    /// Keeps the error of `algo` under `key`.
    fn keep_error(&mut self, key: &[usize], algo: ConvAlgo, error: f64);
}

/// The relative error of each Winograd size in `tiles` on the layer's
/// weights: max abs error over max magnitude, against an f64 direct
/// convolution, on a patch of reproducible input in [-1, 1) and a few output
/// channels. The f64 convolution is computed once for all sizes. Errors
/// computed before, in this process or one whose `store` this is, are taken
/// from there.
pub(in crate::runtime) fn winograd_errors(
    spec: &ConvSpec,
    tiles: &[WinogradTile],
    store: &mut dyn ErrorsStore,
) -> Vec<(ConvAlgo, f64)> {
    let g = &spec.geom;
    let (cin, channels) = (g.cin, g.cout.min(CHECKED_CHANNELS));
    let picked: Vec<usize> = (0..channels).map(|i| i * g.cout / channels).collect();
    let w: Vec<f32> = picked
        .iter()
        .flat_map(|&o| spec.w[o * cin * 9..][..cin * 9].iter().copied())
        .collect();
    let (h, wd) = (g.h.min(CHECKED_SIDE), g.w.min(CHECKED_SIDE));
    // The same padding after the patch as after the layer's input.
    let pad_end =
        |out: usize, extent: usize, begin: usize| (out + 2).saturating_sub(extent + begin);
    let (pb, pr) = (pad_end(g.oh, g.h, g.pad.0), pad_end(g.ow, g.w, g.pad.1));
    let (oh, ow) = (
        (h + g.pad.0 + pb).saturating_sub(2),
        (wd + g.pad.1 + pr).saturating_sub(2),
    );
    let geom = ConvGeom {
        n: 1,
        cin,
        h,
        w: wd,
        cout: channels,
        oh,
        ow,
        x_cb: 1,
        y_cb: 1,
        ..g.clone()
    };
    // What the errors are computed from: the checked weights by their
    // fingerprint, the patch and the instruction set.
    let print = weights_print(&w);
    let mut key = vec![(print >> 32) as usize, print as u32 as usize];
    key.extend([cin, channels, h, wd, oh, ow, g.pad.0, g.pad.1]);
    key.push(spec.isa as usize);
    let mut known = KNOWN_ERRORS.lock().unwrap_or_else(|e| e.into_inner());
    let known_key = (key, tiles.to_vec());
    if let Some(errors) = known.get(&known_key) {
        return errors.clone();
    }
    let key = &known_key.0;
    let stored: Option<Vec<_>> = (tiles.iter())
        .map(|&t| (store.error(key, ConvAlgo::Winograd(t))).map(|e| (ConvAlgo::Winograd(t), e)))
        .collect();
    let errors = stored.unwrap_or_else(|| {
        let errors = patch_errors(spec, &geom, &w, tiles);
        for &(algo, e) in &errors {
            store.keep_error(key, algo, e);
        }
        errors
    });
    if known.len() >= MAX_KNOWN_ERRORS {
        known.clear();
    }
    known.insert(known_key, errors.clone());
    errors
}

/// Errors computed in this process, by the key they are kept under and the
/// sizes asked for: the planner asks for a layer's in every pair of layouts
/// it measures, and the compiler again for its kernel (about a millisecond
/// each on 512 channels, a tenth of a warm DenseNet121 compile).
static KNOWN_ERRORS: LazyLock<Mutex<HashMap<KnownKey, Errors>>> = LazyLock::new(Mutex::default);

/// The key errors are kept under, and the Winograd sizes asked for.
type KnownKey = (Vec<usize>, Vec<WinogradTile>);

/// Each Winograd size's relative error.
type Errors = Vec<(ConvAlgo, f64)>;
/// Entries kept at most.
const MAX_KNOWN_ERRORS: usize = 1024;

/// The errors of [`winograd_errors`] on the patch `geom` of the checked
/// channels' weights `w`.
fn patch_errors(
    spec: &ConvSpec,
    geom: &ConvGeom,
    w: &[f32],
    tiles: &[WinogradTile],
) -> Vec<(ConvAlgo, f64)> {
    let (cin, channels, h, wd) = (geom.cin, geom.cout, geom.h, geom.w);
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let x: Vec<f32> = (0..cin * h * wd)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    let exact = conv3x3_f64(geom, &x, w);
    let mag = exact.iter().fold(0f64, |m, v| m.max(v.abs()));
    let zero_bias = vec![0f32; channels];
    let check = ConvSpec {
        geom: geom.clone(),
        w,
        params: ChannelParams::bias_only(&zero_bias),
        epilogue: Epilogue::of(None),
        pad_fill: None,
        threads: 1,
        ..*spec
    };
    tiles
        .iter()
        .map(|&tile| {
            let u = TransformedWeights::new(tile, check.isa, cin, channels, w);
            let k = check.winograd(&u, &SharedWeights::default());
            let mut y = vec![0f32; geom.y_len()];
            let mut scratch = vec![0f32; k.scratch_len()];
            k.run(&x, None, &mut y, &mut scratch);
            let err = y
                .iter()
                .zip(&exact)
                .fold(0f64, |e, (&got, want)| e.max((got as f64 - want).abs()));
            let relative = if mag > 0.0 { err / mag } else { err };
            (ConvAlgo::Winograd(tile), relative)
        })
        .collect()
}

/// The 3x3 stride-1 convolution of NCHW `x` (one batch item) with OIHW `w`,
/// in f64: each tap adds over the output pixels whose input it reaches, so
/// the innermost loop checks no bounds (this runs at every compile, and a
/// per-pixel check made it a tenth of a warm ResNet50 compile).
fn conv3x3_f64(g: &ConvGeom, x: &[f32], w: &[f32]) -> Vec<f64> {
    let (h, wd, oh, ow) = (g.h, g.w, g.oh, g.ow);
    let mut y = vec![0f64; g.cout * oh * ow];
    for (o, plane) in y.chunks_exact_mut(oh * ow).enumerate() {
        for i in 0..g.cin {
            for ky in 0..3 {
                let rows = valid_outputs(ky, g.pad.0, oh, h);
                for kx in 0..3 {
                    let cols = valid_outputs(kx, g.pad.1, ow, wd);
                    let tap = w[((o * g.cin + i) * 3 + ky) * 3 + kx] as f64;
                    for oy in rows.clone() {
                        let row = &x[(i * h + oy + ky - g.pad.0) * wd..][..wd];
                        let out = &mut plane[oy * ow..][..ow];
                        for ox in cols.clone() {
                            out[ox] += row[ox + kx - g.pad.1] as f64 * tap;
                        }
                    }
                }
            }
        }
    }
    y
}

/// The outputs `o < outputs` whose input `o + tap - pad` lies in `0..extent`.
fn valid_outputs(tap: usize, pad: usize, outputs: usize, extent: usize) -> std::ops::Range<usize> {
    let lo = pad.saturating_sub(tap).min(outputs);
    let hi = (extent + pad).saturating_sub(tap).clamp(lo, outputs);
    lo..hi
}
