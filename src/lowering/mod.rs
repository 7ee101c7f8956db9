//! From graph ops to lowered TIR functions: an op's compute definition (its
//! [`OpDef::compute`](crate::ops::OpDef::compute)), or a chain of ops fused into
//! one, with the default schedule, lowered for the layouts its tensors are stored
//! in. The runtime compiles the result (`codegen`); the explorer shows the
//! schedule primitive by primitive.
//!
//! Ops covered: the unary and binary elementwise ops (not comparisons), Where-free
//! movement (Transpose, Reshape, Concat, Slice, constant Pad, Expand, Tile), Softmax and
//! LogSoftmax, LayerNormalization, ReduceSum/Mean/Max, MatMul and Gemm, 2-D Conv,
//! 2-D pooling, GlobalPool and BatchNorm. Other ops give [`TirError::Unsupported`].
//!
//! Rank-0 tensors are treated as rank 1 of extent 1 (the same flat buffer).

use crate::core::{Layout, ValueType};
use crate::ops::te::{extents, ComputeCx, ComputeGraph, TeTensor as Tensor, TirError};
use crate::ops::Op;
use crate::tir::compute::{ComputeOp, IterVar};
use crate::tir::expr::{BinOp, Expr, TensorId};
use crate::tir::layout::{BufferLayout, PhysDim};
use crate::tir::lower::{contracted, lower, LowerOptions, LoweredFunc};
use crate::tir::schedule::{Attach, Schedule};
use crate::tir::CONTRACT;

/// An op as a compute graph, with what its default schedule needs to know.
pub struct OpCompute {
    /// The stages of the op.
    pub graph: ComputeGraph,
    /// The placeholder of every operand, in the op's input order.
    pub inputs: Vec<Tensor>,
    /// The stage holding the op's result.
    pub output: Tensor,
    /// Stages inlined into their consumer (padding copies).
    inline: Vec<Tensor>,
    /// Stages computed once per row of the output, attached at the given output
    /// axis (the row statistics of softmax and layer normalization).
    per_row: Vec<(Tensor, usize)>,
    /// Reductions computed where the output needs them, inside its innermost
    /// non-vector loop (so an epilogue works on values still in registers/cache).
    per_element: Vec<Tensor>,
}

/// An op lowered for storage in given layouts.
pub struct LoweredOp {
    /// The lowered function.
    pub func: LoweredFunc,
    /// For every placeholder (the operands, for one op), its position in
    /// `func.params` (`None`: never read).
    pub inputs: Vec<Option<usize>>,
    /// The position of the output in `func.params`.
    pub output: usize,
}

/// The storage of a tensor for flattening; `None` when the layout has more than one
/// block on an axis (which `BufferLayout` cannot say).
pub fn buffer_layout(l: &Layout) -> Option<BufferLayout> {
    let dims = l
        .order()
        .iter()
        .map(|d| match (l.factors(d.axis), d.level) {
            ([], 0) => Some(PhysDim::Axis(d.axis)),
            ([f], 0) => Some(PhysDim::Outer(d.axis, *f as i64)),
            ([f], 1) => Some(PhysDim::Inner(d.axis, *f as i64)),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(BufferLayout { dims })
}

/// The name of operand `i` of `op` in compute definitions.
fn operand_name(op: &Op, i: usize) -> String {
    op.def()
        .operand_names()
        .get(i)
        .map_or_else(|| format!("I{i}"), |n| n.to_string())
}

/// Builds the compute of `op` on operands of `types`.
pub fn op_compute(op: &Op, types: &[ValueType]) -> Result<OpCompute, TirError> {
    chain_compute(&[Link {
        op,
        types,
        prev: None,
    }])
}

/// One op of a fused chain: the op, its operand types, and (after the first op)
/// which operand the previous op's output is.
pub struct Link<'a> {
    /// The op.
    pub op: &'a Op,
    /// The (logical) types of its operands.
    pub types: &'a [ValueType],
    /// Which operand is the previous op's output (none for the first op).
    pub prev: Option<usize>,
}

/// Builds one compute graph for a chain of ops: each op after the first is
/// elementwise (unary or binary) on the previous op's output, of the same shape.
/// The placeholders (`OpCompute::inputs`) are the first op's operands, then every
/// later op's operands but the chained one. The default schedule inlines the
/// elementwise stages into the last one, so the chain is one pass over memory.
pub fn chain_compute(links: &[Link]) -> Result<OpCompute, TirError> {
    let mut g = ComputeGraph::new();
    let mut inputs = vec![];
    let mut inline = vec![];
    let mut per_row = vec![];
    let mut per_element = vec![];
    let mut prev: Option<Tensor> = None;
    for (k, link) in links.iter().enumerate() {
        if let Some(p) = prev {
            let elementwise = matches!(link.op, Op::Unary(_) | Op::Binary(_));
            if !elementwise || link.prev.is_none() {
                return Err(TirError::Unsupported(format!(
                    "{} cannot be fused after another op (only elementwise ops can)",
                    link.op.kind_name()
                )));
            }
            // The earlier stage feeds this one element for element.
            if reduces(&g, p) {
                per_element.push(p);
            } else {
                inline.push(p);
            }
        }
        let sfx = if k == 0 { String::new() } else { k.to_string() };
        let mut ph = Vec::new();
        for (i, ty) in link.types.iter().enumerate() {
            match prev.filter(|_| link.prev == Some(i)) {
                Some(p) => {
                    let chained = &g.op(p.id).shape;
                    if *chained != extents(&ty.shape) {
                        return Err(TirError::Unsupported(format!(
                            "{} reads the chained value as {:?}, it is {chained:?}",
                            link.op.kind_name(),
                            ty.shape
                        )));
                    }
                    ph.push(p);
                }
                None => {
                    let t = g.placeholder(
                        &format!("{}{sfx}", operand_name(link.op, i)),
                        &extents(&ty.shape),
                    )?;
                    inputs.push(t);
                    ph.push(t);
                }
            }
        }
        let first_new = g.ops.len();
        let d = link.op.def().compute(ComputeCx {
            g: &mut g,
            ph: &ph,
            types: link.types,
            sfx: &sfx,
        })?;
        if let Some(p) = prev {
            if g.op(d.output.id).shape != g.op(p.id).shape {
                return Err(TirError::Unsupported(format!(
                    "{} broadcasts the chained value to a larger shape",
                    link.op.kind_name()
                )));
            }
        }
        // Reductions the op's output reads element for element (a matrix product
        // before its scaling, a convolution before its bias).
        for i in first_new..g.ops.len() {
            let t = g.tensor(TensorId(i));
            if reduces(&g, t) && t.id != d.output.id && !d.per_row.iter().any(|(r, _)| r.id == t.id)
            {
                per_element.push(t);
            }
        }
        inline.extend(d.inline);
        per_row.extend(d.per_row);
        prev = Some(d.output);
    }
    let mut output = prev.ok_or_else(|| TirError::Definition("an empty chain".into()))?;
    if reduces(&g, output) {
        // The result is copied from a reduction stage computed where the output
        // needs it (like a reduction an epilogue reads): its accumulators are then
        // a small scratch that codegen keeps in registers, not elements of the output
        // read and written again at every step of the reduction.
        let name = std::mem::take(&mut g.ops[output.id.0].name);
        g.ops[output.id.0].name = format!("{name}.acc");
        let shape = g.op(output.id).shape.clone();
        let acc = output.id;
        per_element.push(output);
        output = g.compute(&name, &shape, |i| Expr::Read {
            tensor: acc,
            indices: i.to_vec(),
        })?;
    }
    Ok(OpCompute {
        graph: g,
        inputs,
        output,
        inline,
        per_row,
        per_element,
    })
}

/// Whether `t` is a compute stage with reduction axes.
fn reduces(g: &ComputeGraph, t: Tensor) -> bool {
    g.op(t.id)
        .compute()
        .is_some_and(|c| !c.reduce_axis.is_empty())
}

/// Rows of output vectors a reduction accumulates side by side
/// (`OpCompute::accumulator_rows`): four rows of two 4-lane vectors keep eight
/// multiply-adds in flight, enough to cover their latency.
const ACCUMULATOR_ROWS: i64 = 4;

/// What rows of accumulators along `axis` of `c`'s output cost in loads: a read
/// that moves with the axis is loaded once per row, twice as costly when it is a
/// vector (it moves with the lanes, along `lane_axis`, too).
/// An index that picks a group of the axis (`floordiv(axis, k)`, see
/// [`group_factor`]) does not move along rows of one group.
fn row_loads(c: &ComputeOp, axis: usize, lane_axis: usize) -> usize {
    let (var, lane_var) = (&c.axis[axis].var, &c.axis[lane_axis].var);
    let group = group_factor(c, axis);
    let within_group = |i: &Expr| {
        i.rewrite(&mut |e| match e {
            Expr::Bin(BinOp::FloorDiv, x, k)
                if matches!(&**x, Expr::Var(v) if v == var) && k.as_int() == group =>
            {
                Some(Expr::Int(0))
            }
            _ => None,
        })
    };
    let mut cost = 0;
    c.body.expr().visit(&mut |e| {
        if let Expr::Read { indices, .. } = e {
            let uses = |v| indices.iter().any(|i| within_group(i).uses_var(v));
            if uses(var) {
                cost += if uses(lane_var) { 2 } else { 1 };
            }
        }
    });
    cost
}

/// The factor `k` of a `floordiv(axis, k)` in an index `c` reads with (a
/// grouped convolution's group of output channels): a walk along the axis stays
/// inside one multiple of `k`, where the index moves by constant steps.
fn group_factor(c: &ComputeOp, axis: usize) -> Option<i64> {
    let var = &c.axis[axis].var;
    let mut factor = None;
    c.body.expr().visit(&mut |e| {
        if let Expr::Bin(BinOp::FloorDiv, x, k) = e {
            if let (Expr::Var(v), Expr::Int(k)) = (&**x, &**k) {
                if v == var && *k > 1 {
                    factor = Some(*k);
                }
            }
        }
    });
    factor
}

/// Vectorizes `lanes`, a loop of `t`, with `t`'s reductions (innermost until
/// now) just outside it: each lane accumulates its own element.
fn lanes_innermost(s: &mut Schedule, t: &Tensor, lanes: &IterVar) -> Result<(), TirError> {
    let reduce = s.reduce_axis(t)?;
    if !reduce.is_empty() {
        let mut order = reduce;
        order.push(lanes.clone());
        s.reorder(t, &order)?;
    }
    s.vectorize(t, lanes)
}

/// The loops of an output visited in storage order.
struct Ordered {
    /// The loop just outside the vector lanes (where element-wise producers go).
    outside_lanes: Option<IterVar>,
    /// The outermost loop of more than one iteration (the parallel one).
    outermost: Option<IterVar>,
    /// The axis whose loop runs the vector lanes, if one does.
    lane_axis: Option<usize>,
}

impl OpCompute {
    /// The default schedule, applied primitive by primitive: padding and chained
    /// elementwise stages inlined, row statistics computed at their row of the
    /// output, the output's loops in the order its storage layout keeps them (the
    /// logical order for row-major storage), the innermost split by 8 and
    /// vectorized with the reductions just outside it, producing reductions
    /// computed at the loop outside the vector lanes, the outermost non-trivial
    /// axis parallel. Every access of the lanes is then unit-stride where the
    /// layouts allow it.
    ///
    /// A reduction whose output has no lanes to vectorize (a row statistic, a
    /// global pool of row-major data) vectorizes its innermost reduction axis
    /// instead, accumulating in vector lanes (`codegen`).
    pub fn default_schedule(
        &self,
        layouts: Option<(&[Layout], &Layout)>,
    ) -> Result<Schedule, TirError> {
        let out = layouts.map(|l| l.1);
        let y = self.output;
        let mut s = Schedule::new(&self.graph, &[y])?;
        for p in &self.inline {
            s.compute_inline(p)?;
        }
        let axes = s.axis(&y)?;
        let shape = &self.graph.op(y.id).shape;
        let storage_order = match out {
            Some(l) if !l.is_identity() => self.storage_order(&mut s, l)?,
            _ => None,
        };
        // Where element-wise producers are computed: the innermost loop outside the
        // vector lanes.
        let mut element_loop = axes.last().cloned();
        let mut parallel = None;
        let mut lane_axis = None;
        if let Some(ordered) = storage_order {
            element_loop = ordered.outside_lanes;
            parallel = ordered.outermost;
            lane_axis = ordered.lane_axis;
        } else if let (Some(last), Some(&extent)) = (axes.last(), shape.last()) {
            if extent >= 8 {
                let (outer, inner) = s.split(&y, last, 8)?;
                element_loop = Some(outer);
                lanes_innermost(&mut s, &y, &inner)?;
                lane_axis = Some(axes.len() - 1);
            } else if let Some(r) = s.reduce_axis(&y)?.last() {
                s.vectorize(&y, r)?;
            }
        }
        for (t, a) in &self.per_row {
            // Computed once per row: inside the output's loops that come before
            // any loop over the row's own axes (those after `a`), however the
            // storage order arranged them; at the root when a row axis is outermost.
            let row_axes = &axes[a + 1..];
            let mut at = None;
            for leaf in s.leaves(&y)? {
                if s.derives_from(&y, &leaf, row_axes)? {
                    break;
                }
                at = Some(leaf);
            }
            if let Some(at) = at {
                s.compute_at(t, &y, &at)?;
            }
            // Across the row: its reduction, or the row itself.
            let lanes = match s.reduce_axis(t)?.last() {
                Some(r) => Some(r.clone()),
                None => s.axis(t)?.last().cloned(),
            };
            if let Some(l) = lanes {
                s.vectorize(t, &l)?;
            }
        }
        let mut parallel = parallel.or_else(|| {
            axes.iter()
                .zip(shape)
                .find(|(_, &d)| d > 1)
                .map(|(a, _)| a.clone())
        });
        let mut rows = None;
        if let (Some(_), Some(a)) = (&element_loop, lane_axis) {
            if let Some((outer, axis, reducer)) = self.accumulator_rows(&mut s, a)? {
                if reducer.id != y.id {
                    // Its rows of lanes stored one after the other, lanes contiguous.
                    s.storage_layout(&reducer, axes_innermost(axes.len(), &[axis, a]))?;
                }
                if element_loop
                    .as_ref()
                    .is_some_and(|l| l.var == axes[axis].var)
                {
                    element_loop = Some(outer.clone());
                }
                if parallel.as_ref().is_some_and(|p| p.var == axes[axis].var) {
                    parallel = Some(outer);
                }
                rows = Some(axis);
            }
        }
        if let (Some(a), Some(r)) = (lane_axis, self.reducer()) {
            self.lanes_contiguous(&mut s, r, a, layouts)?;
        }
        if let Some(at) = element_loop {
            for t in &self.per_element {
                s.compute_at(t, &y, &at)?;
                // Its reductions outside the axis of the output's lanes, which is
                // then a run of vector lanes; with no lanes (or another shape), its
                // innermost axis is one, or else its innermost reduction axis.
                let (axes, reduce) = (s.axis(t)?, s.reduce_axis(t)?);
                let same_shape = self.graph.op(t.id).shape == *shape;
                match lane_axis.filter(|_| same_shape) {
                    Some(a) => {
                        let inner = [rows, Some(a)];
                        let mut order: Vec<IterVar> = (0..axes.len())
                            .filter(|&k| !inner.contains(&Some(k)))
                            .map(|k| axes[k].clone())
                            .collect();
                        order.extend(reduce);
                        if let Some(r) = rows {
                            order.push(axes[r].clone());
                            s.unroll(t, &axes[r])?;
                        }
                        order.push(axes[a].clone());
                        s.reorder(t, &order)?;
                        s.vectorize(t, &axes[a])?;
                    }
                    None if lane_axis.is_none() && !reduce.is_empty() => {
                        s.vectorize(t, reduce.last().expect("not empty"))?;
                    }
                    None => {
                        if let Some((last, outer)) = axes.split_last() {
                            let mut order = outer.to_vec();
                            order.extend(reduce);
                            order.push(last.clone());
                            s.reorder(t, &order)?;
                            s.vectorize(t, last)?;
                        }
                    }
                }
            }
        }
        if let Some(a) = parallel {
            if s.leaves(&y)?.iter().any(|l| l.var == a.var) {
                s.parallel(&y, &a)?;
            }
        }
        Ok(s)
    }

    /// Gives the stage that reduces (the output, or a reduction it reads element
    /// for element) [`ACCUMULATOR_ROWS`] rows of vector lanes per step of its
    /// reduction loops: one more output axis is split and its inner loop unrolled
    /// inside the reductions, just outside the lanes (`lane_axis`'s loop, the
    /// output's last leaf). The rows' multiply-adds do not wait on each other's
    /// results, where one row's steps each wait on the one before. The axis is
    /// the one whose rows share the most loads: a read that moves with the axis is
    /// loaded once per row, twice as costly when it is a vector (it moves with the
    /// lanes too); a convolution takes its output channels (only the weights move,
    /// the input's vectors serve every row), a matrix product its rows. Returns the
    /// outer loop of the split, the axis and the stage that reduces; `None` when
    /// nothing reduces or no axis has a multiple of the rows.
    fn accumulator_rows(
        &self,
        s: &mut Schedule,
        lane_axis: usize,
    ) -> Result<Option<(IterVar, usize, Tensor)>, TirError> {
        let y = self.output;
        let g = &self.graph;
        let shape = &g.op(y.id).shape;
        let Some((reducer, c)) = self
            .reducer()
            .and_then(|t| Some((t, g.op(t.id).compute()?)))
        else {
            return Ok(None);
        };
        let (leaves, axes) = (s.leaves(&y)?, s.axis(&y)?);
        let cost = |a: usize| row_loads(c, a, lane_axis);
        // Ties go to the axis stored innermost (the later leaf).
        let Some(axis) = (0..shape.len())
            .filter(|&a| {
                a != lane_axis
                    && shape[a] >= ACCUMULATOR_ROWS
                    && shape[a] % ACCUMULATOR_ROWS == 0
                    && leaves.iter().any(|l| l.var == axes[a].var)
            })
            .min_by_key(|&a| {
                let pos = leaves.iter().position(|l| l.var == axes[a].var);
                (cost(a), std::cmp::Reverse(pos))
            })
        else {
            return Ok(None);
        };
        let (outer, row) = s.split(&y, &axes[axis], ACCUMULATOR_ROWS)?;
        let mut order: Vec<IterVar> = s
            .leaves(&y)?
            .into_iter()
            .filter(|l| l.var != row.var)
            .collect();
        order.insert(order.len() - 1, row.clone());
        let leaves = s.leaves(&y)?;
        if order.iter().zip(&leaves).any(|(a, b)| a.var != b.var) {
            s.reorder(&y, &order)?;
        }
        s.unroll(&y, &row)?;
        Ok(Some((outer, axis, reducer)))
    }

    /// The schedule of a contraction: the output an epilogue of one stage that
    /// sums products of two tensors (a convolution of any groups, a matrix
    /// product), in strided layouts. The output's loops run in storage order;
    /// inside the outer ones, one call of the walk micro-kernel [`CONTRACT`]
    /// computes a block of the sums, a run of the output's innermost axis (the
    /// lanes) by a run of the axis that shares the most loads (the rows, chosen as
    /// [`Self::accumulator_rows`] does), and the epilogue then passes over the
    /// block. An axis that picks a group (`floordiv(axis, k)`) is walked one group
    /// at a time. `None` when the op is not such a contraction.
    ///
    /// The kernel is `std::arch` code in the widest vectors, with fused
    /// multiply-adds, where Cranelift's code has 128-bit vectors and none.
    pub fn contraction_schedule(
        &self,
        layouts: Option<(&[Layout], &Layout)>,
    ) -> Result<Option<Schedule>, TirError> {
        let g = &self.graph;
        let y = self.output;
        let Some(acc) = self
            .reducer()
            .filter(|t| self.per_row.is_empty() && self.per_element == [*t])
        else {
            return Ok(None);
        };
        let Some(c) = g.op(acc.id).compute().filter(|c| contracted(c).is_some()) else {
            return Ok(None);
        };
        let strided = |b: &Option<BufferLayout>| {
            b.as_ref()
                .is_some_and(|b| b.dims.iter().all(|d| matches!(d, PhysDim::Axis(_))))
        };
        let stored = layouts.map(|(ins, out)| self.storage(ins, out));
        if !stored.iter().flatten().all(|(_, _, b)| strided(b)) {
            return Ok(None);
        }
        let shape = g.op(y.id).shape.clone();
        let order: Vec<usize> = match layouts {
            Some((_, l)) if !l.is_identity() => l.order().iter().map(|d| d.axis).collect(),
            _ => (0..shape.len()).collect(),
        };
        let Some(&lane) = order.last() else {
            return Ok(None);
        };
        // Ties go to the axis stored innermost.
        let row = order
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, a)| a != lane && shape[a] > 1)
            .min_by_key(|&(pos, a)| (row_loads(c, a, lane), std::cmp::Reverse(pos)))
            .map(|(_, a)| a);
        let mut s = Schedule::new(g, &[y])?;
        for p in &self.inline {
            s.compute_inline(p)?;
        }
        let axes = s.axis(&y)?;
        // Each loop of the output with its number of iterations (splits divide).
        // The output's loops outside the kernel, each with its axis when whole.
        let mut outer: Vec<(Option<usize>, IterVar, i64)> = vec![];
        // Those of the kernel's block: (axis, loop, iterations), in storage order.
        let mut block: Vec<(usize, IterVar, i64)> = vec![];
        for &a in &order {
            if Some(a) != row && a != lane {
                outer.push((Some(a), axes[a].clone(), shape[a]));
                continue;
            }
            let mut inner = (axes[a].clone(), shape[a]);
            if let Some(k) = group_factor(c, a).filter(|k| shape[a] % k == 0) {
                let (o, i) = s.split(&y, &inner.0, k)?;
                outer.push((None, o, shape[a] / k));
                inner = (i, k);
            }
            block.push((a, inner.0, inner.1));
        }
        let position = |a: usize| order.iter().position(|&x| x == a);
        // A block of few rows (a group of 4 channels) also walks the innermost
        // whole loop outside it, so that a call does enough work to pay for itself.
        let rows = block.iter().find(|b| Some(b.0) == row).map(|b| b.2);
        if rows.is_some_and(|r| r < 8) {
            if let Some(k) = outer.iter().rposition(|o| o.0.is_some() && o.2 > 1) {
                let (a, iv, n) = outer.remove(k);
                block.push((a.expect("a whole axis"), iv, n));
                block.sort_by_key(|b| position(b.0));
            }
        }
        // Parallel work: with few blocks, the rows are cut into parts.
        let blocks: i64 = outer.iter().map(|l| l.2).product();
        if let Some(b) = block.iter_mut().find(|b| Some(b.0) == row) {
            if blocks < 4 && b.2 >= 16 {
                if let Some(d) = (4..=b.2 / 4).rev().find(|d| b.2 % d == 0) {
                    let (o, i) = s.split(&y, &b.1, d)?;
                    outer.push((None, o, b.2 / d));
                    (b.1, b.2) = (i, d);
                }
            }
        }
        let loops: Vec<IterVar> = outer
            .iter()
            .map(|l| l.1.clone())
            .chain(block.iter().map(|b| b.1.clone()))
            .collect();
        s.reorder(&y, &loops)?;
        let Some((_, lane_loop, lanes)) = block.last().cloned() else {
            return Ok(None);
        };
        // One vector loop over the run (a split would widen the block the sums are
        // computed for to whole vectors, past the output's end).
        if lanes >= 4 {
            s.vectorize(&y, &lane_loop)?;
        }
        if let Some(at) = outer.iter().rev().find(|l| l.2 > 1) {
            s.compute_at(&acc, &y, &at.1)?;
        }
        let rank = shape.len();
        let block_axes: Vec<usize> = block.iter().map(|b| b.0).collect();
        s.storage_layout(&acc, axes_innermost(rank, &block_axes))?;
        let acc_axes = s.axis(&acc)?;
        let mut acc_order: Vec<IterVar> = (0..rank)
            .filter(|a| !block_axes.contains(a))
            .map(|a| acc_axes[a].clone())
            .collect();
        let first = acc_order.len();
        let (lane_axis, walked) = block_axes.split_last().expect("the lanes");
        acc_order.extend(walked.iter().map(|&a| acc_axes[a].clone()));
        acc_order.extend(s.reduce_axis(&acc)?);
        acc_order.push(acc_axes[*lane_axis].clone());
        s.reorder(&acc, &acc_order)?;
        s.tensorize(&acc, &acc_order[first], CONTRACT)?;
        self.lanes_contiguous(&mut s, acc, lane, layouts)?;
        // The stages computed before it (a padded input) in parallel, along their
        // outermost loop of more than one iteration outside the innermost, which
        // is vectorized (its pieces inside and outside the padding are peeled).
        for t in (0..g.ops.len()).map(|k| g.tensor(TensorId(k))) {
            let computed = g.op(t.id).compute().is_some() && !self.inline.contains(&t);
            if !computed || t.id == acc.id || t.id == y.id || s.stage(&t)?.attach != Attach::Root {
                continue;
            }
            let (t_shape, t_axes) = (&g.op(t.id).shape, s.axis(&t)?);
            let extent = |l: &IterVar| {
                let a = t_axes.iter().position(|x| x.var == l.var);
                a.map_or(1, |a| t_shape[a])
            };
            let leaves = s.leaves(&t)?;
            let Some((innermost, outer)) = leaves.split_last() else {
                continue;
            };
            if let Some(l) = outer.iter().find(|l| extent(l) > 1) {
                s.parallel(&t, l)?;
            }
            if extent(innermost) >= 4 {
                s.vectorize(&t, innermost)?;
            }
        }
        if let Some(p) = outer.iter().find(|l| l.2 > 1) {
            s.parallel(&y, &p.1)?;
        }
        Ok(Some(s))
    }

    /// The stage that reduces to the output's elements: the output, or a
    /// reduction of its shape that it reads element for element.
    fn reducer(&self) -> Option<Tensor> {
        let g = &self.graph;
        let shape = &g.op(self.output.id).shape;
        std::iter::once(&self.output)
            .chain(&self.per_element)
            .find(|t| reduces(g, **t) && g.op(t.id).shape == *shape)
            .copied()
    }

    /// Copies every tensor that `reducer` reads along its lanes (`lane_axis`) but
    /// that is not stored with that axis innermost (a convolution's weights, read
    /// along the output channels) into a scratch that is, once per run: its reads
    /// then load whole vectors instead of one lane at a time. The copy is one pass
    /// over the tensor; the reduction reads each element once per output pixel.
    /// Only a tensor smaller than the output is copied: a depthwise convolution's
    /// padded input copied again cost more than its lanes' loads saved. A larger
    /// one that is a stage of the op (that padded input) is stored lanes-innermost
    /// itself instead.
    fn lanes_contiguous(
        &self,
        s: &mut Schedule,
        reducer: Tensor,
        lane_axis: usize,
        layouts: Option<(&[Layout], &Layout)>,
    ) -> Result<(), TirError> {
        let g = &self.graph;
        let Some(c) = g.op(reducer.id).compute() else {
            return Ok(());
        };
        let stored: Vec<(String, Layout, Option<BufferLayout>)> = layouts
            .map(|(ins, out)| self.storage(ins, out))
            .unwrap_or_default();
        let innermost = |t: TensorId, rank: usize| {
            let name = &g.op(t).name;
            match stored.iter().find(|(n, ..)| n == name) {
                Some((_, l, _)) => l.order().last().map(|d| d.axis),
                None => rank.checked_sub(1),
            }
        };
        let lane_var = &c.axis[lane_axis].var;
        let mut strided: Vec<(TensorId, usize)> = vec![];
        c.body.expr().visit(&mut |e| {
            if let Expr::Read { tensor, indices } = e {
                let lanes = indices.iter().position(|i| i.uses_var(lane_var));
                if let Some(d) = lanes {
                    if innermost(*tensor, indices.len()) != Some(d)
                        && !strided.iter().any(|(t, _)| t == tensor)
                    {
                        strided.push((*tensor, d));
                    }
                }
            }
        });
        let size = |t: TensorId| g.op(t).shape.iter().product::<i64>();
        for (t, d) in strided {
            let rank = g.op(t).shape.len();
            let tensor = g.tensor(t);
            if size(t) < size(reducer.id) {
                let cache = s.cache_read(&tensor, &[reducer])?;
                s.storage_layout(&cache, axes_innermost(rank, &[d]))?;
            } else if g.op(t).compute().is_some() && !self.inline.contains(&tensor) {
                // A stage of the op (a padded input): stored with the lanes'
                // axis innermost and computed in that order, its lanes vectorized.
                s.storage_layout(&tensor, axes_innermost(rank, &[d]))?;
                let lane_var = s.axis(&tensor)?[d].var.clone();
                let mut order = s.leaves(&tensor)?;
                if let Some(k) = order.iter().position(|l| l.var == lane_var) {
                    let lane = order.remove(k);
                    order.push(lane.clone());
                    s.reorder(&tensor, &order)?;
                    s.vectorize(&tensor, &lane)?;
                }
            }
        }
        Ok(())
    }

    /// Orders the output's loops as `layout` stores it (see `default_schedule`)
    /// and vectorizes the innermost; `None` when the layout nests blocks (the
    /// logical order is kept).
    fn storage_order(
        &self,
        s: &mut Schedule,
        layout: &Layout,
    ) -> Result<Option<Ordered>, TirError> {
        let y = self.output;
        let axes = s.axis(&y)?;
        let shape = self.graph.op(y.id).shape.clone();
        if (0..axes.len()).any(|a| layout.factors(a).len() > 1) {
            return Ok(None);
        }
        // Each axis as its loops by level, with their extents: the axis, or its
        // outer loop and its block.
        let mut levels: Vec<Vec<(IterVar, i64)>> = Vec::with_capacity(axes.len());
        for (a, iv) in axes.iter().enumerate() {
            levels.push(match layout.factors(a).first() {
                Some(&f) => {
                    let f = f as i64;
                    let (outer, inner) = s.split(&y, iv, f)?;
                    vec![(outer, (shape[a] + f - 1) / f), (inner, f)]
                }
                None => vec![(iv.clone(), shape[a])],
            });
        }
        let mut order: Vec<(IterVar, i64)> = vec![];
        for d in layout.order() {
            match levels.get(d.axis).and_then(|l| l.get(d.level)) {
                Some(level) => order.push(level.clone()),
                None => return Ok(None),
            }
        }
        let loops: Vec<IterVar> = order.iter().map(|l| l.0.clone()).collect();
        s.reorder(&y, &loops)?;
        let Some((innermost, extent)) = order.pop() else {
            return Ok(None);
        };
        let lane = layout.order().last().map(|d| d.axis);
        let outermost = order.iter().find(|l| l.1 > 1).map(|l| l.0.clone());
        let outside = order.last().map(|l| l.0.clone());
        let is_block = levels
            .iter()
            .any(|l| l.len() == 2 && l[1].0.var == innermost.var);
        let (outside_lanes, lane_axis) = match extent {
            // A long axis: lanes of 8 (the runs of 4 the vector path takes, twice).
            8.. if !is_block => {
                let (outer, inner) = s.split(&y, &innermost, 8)?;
                lanes_innermost(s, &y, &inner)?;
                (Some(outer), lane)
            }
            4.. => {
                lanes_innermost(s, &y, &innermost)?;
                (outside, lane)
            }
            _ => (outside, None),
        };
        Ok(Some(Ordered {
            outside_lanes,
            outermost,
            lane_axis,
        }))
    }

    /// The storage of the operands (`layouts.0`) and the output (`layouts.1`): for
    /// every non-identity layout, the tensor's name, the layout and its buffer layout
    /// (`None` for nested blocks).
    pub fn storage(
        &self,
        inputs: &[Layout],
        output: &Layout,
    ) -> Vec<(String, Layout, Option<BufferLayout>)> {
        let g = &self.graph;
        self.inputs
            .iter()
            .zip(inputs)
            .chain(std::iter::once((&self.output, output)))
            .filter(|(_, l)| !l.is_identity())
            .map(|(t, l)| (g.op(t.id).name.clone(), l.clone(), buffer_layout(l)))
            .collect()
    }
}

/// The buffer layout of a tensor of `rank` axes stored in their order, except
/// that the axes of `innermost` come last, in that order.
fn axes_innermost(rank: usize, innermost: &[usize]) -> BufferLayout {
    let outer = (0..rank).filter(|k| !innermost.contains(k));
    let dims = outer.chain(innermost.iter().copied()).map(PhysDim::Axis);
    BufferLayout {
        dims: dims.collect(),
    }
}

/// Lowers `op` on operands of (logical) `types` with its default schedule; `layouts`
/// gives the storage of the operands and the output for a laid-out op.
pub fn lower_op(
    op: &Op,
    types: &[ValueType],
    layouts: Option<(&[Layout], &Layout)>,
) -> Result<LoweredOp, TirError> {
    let link = Link {
        op,
        types,
        prev: None,
    };
    lower_chain(&[link], layouts)
}

/// Lowers a chain (see [`chain_compute`]) with its default schedule; `layouts` gives
/// the storage of the placeholders (in `OpCompute::inputs` order) and of the output.
pub fn lower_chain(
    links: &[Link],
    layouts: Option<(&[Layout], &Layout)>,
) -> Result<LoweredOp, TirError> {
    let c = chain_compute(links)?;
    let mut opts = LowerOptions::default();
    if let Some((ins, out)) = layouts {
        for (name, l, bl) in c.storage(ins, out) {
            let bl = bl.ok_or_else(|| {
                TirError::Unsupported(format!(
                    "layout {l} of `{name}` nests blocks, which buffer layouts cannot express"
                ))
            })?;
            opts.layouts.insert(name, bl);
        }
    }
    // A contraction whose indices do not move by constant steps along the
    // kernel's loops takes the default schedule.
    let tensorized = match c.contraction_schedule(layouts)? {
        Some(s) => lower(&s, &opts).ok(),
        None => None,
    };
    let func = match tensorized {
        Some(f) => f,
        None => lower(&c.default_schedule(layouts)?, &opts)?,
    };
    let position = |t: &Tensor| func.params.iter().position(|p| *p == t.id);
    let inputs = c.inputs.iter().map(position).collect();
    let output = position(&c.output)
        .ok_or_else(|| TirError::Lower("the output is not a parameter".into()))?;
    Ok(LoweredOp {
        func,
        inputs,
        output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{DType, Tensor as GraphTensor};
    use crate::ops::*;
    use crate::tir::interp::Interpreter;
    use std::collections::HashMap;

    /// A deterministic tensor with values in [-1, 1).
    fn tensor(shape: &[usize], seed: u64) -> GraphTensor {
        let n: usize = shape.iter().product();
        let vals = (0..n)
            .map(|i| (((i as u64 * 7919 + seed * 104729) % 2000) as f32) / 1000.0 - 1.0)
            .collect();
        GraphTensor::from_f32(shape.to_vec(), vals)
    }

    fn close(got: &[f64], expected: &[f64], what: &str) {
        assert_eq!(got.len(), expected.len(), "{what}");
        for (k, (a, b)) in got.iter().zip(expected).enumerate() {
            // Equal infinities, or NaN for NaN (atanh(-1), acosh below 1), agree too.
            let same = a == b || (a.is_nan() && b.is_nan());
            assert!(
                same || (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "{what}: element {k}: {a} vs {b}"
            );
        }
    }

    /// The op against the reference executor (tolerance 1e-5 * max(1, |expected|)),
    /// twice: its compute definition evaluated directly, and its default schedule
    /// lowered (in `layouts` when given, padding filled with NaN so that a read of it
    /// shows) and run by the statement-IR interpreter.
    fn agrees_on(op: Op, inputs: Vec<GraphTensor>, layouts: Option<(Vec<Layout>, Layout)>) {
        let types: Vec<ValueType> = inputs
            .iter()
            .map(|t| ValueType::new(DType::F32, t.shape.clone()))
            .collect();
        let refs: Vec<&ValueType> = types.iter().collect();
        let out_types = crate::graph::infer_outputs(&op, &refs).unwrap();
        let ins: Vec<&GraphTensor> = inputs.iter().collect();
        let expected = crate::reference::eval_op(&op, &ins, &out_types).unwrap()[0]
            .data
            .to_f64();
        let c = op_compute(&op, &types).unwrap();
        let feed: HashMap<String, Vec<f64>> = c
            .inputs
            .iter()
            .zip(&inputs)
            .map(|(p, t)| (c.graph.op(p.id).name.clone(), t.data.to_f64()))
            .collect();
        let direct = &c.graph.evaluate(&feed).unwrap()[c.output.id.0];
        close(direct, &expected, &format!("{op:?} (definition)"));

        let lay = layouts.as_ref().map(|(i, o)| (i.as_slice(), o));
        let l = lower_op(&op, &types, lay).unwrap();
        let f = &l.func;
        let shape = |p: usize| f.graph.op(f.params[p]).shape.clone();
        let mut buffers = HashMap::new();
        for (k, t) in inputs.iter().enumerate() {
            let Some(p) = l.inputs[k] else { continue };
            let data = f.layouts[&f.params[p]].pack(&shape(p), &t.data.to_f64(), f64::NAN);
            buffers.insert(f.graph.op(f.params[p]).name.clone(), data);
        }
        let (out, _) = Interpreter::new().run(f, &buffers).unwrap();
        let y = &out[&f.graph.op(f.params[l.output]).name];
        let got = f.layouts[&f.params[l.output]].unpack(&shape(l.output), y);
        close(&got, &expected, &format!("{op:?} (lowered, {layouts:?})"));
    }

    fn agrees_with_reference(op: Op, shapes: &[&[usize]]) {
        let inputs = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| tensor(s, k as u64 + 1))
            .collect();
        agrees_on(op, inputs, None);
    }

    fn window(k: usize, s: usize, d: usize, p: [usize; 4]) -> Window {
        Window {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![d, d],
            pads: p.to_vec(),
        }
    }

    #[test]
    fn cnn_ops_match_the_reference_executor() {
        let conv = |w, group| Op::Conv(Conv { window: w, group });
        agrees_with_reference(
            conv(window(3, 2, 1, [1, 0, 1, 2]), 2),
            &[&[1, 4, 7, 6], &[6, 2, 3, 3], &[6]],
        );
        agrees_with_reference(
            conv(window(2, 1, 2, [0; 4]), 1),
            &[&[2, 3, 5, 5], &[4, 3, 2, 2]],
        );
        for (kind, include, ceil) in [
            (PoolKind::Max, false, false),
            (PoolKind::Avg, false, true),
            (PoolKind::Avg, true, false),
        ] {
            let p = Op::Pool(Pool {
                kind,
                window: window(3, 2, 1, [1, 1, 1, 1]),
                ceil_mode: ceil,
                count_include_pad: include,
            });
            agrees_with_reference(p, &[&[1, 2, 6, 7]]);
        }
        agrees_with_reference(
            Op::GlobalPool(GlobalPool {
                kind: PoolKind::Avg,
            }),
            &[&[1, 3, 4, 5]],
        );
        agrees_with_reference(
            Op::GlobalPool(GlobalPool {
                kind: PoolKind::Max,
            }),
            &[&[1, 3, 4, 5]],
        );
        // BatchNorm, with positive variances.
        let var = GraphTensor::from_f32(vec![3], vec![0.5, 1.0, 2.0]);
        let mut bn: Vec<_> = [&[1usize, 3, 2, 2][..], &[3], &[3], &[3]]
            .iter()
            .enumerate()
            .map(|(k, s)| tensor(s, k as u64 + 1))
            .collect();
        bn.push(var);
        agrees_on(Op::BatchNorm(BatchNorm { epsilon: 1e-5 }), bn, None);
    }

    #[test]
    fn reductions_keep_rows_of_lanes_and_read_strided_weights_from_a_copy() {
        // A grouped convolution with bias: channels 8 = 2 groups of 4, so the
        // output channel is a lane axis in NHWC and NCHW4c and a row axis in NCHW.
        // In the strided layouts the sums are walks of the contraction kernel; the
        // blocked one keeps rows of vector lanes in generated code.
        let op = Op::Conv(Conv {
            window: window(3, 1, 1, [1, 1, 1, 1]),
            group: 2,
        });
        let shapes: [&[usize]; 3] = [&[1, 8, 5, 8], &[8, 4, 3, 3], &[8]];
        let inputs: Vec<GraphTensor> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| tensor(s, k as u64 + 7))
            .collect();
        let types: Vec<ValueType> = shapes
            .iter()
            .map(|s| ValueType::new(DType::F32, s.to_vec()))
            .collect();
        for (name, weights_copied, walked) in [
            ("NCHW", false, true),
            ("NHWC", true, true),
            ("NCHW4c", true, false),
        ] {
            let l = Layout::parse(name).unwrap();
            let ins = vec![
                l.clone(),
                Layout::parse("OIHW").unwrap(),
                Layout::parse("C").unwrap(),
            ];
            agrees_on(op.clone(), inputs.clone(), Some((ins.clone(), l.clone())));
            let f = lower_op(&op, &types, Some((&ins, &l))).unwrap().func;
            let text = f.body.display(&|t| f.graph.op(t).name.clone()).to_string();
            let expected = if walked {
                "call contract"
            } else {
                "unrolled for"
            };
            assert!(text.contains(expected), "{name}: {text}");
            assert_eq!(
                f.graph.find("W.cache").is_some(),
                weights_copied,
                "{name}: {text}"
            );
        }
    }

    #[test]
    fn contractions_walk_one_group_of_channels_per_call() {
        // Depthwise, grouped and dense convolutions and a matrix product: each sum
        // a walk of the contraction kernel, whose steps the group fixes.
        let conv = |group, s| {
            Op::Conv(Conv {
                window: window(3, s, 1, [1, 1, 1, 1]),
                group,
            })
        };
        let cases: [(Op, Vec<&[usize]>); 4] = [
            (conv(6, 1), vec![&[1, 6, 6, 9], &[6, 1, 3, 3]]),
            (conv(3, 2), vec![&[2, 6, 7, 8], &[9, 2, 3, 3], &[9]]),
            (conv(1, 1), vec![&[1, 5, 4, 20], &[8, 5, 3, 3]]),
            (Op::MatMul, vec![&[2, 17, 12], &[12, 19]]),
        ];
        for (op, shapes) in cases {
            agrees_with_reference(op.clone(), &shapes);
            let types: Vec<ValueType> = shapes
                .iter()
                .map(|s| ValueType::new(DType::F32, s.to_vec()))
                .collect();
            let c = op_compute(&op, &types).unwrap();
            let s = c
                .contraction_schedule(None)
                .unwrap()
                .expect("a contraction");
            let f = lower(&s, &LowerOptions::default()).unwrap();
            let text = f.body.display(&|t| f.graph.op(t).name.clone()).to_string();
            assert!(text.contains("call contract"), "{op:?}: {text}");
        }
    }

    #[test]
    fn elementwise_ops_match_the_reference_executor() {
        // Log and Sqrt on positive values below.
        let on_any_value = UnaryOp::EVERY
            .into_iter()
            .filter(|u| !matches!(u, UnaryOp::Log | UnaryOp::Sqrt));
        for u in on_any_value {
            agrees_with_reference(Op::Unary(u), &[&[2, 3, 9]]);
        }
        // Log and Sqrt on positive values.
        let positive =
            GraphTensor::from_f32(vec![2, 5], (1..=10).map(|v| v as f32 * 0.3).collect());
        for u in [UnaryOp::Log, UnaryOp::Sqrt] {
            agrees_on(Op::Unary(u), vec![positive.clone()], None);
        }
        agrees_on(
            Op::Binary(BinaryOp::Pow),
            vec![positive.clone(), tensor(&[5], 3)],
            None,
        );
        for b in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Max,
            BinaryOp::Min,
            BinaryOp::PRelu,
        ] {
            agrees_with_reference(Op::Binary(b), &[&[2, 3, 4], &[3, 1]]);
        }
        agrees_on(
            Op::Binary(BinaryOp::Div),
            vec![tensor(&[2, 5], 1), positive],
            None,
        );
        // A scalar operand.
        agrees_with_reference(Op::Binary(BinaryOp::Mul), &[&[4, 9], &[]]);
    }

    #[test]
    fn movement_ops_match_the_reference_executor() {
        agrees_with_reference(
            Op::Transpose(Transpose {
                perm: vec![2, 0, 1],
            }),
            &[&[2, 3, 4]],
        );
        agrees_with_reference(
            Op::Concat(Concat { axis: 1 }),
            &[&[2, 3, 2], &[2, 1, 2], &[2, 4, 2]],
        );
        agrees_with_reference(
            Op::Slice(Slice {
                axes: vec![
                    SliceAxis {
                        axis: 0,
                        start: 3,
                        end: -1,
                        step: -2,
                    },
                    SliceAxis {
                        axis: 1,
                        start: 1,
                        end: 5,
                        step: 1,
                    },
                ],
            }),
            &[&[4, 6]],
        );
        agrees_with_reference(
            Op::Pad(Pad {
                begins: vec![1, -1],
                ends: vec![0, 2],
                mode: PadMode::Constant(0.5),
            }),
            &[&[3, 4]],
        );
        agrees_with_reference(
            Op::Expand(Expand {
                shape: vec![2, 3, 4],
            }),
            &[&[3, 1]],
        );
        agrees_with_reference(
            Op::Reshape(Reshape {
                shape: vec![3, 2, 4],
            }),
            &[&[2, 12]],
        );
        agrees_on(
            Op::Reshape(Reshape { shape: vec![1, 60] }),
            vec![tensor(&[1, 12, 1, 5], 1)],
            Some((
                vec![Layout::parse("NCHW8c").unwrap()],
                Layout::parse("NC").unwrap(),
            )),
        );
        agrees_with_reference(Op::Identity, &[&[2, 3]]);
        agrees_with_reference(
            Op::Tile(Tile {
                repeats: vec![2, 3],
            }),
            &[&[2, 3]],
        );
    }

    #[test]
    fn normalizations_and_reductions_match_the_reference_executor() {
        for axis in [0, 1, 2] {
            agrees_with_reference(Op::Softmax(Softmax { axis }), &[&[2, 3, 10]]);
            agrees_with_reference(Op::LogSoftmax(LogSoftmax { axis }), &[&[2, 3, 10]]);
        }
        agrees_with_reference(
            Op::LayerNorm(LayerNorm {
                axis: 2,
                epsilon: 1e-5,
                centered: true,
            }),
            &[&[2, 3, 12], &[12], &[12]],
        );
        agrees_with_reference(
            Op::LayerNorm(LayerNorm {
                axis: 1,
                epsilon: 1e-3,
                centered: true,
            }),
            &[&[2, 3, 4], &[3, 4]],
        );
        agrees_with_reference(
            Op::LayerNorm(LayerNorm {
                axis: 0,
                epsilon: 1e-5,
                centered: true,
            }),
            &[&[3, 4], &[4], &[3, 4]],
        );
        agrees_with_reference(
            Op::LayerNorm(LayerNorm {
                axis: 1,
                epsilon: 1e-6,
                centered: false,
            }),
            &[&[2, 3, 4], &[3, 4]],
        );
        agrees_with_reference(
            Op::LayerNorm(LayerNorm {
                axis: 2,
                epsilon: 1e-6,
                centered: false,
            }),
            &[&[2, 3, 4]],
        );
        for kind in [ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max] {
            for keepdims in [false, true] {
                let op = Op::Reduce(Reduce {
                    kind,
                    axes: vec![0, 2],
                    keepdims,
                });
                agrees_with_reference(op, &[&[2, 3, 9]]);
            }
            let all = Op::Reduce(Reduce {
                kind,
                axes: vec![0, 1],
                keepdims: false,
            });
            agrees_with_reference(all, &[&[3, 4]]);
        }
    }

    /// A fused chain against the reference executor run op by op (tolerance as
    /// above). Each link: the op, its own operands, and where the previous result
    /// goes among its operands.
    fn chain_agrees(links: Vec<(Op, Vec<GraphTensor>, Option<usize>)>) -> LoweredOp {
        let mut expected: Option<GraphTensor> = None;
        let mut all_types = vec![];
        let mut feeds = vec![];
        for (op, own, prev) in &links {
            let mut operands = own.clone();
            if let (Some(at), Some(e)) = (prev, &expected) {
                operands.insert(*at, e.clone());
            }
            let types: Vec<ValueType> = operands
                .iter()
                .map(|t| ValueType::new(DType::F32, t.shape.clone()))
                .collect();
            let refs: Vec<&ValueType> = types.iter().collect();
            let out = crate::graph::infer_outputs(op, &refs).unwrap();
            let ins: Vec<&GraphTensor> = operands.iter().collect();
            expected = Some(crate::reference::eval_op(op, &ins, &out).unwrap().remove(0));
            all_types.push(types);
            feeds.extend(own.iter().cloned());
        }
        let chain: Vec<Link> = links
            .iter()
            .zip(&all_types)
            .map(|((op, _, prev), types)| Link {
                op,
                types,
                prev: *prev,
            })
            .collect();
        let l = lower_chain(&chain, None).unwrap();
        let f = &l.func;
        let mut buffers = HashMap::new();
        for (k, t) in feeds.iter().enumerate() {
            if let Some(p) = l.inputs[k] {
                buffers.insert(f.graph.op(f.params[p]).name.clone(), t.data.to_f64());
            }
        }
        let (out, _) = Interpreter::new().run(f, &buffers).unwrap();
        let got = &out[&f.graph.op(f.params[l.output]).name];
        close(got, &expected.unwrap().data.to_f64(), &f.to_text());
        l
    }

    #[test]
    fn chains_fuse_elementwise_epilogues_into_one_loop_nest() {
        // MatMul, bias, Gelu: one function, the product (5 rows a batch, too few
        // for a call of their own) computed by one walk of the contraction kernel
        // into a 2x5x16 scratch, the epilogue inlined.
        let l = chain_agrees(vec![
            (
                Op::MatMul,
                vec![tensor(&[2, 5, 6], 1), tensor(&[6, 16], 2)],
                None,
            ),
            (Op::Binary(BinaryOp::Add), vec![tensor(&[16], 3)], Some(0)),
            (
                Op::Unary(UnaryOp::Gelu { tanh_approx: false }),
                vec![],
                Some(0),
            ),
        ]);
        let x: HashMap<String, Vec<f64>> = [("X", 60), ("W", 96), ("W1", 16)]
            .iter()
            .map(|(n, len)| (n.to_string(), vec![0.5; *len]))
            .collect();
        let (_, stats) = Interpreter::new().run(&l.func, &x).unwrap();
        assert_eq!(stats.max_alloc["Y"], 160, "{}", l.func.to_text());
        assert_eq!(stats.stores["Y2"], 2 * 5 * 16, "{}", l.func.to_text());
        assert!(!stats.stores.contains_key("Y1"), "{}", l.func.to_text());
        // Softmax then a scale, the chained value on the right.
        chain_agrees(vec![
            (
                Op::Softmax(Softmax { axis: 1 }),
                vec![tensor(&[3, 12], 1)],
                None,
            ),
            (
                Op::Binary(BinaryOp::Mul),
                vec![tensor(&[3, 12], 2)],
                Some(1),
            ),
        ]);
        // Convolution with bias, then Relu.
        chain_agrees(vec![
            (
                Op::Conv(Conv {
                    window: window(3, 1, 1, [1, 1, 1, 1]),
                    group: 1,
                }),
                vec![
                    tensor(&[1, 2, 5, 9], 1),
                    tensor(&[3, 2, 3, 3], 2),
                    tensor(&[3], 3),
                ],
                None,
            ),
            (Op::Unary(UnaryOp::Relu), vec![], Some(0)),
        ]);
    }

    #[test]
    fn chains_refuse_what_they_cannot_fuse() {
        let t = |s: &[usize]| ValueType::new(DType::F32, s.to_vec());
        // Why a Relu of input `x` followed by `then` (`x` chained in) is refused.
        let refusal = |x: &[ValueType], then: Op, then_types: &[ValueType]| {
            let relu = Op::Unary(UnaryOp::Relu);
            chain_compute(&[
                Link {
                    op: &relu,
                    types: x,
                    prev: None,
                },
                Link {
                    op: &then,
                    types: then_types,
                    prev: Some(0),
                },
            ])
            .err()
            .unwrap()
        };
        let softmax = Op::Softmax(Softmax { axis: 1 });
        let e = refusal(&[t(&[4, 8])], softmax, &[t(&[4, 8])]);
        assert!(matches!(e, TirError::Unsupported(_)), "{e}");
        // A binary op that broadcasts the chained [4, 1] to [4, 8].
        let add = Op::Binary(BinaryOp::Add);
        let e = refusal(&[t(&[4, 1])], add, &[t(&[4, 1]), t(&[4, 8])]);
        assert!(e.to_string().contains("broadcasts"), "{e}");
    }

    #[test]
    fn row_statistics_are_computed_per_row() {
        // Softmax over the last axis of [4, 6, 10]: the max and the sum live in one
        // element each, computed inside the output's row loop (not 24-element buffers).
        let t = [ValueType::new(DType::F32, vec![4, 6, 10])];
        let l = lower_op(&Op::Softmax(Softmax { axis: 2 }), &t, None).unwrap();
        let x: HashMap<String, Vec<f64>> =
            HashMap::from([("X".to_string(), tensor(&[4, 6, 10], 1).data.to_f64())]);
        let (_, stats) = Interpreter::new().run(&l.func, &x).unwrap();
        assert_eq!(stats.max_alloc["Max"], 1, "{}", l.func.to_text());
        assert_eq!(stats.max_alloc["Sum"], 1, "{}", l.func.to_text());
        assert!(
            l.func.to_text().contains("parallel"),
            "{}",
            l.func.to_text()
        );
    }

    #[test]
    fn matrix_products_match_the_reference_executor() {
        agrees_with_reference(Op::MatMul, &[&[2, 1, 3, 4], &[3, 4, 9]]);
        agrees_with_reference(Op::MatMul, &[&[4], &[3, 4, 5]]);
        agrees_with_reference(Op::MatMul, &[&[2, 3, 4], &[4]]);
        agrees_with_reference(
            Op::Gemm(Gemm {
                alpha: 0.5,
                beta: 2.0,
                trans_a: true,
                trans_b: true,
            }),
            &[&[4, 3], &[9, 4], &[9]],
        );
    }

    #[test]
    fn blocked_storage_with_padding_is_lowered_and_never_read_in_the_padding() {
        // NCHW8c of 12 channels: the second block is half padding (NaN above).
        let blocked = Layout::parse("NCHW8c").unwrap();
        let x = || tensor(&[1, 12, 3, 5], 1);
        agrees_on(
            Op::Unary(UnaryOp::Sigmoid),
            vec![x()],
            Some((vec![blocked.clone()], blocked.clone())),
        );
        agrees_on(
            Op::Binary(BinaryOp::Add),
            vec![x(), tensor(&[1, 12, 3, 5], 2)],
            Some((vec![blocked.clone(), blocked.clone()], blocked.clone())),
        );
        // Softmax over the blocked axis, read in NCHW8c, written in NHWC.
        agrees_on(
            Op::Softmax(Softmax { axis: 1 }),
            vec![x()],
            Some((vec![blocked], Layout::parse("NHWC").unwrap())),
        );
    }

    #[test]
    fn unsupported_ops_and_nested_blocks_say_so() {
        let e = lower_op(&Op::Where, &[], None).err().unwrap();
        assert!(matches!(e, TirError::Unsupported(_)), "{e}");
        assert!(
            e.to_string().contains("Where has no compute definition"),
            "{e}"
        );
        let t = [ValueType::new(DType::F32, vec![1, 32, 2, 2])];
        let nested = Layout::parse("NCHW8c2c").unwrap();
        let e = lower_op(
            &Op::Unary(UnaryOp::Relu),
            &t,
            Some((std::slice::from_ref(&nested), &nested)),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("nests blocks"), "{e}");
    }
}
