//! The native runtime: a planned graph compiled once into a list of kernels over
//! one memory arena, then run as often as wanted.
//!
//! Compilation fuses each convolution with the batch norm, residual add and
//! relu/clip that follow it (batch norm folded into the packed weights), packs
//! weights for the micro-kernels, and gives every intermediate f32 value an
//! offset in a single arena, reusing space once a value's last reader has run.
//! Ops without a native kernel run through the reference executor's `eval_op`
//! on the same buffers; the profile names them as fallbacks.

mod activation;
pub mod bench;
pub mod calibrate;
mod compile;
pub mod conv;
pub mod conv_algo;
pub mod depthwise;
mod elementwise;
mod kernel_times;
pub mod kernels;
pub mod load;
mod matmul;
mod normalize;
mod pool;
pub mod roofline;
mod select;
pub mod simd;
pub mod tir_step;
pub mod winograd;

use crate::core::{par, PageBuf};
use crate::fusion::{output_layout, output_shape, FusedGroup};
use crate::graph::{
    format_spans, numel, Graph, GraphError, Op, Span, Tensor, TensorData, ValueRef, ValueType,
};
use crate::layout::Layout;
use compile::Compiler;
use conv_algo::{ConvAlgoOptions, ConvKernel};
use depthwise::Depthwise;
use kernels::Gather;
use matmul::{BatchedMatMul, Dense};
use pool::PoolGeom;
use roofline::StepWork;
use simd::Isa;
use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An error compiling or running a model, naming the graph input or layer.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The number of inputs does not match the model.
    #[error("the model has {expected} inputs, {got} were given")]
    InputCount {
        /// The model's inputs.
        expected: usize,
        /// The inputs given.
        got: usize,
    },
    /// A model input does not fit its declared type.
    #[error("model input '{name}': expected {expected}, got {got}")]
    Input {
        /// The input.
        name: String,
        /// Its declared type.
        expected: String,
        /// The type given.
        got: String,
    },
    /// A layer could not be compiled or run.
    #[error("{}: {message}", format_spans(spans))]
    AtNode {
        /// The layers of the step.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
    /// A TIR step of the layer could not be lowered, compiled or run.
    #[error("{}: {source}", format_spans(spans))]
    Step {
        /// The layers of the step.
        spans: Vec<Span>,
        /// What failed.
        source: tir_step::StepError,
    },
    /// The kernels' instruction set was forced to one this CPU lacks.
    #[error("this CPU cannot run {0} kernels (it has {detected})", detected = Isa::detect())]
    Isa(Isa),
    /// The worker threads could not be started.
    #[error("cannot start {threads} worker threads: {message}")]
    Threads {
        /// How many were asked for.
        threads: usize,
        /// Why not.
        message: String,
    },
    /// The graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// One input of a run: a tensor, or f32 elements in row-major order borrowed
/// from the caller (read in place where the input's slot allows).
#[derive(Clone, Copy, Debug)]
pub enum ModelInput<'a> {
    /// A tensor of any element type.
    Tensor(&'a Tensor),
    /// Row-major f32 elements of the given shape.
    F32 {
        /// Extent of every axis.
        shape: &'a [usize],
        /// The elements.
        data: &'a [f32],
    },
}

impl<'a> ModelInput<'a> {
    fn dtype(&self) -> crate::graph::DType {
        match self {
            ModelInput::Tensor(t) => t.dtype(),
            ModelInput::F32 { .. } => crate::graph::DType::F32,
        }
    }

    fn shape(&self) -> &'a [usize] {
        match self {
            ModelInput::Tensor(t) => &t.shape,
            ModelInput::F32 { shape, .. } => shape,
        }
    }

    fn len(&self) -> usize {
        match self {
            ModelInput::Tensor(t) => t.data.len(),
            ModelInput::F32 { data, .. } => data.len(),
        }
    }

    fn f32s(&self) -> Cow<'a, [f32]> {
        match self {
            ModelInput::Tensor(t) => t.f32s(),
            ModelInput::F32 { data, .. } => Cow::Borrowed(data),
        }
    }

    /// An owned tensor, for the slots that hold one (a copy of borrowed elements).
    fn to_tensor(self) -> Tensor {
        match self {
            ModelInput::Tensor(t) => t.clone(),
            ModelInput::F32 { shape, data } => Tensor::from_f32(shape.to_vec(), data.to_vec()),
        }
    }
}

/// How to compile a model.
#[derive(Clone, Debug, Default)]
pub struct RuntimeOptions {
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// How each convolution's algorithm is chosen.
    pub conv_algo: ConvAlgoOptions,
    /// The instruction set of the hand-written kernels; `None`, the widest
    /// this CPU has. A narrower one runs the same model on the AVX2 or
    /// portable paths (to compare them, or to test them on a wider CPU).
    pub isa: Option<Isa>,
}

impl RuntimeOptions {
    /// `threads` workers (0: one per core), each convolution's algorithm
    /// chosen by measurement and cached per machine beside the roofline peaks,
    /// as the command line does by default.
    pub fn with_threads(threads: usize) -> RuntimeOptions {
        RuntimeOptions {
            threads,
            conv_algo: ConvAlgoOptions {
                choice: Default::default(),
                cache: roofline::cache_dir(),
            },
            isa: None,
        }
    }

    /// The kernels' instruction set: the one asked for, if this CPU has it.
    pub fn kernel_isa(&self) -> Result<Isa, RuntimeError> {
        match self.isa {
            None => Ok(Isa::detect()),
            Some(isa) if isa.available() => Ok(isa),
            Some(isa) => Err(RuntimeError::Isa(isa)),
        }
    }
}

/// The most worker threads a model may use: 4 per core. More only add
/// contention, and a count read from a user (`--threads 100000`) must not
/// start that many threads.
pub fn max_threads() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A pool of `threads` worker threads (0: one per core; at most [`max_threads`]).
fn worker_pool(threads: usize) -> Result<par::Pool, RuntimeError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = match threads {
        0 => cores,
        n if n > max_threads() => {
            return Err(RuntimeError::Threads {
                threads: n,
                message: format!(
                    "more than {} (4 per core) would only compete for {cores} cores",
                    max_threads()
                ),
            })
        }
        n => n,
    };
    par::Pool::new(threads).map_err(|e| RuntimeError::Threads {
        threads,
        message: e.to_string(),
    })
}

/// Where a value lives while the model runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Slot {
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

enum Kernel {
    Conv(ConvKernel),
    Depthwise(Depthwise),
    Pool(PoolGeom),
    Dense(Dense),
    /// A matrix product of two computed operands, batched.
    MatMul(BatchedMatMul),
    Gather(Gather),
    /// Rows of f32 data (input 0) picked by run-time integer indices (input 1):
    /// an embedding lookup.
    Rows(kernels::Rows),
    /// A chain of unary and binary ops in one pass, operands broadcast.
    Elementwise(elementwise::Elementwise),
    /// Where: a boolean mask (input 0) picks input 1 or 2, broadcast.
    Select(select::Select),
    /// Softmax, layer normalization or mean over contiguous rows.
    Normalize(normalize::RowKernel),
    /// An integer or boolean tensor converted to f32.
    ToF32,
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
}

impl Kernel {
    /// Elements of working memory the kernel needs while it runs.
    fn scratch_len(&self) -> usize {
        match self {
            Kernel::Conv(c) => c.scratch_len(),
            Kernel::MatMul(m) => m.scratch_len(),
            _ => 0,
        }
    }

    /// The element offset at which the kernel's output is a contiguous copy of
    /// its input, if it is one.
    fn view_offset(&self) -> Option<usize> {
        match self {
            Kernel::Copy => Some(0),
            Kernel::Gather(g) => g.view_offset(),
            _ => None,
        }
    }
}

/// One kernel call of the compiled model.
struct Step {
    /// The name of the graph node the step computes (the last one of a fused chain).
    name: String,
    /// What the step does, e.g. "Conv+BatchNormalization+Relu".
    kind: String,
    spans: Vec<Span>,
    kernel: Kernel,
    inputs: Vec<Slot>,
    /// Shapes of the inputs, for fallbacks that rebuild tensors.
    input_types: Vec<ValueType>,
    outputs: Vec<Slot>,
    /// Working memory of the kernel, live during this step only.
    scratch: Option<Slot>,
    work: StepWork,
    /// The milliseconds the cost model measured for its kernel, if it did.
    measured_ms: Option<f64>,
    /// How each output is stored, for `run_checked`.
    stored: Vec<Stored>,
}

/// How a step's output holds its logical elements.
#[derive(Clone, Debug)]
enum Stored {
    /// All of them, row-major, nothing else.
    RowMajor,
    /// In this layout of this logical shape (with padding, or permuted).
    Laid(Layout, Vec<usize>),
    /// Beside padding the check cannot tell apart (a PadWith's output, whose
    /// logical elements its input's step already showed).
    Padded,
}

impl Stored {
    /// How value `v` of a planned graph is stored.
    fn of(g: &Graph, v: ValueRef) -> Stored {
        let laid = |layout: &Layout, logical: Vec<usize>| match layout.is_identity() {
            true => Stored::RowMajor,
            false => Stored::Laid(layout.clone(), logical),
        };
        match &g.node(v.node).op {
            Op::InLayout(_) if v.output == 0 => {
                match (output_layout(g, v.node), output_shape(g, v.node)) {
                    (Some((layout, _)), Some(logical)) => laid(&layout, logical),
                    _ => Stored::Padded,
                }
            }
            Op::InLayout(_) | Op::PadWith(_) => Stored::Padded,
            Op::LayoutTransform(t) => laid(&t.to, t.logical.clone()),
            _ => Stored::RowMajor,
        }
    }
}

/// The first step of a run whose output holds NaN or an infinity
/// (`CompiledModel::run_checked`).
#[derive(Clone, Debug)]
pub struct NonFinite {
    /// The step's name (its last node's).
    pub step: String,
    /// The ops of the step, e.g. `Conv+Relu`.
    pub kind: String,
    /// The source layers the step computes.
    pub spans: Vec<Span>,
    /// Its logical output elements that are NaN, +inf and -inf.
    pub counts: [usize; 3],
    /// Its logical output elements.
    pub of: usize,
}

impl NonFinite {
    /// The step's non-finite elements among `values` (logical), if any.
    fn of_step(step: &Step, values: &[f32]) -> Option<NonFinite> {
        let mut counts = [0; 3];
        for v in values.iter().filter(|v| !v.is_finite()) {
            counts[if v.is_nan() {
                0
            } else if *v > 0.0 {
                1
            } else {
                2
            }] += 1;
        }
        (counts != [0; 3]).then(|| NonFinite {
            step: step.name.clone(),
            kind: step.kind.clone(),
            spans: step.spans.clone(),
            counts,
            of: values.len(),
        })
    }
}

/// Time spent in one step over the profiled runs.
#[derive(Clone, Debug)]
pub struct StepProfile {
    /// The step's name (its last node's).
    pub name: String,
    /// The ops of the step, e.g. `Conv+BatchNormalization+Relu`.
    pub kind: String,
    /// Whether the step runs on the reference executor.
    pub fallback: bool,
    /// The bytes it moves and the flops it computes in one run.
    pub work: StepWork,
    /// Its time in each profiled run, in run order.
    pub times: Vec<Duration>,
}

impl StepProfile {
    /// The median of its times, nearest-rank as the run latencies' p50: one
    /// preempted run does not move it, as it moves a mean on a shared machine.
    pub fn median(&self) -> Duration {
        let mut sorted = self.times.clone();
        sorted.sort();
        bench::percentile(&sorted, 50.0)
    }
}

/// A model compiled for this CPU.
pub struct CompiledModel {
    steps: Vec<Step>,
    /// Constants the steps read (shared with the graph, not copied).
    consts: Vec<Tensor>,
    boxes: usize,
    arena_len: usize,
    inputs: Vec<(String, ValueType, Slot)>,
    outputs: Vec<(ValueType, Slot)>,
    pool: par::Pool,
    /// The memory of the last run, reused by the next one.
    scratch: Mutex<Scratch>,
    isa: Isa,
    conv_algos: Vec<conv_algo::LayerAlgo>,
}

/// Memory a run leaves for the next: the arena, and the buffer of each output
/// it returned, which the next run writes again once the caller has dropped
/// that output (so a run in a loop allocates and clears nothing).
#[derive(Default)]
struct Scratch {
    arena: PageBuf,
    outputs: Vec<Option<Arc<TensorData>>>,
    lists: RunLists,
}

/// Where a run reads its inputs and writes its outputs, and its non-f32
/// values: filled at the start of every run and used by that run only, kept
/// so that a run allocates no lists.
#[derive(Default)]
struct RunLists {
    /// The f32 elements of each graph input with an `Input` slot (null elsewhere).
    inputs: Vec<(*const f32, usize)>,
    /// Inputs converted to f32 for the run (an f16 model's).
    converted: Vec<Vec<f32>>,
    /// The buffer of each graph output with an `Output` slot (null elsewhere).
    outputs: Vec<(*mut f32, usize)>,
    boxes: Vec<Option<Tensor>>,
}

// SAFETY: the pointers are dereferenced only by the run that set them, while
// it borrows the buffers they point to.
unsafe impl Send for RunLists {}

/// Bytes the arena's start is aligned to: its slots are aligned to this
/// relative to the start (`compile/arena.rs`), so every slot then starts on a
/// cache line and a kernel's full vectors never straddle two lines.
const ARENA_ALIGN: usize = 64;

impl Scratch {
    /// The arena's first `len` elements, starting on an `ARENA_ALIGN` boundary
    /// (the buffer holds a few more so that one exists). A longer arena is a
    /// new one: what the old one held is not needed.
    fn aligned_arena(&mut self, len: usize) -> *mut f32 {
        let slack = ARENA_ALIGN / std::mem::size_of::<f32>() - 1;
        if self.arena.len() < len + slack {
            self.arena = PageBuf::zeroed(len + slack);
        }
        let skip = self.arena.as_ptr().align_offset(ARENA_ALIGN).min(slack);
        self.arena[skip..].as_mut_ptr()
    }
}

/// A buffer of `len` f32 for an output: last run's when nobody else holds it
/// any more (its stale contents are overwritten, as the arena's are), else a
/// new one.
fn output_buffer(last: Option<Arc<TensorData>>, len: usize) -> Arc<TensorData> {
    if let Some(mut last) = last {
        if matches!(Arc::get_mut(&mut last), Some(TensorData::F32(v)) if v.len() == len) {
            return last;
        }
    }
    Arc::new(TensorData::F32(vec![0.0; len]))
}

/// Fills a slot of the arena from a slice, for the safe paths.
struct Buffers<'a> {
    arena: *mut f32,
    arena_len: usize,
    consts: &'a [Tensor],
    inputs: &'a [(*const f32, usize)],
    outputs: &'a [(*mut f32, usize)],
    boxes: &'a mut [Option<Tensor>],
}

impl Buffers<'_> {
    /// A read view of an f32 slot.
    ///
    /// # Safety
    /// No live mutable view may overlap it; the memory plan guarantees this for
    /// a step's inputs and outputs.
    unsafe fn read(&self, s: Slot) -> &[f32] {
        match s {
            Slot::Arena { offset, len } => {
                assert!(offset + len <= self.arena_len);
                std::slice::from_raw_parts(self.arena.add(offset), len)
            }
            Slot::Const(i) => match &*self.consts[i].data {
                TensorData::F32(v) => v,
                // Steps take non-f32 constants as tensors (`tensor`), never as f32.
                _ => &[],
            },
            Slot::Input(i) => {
                let (ptr, len) = self.inputs[i];
                std::slice::from_raw_parts(ptr, len)
            }
            Slot::Output(k) => {
                let (ptr, len) = self.outputs[k];
                std::slice::from_raw_parts(ptr, len)
            }
            Slot::Boxed(_) => unreachable!("native kernels only read f32 slots"),
        }
    }

    /// # Safety
    /// As `read`: the slot must not overlap any other view in use.
    #[allow(clippy::mut_from_ref)]
    unsafe fn write(&self, s: Slot) -> &mut [f32] {
        match s {
            Slot::Arena { offset, len } => {
                assert!(offset + len <= self.arena_len);
                std::slice::from_raw_parts_mut(self.arena.add(offset), len)
            }
            Slot::Output(k) => {
                let (ptr, len) = self.outputs[k];
                std::slice::from_raw_parts_mut(ptr, len)
            }
            _ => unreachable!("native kernels only write arena and output slots"),
        }
    }

    fn tensor(&self, s: Slot, ty: &ValueType) -> Tensor {
        match s {
            Slot::Arena { .. } | Slot::Output(_) => {
                Tensor::from_f32(ty.shape.clone(), unsafe { self.read(s) }.to_vec())
            }
            Slot::Const(i) => self.consts[i].clone(),
            Slot::Input(_) => Tensor::from_f32(ty.shape.clone(), unsafe { self.read(s) }.to_vec()),
            Slot::Boxed(i) => self.boxes[i]
                .clone()
                .expect("a boxed value is set before use"),
        }
    }
}

impl CompiledModel {
    /// Compiles a planned graph.
    pub fn compile(graph: &Graph, options: &RuntimeOptions) -> Result<CompiledModel, RuntimeError> {
        let pool = worker_pool(options.threads)?;
        let Some(widened) = graph.widened_f16() else {
            return Compiler::new(graph, options.kernel_isa()?, options).finish(pool);
        };
        // f16 storage at the interface, f32 inside: inputs are converted as they
        // are copied in, outputs rounded back to the model's types.
        let mut model = Compiler::new(&widened, options.kernel_isa()?, options).finish(pool)?;
        for ((_, ty, _), &id) in model.inputs.iter_mut().zip(graph.inputs()) {
            *ty = graph.node(id).outputs[0].ty.clone();
        }
        for ((ty, _), &v) in model.outputs.iter_mut().zip(graph.outputs()) {
            *ty = graph.value_type(v).clone();
        }
        Ok(model)
    }

    /// The fused groups the compiler makes of a planned graph on this machine (the
    /// fusion pass asked about this machine's native kernels).
    pub fn fusion_groups(graph: &Graph) -> Result<Vec<FusedGroup>, RuntimeError> {
        Compiler::new(graph, Isa::detect(), &RuntimeOptions::default()).fusion_groups()
    }

    /// The algorithm of every convolution of a planned graph, chosen as
    /// `compile` chooses it (so measured, or read from the cache, under
    /// `auto`), without compiling the other steps.
    pub fn conv_algorithms(
        graph: &Graph,
        options: &RuntimeOptions,
    ) -> Result<Vec<conv_algo::LayerAlgo>, RuntimeError> {
        let pool = worker_pool(options.threads)?;
        let widened = graph.widened_f16();
        let g = widened.as_ref().unwrap_or(graph);
        Compiler::new(g, options.kernel_isa()?, options).conv_algos(&pool)
    }

    /// The algorithm of every convolution step, in the order the steps run.
    pub fn conv_steps(&self) -> &[conv_algo::LayerAlgo] {
        &self.conv_algos
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

    /// Runs the model on one tensor per graph input; returns the graph outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_inputs(&inputs.iter().map(ModelInput::Tensor).collect::<Vec<_>>())
    }

    /// Runs the model like `run` on inputs that may be borrowed f32 buffers (a
    /// caller's array, read in place without a copy).
    pub fn run_inputs(&self, inputs: &[ModelInput]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_inner(inputs, None, None)
    }

    /// Runs the model like `run`, and looks after every step for NaN or an
    /// infinity among its logical output elements (layout padding, which may
    /// hold -inf or NaN by design, is skipped): the first such step, if any.
    pub fn run_checked(
        &self,
        inputs: &[Tensor],
    ) -> Result<(Vec<Tensor>, Option<NonFinite>), RuntimeError> {
        let mut found = None;
        let inputs: Vec<ModelInput> = inputs.iter().map(ModelInput::Tensor).collect();
        let outputs = self.run_inner(&inputs, None, Some(&mut found))?;
        Ok((outputs, found))
    }

    /// Runs the model and appends each step's time to `profile` (one entry per step,
    /// created on the first call).
    pub fn run_profiled(
        &self,
        inputs: &[Tensor],
        profile: &mut Vec<StepProfile>,
    ) -> Result<Vec<Tensor>, RuntimeError> {
        if profile.is_empty() {
            *profile = self
                .steps
                .iter()
                .map(|s| StepProfile {
                    name: s.name.clone(),
                    kind: s.kind.clone(),
                    fallback: matches!(s.kernel, Kernel::Fallback { .. }),
                    work: s.work,
                    times: vec![],
                })
                .collect();
        }
        let inputs: Vec<ModelInput> = inputs.iter().map(ModelInput::Tensor).collect();
        self.run_inner(&inputs, Some(profile), None)
    }

    fn run_inner(
        &self,
        inputs: &[ModelInput],
        mut profile: Option<&mut Vec<StepProfile>>,
        mut check: Option<&mut Option<NonFinite>>,
    ) -> Result<Vec<Tensor>, RuntimeError> {
        if inputs.len() != self.inputs.len() {
            return Err(RuntimeError::InputCount {
                expected: self.inputs.len(),
                got: inputs.len(),
            });
        }
        for ((name, ty, _), t) in self.inputs.iter().zip(inputs) {
            if t.dtype() != ty.dtype || t.shape() != ty.shape || t.len() != ty.numel() {
                return Err(RuntimeError::Input {
                    name: name.clone(),
                    expected: ty.to_string(),
                    got: ValueType::new(t.dtype(), t.shape().to_vec()).to_string(),
                });
            }
        }
        // Another thread running this model concurrently gets its own memory.
        let mut guard = self.scratch.try_lock();
        let mut own = Scratch::default();
        let scratch: &mut Scratch = match guard.as_mut() {
            Ok(s) => s,
            Err(_) => &mut own,
        };
        let arena = scratch.aligned_arena(self.arena_len);
        let Scratch {
            outputs: returned,
            lists,
            ..
        } = scratch;
        // The buffer of each output that owns an `Output` slot (a value listed
        // twice as an output is owned by its first listing, copied for the rest).
        returned.resize(self.outputs.len(), None);
        for (k, ((ty, slot), buffer)) in self.outputs.iter().zip(returned.iter_mut()).enumerate() {
            *buffer = match slot {
                Slot::Output(owner) if *owner == k => {
                    Some(output_buffer(buffer.take(), ty.numel()))
                }
                _ => None,
            };
        }
        lists.outputs.clear();
        lists.outputs.extend(returned.iter_mut().map(
            |b| match b.as_mut().and_then(Arc::get_mut) {
                Some(TensorData::F32(v)) => (v.as_mut_ptr(), v.len()),
                _ => (std::ptr::null_mut(), 0),
            },
        ));
        lists.inputs.clear();
        lists.converted.clear();
        lists.boxes.clear();
        lists.boxes.resize(self.boxes, None);
        for ((_, _, slot), t) in self.inputs.iter().zip(inputs) {
            let at = match *slot {
                Slot::Input(_) => match t.f32s() {
                    Cow::Borrowed(v) => (v.as_ptr(), v.len()),
                    Cow::Owned(v) => {
                        lists.converted.push(v);
                        let v = lists.converted.last().expect("just pushed");
                        (v.as_ptr(), v.len())
                    }
                },
                Slot::Boxed(i) => {
                    lists.boxes[i] = Some(t.to_tensor());
                    (std::ptr::null(), 0)
                }
                _ => (std::ptr::null(), 0),
            };
            lists.inputs.push(at);
        }
        let mut bufs = Buffers {
            arena,
            arena_len: self.arena_len,
            consts: &self.consts,
            inputs: &lists.inputs,
            outputs: &lists.outputs,
            boxes: &mut lists.boxes,
        };
        self.pool.install(|| -> Result<(), RuntimeError> {
            for (i, step) in self.steps.iter().enumerate() {
                let t0 = Instant::now();
                self.exec(step, &mut bufs)?;
                if let Some(p) = profile.as_deref_mut() {
                    p[i].times.push(t0.elapsed());
                }
                if let Some(found) = check.as_deref_mut().filter(|f| f.is_none()) {
                    *found =
                        first_non_finite(step, &bufs).map_err(|message| RuntimeError::AtNode {
                            spans: step.spans.clone(),
                            message,
                        })?;
                }
            }
            Ok(())
        })?;
        let outputs = self
            .outputs
            .iter()
            .zip(returned.iter())
            .map(|((ty, slot), data)| {
                let t = match data {
                    Some(data) => Tensor {
                        shape: ty.shape.clone(),
                        data: data.clone(),
                    },
                    None => bufs.tensor(*slot, ty),
                };
                match t.dtype() == ty.dtype {
                    true => t,
                    false => t.cast(ty.dtype),
                }
            })
            .collect();
        // Nothing of this run is kept alive by the lists.
        lists.converted.clear();
        lists.boxes.clear();
        Ok(outputs)
    }

    fn exec(&self, step: &Step, bufs: &mut Buffers) -> Result<(), RuntimeError> {
        let at_node = |message: String| RuntimeError::AtNode {
            spans: step.spans.clone(),
            message,
        };
        // SAFETY (all views below): the memory plan never lets a step's output
        // overlap its inputs, and a step's inputs are only read.
        unsafe {
            match &step.kernel {
                Kernel::Conv(c) => {
                    let residual = step.inputs.get(1).map(|&s| bufs.read(s));
                    c.run(
                        bufs.read(step.inputs[0]),
                        residual,
                        bufs.write(step.outputs[0]),
                        step.scratch.map_or(&mut [], |s| bufs.write(s)),
                    )
                }
                Kernel::Depthwise(d) => {
                    let residual = step.inputs.get(1).map(|&s| bufs.read(s));
                    d.run(
                        bufs.read(step.inputs[0]),
                        residual,
                        bufs.write(step.outputs[0]),
                    )
                }
                Kernel::Pool(g) => {
                    pool::pool(g, bufs.read(step.inputs[0]), bufs.write(step.outputs[0]))
                }
                Kernel::Gather(g) => {
                    let inputs: [&[f32]; kernels::MAX_GATHER_INPUTS] = std::array::from_fn(|i| {
                        step.inputs.get(i).map_or(&[][..], |&s| bufs.read(s))
                    });
                    g.run(&inputs[..step.inputs.len()], bufs.write(step.outputs[0]))
                        .map_err(at_node)?
                }
                Kernel::Dense(d) => d.run(bufs.read(step.inputs[0]), bufs.write(step.outputs[0])),
                Kernel::MatMul(m) => m.run(
                    bufs.read(step.inputs[0]),
                    bufs.read(step.inputs[1]),
                    bufs.write(step.outputs[0]),
                    step.scratch.map_or(&mut [], |s| bufs.write(s)),
                ),
                Kernel::Copy => bufs
                    .write(step.outputs[0])
                    .copy_from_slice(bufs.read(step.inputs[0])),
                Kernel::Rows(r) => {
                    let indices = bufs.tensor(step.inputs[1], &step.input_types[1]);
                    r.run(
                        bufs.read(step.inputs[0]),
                        &indices.data.to_i64(),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(at_node)?
                }
                Kernel::Elementwise(k) => {
                    let operands: [&[f32]; elementwise::MAX_OPERANDS] = std::array::from_fn(|i| {
                        step.inputs.get(i).map_or(&[][..], |&s| bufs.read(s))
                    });
                    k.run(&operands[..step.inputs.len()], bufs.write(step.outputs[0]))
                        .map_err(at_node)?
                }
                Kernel::Select(k) => {
                    let mask = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    let TensorData::Bool(mask) = &*mask.data else {
                        return Err(at_node("the Where condition is not boolean".into()));
                    };
                    k.run(
                        mask,
                        bufs.read(step.inputs[1]),
                        bufs.read(step.inputs[2]),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(at_node)?
                }
                Kernel::Normalize(k) => {
                    let param = |i: usize| step.inputs.get(i).map(|&s| bufs.read(s));
                    k.run(
                        bufs.read(step.inputs[0]),
                        param(1),
                        param(2),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(at_node)?
                }
                Kernel::ToF32 => {
                    let t = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    bufs.write(step.outputs[0]).copy_from_slice(&t.f32s())
                }
                Kernel::Rebox(shape) => {
                    let t = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    let Slot::Boxed(i) = step.outputs[0] else {
                        unreachable!("non-f32 values are boxed")
                    };
                    bufs.boxes[i] = Some(t.reshaped(shape.clone()));
                }
                Kernel::Tir(k) => {
                    let input = |i: usize| bufs.read(step.inputs[i]).as_ptr();
                    k.run(input, bufs.write(step.outputs[0]))
                        .map_err(|source| RuntimeError::Step {
                            spans: step.spans.clone(),
                            source,
                        })?
                }
                Kernel::Fallback { op, outputs } => {
                    let args: Vec<Tensor> = step
                        .inputs
                        .iter()
                        .zip(&step.input_types)
                        .map(|(s, ty)| bufs.tensor(*s, ty))
                        .collect();
                    let refs: Vec<&Tensor> = args.iter().collect();
                    let results = crate::reference::eval_op(op, &refs, outputs)
                        .map_err(|e| at_node(e.to_string()))?;
                    for (t, s) in results.into_iter().zip(&step.outputs) {
                        match *s {
                            Slot::Arena { .. } | Slot::Output(_) => {
                                bufs.write(*s).copy_from_slice(&t.f32s())
                            }
                            Slot::Boxed(i) => bufs.boxes[i] = Some(t),
                            Slot::Const(_) | Slot::Input(_) => {
                                unreachable!("outputs are never constants or inputs")
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The steps that run on the reference executor (no native kernel, no loop
    /// nest): their names, ops and source layers.
    pub fn fallback_steps(&self) -> Vec<(String, String, Vec<Span>)> {
        self.steps
            .iter()
            .filter(|s| matches!(s.kernel, Kernel::Fallback { .. }))
            .map(|s| (s.name.clone(), s.kind.clone(), s.spans.clone()))
            .collect()
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

#[cfg(test)]
mod tests;

/// NaN or infinities among the logical output elements of `step`, just run.
fn first_non_finite(step: &Step, bufs: &Buffers) -> Result<Option<NonFinite>, String> {
    for (slot, stored) in step.outputs.iter().zip(&step.stored) {
        if matches!(slot, Slot::Boxed(_)) {
            continue;
        }
        // SAFETY: the step has written its output and no step runs meanwhile.
        let values = unsafe { bufs.read(*slot) };
        let found = match stored {
            Stored::RowMajor => NonFinite::of_step(step, values),
            Stored::Padded => None,
            Stored::Laid(layout, logical) => {
                let to = Layout::identity(logical.len()).map_err(|e| e.to_string())?;
                let gather = Gather::new(layout, &to, logical, 0.0)?;
                let mut row_major = vec![0f32; numel(logical)];
                gather.run(&[values], &mut row_major)?;
                NonFinite::of_step(step, &row_major)
            }
        };
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}
