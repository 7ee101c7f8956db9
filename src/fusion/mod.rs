//! Fusion: the graph pass that groups nodes which run as one compiled step.
//!
//! It runs on a planned graph and decides, from the graph alone plus what the
//! target can run natively, which nodes fold into one step:
//!
//! - a convolution with the batch norm, residual add and relu/clip after it
//!   (the batch norm folds into the weights, the rest into the kernel's epilogue);
//! - a chain of elementwise nodes, each the only reader of the value before it,
//!   after the node that produces their input (one TIR loop nest).
//!
//! The result is a list of explicit [`FusedGroup`]s. The runtime compiles each
//! group as one step (or, if a chain has no loop nest, its nodes one by one), the
//! explorer shows every node's group, and `bench --profile` times each step under
//! the group's name.

use crate::core::{DType, Layout, PadValue};
use crate::graph::{Graph, GraphError, LaidOut, NodeId, Op, Transpose, ValueRef, ValueType};
use crate::ops::{infer_outputs, BinaryOp, UnaryOp};
use std::collections::HashSet;

/// Nodes that run as one step.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedGroup {
    /// The nodes in the order they compute; the last one produces the step's output.
    pub nodes: Vec<NodeId>,
    /// How the nodes are fused.
    pub pattern: Pattern,
}

/// How the nodes of a group are fused.
#[derive(Clone, Debug, PartialEq)]
pub enum Pattern {
    /// A convolution (the group's first node) with the nodes after it folded in.
    ConvEpilogue {
        /// A batch norm folded into the weights and bias.
        bn: Option<NodeId>,
        /// The other operand of a residual add applied in the epilogue.
        residual: Option<ValueRef>,
        /// The activation applied last.
        activation: Option<Activation>,
    },
    /// Elementwise nodes computed in one loop nest with the node before them.
    Elementwise,
    /// A softmax or a matrix product and the rounding onto a quantization
    /// grid that alone reads its output, directly or through reshapes: a
    /// quantized attention's probabilities and its products of two
    /// activations, which the peers compute from the integers.
    Requantized,
}

/// The activation a convolution's epilogue applies last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// An elementwise op (relu and clip among them).
    Unary(UnaryOp),
    /// x · sigmoid(x) (SiLU), which converters write as `Mul(x, Sigmoid(x))`.
    Swish,
    /// A PRelu whose slope (the node's second input, a constant) holds one
    /// value per channel of the convolution, or one for all.
    PRelu,
    /// A clamp (relu or clip) and the elementwise op after it: a quantized
    /// model's relu before the rounding onto its output grid.
    Clamped {
        /// A relu or clip.
        clamp: UnaryOp,
        /// The op after it, which is no clamp.
        then: UnaryOp,
    },
}

impl Activation {
    /// Whether another op may follow this one in the epilogue: a clamp.
    fn is_clamp(self) -> bool {
        matches!(self, Activation::Unary(u) if u.clamp_bounds().is_some())
    }

    /// `act` after the one before it in the epilogue, when the two make one
    /// activation: a clamp, then an op that is no clamp.
    fn after(before: Option<Activation>, act: Activation) -> Option<Activation> {
        match (before, act) {
            (None, act) => Some(act),
            (Some(before @ Activation::Unary(clamp)), Activation::Unary(then))
                if before.is_clamp() && !act.is_clamp() =>
            {
                Some(Activation::Clamped { clamp, then })
            }
            _ => None,
        }
    }
}

impl FusedGroup {
    /// The node whose output the step produces.
    pub fn last(&self) -> NodeId {
        *self.nodes.last().expect("a group has nodes")
    }

    /// The ops of the group joined by `+`, e.g. `Conv+BatchNorm+Relu`.
    pub fn kinds(&self, g: &Graph) -> String {
        let kinds: Vec<&str> = self
            .nodes
            .iter()
            .map(|&n| g.node(n).op.kind_name())
            .collect();
        kinds.join("+")
    }
}

/// What the target can run natively, asked by the pass while it groups.
pub trait Target {
    /// Whether node `id` is a convolution the target runs with a fused epilogue.
    fn conv_kernel(&mut self, id: NodeId) -> bool;
    /// Whether node `id` has a hand-written kernel of its own.
    fn native_kernel(&mut self, id: NodeId) -> bool;
    /// Whether the convolution kernels apply `act` in their epilogue.
    fn epilogue(&mut self, act: Activation) -> bool;
    /// Whether softmax or matrix product `head`, rounded by node `rounding`
    /// (through the reshapes between them), runs as one quantized kernel.
    fn requantized(&mut self, _head: NodeId, _rounding: NodeId) -> bool {
        false
    }
    /// The most operands an elementwise chain may read from outside itself
    /// (every input of its nodes but the value the node before produces), so
    /// that the target's chain kernel can run it.
    fn chain_operands(&self) -> usize {
        usize::MAX
    }
}

/// The most nodes of one elementwise chain. Chains of real models are a few
/// ops long; a longer one is cut into several groups, so that the cost of
/// compiling a group (its loop nest inlines every node into the last) stays
/// bounded and a graph of any length compiles in time linear in its size.
pub const MAX_CHAIN_NODES: usize = 32;

/// The op a node computes, with its storage when the planner laid it out.
pub fn inner(g: &Graph, id: NodeId) -> (&Op, Option<&LaidOut>) {
    match &g.node(id).op {
        Op::InLayout(l) => (&l.inner, Some(l)),
        op => (op, None),
    }
}

/// Layout and logical shape of input `i` of a node (row-major unless planned).
pub fn input_layout(g: &Graph, id: NodeId, i: usize) -> Option<(Layout, Vec<usize>)> {
    match inner(g, id).1 {
        Some(l) => l.inputs.get(i).cloned(),
        None => {
            let v = *g.node_inputs(id).get(i)?;
            let shape = g.value_type(v).shape.clone();
            Some((Layout::identity(shape.len()).ok()?, shape))
        }
    }
}

/// Layout and padding of output 0 of a node (row-major unless planned).
pub fn output_layout(g: &Graph, id: NodeId) -> Option<(Layout, PadValue)> {
    match inner(g, id).1 {
        Some(l) => l.outputs.first().cloned(),
        None => {
            let rank = g.node(id).outputs.first()?.ty.shape.len();
            Some((Layout::identity(rank).ok()?, PadValue::Undef))
        }
    }
}

/// Logical shape of output 0 of a node (the value of a planned node has the
/// physical shape).
pub fn output_shape(g: &Graph, id: NodeId) -> Option<Vec<usize>> {
    let Some(l) = inner(g, id).1 else {
        return Some(g.node(id).outputs.first()?.ty.shape.clone());
    };
    let types: Vec<ValueType> = g
        .node_inputs(id)
        .iter()
        .zip(&l.inputs)
        .map(|(&v, (_, shape))| ValueType::new(g.value_type(v).dtype, shape.clone()))
        .collect();
    let refs: Vec<&ValueType> = types.iter().collect();
    let mut outputs = infer_outputs(&l.inner, &refs).ok()?;
    (!outputs.is_empty()).then(|| outputs.swap_remove(0).shape)
}

/// The groups of a planned graph, in topological order of their last nodes.
/// Convolutions claim their epilogues first; elementwise chains form among the
/// nodes left, starting at a node without a native kernel or an elementwise one
/// (a native elementwise kernel is given up for the chain).
pub fn plan(g: &Graph, target: &mut dyn Target) -> Result<Vec<FusedGroup>, GraphError> {
    let order = g.topo_order()?;
    let mut claimed: HashSet<NodeId> = HashSet::new();
    let mut groups = Vec::new();
    for &id in &order {
        if !claimed.contains(&id) && target.conv_kernel(id) {
            let group = conv_epilogue(g, id, &claimed, target);
            claimed.extend(group.nodes.iter().copied());
            groups.push(group);
        }
    }
    for &id in &order {
        let Some(nodes) = rounded(g, id, &claimed) else {
            continue;
        };
        if target.requantized(id, *nodes.last().expect("not empty")) {
            claimed.extend(nodes.iter().copied());
            groups.push(FusedGroup {
                nodes,
                pattern: Pattern::Requantized,
            });
        }
    }
    for &id in &order {
        if claimed.contains(&id) || matches!(g.node(id).op, Op::Input | Op::Constant(_)) {
            continue;
        }
        if chains(g, id, 0) || !target.native_kernel(id) {
            let nodes = elementwise_chain(g, id, &claimed, target.chain_operands());
            if nodes.len() >= 2 {
                claimed.extend(nodes.iter().copied());
                groups.push(FusedGroup {
                    nodes,
                    pattern: Pattern::Elementwise,
                });
            }
        }
    }
    let position: std::collections::HashMap<NodeId, usize> =
        order.iter().enumerate().map(|(k, &n)| (n, k)).collect();
    groups.sort_by_key(|f| position[&f.last()]);
    Ok(groups)
}

/// Whether node `next` computes on data stored exactly like `like`'s output
/// (same layouts for every non-constant input and the output).
pub fn same_storage(g: &Graph, like: NodeId, next: NodeId) -> bool {
    let Some((yl, _)) = output_layout(g, like) else {
        return false;
    };
    let ins = g.node_inputs(next);
    let data_ok = ins.iter().enumerate().all(|(i, &v)| {
        g.constant(v).is_some() || input_layout(g, next, i).is_some_and(|(l, _)| l == yl)
    });
    data_ok && output_layout(g, next).is_some_and(|(l, _)| l == yl)
}

/// Convolution `id` with the batch norm, residual add and activation that follow
/// it (in that order, each optional; the activation one the target's epilogue
/// applies), looking through transposes that only relabel the conv's output
/// (TFLite's channels-last graphs put one after every conv). Nodes in `claimed`
/// belong to another group.
fn conv_epilogue(
    g: &Graph,
    id: NodeId,
    claimed: &HashSet<NodeId>,
    target: &mut dyn Target,
) -> FusedGroup {
    let epilogue = conv_epilogue_of(
        g,
        id,
        |like, next| !claimed.contains(&next) && same_storage(g, like, next),
        |v| relabel_after(g, v).filter(|t| !claimed.contains(t)),
        |act| target.epilogue(act),
    );
    let mut nodes = vec![id];
    nodes.extend(epilogue.reads.iter().map(|&(n, _)| n));
    FusedGroup {
        nodes,
        pattern: epilogue.pattern,
    }
}

/// What follows a convolution in its fused epilogue.
pub struct ConvEpilogue {
    /// Every node after the convolution in the epilogue, in order, with the
    /// input port on which it reads the value before it.
    pub reads: Vec<(NodeId, usize)>,
    /// The epilogue's batch norm, residual and activation.
    pub pattern: Pattern,
}

/// The epilogue of convolution `id`: the batch norm, residual add and
/// activation after it (in that order, each optional) and the relabels between
/// them. `may_join(like, next)` says whether `next` may join reading the data
/// as node `like` stores it, `relabel(v)` names the node after `v` that only
/// relabels it, and `fuses(act)` whether the epilogue applies `act`. The fusion
/// pass asks about planned storage; the planner, before any storage is chosen,
/// asks the same walk what the pass will fuse.
pub fn conv_epilogue_of(
    g: &Graph,
    id: NodeId,
    may_join: impl Fn(NodeId, NodeId) -> bool,
    relabel: impl Fn(ValueRef) -> Option<NodeId>,
    mut fuses: impl FnMut(Activation) -> bool,
) -> ConvEpilogue {
    let (mut bn, mut residual, mut activation) = (None, None, None);
    let mut reads = vec![];
    // The node that last set how the data is stored: the conv or a relabel.
    let mut like = id;
    // The logical axis of the conv's output channels in `v` (relabels move it).
    let mut channel_axis = 1;
    let mut v = ValueRef::new(id, 0);
    // The node may join: allowed by the caller, and of `like`'s type.
    let joins = |like: NodeId, next: NodeId| {
        may_join(like, next) && g.node(next).outputs[0].ty == g.node(like).outputs[0].ty
    };
    // 0: after the conv, 1: after a batch norm, 2: after the add, 3: after
    // an activation that another may follow (a clamp).
    let mut stage = 0;
    while !g.is_graph_output(v) && activation.is_none_or(Activation::is_clamp) {
        if let Some(t) = relabel(v) {
            if let Op::Transpose(Transpose { perm }) = inner(g, t).0 {
                channel_axis = perm.iter().position(|&p| p == channel_axis).unwrap_or(0);
            }
            reads.push((t, 0));
            like = t;
            v = ValueRef::new(t, 0);
            continue;
        }
        let swish =
            swish_of(g, v).filter(|s| activation.is_none() && s.iter().all(|&n| joins(like, n)));
        if let Some(swish) = swish {
            if fuses(Activation::Swish) {
                for n in swish {
                    let port = g.node_inputs(n).iter().position(|&i| i == v);
                    reads.push((n, port.expect("a swish node reads its operand")));
                }
                activation = Some(Activation::Swish);
            }
            break;
        }
        let users = g.consumers(v);
        let [(next, port)] = users[..] else { break };
        if !joins(like, next) {
            break;
        }
        let ins = g.node_inputs(next);
        match inner(g, next).0 {
            Op::BatchNorm(_) if stage == 0 && port == 0 => {
                // Its parameters fold into the weights at compile time.
                let f32_constant =
                    |p: &ValueRef| g.constant(*p).is_some_and(|t| t.dtype() == DType::F32);
                if ins.len() != 5 || !ins[1..].iter().all(f32_constant) {
                    break;
                }
                bn = Some(next);
                stage = 1;
            }
            Op::Binary(BinaryOp::Add) if stage <= 1 => {
                let other = ins[1 - port];
                if g.constant(other).is_some() || *g.value_type(other) != g.node(like).outputs[0].ty
                {
                    break;
                }
                residual = Some(other);
                stage = 2;
            }
            Op::Unary(u) => match Activation::after(activation, Activation::Unary(*u)) {
                Some(act) if fuses(act) => {
                    activation = Some(act);
                    stage = 3;
                }
                _ => break,
            },
            Op::Binary(BinaryOp::PRelu)
                if port == 0
                    && activation.is_none()
                    && slope_per_channel(g, next, channel_axis)
                    && fuses(Activation::PRelu) =>
            {
                activation = Some(Activation::PRelu)
            }
            _ => break,
        }
        reads.push((next, port));
        v = ValueRef::new(next, 0);
    }
    ConvEpilogue {
        reads,
        pattern: Pattern::ConvEpilogue {
            bn,
            residual,
            activation,
        },
    }
}

/// Whether PRelu node `id`'s slope is an f32 constant that broadcasts over
/// its data (logical shapes, aligned at the innermost axis) with one value
/// per index of `channel_axis`, or one for all.
fn slope_per_channel(g: &Graph, id: NodeId, channel_axis: usize) -> bool {
    let ins = g.node_inputs(id);
    let constant = g.constant(ins[1]).is_some_and(|t| t.dtype() == DType::F32);
    let (Some((_, data)), Some((_, slope))) = (input_layout(g, id, 0), input_layout(g, id, 1))
    else {
        return false;
    };
    let Some(lead) = data.len().checked_sub(slope.len()) else {
        return false;
    };
    let along_channels = |(i, &n): (usize, &usize)| {
        n == 1 || (lead + i == channel_axis && data.get(channel_axis) == Some(&n))
    };
    constant && slope.iter().enumerate().all(along_channels)
}

/// The node after `v` when it only relabels `v`'s storage: `v`'s one reader is
/// a transpose whose output layout is its input layout with the axes renamed,
/// so both values are the same bytes (the planner made the transpose free).
fn relabel_after(g: &Graph, v: ValueRef) -> Option<NodeId> {
    let [(t, 0)] = g.consumers(v)[..] else {
        return None;
    };
    let Op::Transpose(Transpose { perm }) = inner(g, t).0 else {
        return None;
    };
    let (from, _) = input_layout(g, t, 0)?;
    let (to, _) = output_layout(g, t)?;
    (from.transposed(perm).ok()? == to).then_some(t)
}

/// The Sigmoid and Mul nodes of `v · sigmoid(v)`, when they are `v`'s only
/// readers and the sigmoid has no other reader.
fn swish_of(g: &Graph, v: ValueRef) -> Option<[NodeId; 2]> {
    let users = g.consumers(v);
    let [(a, _), (b, _)] = users[..] else {
        return None;
    };
    let is_sigmoid = |n: NodeId| matches!(inner(g, n).0, Op::Unary(UnaryOp::Sigmoid));
    let (sigmoid, mul) = if is_sigmoid(a) { (a, b) } else { (b, a) };
    let s = ValueRef::new(sigmoid, 0);
    let product = matches!(inner(g, mul).0, Op::Binary(BinaryOp::Mul));
    let reads = g.node_inputs(mul);
    let only_reader = g.consumers(s) == [(mul, 0)] || g.consumers(s) == [(mul, 1)];
    let operands = reads.contains(&v) && reads.contains(&s);
    (is_sigmoid(sigmoid) && product && only_reader && operands && !g.is_graph_output(s))
        .then_some([sigmoid, mul])
}

/// Whether node `id` computes elementwise on its input `port`, so that it can
/// join a chain there: unary and binary ops, and a batch norm on its data
/// (its parameters per channel).
fn chains(g: &Graph, id: NodeId, port: usize) -> bool {
    match inner(g, id).0 {
        Op::Unary(_) | Op::Binary(_) => true,
        Op::BatchNorm(_) => port == 0,
        _ => false,
    }
}

/// Softmax or matrix product `id`, the reshapes its output alone goes
/// through, and the rounding onto a quantization grid that alone reads the
/// last of them; `None` where there is no such chain, or a value on it is a
/// graph output or claimed.
fn rounded(g: &Graph, id: NodeId, claimed: &HashSet<NodeId>) -> Option<Vec<NodeId>> {
    if claimed.contains(&id) || !matches!(inner(g, id).0, Op::Softmax(_) | Op::MatMul) {
        return None;
    }
    let mut nodes = vec![id];
    loop {
        let v = ValueRef::new(*nodes.last().expect("not empty"), 0);
        let [(next, 0)] = g.consumers(v)[..] else {
            return None;
        };
        if g.is_graph_output(v) || claimed.contains(&next) {
            return None;
        }
        nodes.push(next);
        match inner(g, next).0 {
            Op::Reshape(_) => {}
            Op::Unary(UnaryOp::QuantizeDequantize { .. }) => return Some(nodes),
            _ => return None,
        }
    }
}

/// `head` and the elementwise nodes that can follow it in one loop nest: each
/// the only reader of the value before it, which is no graph output and not
/// broadcast by it; at most [`MAX_CHAIN_NODES`] nodes reading at most
/// `max_operands` operands.
fn elementwise_chain(
    g: &Graph,
    head: NodeId,
    claimed: &HashSet<NodeId>,
    max_operands: usize,
) -> Vec<NodeId> {
    let mut chain = vec![head];
    let mut operands = g.node_inputs(head).len();
    while chain.len() < MAX_CHAIN_NODES {
        let v = ValueRef::new(*chain.last().expect("not empty"), 0);
        if g.is_graph_output(v) {
            return chain;
        }
        // One (node, input) reads the value: one node, reading it once.
        let [(next, port)] = g.consumers(v)[..] else {
            return chain;
        };
        let elementwise = chains(g, next, port);
        // The value must mean the same element to both nodes: both laid out or
        // neither, the reader taking it in the layout it is written in.
        let same_storage = inner(g, v.node).1.is_some() == inner(g, next).1.is_some()
            && output_layout(g, v.node).map(|l| l.0) == input_layout(g, next, port).map(|l| l.0);
        // A value the next node broadcasts (a squeeze-excite's factor per
        // channel) ends the chain: joined, the nodes before would run once
        // per element of the larger output, a sigmoid per pixel and channel
        // where one per channel does.
        let elements = |v: ValueRef| g.value_type(v).shape.iter().product::<usize>();
        let broadcast = elements(ValueRef::new(next, 0)) > elements(v);
        if claimed.contains(&next) || !elementwise || !same_storage || broadcast {
            return chain;
        }
        // Every input but the one value from the chain is an operand.
        operands += g.node_inputs(next).iter().filter(|&&u| u != v).count();
        if operands > max_operands {
            return chain;
        }
        chain.push(next);
    }
    chain
}
