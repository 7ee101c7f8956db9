//! Quantized ops computed in the epilogue of the integer convolution before
//! them.
//!
//! A quantized convolution rounds its output onto a grid, and the step
//! after it often reads that value alone: two steps, the convolution's
//! output written as floats and read back. Where the convolution is an
//! integer one (dense or depthwise), that step joins its epilogue, bit for
//! bit as it computed:
//! - a quantized residual add of the output and the shortcut (the end of a
//!   residual block), computed from the convolution's integers;
//! - an elementwise chain of the output alone that runs as a table of its
//!   results at the grid's values (a swish, hard-swish or sigmoid and the
//!   rounding after it), looked up at the convolution's integers. Its own
//!   step read and wrote each value at half the copy bandwidth: 45% of a
//!   full-integer EfficientNetB0's time.

use super::{dataflow, Compiler, Pending};
use crate::core::merge_spans;
use crate::graph::ValueRef;
use crate::runtime::kernels::conv::algo::ConvKernel;
use crate::runtime::model::Kernel;
use std::collections::HashMap;

/// A step joined to the convolution before it: (convolution step, joined
/// step, the joined step's other operand).
type Joined = (usize, usize, Option<ValueRef>);

/// The step computing `v`, when `v` has no other reader (nor is a graph
/// output) and the step reads one input (no residual): a step that may
/// take in the one reading `v`.
fn joinable_producer(
    steps: &[Pending],
    readers: &HashMap<ValueRef, usize>,
    producer: &HashMap<ValueRef, usize>,
    v: ValueRef,
) -> Option<usize> {
    let &step = producer.get(&v)?;
    (readers.get(&v) == Some(&1) && steps[step].inputs.len() == 1).then_some(step)
}

impl Compiler<'_> {
    /// Folds every quantized add whose operand an integer convolution alone
    /// computes into that convolution's step, which then runs where the add
    /// did (both operands are computed by then).
    pub(super) fn fuse_quantized_adds(&mut self) {
        let (readers, producer) = dataflow(self.g, &self.steps);
        let mut joined = vec![];
        for add_step in 0..self.steps.len() {
            let step = &self.steps[add_step];
            let Kernel::Elementwise(e) = &step.kernel else {
                continue;
            };
            let Some((add, a, b)) = e.as_quantized_add() else {
                continue;
            };
            let (va, vb) = (step.inputs[a], step.inputs[b]);
            for (v, other, first) in [(va, vb, true), (vb, va, false)] {
                let Some(conv_step) = joinable_producer(&self.steps, &readers, &producer, v) else {
                    continue;
                };
                let Kernel::Conv(ConvKernel::Int8(conv)) = &mut self.steps[conv_step].kernel else {
                    continue;
                };
                if conv.fuse_add(add, first) {
                    joined.push((conv_step, add_step, Some(other)));
                    break;
                }
            }
        }
        self.join(joined);
    }

    /// Folds every table (an elementwise chain of one quantized value, read
    /// as stored) whose value an integer convolution alone computes, with
    /// no residual, into that convolution's step.
    pub(super) fn fuse_tables(&mut self) {
        let (readers, producer) = dataflow(self.g, &self.steps);
        let mut joined = vec![];
        for table_step in 0..self.steps.len() {
            let step = &self.steps[table_step];
            let Kernel::Elementwise(e) = &step.kernel else {
                continue;
            };
            let (Some((grid, results)), &[v]) = (e.as_table(), &step.inputs[..]) else {
                continue;
            };
            let Some(conv_step) = joinable_producer(&self.steps, &readers, &producer, v) else {
                continue;
            };
            let results = results.clone();
            let fused = match &mut self.steps[conv_step].kernel {
                Kernel::Conv(ConvKernel::Int8(conv)) => conv.fuse_table(grid, &results),
                Kernel::Depthwise(d) => d.fuse_table(grid, &results),
                _ => false,
            };
            if fused {
                joined.push((conv_step, table_step, None));
            }
        }
        self.join(joined);
    }

    /// Merges each joined step into its convolution's, which takes the
    /// joined step's place (its operands are computed by then) and output.
    fn join(&mut self, joined: Vec<Joined>) {
        if joined.is_empty() {
            return;
        }
        let mut steps: Vec<Option<Pending>> = self.steps.drain(..).map(Some).collect();
        for (conv_step, later_step, other) in joined {
            let (Some(mut conv), Some(later)) = (steps[conv_step].take(), steps[later_step].take())
            else {
                unreachable!("each step joins one fusion")
            };
            conv.inputs.extend(other);
            conv.outputs = later.outputs;
            conv.kind = format!("{}+{}", conv.kind, later.kind);
            conv.spans = merge_spans([&conv.spans[..], &later.spans[..]]);
            steps[later_step] = Some(conv);
        }
        self.steps = steps.into_iter().flatten().collect();
    }
}
