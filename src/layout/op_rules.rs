//! Per-op layout rules: the storage layouts each op can run in, and at what cost.
//!
//! Ops fall into four kinds:
//! - layout *sources* want a particular layout (convolution and pooling run
//!   fastest in the target family's layout);
//! - *sinks* absorb a transform at no cost (a transpose becomes a relabelling of
//!   axes, a constant is re-packed at compile time);
//! - *agnostic* ops run in whatever layout their operands arrive in
//!   (elementwise, batch norm, and concat / split / slice / pad / resize / reductions /
//!   softmax along axes the layout does not block);
//! - *fixed* ops run only in the row-major layout (matmul, gather, ...); a
//!   reshape that only drops or inserts unit axes (a squeeze or unsqueeze) may
//!   also relabel its input's layout, as a transpose does.
//!
//! The cost model, in ns: a convolution costs the time its kernel was measured
//! to take on this machine in those layouts ([`MeasuredCosts`], which the
//! runtime provides and caches per CPU); everything else, and a convolution
//! planned without measurements, costs its data movement at `ns_per_byte` and
//! its arithmetic at `ns_per_flop`, with a penalty for convolutions in layouts
//! their kernels vectorise poorly, and padded elements counted as work.

use super::{Layout, LayoutError};
use crate::fusion::{conv_epilogue_of, Activation};
use crate::graph::{numel, Graph, NodeId, Op, Tensor, ValueRef, ValueType};
pub use crate::ops::LayoutRole as OpKind;
use crate::ops::{Conv, Reshape, Transpose};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

/// The family of layouts the planner may move activations into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Row-major NCHW only (nothing to plan).
    Nchw,
    /// Channels last.
    Nhwc,
    /// Channels blocked by the given width: NCHW{x}c.
    Nchwc(usize),
}

impl Family {
    /// "nchw", "nhwc", "nchwc" (block from this CPU's vector width) or "nchw{x}c".
    pub fn parse(s: &str) -> Result<Family, LayoutError> {
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "nchw" => Ok(Family::Nchw),
            "nhwc" => Ok(Family::Nhwc),
            "nchwc" => Ok(Family::host_blocked()),
            other => other
                .strip_prefix("nchw")
                .and_then(|r| r.strip_suffix('c'))
                .and_then(|x| x.parse::<usize>().ok())
                .filter(|&x| x > 0)
                .map(Family::Nchwc)
                .ok_or_else(|| LayoutError::Parse {
                    text: s.to_string(),
                    message: "expected nchw, nhwc, nchwc or nchw<x>c".into(),
                }),
        }
    }

    /// Channels blocked by this CPU's vector width (f32 lanes).
    pub fn host_blocked() -> Family {
        Family::Nchwc(cpu_vector_lanes())
    }

    /// The layout this family stores a logical NCHW activation in.
    pub fn activation_layout(self) -> Option<Layout> {
        match self {
            Family::Nchw => None,
            Family::Nhwc => Layout::parse("NHWC").ok(),
            Family::Nchwc(x) => Layout::parse(&format!("NCHW{x}c")).ok(),
        }
    }
}

impl std::str::FromStr for Family {
    type Err = LayoutError;
    fn from_str(s: &str) -> Result<Family, LayoutError> {
        Family::parse(s)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Family::Nchw => write!(f, "NCHW"),
            Family::Nhwc => write!(f, "NHWC"),
            Family::Nchwc(x) => write!(f, "NCHW{x}c"),
        }
    }
}

/// f32 lanes of this CPU's widest vector unit.
pub fn cpu_vector_lanes() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 16;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return 8;
        }
    }
    4
}

/// The kind of an op (see the module docs).
pub fn op_kind(op: &Op) -> OpKind {
    op.def().layout_role()
}

/// One way to run an op: the layout of each input and output, and its cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Impl {
    /// The layout of each input.
    pub inputs: Vec<LayoutId>,
    /// The layout of each output.
    pub outputs: Vec<LayoutId>,
    /// Its estimated time (ns).
    pub cost: f64,
}

/// One convolution in storage layouts, as the planner asks its time.
pub struct ConvQuery<'a> {
    /// The convolution.
    pub conv: &'a Conv,
    /// Its data input and the layout it is stored in.
    pub x: (&'a ValueType, &'a Layout),
    /// Its weights (logical OIHW).
    pub weights: &'a Tensor,
    /// Its output and the layout it is stored in.
    pub y: (&'a ValueType, &'a Layout),
}

/// Kernel times measured on this machine, taken by the cost model instead of
/// its estimate wherever there is one. The runtime implements it (it is a layer
/// above the planner, and owns the kernels).
pub trait MeasuredCosts: Send + Sync + fmt::Debug {
    /// Nanoseconds of one run of the convolution as the runtime would run it
    /// in those layouts; `None` when it has no native kernel for them.
    fn conv_ns(&self, query: &ConvQuery) -> Option<f64>;
    /// Nanoseconds of one transform of `t` from layout `from` to `to` as the
    /// runtime runs it; `None` when it was not measured.
    fn transform_ns(&self, t: &ValueType, from: &Layout, to: &Layout) -> Option<f64>;
}

/// Unit costs of the cost model, and the measured kernel times that replace
/// its estimate of convolutions.
#[derive(Clone, Debug)]
pub struct CostModel {
    /// Time to move one byte (ns).
    pub ns_per_byte: f64,
    /// Time of one floating-point operation at kernel speed (ns).
    pub ns_per_flop: f64,
    /// Slowdown of a convolution in row-major NCHW against the blocked layout.
    pub nchw_conv_penalty: f64,
    /// Slowdown of a convolution in NHWC against the blocked layout.
    pub nhwc_conv_penalty: f64,
    /// Slowdown of a depthwise convolution whose input and output are laid out
    /// differently: the kernels need one channel blocking for both, so it runs
    /// as a generated loop nest (~25x slower, measured on EfficientNetB0).
    pub split_depthwise_penalty: f64,
    /// Cost of a transform between layouts with the same bytes: it moves
    /// nothing, but is one more node between two ops (fusion stops at it), so
    /// between plans that move the same bytes the one with fewer wins instead
    /// of an arbitrary one (a squeeze-excite path flipping between NCHW16c and
    /// NCHW, which for 1x1 spatial store the same bytes).
    pub relabel_ns: f64,
    /// Measured kernel times; `None` plans by the estimate alone (the same
    /// plan on every machine).
    pub measured: Option<Arc<dyn MeasuredCosts>>,
    /// Whether the convolution kernels apply an activation in their epilogue
    /// (by default every one; the runtime's calibrated model names its own).
    pub epilogue_fuses: fn(Activation) -> bool,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            ns_per_byte: 0.1,
            ns_per_flop: 0.02,
            nchw_conv_penalty: 2.0,
            nhwc_conv_penalty: 1.15,
            split_depthwise_penalty: 25.0,
            relabel_ns: 0.5,
            measured: None,
            epilogue_fuses: |_| true,
        }
    }
}

impl CostModel {
    /// Cost of moving `t` from layout `from` to `to`: its measured time, else
    /// reading one and writing the other at copy speed; `relabel_ns` when both
    /// put every element at the same offset.
    pub fn transform_cost(&self, t: &ValueType, from: &Layout, to: &Layout) -> f64 {
        if from == to {
            return 0.0;
        }
        if same_bytes(from, to, &t.shape) {
            return self.relabel_ns;
        }
        if let Some(ns) = self
            .measured
            .as_ref()
            .and_then(|m| m.transform_ns(t, from, to))
        {
            return ns;
        }
        (physical_bytes(t, from) + physical_bytes(t, to)) as f64 * self.ns_per_byte
    }
}

/// Bytes of `t` stored in `layout` (padding included).
pub fn physical_bytes(t: &ValueType, layout: &Layout) -> usize {
    let shape = layout
        .physical_shape(&t.shape)
        .unwrap_or_else(|_| t.shape.clone());
    numel(&shape) * t.dtype.size_bytes()
}

/// Whether two layouts of a tensor put every element at the same offset, with
/// no padding in either: then a transform between them moves nothing.
pub fn same_bytes(a: &Layout, b: &Layout, shape: &[usize]) -> bool {
    let canon = |l: &Layout| -> Option<Vec<usize>> {
        if !l.padded_axes(shape).ok()?.is_empty() {
            return None;
        }
        let phys = l.physical_shape(shape).ok()?;
        // Drop unit digits, then merge runs of consecutive digits of one axis
        // (outer then inner blocks in order), which linearise like the plain axis.
        let digits: Vec<_> = l
            .order()
            .iter()
            .zip(&phys)
            .filter(|(_, &e)| e != 1)
            .map(|(d, _)| *d)
            .collect();
        let mut out: Vec<usize> = Vec::new();
        let mut prev: Option<crate::layout::Digit> = None;
        for d in digits {
            let continues = prev.is_some_and(|p| p.axis == d.axis && d.level == p.level + 1);
            if !continues {
                out.push(d.axis);
            }
            prev = Some(d);
        }
        // Each axis must appear as one contiguous run for the offsets to agree.
        let mut seen = out.clone();
        seen.sort();
        seen.dedup();
        (seen.len() == out.len()).then_some(out)
    };
    matches!((canon(a), canon(b)), (Some(x), Some(y)) if x == y)
}

/// A layout interned in a [`Layouts`] table: planning compares and copies these
/// instead of whole layouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LayoutId(u32);

/// The layouts a plan mentions, each once.
#[derive(Default)]
pub struct Layouts {
    all: Vec<Layout>,
    ids: HashMap<Layout, LayoutId>,
    /// The row-major layout of each rank, once interned.
    identities: Vec<Option<LayoutId>>,
}

impl Layouts {
    /// The id of layout `l`, adding it when new.
    pub fn intern(&mut self, l: Layout) -> LayoutId {
        if let Some(&id) = self.ids.get(&l) {
            return id;
        }
        let id = LayoutId(self.all.len() as u32);
        self.all.push(l.clone());
        self.ids.insert(l, id);
        id
    }

    /// The id of layout `l`, if it was interned.
    pub fn find(&self, l: &Layout) -> Option<LayoutId> {
        self.ids.get(l).copied()
    }

    /// The layout with id `id`.
    pub fn get(&self, id: LayoutId) -> &Layout {
        &self.all[id.0 as usize]
    }

    /// The row-major layout of a rank, if it was interned.
    pub fn identity_id(&self, rank: usize) -> Option<LayoutId> {
        self.identities.get(rank).copied().flatten()
    }

    /// The id of the row-major layout of rank `rank`, adding it when new.
    pub fn identity(&mut self, rank: usize) -> Result<LayoutId, LayoutError> {
        if let Some(Some(id)) = self.identities.get(rank) {
            return Ok(*id);
        }
        let id = self.intern(Layout::identity(rank)?);
        if self.identities.len() <= rank {
            self.identities.resize(rank + 1, None);
        }
        self.identities[rank] = Some(id);
        Ok(id)
    }
}

/// Candidate storage layouts of each value, seeded by the family at the data
/// inputs and outputs of layout sources and carried through agnostic ops (same
/// rank) and transposes (relabelled). The row-major layout is always first.
pub fn value_candidates(
    g: &Graph,
    order: &[NodeId],
    family: Family,
    layouts: &mut Layouts,
) -> Result<BTreeMap<ValueRef, Vec<LayoutId>>, LayoutError> {
    const MAX_PER_VALUE: usize = 6;
    let mut cands: BTreeMap<ValueRef, Vec<LayoutId>> = BTreeMap::new();
    for &id in order {
        for i in 0..g.node(id).outputs.len() {
            let v = ValueRef::new(id, i);
            cands.insert(v, vec![layouts.identity(g.value_type(v).shape.len())?]);
        }
    }
    let add = |cands: &mut BTreeMap<ValueRef, Vec<LayoutId>>, v: ValueRef, l: LayoutId| -> bool {
        let set = cands.entry(v).or_default();
        if set.len() < MAX_PER_VALUE && !set.contains(&l) {
            set.push(l);
            return true;
        }
        false
    };
    if let Some(target) = family.activation_layout() {
        let target = layouts.intern(target);
        for &id in order {
            let n = g.node(id);
            if op_kind(&n.op) != OpKind::Source
                || g.value_type(ValueRef::new(id, 0)).shape.len() != 4
            {
                continue;
            }
            let data_in = g.node_inputs(id)[0];
            add(&mut cands, data_in, target);
            add(&mut cands, ValueRef::new(id, 0), target);
        }
    }
    // A matrix product reads either operand transposed at no extra cost (as BLAS
    // does with its transpose flags), so column-major is a candidate for both.
    let column_major = layouts.intern(Layout::permutation(&[1, 0])?);
    for &id in order {
        if is_matrix_product(g, id) {
            for v in g.node_inputs(id) {
                if g.constant(v).is_none() {
                    add(&mut cands, v, column_major);
                }
            }
        }
    }
    // Carry candidates along until nothing changes (bounded: sets are capped).
    for _round in 0..8 {
        let mut changed = false;
        for &id in order {
            let n = g.node(id);
            let ins = g.node_inputs(id);
            let outs: Vec<ValueRef> = (0..n.outputs.len()).map(|i| ValueRef::new(id, i)).collect();
            match &n.op {
                Op::Transpose(_) | Op::Reshape(_) => {
                    let (x, y) = (&g.value_type(ins[0]).shape, &n.outputs[0].ty.shape);
                    for l in cands.get(&ins[0]).cloned().unwrap_or_default() {
                        if let Some(t) = relabelled(&n.op, layouts.get(l), x) {
                            let t = layouts.intern(t);
                            changed |= add(&mut cands, outs[0], t);
                        }
                    }
                    for l in cands.get(&outs[0]).cloned().unwrap_or_default() {
                        if let Some(t) = relabelled_back(&n.op, layouts.get(l), x, y) {
                            let t = layouts.intern(t);
                            changed |= add(&mut cands, ins[0], t);
                        }
                    }
                }
                op if op_kind(op) == OpKind::Agnostic => {
                    let rank = g.value_type(outs[0]).shape.len();
                    let group: Vec<ValueRef> = ins
                        .iter()
                        .chain(&outs)
                        .copied()
                        .filter(|&v| g.value_type(v).shape.len() == rank && g.constant(v).is_none())
                        .collect();
                    let mut union: Vec<LayoutId> = group
                        .iter()
                        .flat_map(|v| cands.get(v).cloned().unwrap_or_default())
                        .collect();
                    union.dedup();
                    for &v in &group {
                        for &l in &union {
                            changed |= add(&mut cands, v, l);
                        }
                    }
                }
                _ => {}
            }
        }
        if !changed {
            break;
        }
    }
    Ok(cands)
}

/// The layout of a transpose's or reshape's output that keeps the bytes of its
/// input `x`, stored in `l`, where they are (a relabelling: no data moves).
pub fn relabelled(op: &Op, l: &Layout, x: &[usize]) -> Option<Layout> {
    match op {
        Op::Transpose(Transpose { perm }) => l.transposed(perm).ok(),
        Op::Reshape(Reshape { shape }) => l.reshaped(x, shape),
        _ => None,
    }
}

/// The input layout that [`relabelled`] takes to the output layout `l`, for
/// an input of shape `x` and an output of shape `y`.
pub fn relabelled_back(op: &Op, l: &Layout, x: &[usize], y: &[usize]) -> Option<Layout> {
    match op {
        Op::Transpose(Transpose { perm }) => {
            let mut inv = vec![0; perm.len()];
            for (j, &a) in perm.iter().enumerate() {
                inv[a] = j;
            }
            l.transposed(&inv).ok()
        }
        Op::Reshape(_) => l.reshaped(y, x),
        _ => None,
    }
}

/// A MatMul of two matrices (the case BLAS-style kernels take either way round).
fn is_matrix_product(g: &Graph, id: NodeId) -> bool {
    matches!(g.node(id).op, Op::MatMul)
        && g.node_inputs(id)
            .iter()
            .all(|&v| g.value_type(v).shape.len() == 2)
}

/// Whether the agnostic op `op` can run with its data in layout `l`.
fn agnostic_fits(op: &Op, l: &Layout, ins: &[&ValueType]) -> bool {
    op.def().runs_in(l, ins)
}

fn bytes(ts: &[&ValueType], layouts: &[&Layout]) -> f64 {
    ts.iter()
        .zip(layouts)
        .map(|(t, l)| physical_bytes(t, l) as f64)
        .sum()
}

/// Cost of running `op` with the given layouts: a convolution's measured time
/// when there is one, else its data movement and its arithmetic at the speed
/// its kernel reaches in those layouts. `weights` are a convolution's constant
/// weights.
fn op_cost(
    op: &Op,
    (ins, in_l): (&[&ValueType], &[&Layout]),
    (outs, out_l): (&[&ValueType], &[&Layout]),
    weights: Option<&Tensor>,
    m: &CostModel,
) -> f64 {
    if let (Op::Conv(conv), Some(measured), Some(weights)) = (op, &m.measured, weights) {
        let query = ConvQuery {
            conv,
            x: (ins[0], in_l[0]),
            weights,
            y: (outs[0], out_l[0]),
        };
        if let Some(ns) = measured.conv_ns(&query) {
            return ns;
        }
    }
    let moved = (bytes(ins, in_l) + bytes(outs, out_l)) * m.ns_per_byte;
    if let ([x], [xl], [yl]) = (ins, in_l, out_l) {
        if relabelled(op, xl, &x.shape).as_ref() == Some(*yl) {
            // A relabelling of axes moves nothing.
            return 0.0;
        }
    }
    let flops = op.def().flops(ins, outs);
    if flops == 0.0 {
        return moved;
    }
    let slowdown = match op {
        Op::Conv(c) => conv_slowdown(c, (ins[0], in_l[0]), (outs[0], out_l[0]), m),
        _ => 1.0,
    };
    flops * m.ns_per_flop * slowdown + moved
}

/// How much slower than in its blocked layouts the convolution kernel runs in
/// the given layouts of its data input `x` and output `y`, padded channels counted
/// as work.
fn conv_slowdown(
    c: &Conv,
    (x, x_layout): (&ValueType, &Layout),
    (y, y_layout): (&ValueType, &Layout),
    m: &CostModel,
) -> f64 {
    let depthwise = c.group > 1 && c.group == x.shape[1];
    let layout_penalty = |l: &Layout| {
        if l.is_blocked() {
            1.0
        } else if l.is_identity() {
            if depthwise {
                m.nchw_conv_penalty.sqrt()
            } else {
                m.nchw_conv_penalty
            }
        } else {
            m.nhwc_conv_penalty
        }
    };
    // The kernel vectorises over channels of both operands; a first layer
    // with a handful of input channels reads any layout equally well.
    let input_penalty = if x.shape[1] <= 4 {
        1.0
    } else {
        layout_penalty(x_layout)
    };
    let mut penalty = layout_penalty(y_layout).max(input_penalty);
    if depthwise && x_layout != y_layout {
        penalty *= m.split_depthwise_penalty;
    }
    // Padded channels are computed too.
    let pad = |t: &ValueType, l: &Layout| {
        physical_bytes(t, l) as f64 / (numel(&t.shape).max(1) * t.dtype.size_bytes()) as f64
    };
    let waste = pad(x, x_layout) * if depthwise { 1.0 } else { pad(y, y_layout) };
    penalty * waste
}

/// The nodes the fusion pass will run in the epilogue of the convolution
/// before them (its batch norm, residual add and an activation `model` says the
/// kernels apply, looking through transposes, which the plan makes relabels),
/// each with the input port that reads the value before it. Such a node costs
/// nothing while it reads that value in the layout it is written in, and a
/// pass over its data once a transform comes between: the planner charges its
/// own cost to that edge instead of to the node, so that a transform goes after
/// the activation rather than between it and the conv.
pub fn conv_epilogue_reads(g: &Graph, model: &CostModel) -> HashMap<NodeId, usize> {
    let transpose_after = |v: ValueRef| match g.consumers(v)[..] {
        [(t, 0)] if matches!(g.node(t).op, Op::Transpose(_)) => Some(t),
        _ => None,
    };
    let mut reads = HashMap::new();
    for id in g.node_ids() {
        if matches!(g.node(id).op, Op::Conv(_)) {
            let epilogue =
                conv_epilogue_of(g, id, |_, _| true, transpose_after, model.epilogue_fuses);
            let fused = epilogue.reads.into_iter();
            reads.extend(fused.filter(|&(n, _)| !matches!(g.node(n).op, Op::Transpose(_))));
        }
    }
    reads
}

/// Whether the runtime's convolution and pooling kernels run a 4-D tensor of
/// `shape` in `l`: NCHW, NHWC or NCHW{x}c. In any other order (an NHWC16c
/// relabel, say) they would fall back to generated loops that the estimate
/// does not price.
fn native_4d(l: &Layout, shape: &[usize]) -> bool {
    l.channel_block(shape).is_some()
}

/// The ways node `id` can run, given the candidate layouts of its values. The
/// first is always the row-major one.
pub fn impls(
    g: &Graph,
    id: NodeId,
    cands: &BTreeMap<ValueRef, Vec<LayoutId>>,
    layouts: &mut Layouts,
    model: &CostModel,
) -> Result<Vec<Impl>, LayoutError> {
    let n = g.node(id);
    let in_refs = g.node_inputs(id);
    let ins: Vec<&ValueType> = in_refs.iter().map(|&v| g.value_type(v)).collect();
    let outs: Vec<&ValueType> = n.outputs.iter().map(|v| &v.ty).collect();
    let id_in: Vec<LayoutId> = ins
        .iter()
        .map(|t| layouts.identity(t.shape.len()))
        .collect::<Result<_, _>>()?;
    let id_out: Vec<LayoutId> = outs
        .iter()
        .map(|t| layouts.identity(t.shape.len()))
        .collect::<Result<_, _>>()?;
    let mut options: Vec<(Vec<LayoutId>, Vec<LayoutId>)> = vec![(id_in.clone(), id_out.clone())];
    let out_cands: Vec<LayoutId> = cands
        .get(&ValueRef::new(id, 0))
        .map(|c| c.iter().skip(1).copied().collect())
        .unwrap_or_default();
    let cands_of = |v: &ValueRef| cands.get(v).cloned().unwrap_or_default();
    match (&n.op, op_kind(&n.op)) {
        (Op::Transpose(_) | Op::Reshape(_), _) => {
            // A relabelling for every candidate layout of the input.
            for l in cands_of(&in_refs[0]) {
                if let Some(t) = relabelled(&n.op, layouts.get(l), &ins[0].shape) {
                    options.push((vec![l], vec![layouts.intern(t)]));
                }
            }
        }
        (Op::Conv(_), _) if outs[0].shape.len() == 4 => {
            // A convolution may also read one layout and write another (a first
            // layer reads the 3-channel image row-major and writes blocked).
            let in_cands: Vec<LayoutId> = cands_of(&in_refs[0])
                .into_iter()
                .filter(|&l| native_4d(layouts.get(l), &ins[0].shape))
                .collect();
            let out_all: Vec<LayoutId> = std::iter::once(id_out[0])
                .chain(out_cands.iter().copied())
                .filter(|&l| native_4d(layouts.get(l), &outs[0].shape))
                .collect();
            for &lo in &out_all {
                for &li in &in_cands {
                    let mut inputs = id_in.clone();
                    inputs[0] = li;
                    options.push((inputs, vec![lo]));
                }
            }
        }
        (Op::MatMul, _) if is_matrix_product(g, id) => {
            for la in cands_of(&in_refs[0]) {
                for lb in cands_of(&in_refs[1]) {
                    options.push((vec![la, lb], id_out.clone()));
                }
            }
        }
        (Op::Pool(_) | Op::GlobalPool(_), _) if outs[0].shape.len() == 4 => {
            for &l in &out_cands {
                if native_4d(layouts.get(l), &outs[0].shape) {
                    let mut inputs = id_in.clone();
                    inputs[0] = l;
                    options.push((inputs, vec![l]));
                }
            }
        }
        (op, OpKind::Agnostic) => {
            let rank = outs[0].shape.len();
            for &l in &out_cands {
                if !agnostic_fits(op, layouts.get(l), &ins) {
                    continue;
                }
                // Operands of the output's rank share its layout; others stay row-major.
                let inputs = ins
                    .iter()
                    .zip(&id_in)
                    .map(|(t, &idl)| if t.shape.len() == rank { l } else { idl })
                    .collect();
                options.push((inputs, vec![l; outs.len()]));
            }
        }
        _ => {}
    }
    let mut out: Vec<Impl> = Vec::with_capacity(options.len());
    for (inputs, outputs) in options {
        if out
            .iter()
            .any(|i| i.inputs == inputs && i.outputs == outputs)
        {
            continue;
        }
        let in_l: Vec<&Layout> = inputs.iter().map(|&l| layouts.get(l)).collect();
        let out_l: Vec<&Layout> = outputs.iter().map(|&l| layouts.get(l)).collect();
        let weights = in_refs.get(1).and_then(|&w| g.constant(w));
        let cost = op_cost(&n.op, (&ins, &in_l), (&outs, &out_l), weights, model);
        out.push(Impl {
            inputs,
            outputs,
            cost,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::DType;

    #[test]
    fn family_names_parse() {
        assert_eq!(Family::parse("NHWC").unwrap(), Family::Nhwc);
        assert_eq!(Family::parse("nchw16c").unwrap(), Family::Nchwc(16));
        assert_eq!(
            Family::parse("nchwc").unwrap(),
            Family::Nchwc(cpu_vector_lanes())
        );
        assert!(Family::parse("nchw0c").is_err());
        assert!(Family::parse("blocked").is_err());
        assert_eq!(
            Family::Nchwc(8).activation_layout().unwrap().to_string(),
            "NCHW8c"
        );
    }

    #[test]
    fn only_the_kernels_own_layouts_are_native() {
        let l = |s: &str| Layout::parse(s).unwrap();
        let shape = [1, 32, 8, 8];
        for native in ["NCHW", "NHWC", "NCHW16c", "NCHW8c"] {
            assert!(native_4d(&l(native), &shape), "{native}");
        }
        assert_eq!(l("NCHW16c").channel_block(&shape), Some(16));
        assert_eq!(l("NHWC").channel_block(&shape), Some(32));
        // Channel-blocked, but in NHWC order: no kernel runs it.
        assert!(!native_4d(&l("NHWC16c"), &shape));
        assert!(!native_4d(
            &Layout::permutation(&[0, 3, 1, 2]).unwrap(),
            &shape
        ));
    }

    #[test]
    fn same_bytes_sees_through_unit_axes_and_whole_blocks() {
        let l = |s: &str| Layout::parse(s).unwrap();
        // [1, 64, 1, 1]: NCHW, NHWC and NCHW16c all store the 64 channels in order.
        assert!(same_bytes(&l("NCHW"), &l("NHWC"), &[1, 64, 1, 1]));
        assert!(same_bytes(&l("NCHW"), &l("NCHW16c"), &[1, 64, 1, 1]));
        // With spatial extent the orders differ.
        assert!(!same_bytes(&l("NCHW"), &l("NHWC"), &[1, 64, 2, 2]));
        // Padding (17 channels in blocks of 16) is never the same bytes.
        assert!(!same_bytes(&l("NCHW"), &l("NCHW16c"), &[1, 17, 1, 1]));
        let m = CostModel::default();
        let t = ValueType::new(DType::F32, vec![1, 64, 1, 1]);
        assert_eq!(m.transform_cost(&t, &l("NCHW"), &l("NHWC")), m.relabel_ns);
        let t = ValueType::new(DType::F32, vec![1, 64, 2, 2]);
        assert_eq!(
            m.transform_cost(&t, &l("NCHW"), &l("NHWC")),
            2.0 * 1024.0 * 0.1
        );
    }
}
