//! Typed operators of the graph IR.
//!
//! Inputs that ONNX passes as tensors but that describe the operation (a reshape's
//! target shape, slice bounds, pads, reduction axes, clip bounds, resize sizes) are
//! resolved at import and held here as typed attributes, so that every later stage
//! sees static, checked parameters. Node inputs are data only.

mod control;
mod conv;
mod data_dependent;
mod detection;
mod dynamic_quantize;
mod elementwise;
mod error;
mod eval;
mod grid_sample;
mod in_layout;
mod index;
mod integer;
mod logical;
mod lrn;
mod matmul;
pub use matmul::determinants;
mod movement;
pub use movement::{transpose, transposed_values};
mod ngram;
pub use ngram::{NgramCounts, NgramWeighting};
mod normalize;
pub mod onnx;
mod pad_flow;
mod pool;
mod reduce;
mod resize;
mod roi_align;
mod scatter;
mod select;
mod shape;
mod source;
pub mod te;
#[cfg(test)]
pub(crate) mod testutil;
mod transform;

pub use crate::core::scalar::{BinaryOp, MathFn, UnaryOp};
use crate::core::{Assumption, DType, Layout, PadFlow, PadValue, Requirement, Tensor, ValueType};
pub use control::{ControlFlow, ControlFlowOp, RunSubgraph};
pub use data_dependent::DataDependent;
pub use detection::{Detection, DetectionPostProcess, NmsPadded};
pub use dynamic_quantize::{DynamicQuantize, FittedGrid};
pub use error::OpError;
pub use eval::eval_op;
pub use grid_sample::{GridPadding, GridSample, Sampling};
pub use integer::IntegerArith;
pub use logical::Logical;
pub use lrn::Lrn;
use onnx::OnnxCx;
pub use pad_flow::{binary_flow, pad_flow, unary_flow};
pub use reduce::{Cumulative, Running};
pub use resize::{is_identity, AxisTaps};
pub use roi_align::{Corners, RegionSamples, RoiAlign, RoiPool};
pub use scatter::{GatherNd, ScatterElements, ScatterNd, ScatterReduction};
pub use select::{ArgKind, ArgReduce, GatherElements, TopK};
pub use shape::{broadcast_shapes, infer_outputs, window_output_extent};
use te::{ComputeCx, Defined, TirError};

/// Which pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// The maximum of the window.
    Max,
    /// The mean of the window.
    Avg,
}

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// The sum.
    Sum,
    /// The mean.
    Mean,
    /// The maximum.
    Max,
    /// The minimum.
    Min,
    /// The product.
    Prod,
}

impl ReduceKind {
    /// The ONNX operator type.
    pub fn onnx_name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "ReduceSum",
            ReduceKind::Mean => "ReduceMean",
            ReduceKind::Max => "ReduceMax",
            ReduceKind::Min => "ReduceMin",
            ReduceKind::Prod => "ReduceProd",
        }
    }

    /// The exact integer reduction: its starting value and how it takes an
    /// element in (wrapping; a mean sums, then divides).
    pub fn integer_fold(self) -> (i128, fn(i128, i128) -> i128) {
        match self {
            ReduceKind::Max => (i128::MIN, i128::max),
            ReduceKind::Min => (i128::MAX, i128::min),
            ReduceKind::Prod => (1, i128::wrapping_mul),
            ReduceKind::Sum | ReduceKind::Mean => (0, i128::wrapping_add),
        }
    }
}

/// Spatial window parameters shared by convolution and pooling.
/// `pads` holds the begin pads of every spatial axis, then the end pads (ONNX order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Window extent per spatial axis.
    pub kernel: Vec<usize>,
    /// Step per spatial axis.
    pub strides: Vec<usize>,
    /// Spacing of window taps per spatial axis.
    pub dilations: Vec<usize>,
    /// Begin pads of every spatial axis, then end pads.
    pub pads: Vec<usize>,
}

impl Window {
    /// Number of spatial axes.
    pub fn spatial_rank(&self) -> usize {
        self.kernel.len()
    }

    /// Pad before spatial axis `axis`.
    pub fn pad_begin(&self, axis: usize) -> usize {
        self.pads[axis]
    }

    /// Pad after spatial axis `axis`.
    pub fn pad_end(&self, axis: usize) -> usize {
        self.pads[axis + self.kernel.len()]
    }
}

/// Convolution, NC* data and OI* weights: inputs x, w, optional bias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conv {
    /// The sliding window.
    pub window: Window,
    /// Number of channel groups (depthwise: the channel count).
    pub group: usize,
}

/// Transposed convolution: inputs x, w (C x M/group x k...), optional bias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvTranspose {
    /// The sliding window (over the output).
    pub window: Window,
    /// Number of channel groups.
    pub group: usize,
    /// Extra output extent at the end of each spatial axis.
    pub output_padding: Vec<usize>,
}

/// The Indices output of MaxPool: the position of each window's maximum (the
/// first, scanning the window row-major) as a flat index into the input, the
/// (batch, channel) plane included. An op of its own, so that the values keep
/// their kernels and unused indices cost nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaxPoolIndices {
    /// The sliding window.
    pub window: Window,
    /// Whether the last window may start in the end padding (output extents round up).
    pub ceil_mode: bool,
    /// ONNX `storage_order` 1: positions within a plane count the spatial axes
    /// column-major (the first fastest).
    pub column_major: bool,
}

/// Pooling over a sliding window: input x.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    /// Maximum or mean.
    pub kind: PoolKind,
    /// The sliding window.
    pub window: Window,
    /// Whether the last window may start in the end padding (output extents round up).
    pub ceil_mode: bool,
    /// Average pooling: whether padded positions count in the divisor.
    pub count_include_pad: bool,
}

/// One sliced axis, with start/end already clamped to the axis (end may be -1
/// for a negative step that runs to the front).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceAxis {
    /// The axis.
    pub axis: usize,
    /// First index taken.
    pub start: i64,
    /// End (exclusive); -1 with a negative step runs to the front.
    pub end: i64,
    /// Step (non-zero).
    pub step: i64,
}

/// What Pad writes outside the input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    /// This value.
    Constant(f32),
    /// The mirror image of the input, without repeating the edge.
    Reflect,
    /// The edge value repeated.
    Edge,
    /// The input repeated periodically (circular padding).
    Wrap,
}

/// How Resize interpolates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    /// The nearest input element.
    Nearest,
    /// Linear interpolation along every resized axis.
    Linear,
    /// Cubic convolution (Keys) along every resized axis.
    Cubic,
}

/// How an output coordinate maps to an input coordinate (ONNX `coordinate_transformation_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoordTransform {
    /// (x + 0.5) / scale − 0.5.
    HalfPixel,
    /// As half_pixel, but 0 where the output extent is 1.
    PytorchHalfPixel,
    /// The corner elements of input and output align.
    AlignCorners,
    /// x / scale.
    Asymmetric,
    /// As half_pixel, shifted so the centres of input and output align when
    /// the output extent is not exactly extent · scale.
    HalfPixelSymmetric,
    /// Output coordinates span the region of interest [`Resize::crop`].
    TfCropAndResize,
}

/// How a fractional input coordinate rounds in nearest mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NearestMode {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
}

/// Resize of x to `sizes`.
#[derive(Clone, Debug, PartialEq)]
pub struct Resize {
    /// Interpolation.
    pub mode: ResizeMode,
    /// Coordinate mapping.
    pub coord: CoordTransform,
    /// Rounding in nearest mode.
    pub nearest: NearestMode,
    /// Scale per axis (output / input), as the coordinate transform uses it.
    pub scales: Vec<f32>,
    /// Output extent per axis.
    pub sizes: Vec<usize>,
    /// The filter of linear and cubic modes.
    pub filter: ResizeFilter,
    /// tf_crop_and_resize: the region of interest per axis (start and end as
    /// fractions of the input), and the value of outputs that map outside the input.
    pub crop: Option<(Vec<(f32, f32)>, f32)>,
}

/// How linear and cubic Resize weigh the input elements.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResizeFilter {
    /// The cubic kernel's coefficient a (ONNX `cubic_coeff_a`).
    pub cubic_a: f32,
    /// Taps outside the input weigh 0 (the rest renormalised) instead of
    /// repeating the edge element.
    pub exclude_outside: bool,
    /// Downscaling widens the filter by 1 / scale: a low-pass against aliasing.
    pub antialias: bool,
}

impl Default for ResizeFilter {
    fn default() -> ResizeFilter {
        ResizeFilter {
            cubic_a: -0.75,
            exclude_outside: false,
            antialias: false,
        }
    }
}

/// An operator with typed attributes. The comment on each names its data inputs.
/// Every variant holds one type implementing [`OpDef`], which says what the op
/// means to every stage.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input (no inputs).
    Input,
    /// A constant: an initializer or a folded value (no inputs).
    Constant(Tensor),
    /// x, w, optional bias
    Conv(Conv),
    /// x, w, optional bias
    ConvTranspose(ConvTranspose),
    /// x, scale, bias, mean, var
    BatchNorm(BatchNorm),
    /// x
    Unary(UnaryOp),
    /// a, b (broadcast)
    Binary(BinaryOp),
    /// cond, x, y (broadcast)
    Where,
    /// a, b (broadcast): Mod and BitShift
    IntegerArith(IntegerArith),
    /// x
    Pool(Pool),
    /// x -> i64 position of each window's maximum (MaxPool's Indices output)
    MaxPoolIndices(MaxPoolIndices),
    /// x: N C spatial... -> N C 1...
    GlobalPool(GlobalPool),
    /// a, b, optional c: alpha · op(a) op(b) + beta · c
    Gemm(Gemm),
    /// a, b (numpy matmul semantics)
    MatMul,
    /// x: [..., M, M] -> [...], the determinant of each matrix
    Det,
    /// x: integer items (C) or (N, C) -> f32 counts of a pool's n-grams
    NgramCounts(NgramCounts),
    /// x: same elements, new shape (also Flatten, Squeeze, Unsqueeze).
    Reshape(Reshape),
    /// x
    Transpose(Transpose),
    /// x0, x1, ...
    Concat(Concat),
    /// x -> one output per size
    Split(Split),
    /// x
    Slice(Slice),
    /// data, indices (indices already non-negative-normalised when constant)
    Gather(Gather),
    /// x
    Pad(Pad),
    /// x
    Resize(Resize),
    /// x, grid: x sampled at the grid's points
    GridSample(GridSample),
    /// x, rois, batch_indices: each region's bins pooled from bilinear samples
    RoiAlign(RoiAlign),
    /// x
    Softmax(Softmax),
    /// x
    LogSoftmax(LogSoftmax),
    /// x
    Reduce(Reduce),
    /// x, scale, optional bias: normalises over axes `axis..rank`
    LayerNorm(LayerNorm),
    /// x: local response normalization across channels
    Lrn(Lrn),
    /// x -> running sums or products along an axis
    Cumulative(Cumulative),
    /// x -> i64 index of the extreme along an axis
    ArgReduce(ArgReduce),
    /// x -> (values, i64 indices) of the k extremes along an axis
    TopK(TopK),
    /// boxes, scores (NMS) or box encodings, class scores, anchors (SSD
    /// post-processing) -> outputs padded to their most detections
    Detection(Detection),
    /// data, indices (same rank)
    GatherElements(GatherElements),
    /// data, indices (index tuples along the last axis)
    GatherNd(GatherNd),
    /// data, indices (index tuples along the last axis), updates
    ScatterNd(ScatterNd),
    /// data, indices, updates (indices' shape)
    ScatterElements(ScatterElements),
    /// bool a, b (And, Or, Xor) or x (Not)
    Logical(Logical),
    /// x
    Cast(Cast),
    /// x (f32) -> x rounded onto a grid of bytes fitted to its range at run time
    DynamicQuantize(DynamicQuantize),
    /// x: each element's bits read as another type of the same width
    BitCast(BitCast),
    /// x -> broadcast to `shape` (the full output shape)
    Expand(Expand),
    /// x
    Tile(Tile),
    /// x (also Dropout in inference)
    Identity,
    /// x, stored in `from` -> the same logical tensor stored in `to`.
    LayoutTransform(LayoutTransform),
    /// x -> x with more elements on each axis, holding a pad value.
    PadWith(PadWith),
    /// x -> x without elements on each axis.
    Crop(Crop),
    /// If, Loop or Scan: the op runs subgraphs; its inputs are its ONNX inputs,
    /// then the values its subgraphs read from the enclosing graph.
    Control(ControlFlow),
    /// An op the planner placed in storage layouts: `inner` keeps its logical
    /// meaning; the inputs and outputs are physical tensors in the given layouts.
    InLayout(Box<LaidOut>),
}

/// The attributes of the ops that have no type of their own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Input;
/// Where: cond, x, y.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Where;
/// MatMul: a, b.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MatMul;

/// Det: the determinant of each square matrix in the last two axes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Det;
/// Identity: x.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Identity;

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct BatchNorm {
    pub epsilon: f32,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct GlobalPool {
    pub kind: PoolKind,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Gemm {
    pub alpha: f32,
    pub beta: f32,
    pub trans_a: bool,
    pub trans_b: bool,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Reshape {
    pub shape: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Transpose {
    pub perm: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Concat {
    pub axis: usize,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Split {
    pub axis: usize,
    pub sizes: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Slice {
    pub axes: Vec<SliceAxis>,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Gather {
    pub axis: usize,
}

/// `begins`/`ends` per axis; negative values crop.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Pad {
    pub begins: Vec<i64>,
    pub ends: Vec<i64>,
    pub mode: PadMode,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Softmax {
    pub axis: usize,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct LogSoftmax {
    pub axis: usize,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Reduce {
    pub kind: ReduceKind,
    pub axes: Vec<usize>,
    pub keepdims: bool,
}

/// LayerNormalization over the axes from `axis` on: (x - mean) / sqrt(var +
/// epsilon) · scale + bias; or, not `centered`, RMSNormalization: x /
/// sqrt(mean(x²) + epsilon) · scale (+ bias), the mean not subtracted. The
/// inputs are x, then optionally the scale (1 without), then the bias.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct LayerNorm {
    pub axis: usize,
    pub epsilon: f32,
    pub centered: bool,
}

/// Conversion to another element type (ONNX Cast).
#[derive(Clone, Debug, PartialEq)]
pub struct Cast {
    /// The element type converted to.
    pub to: DType,
    /// To a float8 format: whether values beyond its range saturate to its
    /// largest finite value (else they become infinity or NaN).
    pub saturate: bool,
}

/// The bits of each element read as another element type of the same width
/// (ONNX BitCast).
#[derive(Clone, Debug, PartialEq)]
pub struct BitCast {
    /// The element type read.
    pub to: DType,
}

/// The full output shape to broadcast to.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Expand {
    pub shape: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Tile {
    pub repeats: Vec<usize>,
}

/// x stored in `from` -> the same logical tensor (of shape `logical`) stored
/// in `to`; padding positions of the output hold `pad`.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct LayoutTransform {
    pub from: Layout,
    pub to: Layout,
    pub logical: Vec<usize>,
    pub pad: PadValue,
}

/// x -> x with `begins`/`ends` more elements on each axis, holding `value`.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct PadWith {
    pub begins: Vec<usize>,
    pub ends: Vec<usize>,
    pub value: PadValue,
}

/// x -> x without `begins`/`ends` elements on each axis; `assume` states what
/// the removed elements hold, and who said so.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub struct Crop {
    pub begins: Vec<usize>,
    pub ends: Vec<usize>,
    pub assume: Option<Assumption>,
}

/// What one operator means to every stage of the compiler, in one place: its
/// shape inference, its reference semantics, how layouts and padding flow
/// through it, its cost, its TIR compute and its ONNX form. Every type an [`Op`]
/// variant holds implements it; stages ask the op instead of matching on it.
pub trait OpDef {
    /// The ONNX operator type (reports, errors, export).
    fn name(&self) -> &'static str;

    /// How many outputs the op produces.
    fn num_outputs(&self) -> usize {
        1
    }

    /// The output types for inputs of the given types (shape inference). Errors
    /// are plain messages; the graph adds the layer's span.
    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError>;

    /// The reference semantics: outputs of exactly the types `outputs` for inputs
    /// already checked against [`OpDef::infer`]. Floats compute in f64.
    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError>;

    /// How the op takes part in layout planning (the default, `Fixed`, runs it
    /// row-major only, which is always correct).
    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Fixed
    }

    /// For an agnostic op: whether it can run with its data stored in `l`
    /// (inputs of types `ins`). Ops whose result ignores the storage order say
    /// yes; ops that slide, split or reduce along an axis check its blocks.
    fn runs_in(&self, l: &Layout, ins: &[&ValueType]) -> bool {
        let _ = (l, ins);
        true
    }

    /// Whether every output element is a copy of an element of its data inputs
    /// (see `moved_inputs`), picked by the attributes and the other (constant)
    /// inputs alone: the runtime then compiles the op to index gathers found
    /// from its own reference semantics.
    fn moves_data(&self) -> bool {
        false
    }

    /// How many of its `inputs` (the first ones) a data movement copies from:
    /// input 0 alone but for ops that join several tensors.
    fn moved_inputs(&self, inputs: usize) -> usize {
        let _ = inputs;
        1
    }

    /// A data movement from its moved inputs (of shapes `xs`) to one output
    /// of shape `out` as reads per output axis ([`AxisRead`]), one list per
    /// input, when its index map splits so: the output element at index `i`
    /// is, for the input whose reads all give an index there, its element
    /// whose index on each walked axis is `reads[a].index[i[a]]` (0 on axes
    /// no output axis walks, which have extent 1); no input's where one of
    /// its entries is `None`. The runtime then finds the sources from the
    /// layouts' offset tables; `None` (the default) leaves it to evaluate
    /// the op on positions.
    fn axis_reads(&self, xs: &[&[usize]], out: &[usize]) -> Option<Vec<Vec<AxisRead>>> {
        let _ = (xs, out);
        None
    }

    /// Floating-point operations for inputs and outputs of these types (the
    /// cost model adds data movement apart). Ops that only move data do none.
    fn flops(&self, ins: &[&ValueType], outs: &[&ValueType]) -> f64 {
        let _ = (ins, outs);
        0.0
    }

    /// The TIR compute definition: adds the op's stages to `cx.g`, reading the
    /// operand placeholders `cx.ph` (of types `cx.types`), stage names suffixed
    /// with `cx.sfx`. The default says the op has none (the runtime then runs it on the
    /// reference executor, and says so).
    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let _ = cx;
        Err(te::unsupported(self.name(), "none is written"))
    }

    /// Names of the operands in compute definitions and listings.
    fn operand_names(&self) -> &'static [&'static str] {
        &["X", "W", "B"]
    }

    /// Writes the op as ONNX nodes into `cx.b`, reading `cx.inputs` (of types
    /// `cx.in_types`); the outputs are named after `cx.outputs` where free.
    /// Returns the output names.
    fn to_onnx(&self, cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let _ = cx;
        Err(OpError::Unsupported(format!(
            "{} has no ONNX form",
            self.name()
        )))
    }

    /// The oldest ONNX opset that has the op with the attributes it uses.
    fn min_onnx_opset(&self) -> i64 {
        17
    }

    /// Pad-value flow: what the op needs in the padding of each input
    /// (`inputs` is what each holds there), given the padded logical axes of
    /// the first input, and what its output's padding then holds. The default
    /// refuses padded axes and promises nothing, which is always safe: it never
    /// lets a rewrite rely on a value nobody established.
    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        refuse_padded(inputs, padded)
    }
}

/// The pad-value flow of an op that cannot run on padded axes: it refuses
/// padding on its first input and promises nothing about its output's.
pub fn refuse_padded(inputs: &[PadValue], padded: &[usize]) -> PadFlow {
    let mut req = vec![Requirement::Any; inputs.len()];
    if !padded.is_empty() && !req.is_empty() {
        req[0] = Requirement::Unsupported;
    }
    PadFlow {
        inputs: req,
        output: PadValue::Undef,
    }
}

/// How an op takes part in layout planning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutRole {
    /// Wants a particular layout: convolution and pooling run fastest in the
    /// target family's layout.
    Source,
    /// Absorbs a transform at no cost: a transpose becomes a relabelling of
    /// axes, a constant is re-packed at compile time.
    Sink,
    /// Runs in whatever layout its operands arrive in (see [`OpDef::runs_in`]).
    Agnostic,
    /// Runs only in the row-major layout.
    Fixed,
}

impl Op {
    /// What the op means: the [`OpDef`] of its attributes.
    pub fn def(&self) -> &dyn OpDef {
        match self {
            Op::Input => &Input,
            Op::Constant(t) => t,
            Op::Conv(c) => c,
            Op::ConvTranspose(c) => c,
            Op::BatchNorm(b) => b,
            Op::Unary(u) => u,
            Op::Binary(b) => b,
            Op::Where => &Where,
            Op::IntegerArith(a) => a,
            Op::Pool(p) => p,
            Op::MaxPoolIndices(p) => p,
            Op::GlobalPool(p) => p,
            Op::Gemm(g) => g,
            Op::MatMul => &MatMul,
            Op::Det => &Det,
            Op::NgramCounts(n) => n,
            Op::Reshape(r) => r,
            Op::Transpose(t) => t,
            Op::Concat(c) => c,
            Op::Split(s) => s,
            Op::Slice(s) => s,
            Op::Gather(g) => g,
            Op::Pad(p) => p,
            Op::Resize(r) => r,
            Op::GridSample(s) => s,
            Op::RoiAlign(r) => r,
            Op::Softmax(s) => s,
            Op::LogSoftmax(s) => s,
            Op::Reduce(r) => r,
            Op::LayerNorm(l) => l,
            Op::Lrn(l) => l,
            Op::Cumulative(c) => c,
            Op::ArgReduce(a) => a,
            Op::TopK(t) => t,
            Op::Detection(d) => d,
            Op::GatherElements(g) => g,
            Op::GatherNd(g) => g,
            Op::ScatterNd(s) => s,
            Op::ScatterElements(s) => s,
            Op::Logical(l) => l,
            Op::Cast(c) => c,
            Op::DynamicQuantize(q) => q,
            Op::BitCast(b) => b,
            Op::Expand(e) => e,
            Op::Tile(t) => t,
            Op::Identity => &Identity,
            Op::LayoutTransform(t) => t,
            Op::PadWith(p) => p,
            Op::Crop(c) => c,
            Op::InLayout(l) => l.as_ref(),
            Op::Control(c) => c.0.as_ref(),
        }
    }

    /// A short name for reports and errors (the ONNX operator type).
    pub fn kind_name(&self) -> &'static str {
        self.def().name()
    }

    /// Number of outputs the op produces.
    pub fn num_outputs(&self) -> usize {
        self.def().num_outputs()
    }

    /// What the op computes: the op a planned graph's `InLayout` wraps, else
    /// the op itself.
    pub fn logical(&self) -> &Op {
        match self {
            Op::InLayout(l) => &l.inner,
            op => op,
        }
    }
}

/// How one output axis of a data movement reads its input (see
/// [`OpDef::axis_reads`]).
#[derive(Clone, Debug, PartialEq)]
pub struct AxisRead {
    /// The input axis the output axis walks; `None` for an output axis that
    /// walks none (an inserted or broadcast leading axis).
    pub axis: Option<usize>,
    /// Per output index, the input index read on `axis` (0 when there is no
    /// axis), `None` where the op writes no input element.
    pub index: Vec<Option<usize>>,
}

impl AxisRead {
    /// Output axis of extent `n` reading input axis `axis` index by index
    /// through `index`.
    pub fn along(axis: usize, n: usize, index: impl Fn(usize) -> Option<usize>) -> AxisRead {
        AxisRead {
            axis: Some(axis),
            index: (0..n).map(index).collect(),
        }
    }
}

/// The storage of an op's inputs and outputs, as the planner chose it.
#[derive(Clone, Debug, PartialEq)]
pub struct LaidOut {
    /// The op on logical tensors.
    pub inner: Op,
    /// Layout and logical shape of each input.
    pub inputs: Vec<(Layout, Vec<usize>)>,
    /// Layout of each output, and what its padding holds.
    pub outputs: Vec<(Layout, PadValue)>,
}
