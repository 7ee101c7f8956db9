//! Typed operators of the graph IR.
//!
//! Inputs that ONNX passes as tensors but that describe the operation (a reshape's
//! target shape, slice bounds, pads, reduction axes, clip bounds, resize sizes) are
//! resolved at import and held here as typed attributes, so that every later stage
//! sees static, checked parameters. Node inputs are data only.

pub use crate::core::scalar::{BinaryOp, UnaryOp};
use crate::core::{Assumption, DType, Layout, PadValue, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Max,
    Avg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
}

/// Spatial window parameters shared by convolution and pooling.
/// `pads` holds the begin pads of every spatial axis, then the end pads (ONNX order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pads: Vec<usize>,
}

impl Window {
    pub fn spatial_rank(&self) -> usize {
        self.kernel.len()
    }

    pub fn pad_begin(&self, axis: usize) -> usize {
        self.pads[axis]
    }

    pub fn pad_end(&self, axis: usize) -> usize {
        self.pads[axis + self.kernel.len()]
    }
}

/// Convolution, NC* data and OI* weights: inputs x, w, optional bias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conv {
    pub window: Window,
    pub group: usize,
}

/// Transposed convolution: inputs x, w (C x M/group x k...), optional bias.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvTranspose {
    pub window: Window,
    pub group: usize,
    pub output_padding: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    pub kind: PoolKind,
    pub window: Window,
    pub ceil_mode: bool,
    /// Average pooling: whether padded positions count in the divisor.
    pub count_include_pad: bool,
}

/// One sliced axis, with start/end already clamped to the axis (end may be -1
/// for a negative step that runs to the front).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceAxis {
    pub axis: usize,
    pub start: i64,
    pub end: i64,
    pub step: i64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    Constant(f32),
    Reflect,
    Edge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    Nearest,
    Linear,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoordTransform {
    HalfPixel,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Resize {
    pub mode: ResizeMode,
    pub coord: CoordTransform,
    pub nearest: NearestMode,
    /// Scale per axis (output / input), as the coordinate transform uses it.
    pub scales: Vec<f32>,
    /// Output extent per axis.
    pub sizes: Vec<usize>,
}

/// An operator with typed attributes. The comment on each names its data inputs.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input (no inputs).
    Input,
    /// A constant: an initializer or a folded value (no inputs).
    Constant(Tensor),
    /// x, w, [bias]
    Conv(Conv),
    /// x, w, [bias]
    ConvTranspose(ConvTranspose),
    /// x, scale, bias, mean, var
    BatchNorm { epsilon: f32 },
    /// x
    Unary(UnaryOp),
    /// a, b (broadcast)
    Binary(BinaryOp),
    /// cond, x, y (broadcast)
    Where,
    /// x
    Pool(Pool),
    /// x: N C spatial... -> N C 1...
    GlobalPool(PoolKind),
    /// a, b, [c]: alpha * op(a) op(b) + beta * c
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    /// a, b (numpy matmul semantics)
    MatMul,
    /// x: same elements, new shape (also Flatten, Squeeze, Unsqueeze).
    Reshape { shape: Vec<usize> },
    /// x
    Transpose { perm: Vec<usize> },
    /// x0, x1, ...
    Concat { axis: usize },
    /// x -> one output per size
    Split { axis: usize, sizes: Vec<usize> },
    /// x
    Slice { axes: Vec<SliceAxis> },
    /// data, indices (indices already non-negative-normalised when constant)
    Gather { axis: usize },
    /// x; `begins`/`ends` per axis, negative values crop.
    Pad {
        begins: Vec<i64>,
        ends: Vec<i64>,
        mode: PadMode,
    },
    /// x
    Resize(Resize),
    /// x
    Softmax { axis: usize },
    /// x
    LogSoftmax { axis: usize },
    /// x
    Reduce {
        kind: ReduceKind,
        axes: Vec<usize>,
        keepdims: bool,
    },
    /// x, scale, [bias]: normalises over axes axis..rank
    LayerNorm { axis: usize, epsilon: f32 },
    /// x
    Cast { to: DType },
    /// x -> broadcast to `shape` (the full output shape)
    Expand { shape: Vec<usize> },
    /// x
    Tile { repeats: Vec<usize> },
    /// x (also Dropout in inference)
    Identity,
    /// x, stored in `from` -> the same logical tensor (of shape `logical`)
    /// stored in `to`; padding positions of the output hold `pad`.
    LayoutTransform {
        from: Layout,
        to: Layout,
        logical: Vec<usize>,
        pad: PadValue,
    },
    /// x -> x with `begins`/`ends` more elements on each axis, holding `value`.
    PadWith {
        begins: Vec<usize>,
        ends: Vec<usize>,
        value: PadValue,
    },
    /// x -> x without `begins`/`ends` elements on each axis; `assume` states
    /// what the removed elements hold, and who said so.
    Crop {
        begins: Vec<usize>,
        ends: Vec<usize>,
        assume: Option<Assumption>,
    },
    /// An op the planner placed in storage layouts: `inner` keeps its logical
    /// meaning; the inputs and outputs are physical tensors in the given layouts.
    InLayout(Box<LaidOut>),
}

impl Op {
    /// A short name for reports and errors.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Op::Input => "Input",
            Op::Constant(_) => "Constant",
            Op::Conv(_) => "Conv",
            Op::ConvTranspose(_) => "ConvTranspose",
            Op::BatchNorm { .. } => "BatchNormalization",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "Where",
            Op::Pool(p) => match p.kind {
                PoolKind::Max => "MaxPool",
                PoolKind::Avg => "AveragePool",
            },
            Op::GlobalPool(PoolKind::Max) => "GlobalMaxPool",
            Op::GlobalPool(PoolKind::Avg) => "GlobalAveragePool",
            Op::Gemm { .. } => "Gemm",
            Op::MatMul => "MatMul",
            Op::Reshape { .. } => "Reshape",
            Op::Transpose { .. } => "Transpose",
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Slice { .. } => "Slice",
            Op::Gather { .. } => "Gather",
            Op::Pad { .. } => "Pad",
            Op::Resize(_) => "Resize",
            Op::Softmax { .. } => "Softmax",
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::Reduce { kind, .. } => match kind {
                ReduceKind::Sum => "ReduceSum",
                ReduceKind::Mean => "ReduceMean",
                ReduceKind::Max => "ReduceMax",
            },
            Op::LayerNorm { .. } => "LayerNormalization",
            Op::Cast { .. } => "Cast",
            Op::Expand { .. } => "Expand",
            Op::Tile { .. } => "Tile",
            Op::Identity => "Identity",
            Op::LayoutTransform { .. } => "LayoutTransform",
            Op::PadWith { .. } => "PadWith",
            Op::Crop { .. } => "Crop",
            Op::InLayout(l) => l.inner.kind_name(),
        }
    }

    /// Number of outputs the op produces.
    pub fn num_outputs(&self) -> usize {
        match self {
            Op::InLayout(l) => l.inner.num_outputs(),
            Op::Split { sizes, .. } => sizes.len(),
            _ => 1,
        }
    }
}

/// The storage of an op's inputs and outputs, as the planner chose it.
#[derive(Clone, Debug, PartialEq)]
pub struct LaidOut {
    pub inner: Op,
    /// Layout and logical shape of each input.
    pub inputs: Vec<(Layout, Vec<usize>)>,
    /// Layout of each output, and what its padding holds.
    pub outputs: Vec<(Layout, PadValue)>,
}
