//! Quantized residual adds computed in the epilogue of the integer
//! convolution before them.
//!
//! A residual block of a quantized model ends in a convolution rounded onto
//! a grid and an add of it and the shortcut rounded onto another: two steps,
//! the convolution's output written as floats and read back by the add.
//! Where the convolution is an integer one and that add alone reads it, the
//! convolution reads the shortcut as its residual and computes the add from
//! its integers, as the add's step would, bit for bit.

use super::{dataflow, Compiler, Pending};
use crate::runtime::kernels::conv::algo::ConvKernel;
use crate::runtime::model::Kernel;

impl Compiler<'_> {
    /// Folds every quantized add whose operand an integer convolution alone
    /// computes into that convolution's step, which then runs where the add
    /// did (both operands are computed by then).
    pub(super) fn fuse_quantized_adds(&mut self) {
        let (readers, producer) = dataflow(self.g, &self.steps);
        // (convolution step, add step, the add's other operand)
        let mut fused = vec![];
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
                let Some(&conv_step) = producer.get(&v) else {
                    continue;
                };
                if readers.get(&v) != Some(&1) || self.steps[conv_step].inputs.len() != 1 {
                    continue;
                }
                let Kernel::Conv(ConvKernel::Int8(conv)) = &mut self.steps[conv_step].kernel else {
                    continue;
                };
                if conv.fuse_add(add, first) {
                    fused.push((conv_step, add_step, other));
                    break;
                }
            }
        }
        if fused.is_empty() {
            return;
        }
        let mut steps: Vec<Option<Pending>> = self.steps.drain(..).map(Some).collect();
        for (conv_step, add_step, other) in fused {
            let (Some(mut conv), Some(add)) = (steps[conv_step].take(), steps[add_step].take())
            else {
                unreachable!("each step joins one fusion")
            };
            conv.inputs.push(other);
            conv.outputs = add.outputs;
            conv.kind = format!("{}+{}", conv.kind, add.kind);
            conv.spans.extend(add.spans);
            steps[add_step] = Some(conv);
        }
        self.steps = steps.into_iter().flatten().collect();
    }
}
