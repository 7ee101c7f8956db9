//! The cost model, in ns: a convolution costs the time its kernel was measured
//! to take on this machine in those layouts ([`MeasuredCosts`], which the
//! runtime provides and caches per CPU); everything else, and a convolution
//! planned without measurements, costs its data movement at `ns_per_byte` and
//! its arithmetic at `ns_per_flop`, with a penalty for convolutions in layouts
//! their kernels vectorise poorly, and padded elements counted as work.

use super::relabel::relabelled;
use super::Layout;
use crate::fusion::{conv_epilogue_of, Activation};
use crate::graph::{numel, Graph, NodeId, Op, Tensor, ValueRef, ValueType};
use crate::ops::Conv;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

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
    /// Times within this fraction of each other that count as one (see
    /// [`WithinMargin`]); 0 where every difference counts.
    fn margin(&self) -> f64 {
        0.0
    }
    /// Convolutions asked for that could not be measured in some pair of
    /// layouts, priced by the estimate there (counted by [`WithinMargin`]).
    fn unmeasured_convs(&self) -> usize {
        0
    }
    /// Kernels asked for whose time is an estimate from one measured at a
    /// neighbouring shape, not measured at their own.
    fn estimated(&self) -> Estimated {
        Estimated::default()
    }
}

/// What a measured cost model priced from a kernel measured at a
/// neighbouring shape (one extent apart by at most 1.5x) rather than at its
/// own: where it estimated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Estimated {
    /// Layout transforms, each shape and pair of layouts once.
    pub transforms: usize,
    /// Convolutions, each geometry and pair of layouts once.
    pub convs: usize,
}

/// Measured costs whose noise cannot flip the planner's choice between two
/// alternatives that measure alike: a convolution's time in one pair of
/// layouts that lies within `margin` of a time given earlier for another pair
/// of the same convolution (same weights, same shapes) is given as that
/// earlier time. The planner asks in a fixed order, so such alternatives tie
/// in every process, and the tie is broken the same way in each, whichever of
/// them happened to measure a hair faster there.
pub struct WithinMargin {
    measured: Arc<dyn MeasuredCosts>,
    margin: f64,
    /// The times given per convolution, with its weights held so that their
    /// address, part of the key, is not reused by another tensor; `None`
    /// once a pair of its layouts could not be measured.
    given: Mutex<HashMap<ConvKey, Given>>,
}

/// The times given for one convolution, and its weights.
type Given = (Tensor, Option<Vec<f64>>);

/// A convolution: the address of its weights, its input and output shapes.
type ConvKey = (usize, Vec<usize>, Vec<usize>);

impl WithinMargin {
    /// `measured`, its convolution times within `margin` (a fraction) of
    /// one given earlier for the same convolution given as that one.
    pub fn new(measured: Arc<dyn MeasuredCosts>, margin: f64) -> WithinMargin {
        WithinMargin {
            measured,
            margin,
            given: Mutex::default(),
        }
    }
}

impl fmt::Debug for WithinMargin {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "WithinMargin({:?}, {})", self.measured, self.margin)
    }
}

impl MeasuredCosts for WithinMargin {
    fn conv_ns(&self, q: &ConvQuery) -> Option<f64> {
        let measured = self.measured.conv_ns(q);
        let key = (
            Arc::as_ptr(&q.weights.data) as usize,
            q.x.0.shape.clone(),
            q.y.0.shape.clone(),
        );
        let mut given = self.given.lock().unwrap_or_else(|e| e.into_inner());
        let (_, times) = given
            .entry(key)
            .or_insert_with(|| (q.weights.clone(), Some(vec![])));
        let (Some(ns), Some(times)) = (measured, times.as_mut()) else {
            *times = None;
            return measured;
        };
        let alike = |t: f64| t.max(ns) <= t.min(ns) * (1.0 + self.margin);
        match times.iter().copied().find(|&t| alike(t)) {
            Some(earlier) => Some(earlier),
            None => {
                times.push(ns);
                Some(ns)
            }
        }
    }

    fn transform_ns(&self, t: &ValueType, from: &Layout, to: &Layout) -> Option<f64> {
        self.measured.transform_ns(t, from, to)
    }

    fn margin(&self) -> f64 {
        self.margin
    }

    fn unmeasured_convs(&self) -> usize {
        let given = self.given.lock().unwrap_or_else(|e| e.into_inner());
        given.values().filter(|(_, times)| times.is_none()).count()
    }

    fn estimated(&self) -> Estimated {
        self.measured.estimated()
    }
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
            relabel_ns: 0.5,
            measured: None,
            epilogue_fuses: |_| true,
        }
    }
}

impl CostModel {
    /// Measured times within this fraction of each other count as one
    /// ([`MeasuredCosts::margin`]); 0 without measurements.
    pub fn margin(&self) -> f64 {
        self.measured.as_ref().map_or(0.0, |m| m.margin())
    }

    /// Convolutions the measured costs could not measure in some pair of
    /// layouts ([`MeasuredCosts::unmeasured_convs`]); 0 without measurements.
    pub fn unmeasured_convs(&self) -> usize {
        self.measured.as_ref().map_or(0, |m| m.unmeasured_convs())
    }

    /// Kernels priced from a measured neighbouring shape
    /// ([`MeasuredCosts::estimated`]); none without measurements.
    pub fn estimated(&self) -> Estimated {
        self.measured
            .as_ref()
            .map_or(Estimated::default(), |m| m.estimated())
    }

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
pub(super) fn op_cost(
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
    // A depthwise kernel between two layouts runs at the pace of the slower
    // one (one lane at a time when either is NCHW).
    let penalty = layout_penalty(y_layout).max(input_penalty);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::DType;

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
