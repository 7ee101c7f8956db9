//! The memory plan: every f32 intermediate gets a range of one arena that no
//! value alive at the same time shares; constants and other values get slots of
//! their own.

use super::Compiler;
use crate::core::par;
use crate::fusion;
use crate::graph::{DType, Graph, GraphError, NodeId, Op, ValueRef};
use crate::layout::Layout;
use crate::ops::Concat;
use crate::runtime::measure::roofline::StepWork;
use crate::runtime::model::{Kernel, Slot, Step};
use crate::runtime::storage::Storage;
use crate::runtime::{CompiledModel, RuntimeError};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

impl Compiler<'_> {
    /// Gives every value a slot: constants and non-f32 values their own, f32
    /// intermediates an arena range that no value alive at the same time
    /// shares, of `bytes[v]` elements for the values held as bytes.
    pub(super) fn plan_memory(
        mut self,
        pool: Arc<par::Pool>,
        bytes: &HashMap<ValueRef, usize>,
    ) -> Result<CompiledModel, RuntimeError> {
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
        let mut arena = Placement::default();
        // f32 graph inputs are read where the caller keeps them: no copy in.
        for (k, &id) in g.inputs().iter().enumerate() {
            let v = ValueRef::new(id, 0);
            if g.value_type(v).dtype == DType::F32 {
                slots.insert(v, Slot::Input(k));
            }
        }
        // f32 graph outputs computed by a step are written straight into the
        // tensors the run returns: no copy out.
        for (k, v) in g.outputs().iter().enumerate() {
            if g.value_type(*v).dtype == DType::F32 && !slots.contains_key(v) {
                slots.insert(*v, Slot::Output(k));
            }
        }
        // Concats and pads computed in place: their inputs live inside their
        // output; a pad step is left with its fill.
        let (mut within, mut placed_steps, fills) = self.placed_in_outputs(&slots);
        for i in fills {
            self.keep_the_fill(i);
        }
        self.place_views(bytes, &slots, &mut within, &mut placed_steps);
        for (member, (root, _)) in &within {
            let m = range[member];
            let r = range
                .get_mut(root)
                .expect("a concat output has a live range");
            *r = (r.0.min(m.0), r.1.max(m.1));
        }
        // Every arena request in step order: the values a step defines, then its
        // working memory (live during that step only).
        let mut requests: Vec<(Option<ValueRef>, usize, usize, usize)> = vec![];
        let mut scratch: Vec<Option<Slot>> = vec![None; self.steps.len()];
        for v in order {
            let ty = g.value_type(v);
            if slots.contains_key(&v) || within.contains_key(&v) {
                continue;
            }
            if ty.dtype != DType::F32 {
                slots.insert(v, Slot::Boxed(boxes));
                boxes += 1;
                continue;
            }
            let (first, last) = range[&v];
            let len = arena_elements(g, bytes, v);
            requests.push((Some(v), len, first, last));
        }
        for (i, p) in self.steps.iter().enumerate() {
            if let len @ 1.. = p.kernel.scratch_len() {
                requests.push((None, len, i, i));
            }
        }
        // Definition order (stable: a step's values before its scratch).
        requests.sort_by_key(|r| (r.2, r.0.is_none()));
        // The earliest step any request from here on is alive in: values that
        // died before it can be forgotten.
        let mut horizon = vec![usize::MAX; requests.len() + 1];
        for k in (0..requests.len()).rev() {
            horizon[k] = horizon[k + 1].min(requests[k].2);
        }
        for (k, &(v, len, first, last)) in requests.iter().enumerate() {
            let offset = arena.place(len, first, last, horizon[k]);
            let slot = Slot::Arena { offset, len };
            match v {
                Some(v) => {
                    slots.insert(v, slot);
                }
                None => scratch[first] = Some(slot),
            }
        }
        for (member, (root, offset)) in &within {
            let Some(&Slot::Arena { offset: base, .. }) = slots.get(root) else {
                unreachable!("a concat placed in place has an arena output")
            };
            let len = arena_elements(g, bytes, *member);
            slots.insert(
                *member,
                Slot::Arena {
                    offset: base + offset,
                    len,
                },
            );
        }
        self.check_budget(arena.len, &slots)?;
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
            .zip(scratch)
            .enumerate()
            .filter(|(i, _)| !placed_steps.contains(i))
            .map(|(_, (p, scratch))| {
                Ok(Step {
                    scratch,
                    input_types: p.inputs.iter().map(|v| g.value_type(*v).clone()).collect(),
                    inputs: p.inputs.iter().map(slot).collect::<Result<_, _>>()?,
                    outputs: p.outputs.iter().map(slot).collect::<Result<_, _>>()?,
                    storage: (p.outputs.iter())
                        .map(|&v| match bytes.contains_key(&v) {
                            true => Storage::Bytes,
                            false => Storage::of(g, v),
                        })
                        .collect(),
                    name: p.name,
                    kind: p.kind,
                    spans: p.spans,
                    kernel: p.kernel,
                    work: p.work,
                    measured_ms: p.measured_ms,
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
        Ok(CompiledModel {
            steps,
            consts: self.consts,
            boxes,
            arena_len: arena.len,
            inputs,
            outputs,
            pool,
            scratch: Mutex::default(),
            isa: self.isa,
            conv_algos: self.conv_algos,
            kept_weights: self.kept_weights,
        })
    }

    /// Refuses, before anything is allocated, a model whose run would pass the
    /// memory budget: the arena, the constants, the returned outputs, every
    /// non-f32 value (kept for the whole run) and the largest step run on the
    /// reference executor (its operands and results in f64 and copied: 16 bytes
    /// an element). The error names the layer of the largest value and every
    /// part's bytes.
    fn check_budget(
        &self,
        arena_len: usize,
        slots: &HashMap<ValueRef, Slot>,
    ) -> Result<(), RuntimeError> {
        let g = self.g;
        let bytes = |v: &ValueRef| crate::graph::checked_size_bytes(g.value_type(*v));
        let (mut boxed, mut outputs, mut largest) = (0u64, 0u64, None::<(u64, ValueRef)>);
        for (v, slot) in slots {
            let b = bytes(v).unwrap_or(u64::MAX);
            match slot {
                Slot::Boxed(_) => boxed = boxed.saturating_add(b),
                Slot::Output(_) => outputs = outputs.saturating_add(b),
                Slot::Const(_) | Slot::Input(_) => continue,
                Slot::Arena { .. } => {}
            }
            if largest.is_none_or(|(l, u)| (b, *v) > (l, u)) {
                largest = Some((b, *v));
            }
        }
        let consts = self
            .consts
            .iter()
            .map(|t| (t.numel() as u64).saturating_mul(t.dtype().size_bytes() as u64))
            .fold(0, u64::saturating_add);
        let fallback = self
            .steps
            .iter()
            .filter(|p| matches!(p.kernel, Kernel::Fallback { .. } | Kernel::Control(_)))
            .map(|p| {
                let elements = p.inputs.iter().chain(&p.outputs).map(|v| {
                    let ty = g.value_type(*v);
                    crate::core::checked_numel(&ty.shape).map_or(u64::MAX, |n| n as u64)
                });
                elements.fold(0, u64::saturating_add).saturating_mul(16)
            })
            .max()
            .unwrap_or(0);
        let arena = (arena_len as u64).saturating_mul(4);
        let total = [arena, consts, outputs, boxed, fallback]
            .into_iter()
            .fold(0, u64::saturating_add);
        let f = crate::graph::format_bytes;
        let parts = format!(
            "arena {}, constants {}, outputs {}, non-f32 values {}, reference fallback {}",
            f(arena),
            f(consts),
            f(outputs),
            f(boxed),
            f(fallback)
        );
        let Err(message) =
            crate::core::budget::check(&format!("running the model ({parts})"), total)
        else {
            return Ok(());
        };
        Err(RuntimeError::Graph(match largest {
            Some((b, v)) => GraphError::at(
                &g.node(v.node).spans,
                format!(
                    "{message}; its largest value is '{}' ({})",
                    g.value(v).name,
                    f(b)
                ),
            ),
            None => GraphError::Graph(message.to_string()),
        }))
    }

    /// The concats and pads whose inputs can be computed straight into their
    /// slice of the output, so the concat itself moves nothing and the pad
    /// only writes its fill: each such input maps to (the value whose buffer
    /// holds it, its element offset there); the concat steps (by index) are
    /// dropped and the pad steps (the last set) keep their fill. Nested
    /// placements (DenseNet's growing feature map) resolve to the outermost
    /// one, taken first. An input with a slot of its own (a graph input or
    /// output, a constant), an input used twice, or an input already inside
    /// another placement keeps the copy.
    #[allow(clippy::type_complexity)]
    fn placed_in_outputs(
        &self,
        taken: &HashMap<ValueRef, Slot>,
    ) -> (
        HashMap<ValueRef, (ValueRef, usize)>,
        HashSet<usize>,
        Vec<usize>,
    ) {
        let g = self.g;
        let mut within: HashMap<ValueRef, (ValueRef, usize)> = HashMap::new();
        let (mut placed, mut fills) = (HashSet::new(), vec![]);
        for (i, p) in self.steps.iter().enumerate().rev() {
            let [out] = p.outputs[..] else { continue };
            if p.inputs != g.node_inputs(out.node) {
                continue;
            }
            // A gather with nothing to fill is a copy: `place_views` takes it.
            let placed_input = match (&p.kernel, &p.inputs[..]) {
                (Kernel::Gather(gather), [x]) if gather.filled() > 0 => {
                    gather.placed_input(g.value_type(*x).numel())
                }
                _ => None,
            };
            let (offsets, fill) = match (concat_offsets(g, out.node), placed_input) {
                (Some(offsets), _) => (offsets, false),
                (None, Some(k)) => (vec![k], true),
                (None, None) => continue,
            };
            let (root, base) = within.get(&out).copied().unwrap_or((out, 0));
            let distinct: HashSet<&ValueRef> = p.inputs.iter().collect();
            let free = |u: &ValueRef| {
                !taken.contains_key(u)
                    && !within.contains_key(u)
                    && g.value_type(*u).dtype == DType::F32
            };
            if taken.contains_key(&root)
                || distinct.len() != p.inputs.len()
                || !p.inputs.iter().all(free)
            {
                continue;
            }
            for (u, offset) in p.inputs.iter().zip(offsets) {
                within.insert(*u, (root, base + offset));
            }
            if fill {
                fills.push(i);
            } else {
                placed.insert(i);
            }
        }
        (within, placed, fills)
    }

    /// Step `i`, a gather whose input is now computed inside its output,
    /// left to write the fill around it.
    fn keep_the_fill(&mut self, i: usize) {
        let p = &mut self.steps[i];
        let Kernel::Gather(gather) = &p.kernel else {
            unreachable!("only gathers keep their fill")
        };
        let fill = gather.fill_only();
        p.work = StepWork {
            bytes: 4 * fill.filled() as u64,
            flops: 0.0,
        };
        p.kernel = Kernel::Gather(fill);
        p.inputs.clear();
        p.kind = format!("{} (fill)", self.g.node(p.outputs[0].node).op.kind_name());
    }
}

impl Compiler<'_> {
    /// Steps whose output is a contiguous piece of their input's buffer (a
    /// reshape, a transpose the plan made a relabelling, a slice or split
    /// along the outermost stored axis) move nothing: the output becomes a view
    /// into the input's buffer (its root's, when the input is itself placed
    /// inside another value) and the step is dropped. When the output already
    /// lives inside another value (a concat's or a pad's) and is the whole
    /// input as it is, the input goes there instead (and what was placed in
    /// it with it): a TFLite model's transpose between a convolution and a
    /// concat moves nothing. A graph input, output or constant on either side
    /// keeps the copy. `bytes` are the lengths of the values held as bytes.
    fn place_views(
        &self,
        bytes: &HashMap<ValueRef, usize>,
        taken: &HashMap<ValueRef, Slot>,
        within: &mut HashMap<ValueRef, (ValueRef, usize)>,
        placed: &mut HashSet<usize>,
    ) {
        let g = self.g;
        for (i, p) in self.steps.iter().enumerate() {
            let ([src], [out]) = (&p.inputs[..], &p.outputs[..]) else {
                continue;
            };
            let Some(offset) = p.kernel.view_offset() else {
                continue;
            };
            let f32s = [src, out]
                .iter()
                .all(|v| g.value_type(**v).dtype == DType::F32);
            if !f32s || placed.contains(&i) || taken.contains_key(out) {
                continue;
            }
            if let Some(&(root, base)) = within.get(out) {
                // Only a copy of the whole input fits where the output lives.
                let whole =
                    offset == 0 && arena_elements(g, bytes, *src) == arena_elements(g, bytes, *out);
                let free = !taken.contains_key(src) && !within.contains_key(src);
                if whole && free {
                    for at in within.values_mut().filter(|at| at.0 == *src) {
                        *at = (root, base + at.1);
                    }
                    within.insert(*src, (root, base));
                    placed.insert(i);
                }
                continue;
            }
            let (root, base) = match within.get(src) {
                Some(&at) => at,
                None if !taken.contains_key(src) => (*src, 0),
                None => continue,
            };
            within.insert(*out, (root, base + offset));
            placed.insert(i);
        }
    }
}

/// How many arena elements value `v` takes: its `bytes` length where it is
/// held as bytes, else one per element.
fn arena_elements(g: &Graph, bytes: &HashMap<ValueRef, usize>, v: ValueRef) -> usize {
    bytes
        .get(&v)
        .copied()
        .unwrap_or_else(|| g.value_type(v).numel())
}

/// The element offset of each input of a concat inside its output, when the
/// output's buffer is the inputs' buffers one after another: all share one
/// layout, nothing is padded, and every physical axis outside the concat axis's
/// outermost digit has extent 1 (NCHW or NCHW16c along C with batch 1, each
/// part a whole number of blocks). `None` for any other node.
fn concat_offsets(g: &Graph, id: NodeId) -> Option<Vec<usize>> {
    let Op::Concat(Concat { axis }) = fusion::inner(g, id).0 else {
        return None;
    };
    let (layout, _) = fusion::output_layout(g, id)?;
    let parts: Vec<(Layout, Vec<usize>)> = (0..g.node_inputs(id).len())
        .map(|i| fusion::input_layout(g, id, i))
        .collect::<Option<_>>()?;
    let mut logical = parts.first()?.1.clone();
    logical[*axis] = parts.iter().map(|(_, s)| s[*axis]).sum();
    let unpadded = |shape: &[usize]| layout.padded_axes(shape).is_ok_and(|p| p.is_empty());
    if parts.iter().any(|(l, s)| *l != layout || !unpadded(s)) || !unpadded(&logical) {
        return None;
    }
    let physical = layout.physical_shape(&logical).ok()?;
    let first = layout.order().iter().position(|d| d.axis == *axis)?;
    if physical[..first].iter().any(|&e| e != 1) {
        return None;
    }
    let mut offset = 0;
    Some(
        parts
            .iter()
            .map(|(_, s)| {
                let at = offset;
                offset += s.iter().product::<usize>();
                at
            })
            .collect(),
    )
}

/// Arena ranges given to values by their live ranges (in steps), placed in
/// the order they are defined: each at the first offset where its length is
/// free over its whole range. Only the values still alive are kept (by offset,
/// and by last step to forget them), and the first-fit search looks at no more
/// than [`FIRST_FIT_SCAN`] of them before taking the top of the live set: a
/// placement costs at most that, so even a graph whose live set grows to 100k
/// values (a Max of 100k inputs) is placed in time linear in its values.
#[derive(Default)]
struct Placement {
    /// (offset, id) -> (len, first, last) of the values placed that may still
    /// overlap one to come.
    live: BTreeMap<(usize, usize), (usize, usize, usize)>,
    /// (last, offset, id) of the same values, soonest dead first.
    expiry: BinaryHeap<Reverse<(usize, usize, usize)>>,
    /// How many live values end at each offset + len: the top of the live set.
    ends: BTreeMap<usize, usize>,
    /// Values placed so far (the next id).
    placed: usize,
    /// Elements of the arena.
    len: usize,
}

/// Live values the first-fit search looks at before it takes the top of the
/// live set instead (only graphs with more values alive at once than this place
/// differently).
const FIRST_FIT_SCAN: usize = 4096;

/// Arena offsets are 64-byte aligned (16 f32).
fn aligned(offset: usize) -> usize {
    offset.div_ceil(16) * 16
}

impl Placement {
    /// The first offset where `len` elements are free over steps first..=last
    /// (64-byte aligned relative to the arena), now taken. No later request is
    /// alive before step `horizon`.
    fn place(&mut self, len: usize, first: usize, last: usize, horizon: usize) -> usize {
        while let Some(&Reverse((dies, at, id))) = self.expiry.peek() {
            if dies >= horizon {
                break;
            }
            self.expiry.pop();
            if let Some((l, ..)) = self.live.remove(&(at, id)) {
                if let Some(n) = self.ends.get_mut(&(at + l)) {
                    *n -= 1;
                    if *n == 0 {
                        self.ends.remove(&(at + l));
                    }
                }
            }
        }
        let mut offset = 0;
        for (scanned, (&(o, _), &(l, f, t))) in self.live.iter().enumerate() {
            if scanned == FIRST_FIT_SCAN {
                let top = self.ends.keys().next_back().copied().unwrap_or(0);
                offset = offset.max(aligned(top));
                break;
            }
            if f > last || t < first {
                continue;
            }
            if offset + len <= o {
                break;
            }
            offset = offset.max(aligned(o + l));
        }
        let id = self.placed;
        self.placed += 1;
        self.live.insert((offset, id), (len, first, last));
        self.expiry.push(Reverse((last, offset, id)));
        *self.ends.entry(offset + len).or_default() += 1;
        self.len = self.len.max(offset + len);
        offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values alive at the same step never share elements, whether placed by
    /// the first-fit search or, past `FIRST_FIT_SCAN` live values, at the top;
    /// and a value placed after the dead are forgotten reuses their memory.
    #[test]
    fn values_alive_together_never_overlap() {
        // (len, first, last): 6,000 values alive to the end (a Max of many
        // inputs), with short-lived ones in between, in definition order.
        let mut requests = vec![];
        for i in 0..6_000 {
            requests.push((1 + i % 7 * 5, i, 7_000));
            if i % 3 == 0 {
                requests.push((40, i, i + 2));
            }
        }
        requests.sort_by_key(|r| r.1);
        let mut horizon = vec![usize::MAX; requests.len() + 1];
        for k in (0..requests.len()).rev() {
            horizon[k] = horizon[k + 1].min(requests[k].1);
        }
        let mut arena = Placement::default();
        let placed: Vec<(usize, usize, usize, usize)> = requests
            .iter()
            .enumerate()
            .map(|(k, &(len, first, last))| {
                let at = arena.place(len, first, last, horizon[k]);
                assert_eq!(at % 16, 0);
                (at, len, first, last)
            })
            .collect();
        // Sweep by step: the values alive at each step, sorted by offset, are disjoint.
        for step in (0..6_000).step_by(97) {
            let mut alive: Vec<_> = placed
                .iter()
                .filter(|p| p.2 <= step && step <= p.3)
                .collect();
            alive.sort();
            for w in alive.windows(2) {
                assert!(
                    w[0].0 + w[0].1 <= w[1].0,
                    "{:?} and {:?} overlap",
                    w[0],
                    w[1]
                );
            }
        }
        let total: usize = requests.iter().filter(|r| r.2 == 7_000).map(|r| r.0).sum();
        assert!(arena.len >= total && arena.len < 2 * total + 6_000 * 16);
    }
}
