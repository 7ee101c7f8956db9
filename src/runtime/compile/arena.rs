//! The memory plan: every f32 intermediate gets a range of one arena that no
//! value alive at the same time shares; constants and other values get slots of
//! their own.

use super::Compiler;
use crate::graph::{DType, GraphError, ValueRef};
use crate::runtime::{CompiledModel, RuntimeError, Slot, Step};
use std::collections::HashMap;
use std::sync::Mutex;

impl Compiler<'_> {
    /// Gives every value a slot: constants and non-f32 values their own, f32
    /// intermediates an arena range that no value alive at the same time shares.
    pub(super) fn plan_memory(
        self,
        pool: rayon::ThreadPool,
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
                    work: p.work,
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
