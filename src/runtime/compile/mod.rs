//! From a planned graph to a compiled model: each node (or fused group) gets a
//! kernel — a hand-written SIMD kernel with the nodes folded into it, a TIR step
//! for the op or elementwise chain, or the reference executor as a fallback —
//! then `arena` gives every value its memory.

mod arena;
mod axis_sources;
mod byte_handoff;
mod epilogue_fusion;

use super::kernels::conv::algo::{
    self as conv_algo, ConvAlgoChoice, ConvAlgoOptions, ConvKernel, ConvSpec, KeptWeights,
    LayerAlgo,
};
use super::kernels::conv::depthwise::Depthwise;
use super::kernels::conv::direct::ConvGeom;
use super::kernels::conv::int8::{IntegerWeights, QuantConv};
use super::kernels::conv::tile::{ChannelParams, Epilogue};
use super::kernels::elementwise::{broadcast_strides, Arg, Elementwise, Func, Stored};
use super::kernels::gather::{Gather, Row, MAX_GATHER_INPUTS};
use super::kernels::grid_sample::GridSampler;
use super::kernels::matmul::{BatchedMatMul, Dense};
use super::kernels::normalize::{RowKernel, RowOp};
use super::kernels::pool::{IntegerAverage, PoolGeom};
use super::kernels::quantized::{
    DynamicQuantizer, Grid, QuantizedAdd, QuantizedHardSwish, QuantizedMatMul, QuantizedMul,
    QuantizedSoftmax,
};
use super::kernels::resize::ResizeGeom;
use super::kernels::roi_align::RoiAligner;
use super::kernels::scatter::{Placing, Scatter};
use super::kernels::simd::{Isa, Lanes, MAX_LANES};
use super::kernels::typed::{
    ranked, ArgBest, Gathered, Moved, Reduced, Scanned, TopKBest, Typed, TypedOp,
};
use super::kernels::where_select::Select;
use super::kernels::{activation, gather, tir_step};
use super::machine::{lock, SharedKernelTimes};
use super::measure::conv_times;
use super::measure::kernel_times::KernelTimes;
use super::measure::roofline::StepWork;
use super::model::{ControlKernel, Kernel};
use super::{CompiledModel, KernelPath, Machine, RuntimeError, RuntimeOptions};
use crate::core::{merge_spans, par, PadValue};
use crate::fusion::{
    self, inner, input_layout, output_layout, output_shape, Activation, FusedGroup, Pattern, Target,
};
use crate::graph::{
    grid_of, numel, BinaryOp, ControlFlow, DType, DynamicQuantize, Graph, NodeId, Op, PoolKind,
    QuantizedArithmetic, Span, Tensor, UnaryOp, ValueRef, ValueType,
};
use crate::layout::cost::same_bytes;
use crate::layout::Layout;
use crate::ops::{
    is_identity, AxisTaps, BatchNorm, Gemm, GlobalPool, LaidOut, LayerNorm, LayoutTransform,
    LogSoftmax, OpDef, Pad, PadMode, Reduce, ReduceKind, Reshape, Resize, Softmax,
};
use crate::reference::control::subgraphs;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// A step before memory planning: values instead of slots.
struct Pending {
    name: String,
    kind: String,
    spans: Vec<Span>,
    kernel: Kernel,
    inputs: Vec<ValueRef>,
    outputs: Vec<ValueRef>,
    work: StepWork,
    /// The milliseconds the cost model measured for the step's kernel, if it
    /// did: the profile predicts the step by them.
    measured_ms: Option<f64>,
}

/// How many steps (and graph outputs) read each value, and which step
/// computes it: what the passes over built steps check before joining two.
fn dataflow(g: &Graph, steps: &[Pending]) -> (HashMap<ValueRef, usize>, HashMap<ValueRef, usize>) {
    let mut readers: HashMap<ValueRef, usize> = HashMap::new();
    for v in steps.iter().flat_map(|s| &s.inputs).chain(g.outputs()) {
        *readers.entry(*v).or_default() += 1;
    }
    let producer = (steps.iter().enumerate())
        .flat_map(|(i, s)| s.outputs.iter().map(move |&v| (v, i)))
        .collect();
    (readers, producer)
}

/// Where the elements of a data movement's output come from.
enum Sources {
    /// Pieces of the inputs, by output offset.
    Rows(Vec<Row>),
    /// Per output element, its position among the inputs' elements, one
    /// input's after another's (`u32::MAX`: none, the fill).
    Table(Vec<u32>),
}

impl Sources {
    /// The position of each of `len` output elements among the inputs'
    /// elements, input `k`'s from `starts[k]` on (which the caller checked
    /// to fit below `u32::MAX`); `None` when a row lies outside the output
    /// or reads an input there is none of (as `Gather::from_rows` refuses).
    fn table(self, len: usize, starts: &[usize]) -> Option<Vec<u32>> {
        match self {
            Sources::Rows(rows) => {
                let mut table = vec![u32::MAX; len];
                for r in rows {
                    let start = *starts.get(r.input)?;
                    let out = table.get_mut(r.dst..r.dst.checked_add(r.len)?)?;
                    for (j, t) in out.iter_mut().enumerate() {
                        *t = (start + r.source(j)) as u32;
                    }
                }
                Some(table)
            }
            Sources::Table(t) => Some(t),
        }
    }
}

/// The source layers of a fused group: those of each of its nodes, each
/// once (rewrites leave a source layer's span on several nodes).
fn group_spans(g: &Graph, group: &FusedGroup) -> Vec<Span> {
    merge_spans(group.nodes.iter().map(|&n| &g.node(n).spans[..]))
}

/// A gather, or a plain copy when it moves nothing (e.g. NCHW16c of a 1x1
/// map to NC16c).
fn gather_or_copy(g: Gather, input_shape: Vec<usize>) -> Kernel {
    match g.is_copy(input_shape.iter().product()) {
        true => Kernel::Copy,
        false => Kernel::Gather(g),
    }
}

/// `values` of logical `shape` (each extent the output's or 1) laid out in the
/// output `out`'s layout, zeros in its padding: their strides against the
/// output (`broadcast_strides`) and the physical values. `None` when they do
/// not line up (a broadcast axis the layout blocks).
fn laid_out_like(
    out: &Stored,
    shape: &[usize],
    values: Vec<f32>,
) -> Option<(Vec<usize>, Vec<f32>)> {
    let stored = Stored {
        layout: out.layout,
        shape,
    };
    let strides = broadcast_strides(out, &stored)?;
    let t = Tensor::from_f32(shape.to_vec(), values);
    let physical = out.layout.to_physical(&t, 0.0).ok()?.to_f32();
    Some((strides, physical))
}

/// A 2-D pooling window: (height, width) pairs.
struct PoolWindow {
    k: (usize, usize),
    stride: (usize, usize),
    dilation: (usize, usize),
    pad: (usize, usize),
    pad_end: (usize, usize),
}

/// How a MatMul multiplies its operands.
enum MatMulOperands<'g> {
    /// By a constant matrix (`rows x k` by `k x n`), packed once.
    ByConstant((usize, usize, usize), &'g Tensor),
    /// Batched, `b` packed at every run.
    Batched(BatchedMatMul),
}

pub(super) struct Compiler<'g> {
    g: &'g Graph,
    isa: Isa,
    steps: Vec<Pending>,
    consts: Vec<Tensor>,
    const_of: HashMap<ValueRef, usize>,
    conv_algo: ConvAlgoOptions,
    /// The kernel times the convolutions' algorithms are chosen by (the
    /// machine's cache for this instruction set and thread count).
    times: SharedKernelTimes,
    /// The algorithm of every convolution step built so far.
    conv_algos: Vec<LayerAlgo>,
    /// What was made from the weights of every convolution step built so far.
    kept_weights: Vec<KeptWeights>,
    /// Every op that lowers to TIR runs as generated code (`KernelPath::Generic`).
    generic: bool,
    /// What the model is compiled with, which its subgraphs are compiled with too.
    options: RuntimeOptions,
}

impl<'g> Compiler<'g> {
    pub(super) fn new(
        g: &'g Graph,
        isa: Isa,
        options: &RuntimeOptions,
        times: SharedKernelTimes,
    ) -> Compiler<'g> {
        Compiler {
            g,
            isa,
            times,
            steps: vec![],
            consts: vec![],
            const_of: HashMap::new(),
            conv_algo: options.conv_algo.clone(),
            conv_algos: vec![],
            kept_weights: vec![],
            generic: options.kernels == KernelPath::Generic,
            options: options.clone(),
        }
    }

    fn at(&self, id: NodeId, message: impl Into<String>) -> RuntimeError {
        RuntimeError::AtNode {
            spans: self.g.node(id).spans.clone(),
            message: message.into(),
        }
    }

    /// The logical f32 values of constant input `i` of node `id`: borrowed
    /// from the graph where it is stored so (a copy of a large model's
    /// weights was a sixth of its warm compile).
    fn const_input(&self, id: NodeId, i: usize) -> Option<Cow<'g, [f32]>> {
        let v = *self.g.node_inputs(id).get(i)?;
        let t = self.g.constant(v)?;
        if t.dtype() != DType::F32 {
            return None;
        }
        let (layout, logical) = input_layout(self.g, id, i)?;
        if layout.is_identity() {
            return Some(t.f32s());
        }
        Some(Cow::Owned(layout.from_physical(t, &logical).ok()?.to_f32()))
    }

    fn is_f32(&self, v: ValueRef) -> bool {
        self.g.value_type(v).dtype == DType::F32
    }

    /// Geometry of a convolution with a native kernel (dense, grouped or
    /// depthwise), and whether it is depthwise.
    fn conv_geom(&self, id: NodeId) -> Option<(ConvGeom, bool)> {
        let Op::Conv(c) = inner(self.g, id).0 else {
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
        let (xl, xs) = input_layout(self.g, id, 0)?;
        let (_, ws) = input_layout(self.g, id, 1)?;
        let (yl, _) = output_layout(self.g, id)?;
        let ys = &self.g.node(id).outputs[0].ty.shape;
        let ylogical: Vec<usize> = match inner(self.g, id).1 {
            Some(_) => vec![xs[0], ws[0], 0, 0],
            None => ys.clone(),
        };
        let x_cb = xl.channel_block(&xs)?;
        let y_cb = yl.channel_block(&ylogical)?;
        let geom = ConvGeom::of(c, &xs, ws[0], x_cb, y_cb)?;
        let depthwise = c.group == geom.cin && c.group == geom.cout && c.group > 1;
        Some((geom, depthwise))
    }

    /// Where input 0 of node `id` is a `DynamicQuantize` of one grid stored
    /// as its own input is: the op, and that input, which an integer kernel
    /// quantizing its input itself reads instead.
    fn quantized_per_run(&self, id: NodeId) -> Option<(DynamicQuantize, ValueRef)> {
        let v = self.g.node_inputs(id)[0];
        let (Op::DynamicQuantize(op), _) = inner(self.g, v.node) else {
            return None;
        };
        let (from, shape) = input_layout(self.g, v.node, 0)?;
        let (to, _) = output_layout(self.g, v.node)?;
        let one_grid = numel(&shape[..op.axis.min(shape.len())]) == 1;
        (one_grid && from == to).then(|| (*op, self.g.node_inputs(v.node)[0]))
    }

    /// The quantization grid the (first) input of node `id` lies on, if known.
    fn input_grid(&self, id: NodeId) -> Option<Grid> {
        Grid::of(grid_of(self.g, self.g.node_inputs(id)[0])?)
    }

    /// The step of a convolution group: one native kernel with the batch norm folded
    /// into its weights and the residual add and activation in its epilogue,
    /// its algorithm chosen (and measured) on the threads of `pool`. The
    /// step's kind names the algorithm.
    fn conv_step(
        &mut self,
        pool: &par::Pool,
        group: &FusedGroup,
        bn: Option<NodeId>,
        residual: Option<ValueRef>,
        activation: Option<Activation>,
    ) -> Result<Pending, RuntimeError> {
        let id = group.nodes[0];
        let last = group.last();
        let (geom, depthwise) = self
            .conv_geom(id)
            .expect("fused convs have a native kernel");
        let w = self
            .const_input(id, 1)
            .ok_or_else(|| self.at(id, "conv weights are not a constant"))?;
        let mut bias = match self.g.node_inputs(id).len() {
            3 => self
                .const_input(id, 2)
                .ok_or_else(|| self.at(id, "conv bias is not a constant"))?
                .into_owned(),
            _ => vec![0.0; geom.cout],
        };
        let mut w = w;
        if let Some(bn) = bn {
            let w = w.to_mut();
            let Op::BatchNorm(BatchNorm { epsilon }) = inner(self.g, bn).0 else {
                unreachable!("fusion only takes batch norms")
            };
            let p: Vec<Cow<[f32]>> = (1..5)
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
        // A PRelu is the group's last node; fusion checked its slope's shape.
        let slope = match activation {
            Some(Activation::PRelu) => {
                let s = self
                    .const_input(last, 1)
                    .ok_or_else(|| self.at(last, "PRelu slope is not an f32 constant"))?;
                Some(match s[..] {
                    [one] => vec![one; geom.cout],
                    _ => s.into_owned(),
                })
            }
            _ => None,
        };
        if slope.as_ref().is_some_and(|s| s.len() != geom.cout) {
            return Err(self.at(last, "PRelu slope does not match the channels"));
        }
        let params = ChannelParams {
            bias: &bias,
            slope: slope.as_deref(),
        };
        let epilogue = Epilogue::of(activation);
        let pad_fill = output_layout(self.g, last).and_then(|(_, p)| p.known());
        let threads = pool.threads();
        let per_run = self.quantized_per_run(id);
        let (kernel, mut decision) = if depthwise {
            // Integer sums need the rounding to come last: no residual after it.
            let integers = self
                .input_grid(id)
                .filter(|_| residual.is_none())
                .and_then(|grid| {
                    Depthwise::integer_sums(
                        geom.clone(),
                        self.isa,
                        grid,
                        &w,
                        &bias,
                        epilogue,
                        pad_fill,
                    )
                });
            let k = integers.unwrap_or_else(|| {
                Depthwise::new(geom.clone(), self.isa, &w, params, epilogue, pad_fill)
            });
            (Kernel::Depthwise(k), conv_algo::ConvAlgo::Depthwise.into())
        } else {
            let spec = ConvSpec {
                geom: geom.clone(),
                isa: self.isa,
                w: &w,
                params,
                epilogue,
                pad_fill,
                threads,
                grid: self.input_grid(id),
                residual: residual.is_some(),
                dynamic: per_run.map(|(op, _)| op),
            };
            let mut times = lock(&self.times);
            let layer = group_spans(self.g, group);
            let print = conv_algo::weights_print(&w);
            let (k, decision, shared) = pool
                .install(|| conv_times::build(&spec, &self.conv_algo, &mut times, &layer, print));
            self.kept_weights.push(KeptWeights {
                layer,
                print,
                shared,
            });
            (Kernel::Conv(k), decision)
        };
        // The time the planner measured for the kernel chosen, for the profile.
        let times = &lock(&self.times);
        conv_times::add_cached_time(&mut decision, (&geom, threads), &self.conv_algo, times);
        // The weights and bias are packed into the kernel; the data comes through slots.
        let conv_inputs = self.g.node_inputs(id);
        // The integer kernel quantizes the input itself, from the values
        // before their quantization.
        let quantizes = matches!(&kernel, Kernel::Conv(ConvKernel::Int8(c)) if c.quantizes_input());
        let mut inputs = match (quantizes, per_run) {
            (true, Some((_, unquantized))) => vec![unquantized],
            _ => vec![conv_inputs[0]],
        };
        inputs.extend(residual);
        let suffix = match &kernel {
            Kernel::Depthwise(d) if d.sums_integers() => format!(" ({}, integers)", decision.algo),
            _ if quantizes => format!(" ({}, quantized per run)", decision.algo),
            _ => format!(" ({})", decision.algo),
        };
        let mut step = self.group_pending(group, suffix, kernel, inputs, &conv_inputs[1..]);
        step.measured_ms = decision.measured_ms();
        self.conv_algos.push(LayerAlgo {
            name: step.name.clone(),
            spans: step.spans.clone(),
            decision,
        });
        Ok(step)
    }

    /// The step of a group: named after its last node, its spans those of all.
    /// `packed` are the constants its kernel holds (read on every run, though
    /// not through a slot).
    fn group_pending(
        &self,
        group: &FusedGroup,
        suffix: String,
        kernel: Kernel,
        inputs: Vec<ValueRef>,
        packed: &[ValueRef],
    ) -> Pending {
        let last = group.last();
        let outputs = vec![ValueRef::new(last, 0)];
        Pending {
            work: self.work(&group.nodes, inputs.iter().chain(packed), &outputs),
            name: self.g.node(last).name.clone(),
            kind: group.kinds(self.g) + &suffix,
            spans: group_spans(self.g, group),
            kernel,
            inputs,
            outputs,
            measured_ms: None,
        }
    }

    /// What a step computing `nodes` does: the flops of their ops
    /// (`OpDef::flops`, which counts none for elementwise ops, pools and data
    /// movement), and the stored bytes of every value it reads or writes, once
    /// each, whatever the dtype.
    fn work<'v>(
        &self,
        nodes: &[NodeId],
        reads: impl IntoIterator<Item = &'v ValueRef>,
        writes: &[ValueRef],
    ) -> StepWork {
        let flops = nodes
            .iter()
            .map(|&id| {
                let node = self.g.node(id);
                let ins: Vec<&ValueType> = self
                    .g
                    .node_inputs(id)
                    .iter()
                    .map(|&v| self.g.value_type(v))
                    .collect();
                let outs: Vec<&ValueType> = node.outputs.iter().map(|v| &v.ty).collect();
                node.op.def().flops(&ins, &outs)
            })
            .sum();
        let reads = reads.into_iter().copied();
        let values: HashSet<ValueRef> = reads.chain(writes.iter().copied()).collect();
        let bytes = values
            .into_iter()
            .map(|v| self.g.value_type(v).size_bytes() as u64)
            .sum();
        StepWork { bytes, flops }
    }

    /// A native kernel for a single node, if it has one.
    fn native(&self, id: NodeId) -> Option<Kernel> {
        let node = self.g.node(id);
        let ins = self.g.node_inputs(id);
        let out = &node.outputs.first()?.ty;
        if let Some(k) = self.index_kernel(id) {
            return Some(k);
        }
        if let Some(k) = self.typed(id) {
            return Some(k);
        }
        // The one op with a boolean operand among f32 ones.
        if let Op::Where = inner(self.g, id).0 {
            return self.select(id);
        }
        // Detection post-processing reads row-major f32 and writes outputs of
        // any type.
        if let (Op::Detection(d), None) = inner(self.g, id) {
            return ins
                .iter()
                .all(|&v| self.is_f32(v))
                .then(|| Kernel::Detection(d.clone()));
        }
        // RoiAlign: an f32 map and regions, integer image indices.
        if let (Op::RoiAlign(r), None) = inner(self.g, id) {
            let x = &self.g.value_type(ins[0]).shape;
            let floats = out.dtype == DType::F32 && self.is_f32(ins[0]) && self.is_f32(ins[1]);
            return floats.then(|| Kernel::RoiAligned(RoiAligner::new(r, x, out.shape[0])));
        }
        if out.dtype != DType::F32 || !ins.iter().all(|&v| self.is_f32(v)) {
            return None;
        }
        match inner(self.g, id).0 {
            Op::Pool(p) if p.window.spatial_rank() == 2 => {
                let w = &p.window;
                self.pool_geom(
                    id,
                    (p.kind, true),
                    PoolWindow {
                        k: (w.kernel[0], w.kernel[1]),
                        stride: (w.strides[0], w.strides[1]),
                        dilation: (w.dilations[0], w.dilations[1]),
                        pad: (w.pad_begin(0), w.pad_begin(1)),
                        pad_end: (w.pad_end(0), w.pad_end(1)),
                    },
                    p.count_include_pad,
                )
            }
            // Of any other rank, the spatial axes are each row-major (n, c)
            // row: its mean (converters write a LayerNorm's moments so).
            Op::GlobalPool(GlobalPool {
                kind: PoolKind::Avg,
            }) if input_layout(self.g, id, 0)?.1.len() != 4 => self.rows(id, 2, RowOp::Mean),
            Op::GlobalPool(GlobalPool { kind }) => {
                let (_, xs) = input_layout(self.g, id, 0)?;
                (xs.len() == 4).then_some(())?;
                self.pool_geom(
                    id,
                    (*kind, false),
                    PoolWindow {
                        k: (xs[2], xs[3]),
                        stride: (1, 1),
                        dilation: (1, 1),
                        pad: (0, 0),
                        pad_end: (0, 0),
                    },
                    false,
                )
            }
            // A nearest resize that only copies runs as a gather (in runs of
            // repeated elements), which measures faster than the tap tables.
            Op::Resize(r) if !OpDef::moves_data(r) => self.resize(id, r),
            Op::GridSample(s) if inner(self.g, id).1.is_none() => {
                let x = &self.g.value_type(ins[0]).shape;
                Some(Kernel::Sampled(GridSampler::new(s, x, &out.shape)))
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
            }) if inner(self.g, id).1.is_none() => {
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
                let w = self.g.constant(ins[1])?.f32s();
                let shape = (a.shape[0], k, n);
                self.integer_dense(id, shape, *alpha, &w, *trans_b, c)
                    .or_else(|| {
                        Dense::new(shape, self.isa, *alpha, &w, *trans_b, c).map(Kernel::Dense)
                    })
            }
            Op::MatMul => self.matmul(id),
            Op::Det => Some(Kernel::Det(*self.g.value_type(ins[0]).shape.last()?)),
            Op::DynamicQuantize(op) => {
                let (_, shape) = input_layout(self.g, id, 0)?;
                Some(Kernel::DynamicQuantize(DynamicQuantizer {
                    op: *op,
                    group_len: op.group_len(&shape),
                    lanes: Lanes::for_block(self.isa, MAX_LANES),
                }))
            }
            // Softmax normalizes its one axis: rows only when it is the last.
            Op::Softmax(Softmax { axis }) if axis + 1 == self.g.value_type(ins[0]).shape.len() => {
                self.rows(id, *axis, RowOp::Softmax)
            }
            Op::LogSoftmax(LogSoftmax { axis })
                if axis + 1 == self.g.value_type(ins[0]).shape.len() =>
            {
                self.rows(id, *axis, RowOp::LogSoftmax)
            }
            Op::LayerNorm(LayerNorm {
                axis,
                epsilon,
                centered,
            }) => {
                let (epsilon, centered) = (*epsilon, *centered);
                self.rows(id, *axis, RowOp::LayerNorm { epsilon, centered })
            }
            Op::Reduce(Reduce {
                kind: ReduceKind::Mean,
                axes,
                ..
            }) => {
                // Only a reduction over the innermost axes makes rows.
                let rank = self.g.value_type(ins[0]).shape.len();
                let first = rank.checked_sub(axes.len())?;
                let mut sorted = axes.clone();
                sorted.sort_unstable();
                (!axes.is_empty() && sorted.into_iter().eq(first..rank))
                    .then(|| self.rows(id, first, RowOp::Mean))?
            }
            Op::Reshape(_) | Op::Identity if inner(self.g, id).1.is_none() => Some(Kernel::Copy),
            Op::Reshape(Reshape { shape }) => {
                let (from, from_shape) = input_layout(self.g, id, 0)?;
                let (to, pad) = output_layout(self.g, id)?;
                let fill = pad.known().unwrap_or(0.0);
                let g = Gather::reshape((&from, &from_shape), (&to, shape), fill).ok()?;
                Some(gather_or_copy(g, from.physical_shape(&from_shape).ok()?))
            }
            _ => None,
        }
    }

    /// Softmax or matrix product `head` rounded onto the grid of
    /// QuantizeDequantize `rounding` (the nodes between them reshapes), as
    /// one quantized kernel: when `head`'s native kernel runs over rows of
    /// values on byte grids (a softmax), or over two operands on grids (a
    /// product of activations; one by a constant is an integer dense
    /// product already), and the rounding writes its outputs in their order.
    fn requantized(&self, head: NodeId, rounding: NodeId) -> Option<Kernel> {
        let row_major = |(l, _): (Layout, PadValue)| l.is_identity();
        if !output_layout(self.g, rounding).is_some_and(row_major) {
            return None;
        }
        let (Op::Unary(qdq), _) = inner(self.g, rounding) else {
            return None;
        };
        let output = Grid::of(*qdq)?;
        let grid = |port: usize| Grid::of(grid_of(self.g, self.g.node_inputs(head)[port])?);
        if matches!(inner(self.g, head).0, Op::MatMul) {
            // A product by a constant matrix is an integer dense one already.
            let MatMulOperands::Batched(product) = self.matmul_operands(head)? else {
                return None;
            };
            return QuantizedMatMul::new(product, [grid(0)?, grid(1)?, output], self.isa)
                .map(|m| Kernel::QuantizedMatMul(Box::new(m)));
        }
        match self.native(head)? {
            Kernel::Normalize(rows) => {
                QuantizedSoftmax::new(grid(0)?, output, rows.len(), self.isa)
                    .map(Kernel::QuantizedSoftmax)
            }
            _ => None,
        }
    }

    /// A row kernel for `op` over the axes from `axis` on, when they are the
    /// innermost of row-major storage in and out (each row contiguous) and
    /// LayerNorm's scale and bias hold one row-major value per row element.
    fn rows(&self, id: NodeId, axis: usize, op: RowOp) -> Option<Kernel> {
        let (xl, xs) = input_layout(self.g, id, 0)?;
        let row_major = |l: &Layout| l.is_identity();
        if !row_major(&xl) || !row_major(&output_layout(self.g, id)?.0) {
            return None;
        }
        let len: usize = xs.get(axis..)?.iter().product();
        let params_per_element = (1..self.g.node_inputs(id).len()).all(|i| {
            input_layout(self.g, id, i)
                .is_some_and(|(l, s)| row_major(&l) && s.iter().product::<usize>() == len)
        });
        params_per_element
            .then(|| RowKernel::new(op, len, self.isa))?
            .map(Kernel::Normalize)
    }

    /// ONNX MatMul on operands stored as row-major (or in a layout with the
    /// same bytes, such as the NC16c of a pooled feature vector): against a
    /// constant matrix, packed once (`Dense`, over every row of `a` at once);
    /// otherwise batched, the leading axes broadcast and `b` packed at every run.
    fn matmul(&self, id: NodeId) -> Option<Kernel> {
        match self.matmul_operands(id)? {
            MatMulOperands::ByConstant(shape, w) => {
                let w = w.f32s();
                self.integer_dense(id, shape, 1.0, &w, false, None)
                    .or_else(|| {
                        Dense::new(shape, self.isa, 1.0, &w, false, None).map(Kernel::Dense)
                    })
            }
            MatMulOperands::Batched(product) => Some(Kernel::MatMul(product)),
        }
    }

    /// How MatMul `id` multiplies its operands, when both and its output
    /// are stored row-major (or in a layout with the same bytes).
    fn matmul_operands(&self, id: NodeId) -> Option<MatMulOperands<'g>> {
        let row_major = |l: &Layout, shape: &[usize]| {
            Layout::identity(shape.len()).is_ok_and(|r| same_bytes(l, &r, shape))
        };
        let (la, a) = input_layout(self.g, id, 0)?;
        let (lb, b) = input_layout(self.g, id, 1)?;
        let (ly, y) = (output_layout(self.g, id)?.0, output_shape(self.g, id)?);
        if !row_major(&la, &a) || !row_major(&lb, &b) || !row_major(&ly, &y) {
            return None;
        }
        let ins = self.g.node_inputs(id);
        // A vector operand is a matrix of one row (a) or one column (b).
        let a_shape = match a[..] {
            [k] => vec![1, k],
            _ => a.clone(),
        };
        let b_shape = match b[..] {
            [k] => vec![k, 1],
            _ => b.clone(),
        };
        let [m, k] = *a_shape.last_chunk()?;
        let [kb, n] = *b_shape.last_chunk()?;
        if k != kb {
            return None;
        }
        if let (Some(w), 2) = (self.g.constant(ins[1]), b.len()) {
            let rows = a.iter().product::<usize>() / k.max(1);
            return Some(MatMulOperands::ByConstant((rows, k, n), w));
        }
        let (a_batch, b_batch) = (&a_shape[..a_shape.len() - 2], &b_shape[..b_shape.len() - 2]);
        BatchedMatMul::new(a_batch, b_batch, (m, k, n), self.isa).map(MatMulOperands::Batched)
    }

    /// The product of node `id`'s input (`rows x k`, row-major) by the
    /// constant `w` (`k x n`, or `n x k` where `transposed`) times `alpha`,
    /// plus `bias` broadcast from `shape`, summed exactly in integers where
    /// the input lies on a grid of bytes, `alpha * w` on grids of signed
    /// bytes per column and the bias holds one value per column or one in
    /// all: as the integer convolution of a 1x1 window over `rows` pixels
    /// of `k` channels in NHWC, which is the row-major matrix. A quantized
    /// model's fully connected layers and a transformer's projections read
    /// a quarter of the weight bytes of the float product this way.
    fn integer_dense(
        &self,
        id: NodeId,
        (rows, k, n): (usize, usize, usize),
        alpha: f32,
        w: &[f32],
        transposed: bool,
        bias: Option<(&[f32], &[usize])>,
    ) -> Option<Kernel> {
        if self.conv_algo.choice == ConvAlgoChoice::Direct {
            return None;
        }
        let per_run = self.quantized_per_run(id);
        let grid = match per_run {
            Some((op, _)) => Grid::any_fitted(&op),
            None => self.input_grid(id).filter(Grid::fits_a_byte)?,
        };
        let bias = match bias {
            None => vec![0.0; n],
            Some((b, shape)) => match (b.len(), shape.last()) {
                (1, _) => vec![b[0]; n],
                (len, Some(&last)) if len == n && last == n => b.to_vec(),
                _ => return None,
            },
        };
        // Output channel `o` of the convolution is column `o` of the product.
        let oi: Vec<f32> = (0..n * k)
            .map(|at| {
                let (o, i) = (at / k, at % k);
                alpha
                    * match transposed {
                        true => w[o * k + i],
                        false => w[i * n + o],
                    }
            })
            .collect();
        let weights = IntegerWeights::recover(&oi, n)?;
        let geom = ConvGeom {
            n: 1,
            cin: k,
            h: 1,
            w: rows,
            cout: n,
            oh: 1,
            ow: rows,
            k: (1, 1),
            stride: (1, 1),
            dilation: (1, 1),
            pad: (0, 0),
            groups: 1,
            x_cb: k,
            y_cb: n,
        };
        let spec = ConvSpec {
            geom,
            isa: self.isa,
            w: &oi,
            params: ChannelParams::bias_only(&bias),
            epilogue: Epilogue::of(None),
            pad_fill: None,
            threads: par::threads(),
            grid: per_run.is_none().then_some(grid),
            residual: false,
            dynamic: per_run.map(|(op, _)| op),
        };
        QuantConv::new(&spec, grid, &weights).map(|c| Kernel::IntegerDense(Box::new(c)))
    }

    /// Kernels at the edge of the f32 world, for the integer inputs of language
    /// models: token ids gathering embedding rows, masks cast to f32, and
    /// integer tensors reshaped on the way.
    fn index_kernel(&self, id: NodeId) -> Option<Kernel> {
        let (op, laid_out) = inner(self.g, id);
        // A cast keeps every element where it is: in one layout without
        // padding (a quantized input transposed as bytes), it converts the
        // storage in order.
        let in_place = |l: &LaidOut| matches!(op, Op::Cast(_)) && one_unpadded_layout(l);
        if laid_out.is_some_and(|l| !in_place(l)) {
            return None;
        }
        let ins = self.g.node_inputs(id);
        let out = &self.g.node(id).outputs.first()?.ty;
        let is_int = |v: &ValueRef| {
            matches!(
                self.g.value_type(*v).dtype,
                DType::I64 | DType::I32 | DType::I8 | DType::U8 | DType::Bool
            )
        };
        match op {
            Op::Cast(_) if out.dtype == DType::F32 && !self.is_f32(ins[0]) => Some(Kernel::ToF32),
            // Quantized outputs (f32 values rounded and clamped to the type),
            // masks and ids between integer and boolean types, other floats.
            Op::Cast(c) if out.dtype != DType::F32 => Some(Kernel::Cast(c.clone())),
            Op::BitCast(b) => Some(Kernel::BitCast(b.to)),
            Op::NgramCounts(n) => Some(Kernel::NgramCounts(Box::new(n.clone()))),
            Op::Reshape(_) | Op::Identity if out.dtype != DType::F32 => {
                Some(Kernel::Rebox(out.shape.clone()))
            }
            Op::Gather(crate::ops::Gather { axis }) if is_int(&ins[1]) => {
                let xs = &self.g.value_type(ins[0]).shape;
                let rows = gather::Rows {
                    outer: xs[..*axis].iter().product(),
                    extent: xs[*axis],
                    inner: xs[axis + 1..].iter().product(),
                };
                self.picked(gather::Picking::Rows(rows), ins[0], out)
            }
            Op::GatherElements(crate::ops::GatherElements { axis }) if is_int(&ins[1]) => {
                let elements = gather::Elements {
                    data: self.g.value_type(ins[0]).shape.clone(),
                    indices: self.g.value_type(ins[1]).shape.clone(),
                    axis: *axis,
                };
                self.picked(gather::Picking::Elements(elements), ins[0], out)
            }
            Op::GatherNd(op) if is_int(&ins[1]) => {
                let tuples = gather::Tuples {
                    op: op.clone(),
                    data: self.g.value_type(ins[0]).shape.clone(),
                    indices: self.g.value_type(ins[1]).shape.clone(),
                };
                self.picked(gather::Picking::Tuples(tuples), ins[0], out)
            }
            Op::ScatterNd(s) if is_int(&ins[1]) => self.scattered(Placing::Nd(s.clone()), &ins),
            Op::ScatterElements(s) if is_int(&ins[1]) => {
                self.scattered(Placing::Elements(s.clone()), &ins)
            }
            _ => None,
        }
    }

    /// The kernel of a gather from `data` by run-time indices: on f32 slots,
    /// or on tensors of any other type.
    fn picked(&self, picking: gather::Picking, data: ValueRef, out: &ValueType) -> Option<Kernel> {
        match out.dtype {
            DType::F32 => self.is_f32(data).then_some(Kernel::Picked(picking)),
            d => Gathered::new(picking, d, out.shape.clone()).map(Kernel::Gathered),
        }
    }

    /// The kernel of a scatter into data (`ins[0]`) at run-time indices
    /// (`ins[1]`) of updates (`ins[2]`): on f32 slots, or on tensors of
    /// another type.
    fn scattered(&self, placing: Placing, ins: &[ValueRef]) -> Option<Kernel> {
        let (data, indices) = (self.g.value_type(ins[0]), self.g.value_type(ins[1]));
        let k = Scatter::new(placing, data.shape.clone(), indices.shape.clone());
        match data.dtype {
            DType::F32 => Some(Kernel::Scatter(k)),
            d => k.takes(d).then_some(Kernel::Scattered(k)),
        }
    }

    /// Elementwise ops, reductions and running sums on row-major integers and
    /// booleans, comparisons, ArgMax/ArgMin and TopK of f32 and integers.
    fn typed(&self, id: NodeId) -> Option<Kernel> {
        let (op, laid_out) = inner(self.g, id);
        if laid_out.is_some() {
            return None;
        }
        let ins = self.g.node_inputs(id);
        let op = match op {
            Op::Binary(b) => TypedOp::of_binary(*b, self.g.value_type(*ins.first()?).dtype)?,
            Op::IntegerArith(a) => TypedOp::Integer(*a),
            Op::ArgReduce(r) if ranked(self.g.value_type(*ins.first()?).dtype) => {
                let (x, out) = (self.g.value_type(ins[0]), &self.g.node(id).outputs[0].ty);
                return ArgBest::new(r, &x.shape, &out.shape).map(Kernel::Arg);
            }
            Op::Reduce(r) if !self.is_f32(*ins.first()?) => {
                let (x, out) = (self.g.value_type(ins[0]), &self.g.node(id).outputs[0].ty);
                return Reduced::new(r, x.dtype, &x.shape, &out.shape).map(Kernel::Reduced);
            }
            Op::Cumulative(c) if !self.is_f32(*ins.first()?) => {
                let x = self.g.value_type(ins[0]);
                return Scanned::new(c, x.dtype, &x.shape).map(Kernel::Scanned);
            }
            Op::TopK(t) if ranked(self.g.value_type(*ins.first()?).dtype) => {
                let x = self.g.value_type(ins[0]);
                return TopKBest::new(t, &x.shape).map(Kernel::TopK);
            }
            Op::Logical(l) => TypedOp::Logical(*l),
            Op::Where => TypedOp::Where,
            _ => return None,
        };
        let operands: Vec<(DType, &[usize])> = (ins.iter())
            .map(|&v| {
                let t = self.g.value_type(v);
                (t.dtype, &t.shape[..])
            })
            .collect();
        let out = &self.g.node(id).outputs.first()?.ty;
        Typed::new(op, &operands, &out.shape).map(Kernel::Typed)
    }

    /// The inputs of a data-movement node its elements come from (see
    /// `OpDef::moved_inputs`), the first ones; the rest pick them.
    fn moved_inputs(&self, id: NodeId) -> usize {
        let inputs = self.g.node_inputs(id).len();
        inner(self.g, id).0.def().moved_inputs(inputs).min(inputs)
    }

    /// A data-movement node as one index gather per output: the op's reference
    /// semantics applied to the positions 1, 2, 3, ... of its moved inputs (in
    /// their storage, one input's positions after another's) give, in each
    /// output, the position every element comes from; a position the op did
    /// not fill is padding of the output's layout, or of a constant Pad (which
    /// pads the positions with 0, no source, and fills its value; `None` when
    /// the layout's padding would need another value). Integer and boolean
    /// values (row-major, boxed) move by the same sources. An op whose index
    /// map splits by axis gets the same sources from the layouts' offset
    /// tables instead (`axis_sources`), without evaluating anything.
    fn movement(&self, id: NodeId) -> Option<Vec<Kernel>> {
        let node = self.g.node(id);
        let ins = self.g.node_inputs(id);
        let (moved, params) = ins.split_at(self.moved_inputs(id));
        let xs: Vec<&ValueType> = moved.iter().map(|&v| self.g.value_type(v)).collect();
        let dtype = node.outputs.first()?.ty.dtype;
        let one_type = node.outputs.iter().all(|v| v.ty.dtype == dtype);
        let params: Option<Vec<&Tensor>> = params.iter().map(|&v| self.g.constant(v)).collect();
        let inputs_ok =
            (1..=MAX_GATHER_INPUTS).contains(&xs.len()) && xs.iter().all(|x| x.dtype == dtype);
        let (op, laid_out) = inner(self.g, id);
        if !one_type || !inputs_ok || (dtype != DType::F32 && laid_out.is_some()) {
            return None;
        }
        let (positions_op, constant) = match op {
            Op::Pad(
                p @ Pad {
                    mode: PadMode::Constant(value),
                    ..
                },
            ) => {
                let zero = Op::Pad(Pad {
                    mode: PadMode::Constant(0.0),
                    ..p.clone()
                });
                let op = match laid_out {
                    Some(l) => Op::InLayout(Box::new(LaidOut {
                        inner: zero,
                        ..l.clone()
                    })),
                    None => zero,
                };
                (Cow::Owned(op), Some(*value))
            }
            // Its padding, like a constant pad's, has no source and its fill.
            Op::LayoutTransform(t) => {
                let unfilled = Op::LayoutTransform(LayoutTransform {
                    pad: PadValue::Known(0.0),
                    ..t.clone()
                });
                (Cow::Owned(unfilled), t.pad.known())
            }
            op if op.def().moves_data() => (Cow::Borrowed(&node.op), None),
            _ => return None,
        };
        let fills = (0..node.outputs.len())
            .map(|k| {
                let layout_pad = laid_out.map(|l| l.outputs[k].1);
                match (constant, layout_pad.and_then(|p| p.known())) {
                    (Some(v), Some(p)) => (v == p).then_some(v),
                    (Some(v), None) => Some(v),
                    (None, p) => Some(p.unwrap_or(0.0)),
                }
            })
            .collect::<Option<Vec<f32>>>()?;
        let mut starts = vec![];
        let mut n = 0;
        for x in &xs {
            starts.push(n);
            n += x.numel();
        }
        let n = u32::try_from(n).ok().filter(|&n| n < u32::MAX)?;
        // Working out the sources takes about 40 bytes per element (positions
        // evaluated in i64 and f64); past a quarter of the memory budget the op
        // runs as it is instead (and the budget check of the run decides).
        let elements = node
            .outputs
            .iter()
            .map(|v| v.ty.numel() as u64)
            .fold(n as u64, u64::saturating_add);
        if elements.saturating_mul(40) > crate::core::budget::limit() / 4 {
            return None;
        }
        let sources = match self.axis_sources(id) {
            Some(src) => vec![src],
            None => {
                let positions: Vec<Tensor> = xs
                    .iter()
                    .zip(&starts)
                    .map(|(x, &s)| {
                        Tensor::from_i64(
                            x.shape.clone(),
                            (s + 1..=s + x.numel()).map(|p| p as i64).collect(),
                        )
                    })
                    .collect();
                let mut args: Vec<&Tensor> = positions.iter().collect();
                args.extend(params?);
                let types: Vec<_> = node
                    .outputs
                    .iter()
                    .map(|v| crate::graph::ValueType::new(DType::I64, v.ty.shape.clone()))
                    .collect();
                let positions = positions_op.def().eval(&args, &types).ok()?;
                let source = |p: i64| match p {
                    1.. if p <= n as i64 => (p - 1) as u32,
                    _ => u32::MAX,
                };
                (positions.iter())
                    .map(|t| Sources::Table(t.data.to_i64().into_iter().map(source).collect()))
                    .collect()
            }
        };
        let kernel = |((src, v), &fill): ((Sources, &crate::graph::Value), &f32)| {
            // The planned value has the physical shape.
            let len = v.ty.numel();
            let gather = match (dtype, src) {
                (DType::F32, Sources::Rows(rows)) => {
                    Gather::from_rows(rows, starts.len(), len, fill)
                }
                (DType::F32, Sources::Table(src)) => Gather::from_inputs(src, &starts, fill),
                (_, src) => {
                    let table = src.table(len, &starts)?;
                    return Some(Kernel::Moved(Moved::new(table, fill, v.ty.shape.clone())));
                }
            };
            gather.map(Kernel::Gather)
        };
        sources
            .into_iter()
            .zip(&node.outputs)
            .zip(&fills)
            .map(kernel)
            .collect()
    }

    /// The rows of a one-output data movement whose index map splits by
    /// axis (`OpDef::axis_reads`), from its layouts' offset tables: one row,
    /// found without a pass over the elements, where the movement is a view
    /// of its one input.
    fn axis_sources(&self, id: NodeId) -> Option<Sources> {
        let node = self.g.node(id);
        let moved = &self.g.node_inputs(id)[..self.moved_inputs(id)];
        let [y] = &node.outputs[..] else { return None };
        let (op, laid_out) = inner(self.g, id);
        let (xs, y_layout, y_shape): (Vec<(Cow<Layout>, Vec<usize>)>, _, _) = match laid_out {
            Some(l) => {
                let [(y_layout, _)] = &l.outputs[..] else {
                    return None;
                };
                let xs: Vec<_> = (l.inputs.iter().take(moved.len()))
                    .map(|(layout, shape)| (Cow::Borrowed(layout), shape.clone()))
                    .collect();
                let types: Vec<ValueType> = (xs.iter())
                    .map(|(_, shape)| ValueType::new(y.ty.dtype, shape.clone()))
                    .collect();
                let refs: Vec<&ValueType> = types.iter().collect();
                let [y_type] = &op.def().infer(&refs).ok()?[..] else {
                    return None;
                };
                (xs, Cow::Borrowed(y_layout), y_type.shape.clone())
            }
            None => {
                let identity =
                    |shape: &[usize]| Some(Cow::Owned(Layout::identity(shape.len()).ok()?));
                let xs = (moved.iter())
                    .map(|&x| {
                        let shape = self.g.value_type(x).shape.clone();
                        Some((identity(&shape)?, shape))
                    })
                    .collect::<Option<_>>()?;
                (xs, identity(&y.ty.shape)?, y.ty.shape.clone())
            }
        };
        let shapes: Vec<&[usize]> = xs.iter().map(|(_, s)| &s[..]).collect();
        let reads = op.def().axis_reads(&shapes, &y_shape)?;
        let placed: Vec<axis_sources::Placed> = (xs.iter())
            .map(|(layout, shape)| axis_sources::Placed { layout, shape })
            .collect();
        let y = axis_sources::Placed {
            layout: &y_layout,
            shape: &y_shape,
        };
        let rows = match axis_sources::shift(&reads, &placed, y) {
            Some(k) => vec![Row::view(numel(&y_shape), k as usize)],
            None => axis_sources::rows(&reads, &placed, y)?,
        };
        Some(Sources::Rows(rows))
    }

    /// The vector kernel of an elementwise chain (each node the only reader of
    /// the one before), with its operands: every input that is not the
    /// previous node's output, in order. `None` unless every node is an f32
    /// unary or arithmetic binary op whose operands line up with the output
    /// (see `broadcast_strides`).
    fn elementwise(&self, chain: &[NodeId]) -> Option<(Kernel, Vec<ValueRef>)> {
        let last = *chain.last()?;
        let (out_layout, _) = output_layout(self.g, last)?;
        let out_shape = output_shape(self.g, last)?;
        let out = Stored {
            layout: &out_layout,
            shape: &out_shape,
        };
        let (mut funcs, mut operands, mut strides, mut lens) = (vec![], vec![], vec![], vec![]);
        let mut packed: Vec<(Vec<usize>, Vec<f32>)> = vec![];
        for (k, &id) in chain.iter().enumerate() {
            let node = self.g.node(id);
            let ins = self.g.node_inputs(id);
            let [y] = &node.outputs[..] else { return None };
            if y.ty.dtype != DType::F32 || !ins.iter().all(|&v| self.is_f32(v)) {
                return None;
            }
            let op = inner(self.g, id).0;
            if !matches!(op, Op::Unary(_) | Op::Binary(_) | Op::BatchNorm(_)) {
                return None;
            }
            // A batch norm reads its data; its parameters become constants.
            let prev = (k > 0).then(|| ValueRef::new(chain[k - 1], 0));
            let read = match op {
                Op::BatchNorm(_) if prev.is_some_and(|p| ins[1..].contains(&p)) => return None,
                Op::BatchNorm(_) => &ins[..1],
                _ => &ins[..],
            };
            let mut args = vec![];
            for (port, &v) in read.iter().enumerate() {
                if Some(v) == prev {
                    args.push(Arg::Prev);
                    continue;
                }
                match self.lined_up(id, port, &out) {
                    // A value read twice alike (a swish's input) is one
                    // operand.
                    Some((s, len)) => match (operands.iter().zip(&strides))
                        .position(|(&o, read)| o == v && *read == s)
                    {
                        Some(k) => args.push(Arg::Operand(k)),
                        None => {
                            strides.push(s);
                            lens.push(len);
                            args.push(Arg::Operand(operands.len()));
                            operands.push(v);
                        }
                    },
                    // A constant of lower rank than the output (a PRelu's
                    // [1, 1, C] slope) stays row-major in the plan; the kernel
                    // holds it in the output's layout instead.
                    None => {
                        args.push(Arg::Packed(packed.len()));
                        packed.push(self.broadcast_constant(id, port, &out)?);
                    }
                }
            }
            let rounded = match op {
                Op::Unary(u) => self.quantized_tail(&chain[..k], &funcs, *u),
                _ => None,
            };
            match (op, &args[..], rounded) {
                // Rounding a sum or product of grid values onto a grid is one
                // op, computed from the integers as the peers' quantized ops do.
                (Op::Unary(_), &[Arg::Prev], Some((func, replaced))) => {
                    funcs.truncate(funcs.len() - replaced);
                    funcs.push(func);
                }
                (Op::Unary(u), &[a], _) => funcs.push(Func::Unary(*u, a)),
                (Op::Binary(b), &[p, q], _) => funcs.push(Func::Binary(*b, p, q)),
                (Op::BatchNorm(BatchNorm { epsilon }), &[x], _) => {
                    let (per_channel, scale, shift) = self.batch_norm_affine(id, *epsilon, &out)?;
                    let (s, t) = (Arg::Packed(packed.len()), Arg::Packed(packed.len() + 1));
                    packed.extend([(per_channel.clone(), scale), (per_channel, shift)]);
                    funcs.push(Func::Binary(BinaryOp::Mul, x, s));
                    funcs.push(Func::Binary(BinaryOp::Add, Arg::Prev, t));
                }
                _ => return None,
            }
        }
        let physical = out_layout.physical_shape(&out_shape).ok()?;
        for (s, values) in &packed {
            strides.push(s.clone());
            lens.push(values.len());
        }
        let packed = packed.into_iter().map(|(_, v)| v).collect();
        let mut kernel = Elementwise::new(funcs, &physical, strides, lens, packed, self.isa)?;
        // A chain of one quantized value is a function of its byte.
        if let [x] = operands[..] {
            if let Some(grid) = grid_of(self.g, x).and_then(Grid::of) {
                kernel.tabulate(grid, self.isa);
            }
        }
        Some((Kernel::Elementwise(kernel), operands))
    }

    /// The last of `funcs` (computing the nodes `before`) and the rounding
    /// `qdq` after them as one quantized op, with how many of `funcs` it
    /// replaces: an add or a multiply, or an add then a Relu or Clip (a
    /// TFLite op's fused activation), rounded onto a grid; in a TFLite
    /// model, a hard-swish of a value on a grid.
    fn quantized_tail(
        &self,
        before: &[NodeId],
        funcs: &[Func],
        qdq: UnaryOp,
    ) -> Option<(Func, usize)> {
        match (funcs, before) {
            ([.., Func::Binary(b, p, q)], [.., node]) => {
                Some((self.quantized_binary(*node, *b, qdq, *p, *q)?, 1))
            }
            ([.., Func::Unary(UnaryOp::HardSwish, a)], [.., node])
                if self.g.quantized_arithmetic == QuantizedArithmetic::Tflite =>
            {
                let hard_swish = QuantizedHardSwish::new(self.input_grid(*node)?, Grid::of(qdq)?)?;
                Some((Func::QuantizedHardSwish(hard_swish, *a), 1))
            }
            (
                [.., Func::Binary(BinaryOp::Add, p, q), Func::Unary(clamp, Arg::Prev)],
                [.., node, _],
            ) => {
                let (lo, hi) = clamp.clamp_bounds()?;
                match self.quantized_binary(*node, BinaryOp::Add, qdq, *p, *q)? {
                    Func::QuantizedAdd(add, p, q) => {
                        Some((Func::QuantizedAdd(add.clamped(lo, hi), p, q), 2))
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Node `node`, an add or a multiply `op` of operands `p` and `q`,
    /// followed by `qdq`, as one quantized op: when `qdq` rounds onto a grid
    /// and both operands lie on grids.
    fn quantized_binary(
        &self,
        node: NodeId,
        op: BinaryOp,
        qdq: UnaryOp,
        p: Arg,
        q: Arg,
    ) -> Option<Func> {
        // The cheap checks first: the operands' grids walk the graph.
        let c = Grid::of(qdq)?;
        if !matches!(op, BinaryOp::Add | BinaryOp::Mul) || *inner(self.g, node).0 != Op::Binary(op)
        {
            return None;
        }
        let grid = |v: ValueRef| Grid::of(grid_of(self.g, v)?);
        let ins = self.g.node_inputs(node);
        let [a, b] = ins[..] else { return None };
        let (a, b) = (grid(a)?, grid(b)?);
        match op {
            BinaryOp::Add => QuantizedAdd::new(a, b, c, self.g.quantized_arithmetic)
                .map(|add| Func::QuantizedAdd(add, p, q)),
            _ => QuantizedMul::new(a, b, c).map(|mul| Func::QuantizedMul(mul, p, q)),
        }
    }

    /// A batch norm with constant parameters as `x * scale + shift` per
    /// channel (axis 1), as the convolutions fold it: the strides of a
    /// per-channel constant against the output `out`, then the scale and the
    /// shift in the output's physical order. `None` when the output's layout pads an axis (the
    /// padding would then need the values the op's pad flow promises).
    fn batch_norm_affine(
        &self,
        id: NodeId,
        epsilon: f32,
        out: &Stored,
    ) -> Option<(Vec<usize>, Vec<f32>, Vec<f32>)> {
        let channels = *out.shape.get(1)?;
        if !out.layout.padded_axes(out.shape).ok()?.is_empty() {
            return None;
        }
        let p: Vec<Cow<[f32]>> = (1..5)
            .map(|i| self.const_input(id, i))
            .collect::<Option<_>>()?;
        if p.iter().any(|v| v.len() != channels) {
            return None;
        }
        let (mut scale, mut shift) = (vec![], vec![]);
        for (((&g, &b), &m), &v) in p[0]
            .iter()
            .zip(p[1].iter())
            .zip(p[2].iter())
            .zip(p[3].iter())
        {
            let [g, b, m, v] = [g, b, m, v].map(f64::from);
            let s = g / (v + epsilon as f64).sqrt();
            scale.push(s as f32);
            shift.push((b - m * s) as f32);
        }
        let mut shape = vec![1; out.shape.len()];
        shape[1] = channels;
        let (strides, scale) = laid_out_like(out, &shape, scale)?;
        let (_, shift) = laid_out_like(out, &shape, shift)?;
        Some((strides, scale, shift))
    }

    /// Constant input `port` of node `id`, broadcast from the right to the
    /// output `out`'s rank and laid out in its layout, with zeros in any
    /// padding (as the planner packs constants, so the pad values it
    /// promised hold): its strides against the output and its values.
    fn broadcast_constant(
        &self,
        id: NodeId,
        port: usize,
        out: &Stored,
    ) -> Option<(Vec<usize>, Vec<f32>)> {
        let values = self.const_input(id, port)?.into_owned();
        let (_, logical) = input_layout(self.g, id, port)?;
        let lift = out.shape.len().checked_sub(logical.len())?;
        let mut shape = vec![1; lift];
        shape.extend(&logical);
        laid_out_like(out, &shape, values)
    }

    /// How input `port` of node `id` lines up with the output `out` of an
    /// elementwise step: its strides (`broadcast_strides`) and its stored length.
    fn lined_up(&self, id: NodeId, port: usize, out: &Stored) -> Option<(Vec<usize>, usize)> {
        let (layout, shape) = input_layout(self.g, id, port)?;
        let stored = Stored {
            layout: &layout,
            shape: &shape,
        };
        let strides = broadcast_strides(out, &stored)?;
        Some((
            strides,
            layout.physical_shape(&shape).ok()?.iter().product(),
        ))
    }

    /// Where with f32 branches, its mask and branches lined up with the output.
    fn select(&self, id: NodeId) -> Option<Kernel> {
        let ins = self.g.node_inputs(id);
        if !self.is_f32(ins[1]) || !self.is_f32(ins[2]) {
            return None;
        }
        let (out_layout, _) = output_layout(self.g, id)?;
        let out_shape = output_shape(self.g, id)?;
        let out = Stored {
            layout: &out_layout,
            shape: &out_shape,
        };
        let (strides, lens) = (0..3)
            .map(|port| self.lined_up(id, port, &out))
            .collect::<Option<(Vec<_>, Vec<_>)>>()?;
        let physical = out_layout.physical_shape(&out_shape).ok()?;
        Select::new(&physical, strides, lens, self.isa).map(Kernel::Select)
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

    fn pool_geom(
        &self,
        id: NodeId,
        (kind, skip_nan): (PoolKind, bool),
        window: PoolWindow,
        count_include_pad: bool,
    ) -> Option<Kernel> {
        let (xl, xs) = input_layout(self.g, id, 0)?;
        let (yl, _) = output_layout(self.g, id)?;
        let cb = xl.channel_block(&xs)?;
        let ys = &self.g.node(id).outputs[0].ty.shape;
        // The output's physical shape is NCHW{cb}c (or NCHW): its spatial extents
        // sit at positions 2 and 3 either way, except NHWC (1 and 2).
        let (oh, ow) = match yl.as_permutation().as_deref() {
            Some([0, 2, 3, 1]) => (ys[1], ys[2]),
            _ => (ys[2], ys[3]),
        };
        if yl.channel_block(&[xs[0], xs[1], oh, ow]) != Some(cb) {
            return None;
        }
        let PoolWindow {
            k,
            stride,
            dilation,
            pad,
            pad_end,
        } = window;
        Some(Kernel::Pool(
            PoolGeom {
                kind,
                skip_nan,
                planes: xs[0] * xs[1].div_ceil(cb),
                cb,
                h: xs[2],
                w: xs[3],
                oh,
                ow,
                k,
                stride,
                dilation,
                pad,
                pad_end,
                count_include_pad,
                lanes: Lanes::One,
                rows: vec![],
                cols: vec![],
                counts: (vec![], vec![]),
                integer_average: self.integer_average(id, k.0 * k.1),
            }
            .for_isa(self.isa),
        ))
    }

    /// TFLite's integer average for average pool `id` over windows of
    /// `positions`: in a TFLite model, where the pool's input lies on a grid
    /// and every reader rounds its output onto that grid (TFLite's pools keep
    /// their input's grid), through data movement alone. The readers'
    /// roundings then leave the pool's values as they are. Onnxruntime's
    /// quantized pools round the float mean, as the pool and the rounding
    /// steps do.
    fn integer_average(&self, id: NodeId, positions: usize) -> Option<IntegerAverage> {
        let (Op::Pool(p), _) = inner(self.g, id) else {
            return None;
        };
        if p.kind != PoolKind::Avg || self.g.quantized_arithmetic != QuantizedArithmetic::Tflite {
            return None;
        }
        // Padding the plan promises a value in keeps it only at 0, on every grid.
        if output_layout(self.g, id)?
            .1
            .known()
            .is_some_and(|v| v != 0.0)
        {
            return None;
        }
        let grid = self.input_grid(id)?;
        (self.rounded_by_readers(id)? == grid).then_some(())?;
        IntegerAverage::new(grid, positions)
    }

    /// The grid every reader of node `id`'s output rounds it onto, through
    /// data movement alone (each moved value read by such readers only, and
    /// no graph output); `None` where a reader computes anything else or the
    /// grids differ.
    fn rounded_by_readers(&self, id: NodeId) -> Option<Grid> {
        let mut grid = None;
        let mut values = vec![ValueRef::new(id, 0)];
        while let Some(v) = values.pop() {
            let readers = self.g.consumers(v);
            if self.g.is_graph_output(v) || readers.is_empty() {
                return None;
            }
            for (reader, port) in readers {
                match inner(self.g, reader).0 {
                    Op::Unary(qdq) => {
                        let rounds_onto = Grid::of(*qdq)?;
                        (*grid.get_or_insert(rounds_onto) == rounds_onto).then_some(())?;
                    }
                    op if op.def().moves_data() && port < self.moved_inputs(reader) => {
                        let outputs = self.g.node(reader).outputs.len();
                        values.extend((0..outputs).map(|k| ValueRef::new(reader, k)));
                    }
                    _ => return None,
                }
            }
        }
        grid
    }

    /// A Resize that filters one axis, or two adjacent in storage (the
    /// spatial axes of NCHW, NHWC or NCHW{cb}c, or of the NHWC tensors TFLite
    /// models resize), keeping the others: the axes stored before them make
    /// the kernel's planes, those after them its channels. One that filters
    /// nothing is a copy.
    fn resize(&self, id: NodeId, r: &Resize) -> Option<Kernel> {
        let (layout, xs) = input_layout(self.g, id, 0)?;
        if output_layout(self.g, id)?.0 != layout {
            return None;
        }
        let taps: Vec<AxisTaps> = (0..xs.len())
            .map(|ax| r.axis_taps(ax, xs[ax], *r.sizes.get(ax)?).ok())
            .collect::<Option<_>>()?;
        let mut filtered: Vec<usize> = (0..xs.len())
            .filter(|&ax| !is_identity(&taps[ax], xs[ax]))
            .collect();
        // Where each axis is stored (`runs_in` leaves the filtered ones unblocked).
        let at = |ax: usize| layout.order().iter().position(|d| d.axis == ax);
        filtered.sort_by_key(|&ax| at(ax));
        let (rows, cols) = match filtered[..] {
            [] => return Some(Kernel::Copy),
            [w] => (None, w),
            [h, w] if at(w)? == at(h)? + 1 => (Some(h), w),
            _ => return None,
        };
        let physical = layout.physical_shape(&xs).ok()?;
        let first = at(rows.unwrap_or(cols))?;
        let planes = physical[..first].iter().product();
        let channels = physical[at(cols)? + 1..].iter().product();
        // One axis filtered: planes of one row.
        let one_row: AxisTaps = vec![Some(vec![(0, 1.0)])];
        let (h, row_taps) = rows.map_or((1, &one_row), |h| (xs[h], &taps[h]));
        let fill = r.crop.as_ref().map_or(0.0, |c| c.1);
        let shape = (planes, channels, h, xs[cols]);
        ResizeGeom::new(shape, row_taps, &taps[cols], fill, self.isa).map(Kernel::Resize)
    }

    /// The fusion pass's groups, with the native kernels built while asking.
    fn plan_fusion(&self) -> Result<(Vec<FusedGroup>, HashMap<NodeId, Built>), RuntimeError> {
        let mut target = NativeKernels {
            c: self,
            built: HashMap::new(),
        };
        let groups = fusion::plan(self.g, &mut target)?;
        Ok((groups, target.built))
    }

    pub(super) fn fusion_groups(&self) -> Result<Vec<FusedGroup>, RuntimeError> {
        Ok(self.plan_fusion()?.0)
    }

    /// The algorithm of every fused convolution, chosen as `finish` would
    /// (measured on the threads of `pool`), without compiling the other steps.
    pub(super) fn conv_algos(mut self, pool: &par::Pool) -> Result<Vec<LayerAlgo>, RuntimeError> {
        for group in self.plan_fusion()?.0 {
            if let Pattern::ConvEpilogue {
                bn,
                residual,
                activation,
            } = group.pattern
            {
                self.conv_step(pool, &group, bn, residual, activation)?;
            }
        }
        Ok(self.conv_algos)
    }

    pub(super) fn finish(mut self, pool: Arc<par::Pool>) -> Result<CompiledModel, RuntimeError> {
        let g = self.g;
        let order = g.topo_order()?;
        let (groups, mut natives) = self.plan_fusion()?;
        let mut group_of: HashMap<NodeId, &FusedGroup> = HashMap::new();
        for group in &groups {
            group_of.extend(group.nodes.iter().map(|&n| (n, group)));
        }
        // A group's step runs where its last node is, when every operand from
        // outside the group is surely computed.
        for &id in &order {
            let Some(group) = group_of.get(&id) else {
                match &g.node(id).op {
                    Op::Control(op) => self.control_step(id, op, &pool)?,
                    _ => self.single_step(id, &mut natives)?,
                }
                continue;
            };
            if group.last() != id {
                continue;
            }
            match &group.pattern {
                Pattern::ConvEpilogue {
                    bn,
                    residual,
                    activation,
                } => {
                    let step = self.conv_step(&pool, group, *bn, *residual, *activation)?;
                    self.steps.push(step);
                }
                Pattern::Elementwise => match (!self.generic)
                    .then(|| self.elementwise(&group.nodes))
                    .flatten()
                {
                    Some((kernel, inputs)) => {
                        let suffix = kernel.table_suffix().to_string();
                        let step = self.group_pending(group, suffix, kernel, inputs, &[]);
                        self.steps.push(step);
                    }
                    None => self.tir_group(group, &mut natives)?,
                },
                // The fusion pass built the kernel when it formed the group.
                Pattern::Requantized => match natives.remove(&id) {
                    Some(Built::Kernel(kernel)) => {
                        let xs = self.g.node_inputs(group.nodes[0]).to_vec();
                        // A product summed in integers through f32 says so.
                        let suffix = match *kernel {
                            Kernel::QuantizedMatMul(_) => " (integers)",
                            _ => "",
                        };
                        let step = self.group_pending(group, suffix.to_string(), *kernel, xs, &[]);
                        self.steps.push(step);
                    }
                    _ => {
                        for &n in &group.nodes {
                            self.single_step(n, &mut natives)?;
                        }
                    }
                },
            }
        }
        self.add_measured_transforms();
        self.fuse_quantized_adds();
        self.fuse_tables();
        self.drop_unread_steps();
        let bytes = self.hand_off_bytes();
        self.plan_memory(pool, &bytes)
    }

    /// Drops the steps whose outputs no step reads and the graph does not
    /// output: a per-run quantization whose readers all quantize their
    /// input themselves.
    fn drop_unread_steps(&mut self) {
        let (mut readers, _) = dataflow(self.g, &self.steps);
        let mut keep = vec![true; self.steps.len()];
        for (i, step) in self.steps.iter().enumerate().rev() {
            if step.outputs.iter().all(|v| !readers.contains_key(v)) {
                keep[i] = false;
                for v in &step.inputs {
                    if let Some(n) = readers.get_mut(v) {
                        *n -= 1;
                        if *n == 0 {
                            readers.remove(v);
                        }
                    }
                }
            }
        }
        let mut kept = keep.into_iter();
        self.steps.retain(|_| kept.next().unwrap_or(true));
    }

    /// The step of an If, Loop or Scan: each of its subgraphs compiled as a
    /// model of its own, on the same pool, run by the op's iterations.
    fn control_step(
        &mut self,
        id: NodeId,
        op: &ControlFlow,
        pool: &Arc<par::Pool>,
    ) -> Result<(), RuntimeError> {
        let node = self.g.node(id);
        let subgraphs = (subgraphs(op).into_iter())
            .map(|sub| {
                compile_graph(
                    sub,
                    self.isa,
                    &self.options,
                    self.times.clone(),
                    pool.clone(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let inputs = self.g.node_inputs(id);
        let outputs: Vec<ValueRef> = (0..node.outputs.len())
            .map(|i| ValueRef::new(id, i))
            .collect();
        let kernel = ControlKernel {
            op: op.clone(),
            outputs: node.outputs.iter().map(|v| v.ty.clone()).collect(),
            subgraphs,
        };
        self.steps.push(Pending {
            name: node.name.clone(),
            kind: node.op.kind_name().to_string(),
            spans: node.spans.clone(),
            kernel: Kernel::Control(Box::new(kernel)),
            work: self.work(&[id], &inputs, &outputs),
            inputs,
            outputs,
            measured_ms: None,
        });
        Ok(())
    }

    /// Gives each layout transform step the time the planner measured for it
    /// (`KernelTimes::transform_millis`), when the cache holds one.
    fn add_measured_transforms(&mut self) {
        if self.conv_algo.cache.is_none() {
            return;
        }
        let times = lock(&self.times);
        for step in &mut self.steps {
            let [out] = step.outputs[..] else { continue };
            if let Op::LayoutTransform(LayoutTransform {
                from, to, logical, ..
            }) = &self.g.node(out.node).op
            {
                step.measured_ms = times.transform_millis(logical, from, to).map(|(ms, _)| ms);
            }
        }
    }

    /// The TIR loop nest of an elementwise group, or one step per node when it
    /// has none.
    fn tir_group(
        &mut self,
        group: &FusedGroup,
        natives: &mut HashMap<NodeId, Built>,
    ) -> Result<(), RuntimeError> {
        match self.tir(&group.nodes)? {
            Some((kernel, inputs)) => {
                let kernel = Kernel::Tir(Box::new(kernel));
                let step = self.group_pending(group, " (tir)".into(), kernel, inputs, &[]);
                self.steps.push(step);
            }
            // No loop nest for the chain: its nodes run one by one.
            None => {
                for &n in &group.nodes {
                    self.single_step(n, natives)?;
                }
            }
        }
        Ok(())
    }

    /// The step of a node of no group: its native kernel, its TIR loop nest, or
    /// the reference executor. Inputs and constants get no step.
    fn single_step(
        &mut self,
        id: NodeId,
        natives: &mut HashMap<NodeId, Built>,
    ) -> Result<(), RuntimeError> {
        let node = self.g.node(id);
        match &node.op {
            Op::Input => return Ok(()),
            Op::Constant(t) => {
                self.const_of
                    .insert(ValueRef::new(id, 0), self.consts.len());
                self.consts.push(t.clone());
                return Ok(());
            }
            _ => {}
        }
        let mut kind = node.op.kind_name().to_string();
        let all_inputs = self.g.node_inputs(id);
        let outputs: Vec<ValueRef> = (0..node.outputs.len())
            .map(|i| ValueRef::new(id, i))
            .collect();
        if self.generic {
            if let Some((k, _)) = self.tir(&[id])? {
                self.steps.push(Pending {
                    name: node.name.clone(),
                    kind: format!("{kind} (tir)"),
                    spans: node.spans.clone(),
                    kernel: Kernel::Tir(Box::new(k)),
                    work: self.work(&[id], &all_inputs, &outputs),
                    inputs: all_inputs,
                    outputs,
                    measured_ms: None,
                });
                return Ok(());
            }
        }
        let (native, moves) = match natives.remove(&id) {
            Some(Built::Kernel(k)) => (Some(*k), None),
            Some(Built::Moves(g)) => (None, Some(g)),
            None => (self.native(id), None),
        };
        // A data movement without a native kernel: one gather step per output.
        let moves = moves.or_else(|| native.is_none().then(|| self.movement(id)).flatten());
        if let Some(moves) = moves {
            let inputs = &self.g.node_inputs(id)[..self.moved_inputs(id)];
            for (k, kernel) in moves.into_iter().enumerate() {
                let outputs = vec![ValueRef::new(id, k)];
                self.steps.push(Pending {
                    name: node.name.clone(),
                    kind: format!("{kind} (gather)"),
                    spans: node.spans.clone(),
                    kernel,
                    work: self.work(&[id], inputs, &outputs),
                    inputs: inputs.to_vec(),
                    outputs,
                    measured_ms: None,
                });
            }
            return Ok(());
        }
        // A chain of one node may read fewer inputs than the node has (a batch
        // norm's parameters are held by the kernel).
        let (kernel, inputs) = match native.map(|k| (k, all_inputs.clone())) {
            Some(native) => native,
            None => match self.elementwise(&[id]) {
                Some(chain) => {
                    kind.push_str(chain.0.table_suffix());
                    chain
                }
                None => match self.tir(&[id])? {
                    Some((k, _)) => {
                        kind.push_str(" (tir)");
                        (Kernel::Tir(Box::new(k)), all_inputs.clone())
                    }
                    None => (
                        Kernel::Fallback {
                            op: node.op.clone(),
                            outputs: node.outputs.iter().map(|v| v.ty.clone()).collect(),
                        },
                        all_inputs.clone(),
                    ),
                },
            },
        };
        let mut inputs = inputs;
        match &kernel {
            Kernel::IntegerDense(c) if c.quantizes_input() => {
                kind.push_str(" (int8, quantized per run)");
                if let Some((_, unquantized)) = self.quantized_per_run(id) {
                    inputs[0] = unquantized;
                }
            }
            Kernel::IntegerDense(_) => kind.push_str(" (int8)"),
            Kernel::Pool(g) if g.integer_average.is_some() => kind.push_str(" (integers)"),
            _ => {}
        }
        self.steps.push(Pending {
            name: node.name.clone(),
            kind,
            spans: node.spans.clone(),
            kernel,
            work: self.work(&[id], &all_inputs, &outputs),
            inputs,
            outputs,
            measured_ms: None,
        });
        Ok(())
    }
}

/// What the fusion pass's questions built for a node, kept for its step.
enum Built {
    Kernel(Box<Kernel>),
    /// A data movement: one gather per output.
    Moves(Vec<Kernel>),
}

/// The compiler's kernels as the fusion pass sees them; native kernels built
/// while asking are kept for the steps.
struct NativeKernels<'c, 'g> {
    c: &'c Compiler<'g>,
    built: HashMap<NodeId, Built>,
}

/// On the generic path no node is a hand kernel's: convolutions take no
/// epilogue and every elementwise op may join a chain.
impl Target for NativeKernels<'_, '_> {
    fn conv_kernel(&mut self, id: NodeId) -> bool {
        !self.c.generic && self.c.conv_geom(id).is_some()
    }

    fn epilogue(&mut self, act: Activation) -> bool {
        !self.c.generic && activation::vectorizes(act)
    }

    fn chain_operands(&self) -> usize {
        super::kernels::elementwise::MAX_OPERANDS
    }

    fn requantized(&mut self, head: NodeId, rounding: NodeId) -> bool {
        let kernel = (!self.c.generic)
            .then(|| self.c.requantized(head, rounding))
            .flatten();
        kernel
            .map(|k| self.built.insert(rounding, Built::Kernel(Box::new(k))))
            .is_some()
    }

    fn native_kernel(&mut self, id: NodeId) -> bool {
        if self.c.generic {
            return false;
        }
        // A movement runs as a gather (or a view), better than fused into a
        // loop nest with the elementwise ops after it.
        let built = match self.c.native(id) {
            Some(k) => Built::Kernel(Box::new(k)),
            None => match self.c.movement(id) {
                Some(moves) => Built::Moves(moves),
                None => return false,
            },
        };
        self.built.insert(id, built);
        true
    }
}

impl CompiledModel {
    /// Compiles a planned graph on this process's machine context
    /// ([`Machine::shared`]).
    pub fn compile(graph: &Graph, options: &RuntimeOptions) -> Result<CompiledModel, RuntimeError> {
        CompiledModel::compile_on(Machine::shared(), graph, options)
    }

    /// Compiles a planned graph on `machine`: its pool for `options.threads`,
    /// its kernel-time cache.
    pub fn compile_on(
        machine: &Machine,
        graph: &Graph,
        options: &RuntimeOptions,
    ) -> Result<CompiledModel, RuntimeError> {
        let (pool, isa, times) = machine.kernel_context(options)?;
        compile_graph(graph, isa, options, times, pool)
    }

    /// The fused groups the compiler makes of a planned graph on this machine (the
    /// fusion pass asked about this machine's native kernels).
    pub fn fusion_groups(graph: &Graph) -> Result<Vec<FusedGroup>, RuntimeError> {
        // Nothing is measured: the kernel times stay in memory, empty.
        let times = Arc::new(Mutex::new(KernelTimes::open(None, Isa::detect(), 1)));
        Compiler::new(graph, Isa::detect(), &RuntimeOptions::default(), times).fusion_groups()
    }

    /// The algorithm of every convolution of a planned graph, chosen as
    /// `compile_on` chooses it (so measured, or read from the cache, under
    /// `auto`), without compiling the other steps.
    pub fn conv_algorithms(
        machine: &Machine,
        graph: &Graph,
        options: &RuntimeOptions,
    ) -> Result<Vec<conv_algo::LayerAlgo>, RuntimeError> {
        let (pool, isa, times) = machine.kernel_context(options)?;
        let widened = graph.widened_f16();
        let g = widened.as_ref().unwrap_or(graph);
        Compiler::new(g, isa, options, times).conv_algos(&pool)
    }
}

/// Compiles `graph` for these kernels, kernel times and pool.
fn compile_graph(
    graph: &Graph,
    isa: Isa,
    options: &RuntimeOptions,
    times: SharedKernelTimes,
    pool: Arc<par::Pool>,
) -> Result<CompiledModel, RuntimeError> {
    let Some(widened) = graph.widened_f16() else {
        return Compiler::new(graph, isa, options, times).finish(pool);
    };
    // f16 storage at the interface, f32 inside: inputs are converted as they
    // are copied in, outputs rounded back to the model's types.
    let mut model = Compiler::new(&widened, isa, options, times).finish(pool)?;
    for ((_, ty, _), &id) in model.inputs.iter_mut().zip(graph.inputs()) {
        *ty = graph.node(id).outputs[0].ty.clone();
    }
    for ((ty, _), &v) in model.outputs.iter_mut().zip(graph.outputs()) {
        *ty = graph.value_type(v).clone();
    }
    Ok(model)
}

/// Whether every input and output of a laid-out op is in one layout that
/// pads nothing: their elements then lie in the same order in storage.
fn one_unpadded_layout(l: &LaidOut) -> bool {
    let Some((layout, logical)) = l.inputs.first() else {
        return false;
    };
    let unpadded = layout.padded_axes(logical).is_ok_and(|a| a.is_empty());
    unpadded
        && l.inputs.iter().all(|(x, _)| x == layout)
        && l.outputs.iter().all(|(y, _)| y == layout)
}

#[cfg(test)]
mod tests;
