//! Candidate layouts: the storage layouts each value may take and each op can
//! run in, and the table interning the layouts a plan mentions.
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

use super::cost::{op_cost, CostModel};
use super::relabel::{relabelled, relabelled_back};
use super::target::TargetFamily;
use super::{Layout, LayoutError};
use crate::graph::{Graph, NodeId, Op, ValueRef, ValueType};
pub use crate::ops::LayoutRole as OpKind;
use std::collections::{BTreeMap, HashMap};

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
    family: TargetFamily,
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
    // Integers and booleans are boxed row-major tensors at run time: the
    // kernels producing them (typed loops, gathers, reboxes) write row-major
    // only, and one in another layout would run on the reference executor. A
    // cast from a laid-out float converts in place, so it keeps its options.
    if !matches!(n.op, Op::Cast(_)) && outs.iter().any(|t| !t.dtype.is_float()) {
        options.truncate(1);
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
}
