//! The compiled model: its steps (one kernel call each), the slots its values
//! live in, and what it tells about itself. `compile/` builds it, `run.rs` and
//! `exec.rs` run it.
//!
//! The fields of `CompiledModel` and `Step` are the contract between
//! `compile/`, which fills them, and `run.rs`, `exec.rs` and `check.rs`, which
//! read them; the rest of the runtime asks the accessors.

use super::kernels::conv::algo::{ConvKernel, DecidedAlgos, KeptWeights, LayerAlgo};
use super::kernels::conv::depthwise::Depthwise;
use super::kernels::conv::int8::QuantConv;
use super::kernels::gather::{Gather, Picking};
use super::kernels::grid_sample::GridSampler;
use super::kernels::matmul::{BatchedMatMul, Dense};
use super::kernels::pool::PoolGeom;
use super::kernels::resize::ResizeGeom;
use super::kernels::roi_align::RoiAligner;
use super::kernels::scatter::Scatter;
use super::kernels::simd::Isa;
use super::kernels::{elementwise, normalize, quantized, tir_step, typed, where_select};
use super::measure::roofline::StepWork;
use super::scratch::Scratch;
use super::storage::Storage;
use crate::core::par;
use crate::graph::{ControlFlow, DType, Op, Span, Tensor, ValueType};
use std::sync::{Arc, Mutex};

/// Where a value lives while the model runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Slot {
    /// f32 elements `[offset, offset + len)` of the arena.
    Arena { offset: usize, len: usize },
    /// A constant of the model (index into `consts`).
    Const(usize),
    /// An f32 graph input, read in place from the caller's tensor (index into
    /// the run's inputs).
    Input(usize),
    /// An f32 graph output, written in place into the tensor the run returns
    /// (index into the graph outputs).
    Output(usize),
    /// A non-f32 value, kept as a tensor (index into the run's boxes).
    Boxed(usize),
}

/// What a step runs.
pub(super) enum Kernel {
    Conv(ConvKernel),
    Depthwise(Depthwise),
    Pool(PoolGeom),
    Resize(ResizeGeom),
    /// GridSample: x (input 0) sampled at the points of a grid (input 1).
    Sampled(GridSampler),
    /// RoiAlign: regions (input 1) of the images (integer input 2) of a
    /// feature map (input 0) pooled into bins.
    RoiAligned(RoiAligner),
    Dense(Dense),
    /// A product by a constant matrix summed in integers: the integer
    /// convolution of a 1x1 window over the rows as pixels (input 0 only).
    IntegerDense(Box<QuantConv>),
    /// A matrix product of two computed operands, batched.
    MatMul(BatchedMatMul),
    /// A matrix product of two computed operands on grids, summed in
    /// integers and rounded onto the output's grid.
    QuantizedMatMul(Box<quantized::QuantizedMatMul>),
    Gather(Gather),
    /// Rows or elements of f32 data (input 0) picked by run-time integer
    /// indices (input 1): an embedding lookup, a GatherElements.
    Picked(Picking),
    /// A chain of unary and binary ops in one pass, operands broadcast.
    Elementwise(elementwise::Elementwise),
    /// Where: a boolean mask (input 0) picks input 1 or 2, broadcast.
    Select(where_select::Select),
    /// Softmax, layer normalization or mean over contiguous rows.
    Normalize(normalize::RowKernel),
    /// A softmax over rows of values on a byte grid, rounded onto another.
    QuantizedSoftmax(quantized::QuantizedSoftmax),
    /// A tensor of another type converted to f32.
    ToF32,
    /// A tensor converted to a type other than f32 (the cast of the reference).
    Cast(crate::ops::Cast),
    /// A tensor's bytes read as elements of another type of the same width.
    BitCast(DType),
    /// The determinant of each row-major f32 matrix of this many rows.
    Det(usize),
    /// Counts of a pool's n-grams in integer rows (`ops::NgramCounts::run`).
    NgramCounts(Box<crate::ops::NgramCounts>),
    /// Values rounded onto grids fitted to their ranges (`ops::DynamicQuantize`).
    DynamicQuantize(quantized::DynamicQuantizer),
    /// An elementwise op on integers or booleans, or a comparison.
    Typed(typed::Typed),
    /// ReduceSum, Max, ... of integers, or Max/Min of booleans.
    Reduced(typed::Reduced),
    /// CumSum or CumProd of integers.
    Scanned(typed::Scanned),
    /// A data movement of integers or booleans.
    Moved(typed::Moved),
    /// ArgMax or ArgMin of f32 values.
    Arg(typed::ArgBest),
    TopK(typed::TopKBest),
    /// NMS or SSD post-processing: a sequential selection over row-major f32
    /// inputs, run by the op's own host function (`ops::Detection::run`).
    Detection(crate::ops::Detection),
    /// Rows or elements of a tensor that is not f32 picked by run-time indices.
    Gathered(typed::Gathered),
    /// ScatterND or ScatterElements of f32 data (input 0) and updates (input
    /// 2) at run-time indices (input 1).
    Scatter(Scatter),
    /// The same on tensors of another type.
    Scattered(Scatter),
    /// A non-f32 tensor given a new shape (same elements).
    Rebox(Vec<usize>),
    Copy,
    /// The op's TIR default schedule, compiled.
    Tir(Box<tir_step::TirKernel>),
    /// The reference executor's implementation of `op`.
    Fallback {
        op: Op,
        outputs: Vec<ValueType>,
    },
    /// If, Loop or Scan: the op's iterations, each subgraph run as a compiled
    /// model of its own.
    Control(Box<ControlKernel>),
}

/// A control-flow op with its subgraphs compiled, in the order the op numbers them.
pub(super) struct ControlKernel {
    pub(super) op: ControlFlow,
    pub(super) outputs: Vec<ValueType>,
    pub(super) subgraphs: Vec<CompiledModel>,
}

impl Kernel {
    /// Elements of working memory the kernel needs while it runs.
    pub(super) fn scratch_len(&self) -> usize {
        match self {
            Kernel::Conv(c) => c.scratch_len(),
            Kernel::IntegerDense(c) => c.scratch_len(),
            Kernel::MatMul(m) => m.scratch_len(),
            Kernel::QuantizedMatMul(m) => m.scratch_len(),
            _ => 0,
        }
    }

    /// What a step's kind says of the kernel: " (table)" for an elementwise
    /// chain looked up by its operand's byte.
    pub(super) fn table_suffix(&self) -> &'static str {
        match self {
            Kernel::Elementwise(e) if e.is_table() => " (table)",
            _ => "",
        }
    }

    /// The element offset at which the kernel's output is a contiguous copy of
    /// its input, if it is one.
    pub(super) fn view_offset(&self) -> Option<usize> {
        match self {
            Kernel::Copy => Some(0),
            Kernel::Gather(g) => g.view_offset(),
            _ => None,
        }
    }
}

/// One kernel call of the compiled model.
pub(super) struct Step {
    /// The name of the graph node the step computes (the last one of a fused chain).
    pub(super) name: String,
    /// What the step does, e.g. "Conv+BatchNormalization+Relu".
    pub(super) kind: String,
    pub(super) spans: Vec<Span>,
    pub(super) kernel: Kernel,
    pub(super) inputs: Vec<Slot>,
    /// Shapes of the inputs, for fallbacks that rebuild tensors.
    pub(super) input_types: Vec<ValueType>,
    pub(super) outputs: Vec<Slot>,
    /// Working memory of the kernel, live during this step only.
    pub(super) scratch: Option<Slot>,
    pub(super) work: StepWork,
    /// The milliseconds the cost model measured for its kernel, if it did.
    pub(super) measured_ms: Option<f64>,
    /// How each output is stored, for `run_checked`.
    pub(super) storage: Vec<Storage>,
}

/// A model compiled for this CPU.
pub struct CompiledModel {
    pub(super) steps: Vec<Step>,
    /// Constants the steps read (shared with the graph, not copied).
    pub(super) consts: Vec<Tensor>,
    pub(super) boxes: usize,
    pub(super) arena_len: usize,
    pub(super) inputs: Vec<(String, ValueType, Slot)>,
    pub(super) outputs: Vec<(ValueType, Slot)>,
    pub(super) pool: Arc<par::Pool>,
    /// The memory of the last run, reused by the next one.
    pub(super) scratch: Mutex<Scratch>,
    pub(super) isa: Isa,
    pub(super) conv_algos: Vec<LayerAlgo>,
    /// What was made from the weights of its convolution steps.
    pub(super) kept_weights: Vec<KeptWeights>,
}

impl CompiledModel {
    /// Each step's work and, where the cost model measured its kernel, its
    /// milliseconds, in the order the steps run.
    pub(super) fn step_costs(&self) -> impl Iterator<Item = (StepWork, Option<f64>)> + '_ {
        self.steps.iter().map(|s| (s.work, s.measured_ms))
    }

    /// The algorithm of every convolution step, in the order the steps run.
    pub fn conv_steps(&self) -> &[LayerAlgo] {
        &self.conv_algos
    }

    /// How many steps are matrix products summed in integers.
    pub fn integer_dense_steps(&self) -> usize {
        let integer = |s: &&Step| {
            matches!(
                s.kernel,
                Kernel::IntegerDense(_) | Kernel::QuantizedMatMul(_)
            )
        };
        self.steps.iter().filter(integer).count()
    }

    /// How many steps are depthwise (or narrow-group) convolutions summed in
    /// integers.
    pub fn integer_depthwise_steps(&self) -> usize {
        let integer = |s: &&Step| matches!(&s.kernel, Kernel::Depthwise(d) if d.sums_integers());
        self.steps.iter().filter(integer).count()
    }

    /// What a compile of the same model at another input shape takes from
    /// this one: each convolution step's algorithm and packed weights.
    pub fn decided_algos(&self) -> DecidedAlgos {
        DecidedAlgos::new(&self.conv_algos, &self.kept_weights)
    }

    /// The instruction set the kernels use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Worker threads the model runs on.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Bytes of the intermediate-value arena.
    pub fn arena_bytes(&self) -> usize {
        self.arena_len * 4
    }
    /// The steps that run on the reference executor (no native kernel, no loop
    /// nest): their names, ops and source layers, those of the compiled
    /// subgraphs of control flow included.
    pub fn fallback_steps(&self) -> Vec<(String, String, Vec<Span>)> {
        let mut found = vec![];
        for s in &self.steps {
            match &s.kernel {
                Kernel::Fallback { .. } => {
                    found.push((s.name.clone(), s.kind.clone(), s.spans.clone()))
                }
                Kernel::Control(k) => {
                    found.extend(k.subgraphs.iter().flat_map(|m| m.fallback_steps()))
                }
                _ => {}
            }
        }
        found
    }

    /// How many steps there are, those of the compiled subgraphs of control
    /// flow included (what [`Self::fallback_steps`] is counted against).
    pub fn step_count(&self) -> usize {
        (self.steps.iter())
            .map(|s| match &s.kernel {
                Kernel::Control(k) => 1 + k.subgraphs.iter().map(|m| m.step_count()).sum::<usize>(),
                _ => 1,
            })
            .sum()
    }

    /// One line per step: what it does and whether it is native or a fallback.
    pub fn describe(&self) -> Vec<String> {
        self.steps
            .iter()
            .map(|s| {
                let how = if matches!(s.kernel, Kernel::Fallback { .. }) {
                    "fallback (reference)"
                } else {
                    "native"
                };
                format!("{} [{}] {how}", s.name, s.kind)
            })
            .collect()
    }
}
