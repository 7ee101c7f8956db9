//! Quantized activations between integer convolutions held as bytes.
//!
//! A requantized convolution output is a value on a grid of bytes, but the
//! float steps keep it as f32: four bytes written per value, then read
//! again by the next integer convolution to stage its input as bytes. Where
//! that convolution alone reads the value, on the grid it was rounded to,
//! the first writes the second's staged input directly (padding included)
//! and the value's slot holds those bytes: a quarter of the memory traffic
//! and no staging pass.

use super::{dataflow, Compiler};
use crate::graph::ValueRef;
use crate::runtime::kernels::conv::algo::ConvKernel;
use crate::runtime::model::Kernel;
use std::collections::HashMap;

impl Compiler<'_> {
    /// Hands every value an integer convolution computes for one integer
    /// convolution alone over as that convolution's staged bytes; the
    /// values now held as bytes, with their slots' lengths in f32 elements.
    pub(super) fn hand_off_bytes(&mut self) -> HashMap<ValueRef, usize> {
        let (readers, producer) = dataflow(self.g, &self.steps);
        let mut held = HashMap::new();
        for reader in 0..self.steps.len() {
            let step = &self.steps[reader];
            let (Kernel::Conv(ConvKernel::Int8(conv)), Some(&v)) =
                (&step.kernel, step.inputs.first())
            else {
                continue;
            };
            let (Some(to), Some(&writer), Some(1)) = (
                conv.staged_input(),
                producer.get(&v),
                readers.get(&v).copied(),
            ) else {
                continue;
            };
            let Kernel::Conv(ConvKernel::Int8(before)) = &mut self.steps[writer].kernel else {
                continue;
            };
            if !before.write_staged(to) {
                continue;
            }
            let len = before.output_len().expect("the output is the staged bytes");
            self.steps[writer].kind.push_str(" -> u8");
            if let Kernel::Conv(ConvKernel::Int8(conv)) = &mut self.steps[reader].kernel {
                conv.read_staged();
            }
            held.insert(v, len);
        }
        held
    }
}
