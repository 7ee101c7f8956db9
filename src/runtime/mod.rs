//! The native runtime: a planned graph compiled once into a list of kernels over
//! one memory arena, then run as often as wanted.
//!
//! Compilation fuses each convolution with the batch norm, residual add and
//! relu/clip that follow it (batch norm folded into the packed weights), packs
//! weights for the micro-kernels, and gives every intermediate f32 value an
//! offset in a single arena, reusing space once a value's last reader has run.
//! Ops without a native kernel run through the reference executor's `eval_op`
//! on the same buffers; the profile names them as fallbacks.

pub mod bench;
pub mod conv;
pub mod depthwise;
pub mod kernels;
pub mod simd;
pub mod tir_step;

use crate::graph::{
    format_spans, DType, Graph, GraphError, NodeId, Op, PoolKind, Span, Tensor, ValueRef, ValueType,
};
use crate::layout::{Layout, PadValue};
use crate::ops::{BatchNorm, Gemm, GlobalPool, LayoutTransform, Reshape};
use conv::{ConvGeom, PackedConv};
use depthwise::Depthwise;
use kernels::{Dense, Gather, PoolGeom};
use simd::{Epilogue, Isa};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An error compiling or running a model, naming the graph input or layer.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("the model has {expected} inputs, {got} were given")]
    InputCount { expected: usize, got: usize },
    #[error("model input '{name}': expected {expected}, got {got}")]
    Input {
        name: String,
        expected: String,
        got: String,
    },
    #[error("{}: {message}", format_spans(spans))]
    AtNode { spans: Vec<Span>, message: String },
    /// A TIR step of the layer could not be lowered, compiled or run.
    #[error("{}: {source}", format_spans(spans))]
    Step {
        spans: Vec<Span>,
        source: tir_step::StepError,
    },
    #[error("cannot start {threads} worker threads: {message}")]
    Threads { threads: usize, message: String },
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// How to compile a model.
#[derive(Clone, Debug, Default)]
pub struct RuntimeOptions {
    /// Worker threads; 0 means one per core.
    pub threads: usize,
}

/// Where a value lives while the model runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Slot {
    /// f32 elements `[offset, offset + len)` of the arena.
    Arena { offset: usize, len: usize },
    /// A constant of the model (index into `consts`).
    Const(usize),
    /// A non-f32 value, kept as a tensor (index into the run's boxes).
    Boxed(usize),
}

enum Kernel {
    Conv(PackedConv),
    Depthwise(Depthwise),
    Clamp(f32, f32),
    Binary(crate::graph::BinaryOp),
    Pool(PoolGeom),
    Dense(Dense),
    Gather(Gather),
    Copy,
    /// The op's TIR default schedule, compiled.
    Tir(Box<tir_step::TirKernel>),
    /// The reference executor's implementation of `op`.
    Fallback {
        op: Op,
        outputs: Vec<ValueType>,
    },
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
}

/// Time spent in one step over the profiled runs.
#[derive(Clone, Debug)]
pub struct StepProfile {
    pub name: String,
    pub kind: String,
    pub fallback: bool,
    pub time: Duration,
}

/// A model compiled for this CPU.
pub struct CompiledModel {
    steps: Vec<Step>,
    consts: Vec<Tensor>,
    /// The f32 data of each constant (empty for other dtypes).
    const_f32: Vec<Vec<f32>>,
    boxes: usize,
    arena_len: usize,
    inputs: Vec<(String, ValueType, Slot)>,
    outputs: Vec<(ValueType, Slot)>,
    pool: rayon::ThreadPool,
    /// The arena of the last run, reused by the next one.
    arena: Mutex<Vec<f32>>,
    isa: Isa,
}

/// Fills a slot of the arena from a slice, for the safe paths.
struct Buffers<'a> {
    arena: *mut f32,
    arena_len: usize,
    consts: &'a [Tensor],
    const_f32: &'a [Vec<f32>],
    boxes: Vec<Option<Tensor>>,
}

// SAFETY: the arena pointer is only used by the run that owns the arena; the
// thread pool runs that run's steps one after another.
unsafe impl Send for Buffers<'_> {}

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
            Slot::Const(i) => &self.const_f32[i],
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
            _ => unreachable!("native kernels only write arena slots"),
        }
    }

    fn tensor(&self, s: Slot, ty: &ValueType) -> Tensor {
        match s {
            Slot::Arena { .. } => {
                Tensor::from_f32(ty.shape.clone(), unsafe { self.read(s) }.to_vec())
            }
            Slot::Const(i) => self.consts[i].clone(),
            Slot::Boxed(i) => self.boxes[i]
                .clone()
                .expect("a boxed value is set before use"),
        }
    }
}

impl CompiledModel {
    /// Compiles a planned graph.
    pub fn compile(graph: &Graph, options: &RuntimeOptions) -> Result<CompiledModel, RuntimeError> {
        let threads = if options.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            options.threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| RuntimeError::Threads {
                threads,
                message: e.to_string(),
            })?;
        Compiler::new(graph, Isa::detect()).finish(pool)
    }

    /// The instruction set the kernels use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Worker threads the model runs on.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Bytes of the intermediate-value arena.
    pub fn arena_bytes(&self) -> usize {
        self.arena_len * 4
    }

    /// Runs the model on one tensor per graph input; returns the graph outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_inner(inputs, None)
    }

    /// Runs the model and adds each step's time to `profile` (one entry per step,
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
                    time: Duration::ZERO,
                })
                .collect();
        }
        self.run_inner(inputs, Some(profile))
    }

    fn run_inner(
        &self,
        inputs: &[Tensor],
        mut profile: Option<&mut Vec<StepProfile>>,
    ) -> Result<Vec<Tensor>, RuntimeError> {
        if inputs.len() != self.inputs.len() {
            return Err(RuntimeError::InputCount {
                expected: self.inputs.len(),
                got: inputs.len(),
            });
        }
        for ((name, ty, _), t) in self.inputs.iter().zip(inputs) {
            let got = ValueType::new(t.dtype(), t.shape.clone());
            if &got != ty || t.data.len() != ty.numel() {
                return Err(RuntimeError::Input {
                    name: name.clone(),
                    expected: ty.to_string(),
                    got: got.to_string(),
                });
            }
        }
        // Another thread running this model concurrently gets its own arena.
        let mut guard = self.arena.try_lock();
        let mut own = Vec::new();
        let arena: &mut Vec<f32> = match guard.as_mut() {
            Ok(a) => a,
            Err(_) => &mut own,
        };
        arena.resize(self.arena_len, 0.0);
        let mut bufs = Buffers {
            arena: arena.as_mut_ptr(),
            arena_len: arena.len(),
            consts: &self.consts,
            const_f32: &self.const_f32,
            boxes: vec![None; self.boxes],
        };
        for ((_, _, slot), t) in self.inputs.iter().zip(inputs) {
            match *slot {
                Slot::Arena { .. } => {
                    unsafe { bufs.write(*slot) }.copy_from_slice(&t.to_f32());
                }
                Slot::Boxed(i) => bufs.boxes[i] = Some(t.clone()),
                Slot::Const(_) => unreachable!("inputs are never constants"),
            }
        }
        self.pool.install(|| -> Result<(), RuntimeError> {
            for (i, step) in self.steps.iter().enumerate() {
                let t0 = Instant::now();
                self.exec(step, &mut bufs)?;
                if let Some(p) = profile.as_deref_mut() {
                    p[i].time += t0.elapsed();
                }
            }
            Ok(())
        })?;
        Ok(self
            .outputs
            .iter()
            .map(|(ty, s)| bufs.tensor(*s, ty))
            .collect())
    }

    fn exec(&self, step: &Step, bufs: &mut Buffers) -> Result<(), RuntimeError> {
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
                Kernel::Clamp(lo, hi) => kernels::clamp(
                    bufs.read(step.inputs[0]),
                    bufs.write(step.outputs[0]),
                    *lo,
                    *hi,
                ),
                Kernel::Binary(op) => kernels::binary(
                    *op,
                    bufs.read(step.inputs[0]),
                    bufs.read(step.inputs[1]),
                    bufs.write(step.outputs[0]),
                ),
                Kernel::Pool(g) => {
                    kernels::pool(g, bufs.read(step.inputs[0]), bufs.write(step.outputs[0]))
                }
                Kernel::Gather(g) => g.run(bufs.read(step.inputs[0]), bufs.write(step.outputs[0])),
                Kernel::Dense(d) => d.run(bufs.read(step.inputs[0]), bufs.write(step.outputs[0])),
                Kernel::Copy => bufs
                    .write(step.outputs[0])
                    .copy_from_slice(bufs.read(step.inputs[0])),
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
                    let results = crate::reference::eval_op(op, &refs, outputs).map_err(|m| {
                        RuntimeError::AtNode {
                            spans: step.spans.clone(),
                            message: m,
                        }
                    })?;
                    for (t, s) in results.into_iter().zip(&step.outputs) {
                        match *s {
                            Slot::Arena { .. } => bufs.write(*s).copy_from_slice(&t.to_f32()),
                            Slot::Boxed(i) => bufs.boxes[i] = Some(t),
                            Slot::Const(_) => unreachable!("outputs are never constants"),
                        }
                    }
                }
            }
        }
        Ok(())
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

/// A step before memory planning: values instead of slots.
struct Pending {
    name: String,
    kind: String,
    spans: Vec<Span>,
    kernel: Kernel,
    inputs: Vec<ValueRef>,
    outputs: Vec<ValueRef>,
}

/// A convolution and the nodes folded into it.
struct Fusion {
    conv: NodeId,
    bn: Option<NodeId>,
    residual: Option<ValueRef>,
    clamp: Option<(f32, f32)>,
    kinds: Vec<&'static str>,
}

/// The channel block `cb` when `layout` stores a logical NCHW tensor as
/// NCHW{cb}c: NCHW is cb = 1, NHWC is cb = C (one block), NCHWxc is cb = x.
fn channel_block(layout: &Layout, shape: &[usize]) -> Option<usize> {
    if shape.len() != 4 {
        return None;
    }
    if layout.is_identity() {
        return Some(1);
    }
    if layout.as_permutation().as_deref() == Some(&[0, 2, 3, 1]) {
        return Some(shape[1]);
    }
    let blocked_c =
        (0..4).all(|a| (a == 1) != layout.factors(a).is_empty()) && layout.factors(1).len() == 1;
    let order: Vec<(usize, usize)> = layout.order().iter().map(|d| (d.axis, d.level)).collect();
    (blocked_c && order == [(0, 0), (1, 0), (2, 0), (3, 0), (1, 1)]).then(|| layout.factors(1)[0])
}

/// A gather, or a plain copy when it moves nothing (e.g. NCHW16c of a 1x1
/// map to NC16c).
fn gather_or_copy(g: Gather, input_shape: Vec<usize>) -> Kernel {
    match g.is_copy(input_shape.iter().product()) {
        true => Kernel::Copy,
        false => Kernel::Gather(g),
    }
}

struct Compiler<'g> {
    g: &'g Graph,
    isa: Isa,
    steps: Vec<Pending>,
    consts: Vec<Tensor>,
    const_of: HashMap<ValueRef, usize>,
}

impl<'g> Compiler<'g> {
    fn new(g: &'g Graph, isa: Isa) -> Compiler<'g> {
        Compiler {
            g,
            isa,
            steps: vec![],
            consts: vec![],
            const_of: HashMap::new(),
        }
    }

    fn at(&self, id: NodeId, message: impl Into<String>) -> RuntimeError {
        RuntimeError::AtNode {
            spans: self.g.node(id).spans.clone(),
            message: message.into(),
        }
    }

    /// The op a node computes, with its storage when the planner laid it out.
    fn inner(&self, id: NodeId) -> (&'g Op, Option<&'g crate::graph::LaidOut>) {
        match &self.g.node(id).op {
            Op::InLayout(l) => (&l.inner, Some(l)),
            op => (op, None),
        }
    }

    /// Layout and logical shape of input `i` of a node.
    fn input_layout(&self, id: NodeId, i: usize) -> Option<(Layout, Vec<usize>)> {
        match self.inner(id).1 {
            Some(l) => l.inputs.get(i).cloned(),
            None => {
                let v = *self.g.node_inputs(id).get(i)?;
                let shape = self.g.value_type(v).shape.clone();
                Some((Layout::identity(shape.len()).ok()?, shape))
            }
        }
    }

    /// Layout and padding of output 0 of a node.
    fn output_layout(&self, id: NodeId) -> Option<(Layout, PadValue)> {
        match self.inner(id).1 {
            Some(l) => l.outputs.first().cloned(),
            None => {
                let rank = self.g.node(id).outputs.first()?.ty.shape.len();
                Some((Layout::identity(rank).ok()?, PadValue::Undef))
            }
        }
    }

    /// The logical f32 values of constant input `i` of a node.
    fn const_input(&self, id: NodeId, i: usize) -> Option<Vec<f32>> {
        let v = *self.g.node_inputs(id).get(i)?;
        let t = self.g.constant(v)?;
        if t.dtype() != DType::F32 {
            return None;
        }
        let (layout, logical) = self.input_layout(id, i)?;
        if layout.is_identity() {
            return Some(t.to_f32());
        }
        Some(layout.from_physical(t, &logical).ok()?.to_f32())
    }

    fn is_f32(&self, v: ValueRef) -> bool {
        self.g.value_type(v).dtype == DType::F32
    }

    /// Geometry of a convolution with a native kernel, and whether it is depthwise.
    fn conv_geom(&self, id: NodeId) -> Option<(ConvGeom, bool)> {
        let Op::Conv(c) = self.inner(id).0 else {
            return None;
        };
        let ins = self.g.node_inputs(id);
        if c.window.spatial_rank() != 2 || !ins.iter().all(|&v| self.is_f32(v)) {
            return None;
        }
        // Weights and bias are packed at compile time.
        if ins[1..].iter().any(|&v| self.g.constant(v).is_none()) {
            return None;
        }
        let (xl, xs) = self.input_layout(id, 0)?;
        let (_, ws) = self.input_layout(id, 1)?;
        let (yl, _) = self.output_layout(id)?;
        let ys = &self.g.node(id).outputs[0].ty.shape;
        let ylogical: Vec<usize> = match self.inner(id).1 {
            Some(_) => vec![xs[0], ws[0], 0, 0],
            None => ys.clone(),
        };
        let x_cb = channel_block(&xl, &xs)?;
        let y_cb = channel_block(&yl, &ylogical)?;
        // The output spatial extents from the window (the physical shape may be blocked).
        let w = &c.window;
        let out = |i: usize, extent: usize| {
            let span = w.dilations[i] * (w.kernel[i] - 1) + 1;
            (extent + w.pad_begin(i) + w.pad_end(i))
                .checked_sub(span)
                .map(|d| d / w.strides[i] + 1)
        };
        let geom = ConvGeom {
            n: xs[0],
            cin: xs[1],
            h: xs[2],
            w: xs[3],
            cout: ws[0],
            oh: out(0, xs[2])?,
            ow: out(1, xs[3])?,
            k: (w.kernel[0], w.kernel[1]),
            stride: (w.strides[0], w.strides[1]),
            dilation: (w.dilations[0], w.dilations[1]),
            pad: (w.pad_begin(0), w.pad_begin(1)),
            x_cb,
            y_cb,
        };
        let depthwise = c.group == geom.cin && c.group == geom.cout && c.group > 1;
        if depthwise && x_cb != y_cb {
            return None;
        }
        (c.group == 1 || depthwise).then_some((geom, depthwise))
    }

    /// Whether node `next` computes on data stored exactly like `like`'s output
    /// (same layouts for every non-constant input and the output).
    fn same_storage(&self, like: NodeId, next: NodeId) -> bool {
        let Some((yl, _)) = self.output_layout(like) else {
            return false;
        };
        let ins = self.g.node_inputs(next);
        let data_ok = ins.iter().enumerate().all(|(i, &v)| {
            self.g.constant(v).is_some() || self.input_layout(next, i).is_some_and(|(l, _)| l == yl)
        });
        data_ok && self.output_layout(next).is_some_and(|(l, _)| l == yl)
    }

    /// The chain of batch norm, residual add and relu/clip that can fold into conv `id`.
    /// Nodes in `claimed` already belong to another chain.
    fn fusion(&self, id: NodeId, claimed: &HashSet<NodeId>) -> Fusion {
        let mut f = Fusion {
            conv: id,
            bn: None,
            residual: None,
            clamp: None,
            kinds: vec!["Conv"],
        };
        let conv_ty = &self.g.node(id).outputs[0].ty;
        let mut v = ValueRef::new(id, 0);
        let mut stage = 0;
        while !self.g.is_graph_output(v) {
            let users = self.g.consumers(v);
            let [(next, port)] = users[..] else { break };
            if claimed.contains(&next)
                || !self.same_storage(id, next)
                || self.g.node(next).outputs[0].ty != *conv_ty
            {
                break;
            }
            let ins = self.g.node_inputs(next);
            match self.inner(next).0 {
                Op::BatchNorm(_) if stage == 0 && port == 0 => {
                    if !(1..5).all(|i| self.const_input(next, i).is_some()) {
                        break;
                    }
                    f.bn = Some(next);
                    stage = 1;
                }
                Op::Binary(crate::graph::BinaryOp::Add) if stage <= 1 => {
                    let other = ins[1 - port];
                    if self.g.constant(other).is_some() || self.g.value_type(other) != conv_ty {
                        break;
                    }
                    f.residual = Some(other);
                    stage = 2;
                }
                Op::Unary(u) if kernels::unary_clamp(*u).is_some() => {
                    f.clamp = kernels::unary_clamp(*u);
                    stage = 3;
                }
                _ => break,
            }
            f.kinds.push(self.g.node(next).op.kind_name());
            v = ValueRef::new(next, 0);
            if stage == 3 {
                break;
            }
        }
        f
    }

    /// The last node of a fusion chain.
    fn chain(&self, f: &Fusion) -> Vec<NodeId> {
        let mut nodes = vec![f.conv];
        for _ in 1..f.kinds.len() {
            let v = ValueRef::new(*nodes.last().expect("non-empty"), 0);
            nodes.push(self.g.consumers(v)[0].0);
        }
        nodes
    }

    fn conv_step(&self, f: &Fusion, nodes: &[NodeId]) -> Result<Pending, RuntimeError> {
        let id = f.conv;
        let last = *nodes.last().expect("a chain has its conv");
        let (geom, depthwise) = self
            .conv_geom(id)
            .expect("fused convs have a native kernel");
        let w = self
            .const_input(id, 1)
            .ok_or_else(|| self.at(id, "conv weights are not a constant"))?;
        let mut bias = match self.g.node_inputs(id).len() {
            3 => self
                .const_input(id, 2)
                .ok_or_else(|| self.at(id, "conv bias is not a constant"))?,
            _ => vec![0.0; geom.cout],
        };
        let mut w = w;
        if let Some(bn) = f.bn {
            let Op::BatchNorm(BatchNorm { epsilon }) = self.inner(bn).0 else {
                unreachable!("fusion only takes batch norms")
            };
            let p: Vec<Vec<f32>> = (1..5)
                .map(|i| self.const_input(bn, i).unwrap_or_default())
                .collect();
            if p.iter().any(|v| v.len() != geom.cout) {
                return Err(self.at(bn, "batch norm parameters do not match the channels"));
            }
            let per_out = w.len() / geom.cout;
            for o in 0..geom.cout {
                let s = p[0][o] / (p[3][o] + epsilon).sqrt();
                w[o * per_out..(o + 1) * per_out]
                    .iter_mut()
                    .for_each(|x| *x *= s);
                bias[o] = (bias[o] - p[2][o]) * s + p[1][o];
            }
        }
        let (lo, hi) = f.clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        let pad_fill = self.output_layout(last).and_then(|(_, p)| p.known());
        let kernel = if depthwise {
            Kernel::Depthwise(Depthwise::new(
                geom,
                self.isa,
                &w,
                &bias,
                (lo, hi),
                pad_fill,
            ))
        } else {
            Kernel::Conv(PackedConv::new(
                geom,
                self.isa,
                &w,
                &bias,
                Epilogue { min: lo, max: hi },
                pad_fill,
            ))
        };
        let mut inputs = vec![self.g.node_inputs(id)[0]];
        inputs.extend(f.residual);
        Ok(Pending {
            name: self.g.node(last).name.clone(),
            kind: f.kinds.join("+"),
            spans: nodes
                .iter()
                .flat_map(|&n| self.g.node(n).spans.clone())
                .collect(),
            kernel,
            inputs,
            outputs: vec![ValueRef::new(last, 0)],
        })
    }

    /// A native kernel for a single node, if it has one.
    fn native(&self, id: NodeId) -> Option<Kernel> {
        let node = self.g.node(id);
        let ins = self.g.node_inputs(id);
        let out = &node.outputs.first()?.ty;
        if out.dtype != DType::F32 || !ins.iter().all(|&v| self.is_f32(v)) {
            return None;
        }
        let same = |v: &ValueRef| self.g.value_type(*v) == out;
        match self.inner(id).0 {
            Op::Unary(u) if same(&ins[0]) && self.same_storage(id, id) => {
                kernels::unary_clamp(*u).map(|(lo, hi)| Kernel::Clamp(lo, hi))
            }
            Op::Binary(b)
                if kernels::binary_supported(*b)
                    && ins.iter().all(same)
                    && (0..2).all(|i| {
                        self.input_layout(id, i).map(|l| l.0) == self.output_layout(id).map(|l| l.0)
                    }) =>
            {
                Some(Kernel::Binary(*b))
            }
            Op::Pool(p)
                if !p.ceil_mode
                    && p.window.spatial_rank() == 2
                    && p.window.dilations.iter().all(|&d| d == 1) =>
            {
                self.pool_geom(
                    id,
                    p.kind,
                    p.window.kernel.clone(),
                    p.window.strides.clone(),
                    (p.window.pad_begin(0), p.window.pad_begin(1)),
                    p.count_include_pad,
                )
            }
            Op::GlobalPool(GlobalPool { kind }) => {
                let (_, xs) = self.input_layout(id, 0)?;
                (xs.len() == 4).then_some(())?;
                self.pool_geom(id, *kind, vec![xs[2], xs[3]], vec![1, 1], (0, 0), false)
            }
            Op::LayoutTransform(LayoutTransform {
                from,
                to,
                logical,
                pad,
            }) => {
                let g = Gather::new(from, to, logical, pad.known().unwrap_or(0.0)).ok()?;
                Some(gather_or_copy(g, from.physical_shape(logical).ok()?))
            }
            Op::Gemm(Gemm {
                alpha,
                beta,
                trans_a: false,
                trans_b,
            }) if self.inner(id).1.is_none() => {
                let (a, b) = (self.g.value_type(ins[0]), self.g.value_type(ins[1]));
                let bias = match ins.get(2) {
                    Some(&c) => {
                        let t = self.g.constant(c)?;
                        let v: Vec<f32> = t.to_f32().iter().map(|x| x * beta).collect();
                        Some((v, t.shape.clone()))
                    }
                    None => None,
                };
                let (k, n) = match trans_b {
                    true => (b.shape[1], b.shape[0]),
                    false => (b.shape[0], b.shape[1]),
                };
                let c = bias.as_ref().map(|(v, s)| (v.as_slice(), s.as_slice()));
                let w = self.g.constant(ins[1])?.to_f32();
                Dense::new((a.shape[0], k, n), self.isa, *alpha, &w, *trans_b, c).map(Kernel::Dense)
            }
            Op::MatMul if self.inner(id).1.is_none() => {
                let (a, b) = (self.g.value_type(ins[0]), self.g.value_type(ins[1]));
                let w = self.g.constant(ins[1])?.to_f32();
                let [k, n] = b.shape[..] else { return None };
                let m = a.numel() / k;
                Dense::new((m, k, n), self.isa, 1.0, &w, false, None).map(Kernel::Dense)
            }
            Op::Reshape(_) | Op::Identity if self.inner(id).1.is_none() => Some(Kernel::Copy),
            Op::Reshape(Reshape { shape }) => {
                let (from, from_shape) = self.input_layout(id, 0)?;
                let (to, pad) = self.output_layout(id)?;
                let fill = pad.known().unwrap_or(0.0);
                let g = Gather::reshape((&from, &from_shape), (&to, shape), fill).ok()?;
                Some(gather_or_copy(g, from.physical_shape(&from_shape).ok()?))
            }
            _ => None,
        }
    }

    /// A chain of nodes compiled from its TIR default schedule, when it has one and
    /// computes one f32 tensor from f32 tensors; with the step's inputs.
    fn tir(
        &self,
        chain: &[NodeId],
    ) -> Result<Option<(tir_step::TirKernel, Vec<ValueRef>)>, RuntimeError> {
        let last = *chain.last().expect("chains are not empty");
        let mut nodes = vec![];
        let mut inputs = vec![];
        for (k, &id) in chain.iter().enumerate() {
            let node = self.g.node(id);
            let ins = self.g.node_inputs(id);
            let [out] = &node.outputs[..] else {
                return Ok(None);
            };
            if out.ty.dtype != DType::F32 || !ins.iter().all(|&v| self.is_f32(v)) {
                return Ok(None);
            }
            let prev = (k > 0).then(|| ValueRef::new(chain[k - 1], 0));
            let link = tir_step::ChainNode {
                op: &node.op,
                inputs: ins.iter().map(|&v| self.g.value_type(v).clone()).collect(),
                prev: prev.and_then(|p| ins.iter().position(|&v| v == p)),
            };
            inputs.extend(link.own(&ins).copied());
            nodes.push(link);
        }
        let out = &self.g.node(last).outputs[0].ty;
        let kernel =
            tir_step::TirKernel::new(&nodes, out).map_err(|source| RuntimeError::Step {
                spans: self.g.node(last).spans.clone(),
                source,
            })?;
        Ok(kernel.map(|k| (k, inputs)))
    }

    /// `head` and the elementwise nodes that can follow it in one loop nest: each
    /// the only reader of the value before it, which is no graph output.
    fn elementwise_chain(&self, head: NodeId, claimed: &HashSet<NodeId>) -> Vec<NodeId> {
        let mut chain = vec![head];
        loop {
            let v = ValueRef::new(*chain.last().expect("not empty"), 0);
            if self.g.is_graph_output(v) {
                return chain;
            }
            // One (node, input) reads the value: one node, reading it once.
            let [(next, port)] = self.g.consumers(v)[..] else {
                return chain;
            };
            let elementwise = matches!(self.inner(next).0, Op::Unary(_) | Op::Binary(_));
            // The value must mean the same element to both nodes: both laid out or
            // neither, the reader taking it in the layout it is written in.
            let same_storage = self.inner(v.node).1.is_some() == self.inner(next).1.is_some()
                && self.output_layout(v.node).map(|l| l.0)
                    == self.input_layout(next, port).map(|l| l.0);
            if claimed.contains(&next) || !elementwise || !same_storage {
                return chain;
            }
            chain.push(next);
        }
    }

    fn pool_geom(
        &self,
        id: NodeId,
        kind: PoolKind,
        k: Vec<usize>,
        stride: Vec<usize>,
        pad: (usize, usize),
        count_include_pad: bool,
    ) -> Option<Kernel> {
        let (xl, xs) = self.input_layout(id, 0)?;
        let (yl, _) = self.output_layout(id)?;
        let cb = channel_block(&xl, &xs)?;
        let ys = &self.g.node(id).outputs[0].ty.shape;
        // The output's physical shape is NCHW{cb}c (or NCHW): its spatial extents
        // sit at positions 2 and 3 either way, except NHWC (1 and 2).
        let (oh, ow) = match yl.as_permutation().as_deref() {
            Some([0, 2, 3, 1]) => (ys[1], ys[2]),
            _ => (ys[2], ys[3]),
        };
        if channel_block(&yl, &[xs[0], xs[1], oh, ow]) != Some(cb) {
            return None;
        }
        Some(Kernel::Pool(PoolGeom {
            kind,
            planes: xs[0] * xs[1].div_ceil(cb),
            cb,
            h: xs[2],
            w: xs[3],
            oh,
            ow,
            k: (k[0], k[1]),
            stride: (stride[0], stride[1]),
            pad,
            count_include_pad,
        }))
    }

    fn finish(mut self, pool: rayon::ThreadPool) -> Result<CompiledModel, RuntimeError> {
        let g = self.g;
        let order = g.topo_order()?;
        // Plan the fusions first: a fused step runs where its chain ends, when
        // the residual operand is surely computed.
        let mut fused: HashMap<NodeId, Fusion> = HashMap::new();
        let mut skip: HashSet<NodeId> = HashSet::new();
        let mut claimed: HashSet<NodeId> = HashSet::new();
        for &id in &order {
            if claimed.contains(&id) || self.conv_geom(id).is_none() {
                continue;
            }
            let f = self.fusion(id, &claimed);
            let nodes = self.chain(&f);
            let last = *nodes.last().expect("non-empty");
            skip.extend(nodes[..nodes.len() - 1].iter().copied());
            claimed.extend(nodes.iter().copied());
            fused.insert(last, f);
        }
        // Then the hand-written kernels, and chains of elementwise nodes fused into
        // one TIR loop nest with the node before them unless that one has a
        // hand-written kernel (an elementwise one is given up for the chain).
        let mut natives: HashMap<NodeId, Kernel> = HashMap::new();
        let mut chains: HashMap<NodeId, (Vec<NodeId>, tir_step::TirKernel, Vec<ValueRef>)> =
            HashMap::new();
        for &id in &order {
            if claimed.contains(&id) || matches!(g.node(id).op, Op::Input | Op::Constant(_)) {
                continue;
            }
            let native = self.native(id);
            let elementwise = matches!(self.inner(id).0, Op::Unary(_) | Op::Binary(_));
            if native.is_none() || elementwise {
                let nodes = self.elementwise_chain(id, &claimed);
                if nodes.len() >= 2 {
                    if let Some((kernel, inputs)) = self.tir(&nodes)? {
                        let last = *nodes.last().expect("non-empty");
                        skip.extend(nodes[..nodes.len() - 1].iter().copied());
                        claimed.extend(nodes.iter().copied());
                        chains.insert(last, (nodes, kernel, inputs));
                        continue;
                    }
                }
            }
            if let Some(k) = native {
                natives.insert(id, k);
            }
        }
        for &id in &order {
            let node = g.node(id);
            if let Some((nodes, kernel, inputs)) = chains.remove(&id) {
                let kinds: Vec<&str> = nodes.iter().map(|&n| g.node(n).op.kind_name()).collect();
                self.steps.push(Pending {
                    name: node.name.clone(),
                    kind: format!("{} (tir)", kinds.join("+")),
                    spans: nodes
                        .iter()
                        .flat_map(|&n| g.node(n).spans.clone())
                        .collect(),
                    kernel: Kernel::Tir(Box::new(kernel)),
                    inputs,
                    outputs: vec![ValueRef::new(id, 0)],
                });
                continue;
            }
            if let Some(f) = fused.get(&id) {
                let nodes = self.chain(f);
                let step = self.conv_step(f, &nodes)?;
                self.steps.push(step);
                continue;
            }
            if skip.contains(&id) {
                continue;
            }
            match &node.op {
                Op::Input => continue,
                Op::Constant(t) => {
                    self.const_of
                        .insert(ValueRef::new(id, 0), self.consts.len());
                    self.consts.push(t.clone());
                    continue;
                }
                _ => {}
            }
            let mut kind = node.op.kind_name().to_string();
            let kernel = match natives.remove(&id) {
                Some(k) => k,
                None => match self.tir(&[id])? {
                    Some((k, _)) => {
                        kind.push_str(" (tir)");
                        Kernel::Tir(Box::new(k))
                    }
                    None => Kernel::Fallback {
                        op: node.op.clone(),
                        outputs: node.outputs.iter().map(|v| v.ty.clone()).collect(),
                    },
                },
            };
            self.steps.push(Pending {
                name: node.name.clone(),
                kind,
                spans: node.spans.clone(),
                kernel,
                inputs: g.node_inputs(id),
                outputs: (0..node.outputs.len())
                    .map(|i| ValueRef::new(id, i))
                    .collect(),
            });
        }
        self.plan_memory(pool)
    }

    /// Gives every value a slot: constants and non-f32 values their own, f32
    /// intermediates an arena range that no value alive at the same time shares.
    fn plan_memory(self, pool: rayon::ThreadPool) -> Result<CompiledModel, RuntimeError> {
        let g = self.g;
        let end = self.steps.len();
        // Live range of every value: [defining step, last reading step].
        let mut range: HashMap<ValueRef, (usize, usize)> = HashMap::new();
        let mut order: Vec<ValueRef> = vec![];
        for &id in g.inputs() {
            range.insert(ValueRef::new(id, 0), (0, 0));
            order.push(ValueRef::new(id, 0));
        }
        for (i, s) in self.steps.iter().enumerate() {
            for v in &s.outputs {
                range.insert(*v, (i, i));
                order.push(*v);
            }
            for v in &s.inputs {
                if let Some(r) = range.get_mut(v) {
                    r.1 = r.1.max(i);
                }
            }
        }
        for v in g.outputs() {
            if let Some(r) = range.get_mut(v) {
                r.1 = end;
            }
        }
        let mut slots: HashMap<ValueRef, Slot> = HashMap::new();
        for (v, &i) in &self.const_of {
            slots.insert(*v, Slot::Const(i));
        }
        let mut boxes = 0;
        // (offset, len, first, last) of every arena value placed so far.
        let mut placed: Vec<(usize, usize, usize, usize)> = vec![];
        let mut arena_len = 0;
        for v in order {
            let ty = g.value_type(v);
            if ty.dtype != DType::F32 {
                slots.insert(v, Slot::Boxed(boxes));
                boxes += 1;
                continue;
            }
            let (first, last) = range[&v];
            let len = ty.numel();
            let mut busy: Vec<(usize, usize)> = placed
                .iter()
                .filter(|p| p.2 <= last && first <= p.3)
                .map(|p| (p.0, p.1))
                .collect();
            busy.sort();
            let mut offset = 0;
            for (o, l) in busy {
                if offset + len <= o {
                    break;
                }
                // Keep every buffer 64-byte aligned relative to the arena.
                offset = offset.max((o + l).div_ceil(16) * 16);
            }
            placed.push((offset, len, first, last));
            arena_len = arena_len.max(offset + len);
            slots.insert(v, Slot::Arena { offset, len });
        }
        let slot = |v: &ValueRef| -> Result<Slot, RuntimeError> {
            slots.get(v).copied().ok_or_else(|| {
                RuntimeError::Graph(GraphError::Graph(format!(
                    "value '{}' is read before it is computed",
                    g.value(*v).name
                )))
            })
        };
        let steps = self
            .steps
            .into_iter()
            .map(|p| {
                Ok(Step {
                    input_types: p.inputs.iter().map(|v| g.value_type(*v).clone()).collect(),
                    inputs: p.inputs.iter().map(slot).collect::<Result<_, _>>()?,
                    outputs: p.outputs.iter().map(slot).collect::<Result<_, _>>()?,
                    name: p.name,
                    kind: p.kind,
                    spans: p.spans,
                    kernel: p.kernel,
                })
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let inputs = g
            .inputs()
            .iter()
            .map(|&id| {
                let v = ValueRef::new(id, 0);
                Ok((g.node(id).name.clone(), g.value_type(v).clone(), slot(&v)?))
            })
            .collect::<Result<_, RuntimeError>>()?;
        let outputs = g
            .outputs()
            .iter()
            .map(|v| Ok((g.value_type(*v).clone(), slot(v)?)))
            .collect::<Result<_, RuntimeError>>()?;
        let const_f32 = self
            .consts
            .iter()
            .map(|t| {
                if t.dtype() == DType::F32 {
                    t.to_f32()
                } else {
                    vec![]
                }
            })
            .collect();
        Ok(CompiledModel {
            steps,
            consts: self.consts,
            const_f32,
            boxes,
            arena_len,
            inputs,
            outputs,
            pool,
            arena: Mutex::new(vec![]),
            isa: self.isa,
        })
    }
}

#[cfg(test)]
mod tests;
