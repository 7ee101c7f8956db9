//! Quantized activations between integer convolutions held as bytes.
//!
//! A requantized convolution output is a value on a grid of bytes, but the
//! float steps keep it as f32: four bytes written per value, then read
//! again by the next integer convolution to stage its input as bytes. Where
//! integer convolutions alone read the value, on the grid it was rounded
//! to, the first writes their staged input directly (padding included) and
//! the value's slot holds those bytes: a quarter of the memory traffic and
//! no staging pass. Its readers are convolutions that stage it the same
//! way, and convolutions whose fused quantized add reads it as the other
//! operand (a residual block's shortcut, read by the next block's first
//! convolution and by its last, which adds it). Depthwise convolutions
//! write bytes too: their outputs rounded onto the next convolution's
//! (a MobileNet block's depthwise convolution to its project one). Steps that only relabel a
//! value (a transpose the plan made free, as TFLite's channels-last graphs
//! put around every convolution) are looked through: their readers read the
//! value itself, and a relabel left without readers is dropped.

use super::Compiler;
use crate::graph::ValueRef;
use crate::runtime::kernels::conv::algo::ConvKernel;
use crate::runtime::kernels::conv::int8::StagedInput;
use crate::runtime::model::Kernel;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A value, and each step reading it with how it reads it (`None`: not
/// as an integer convolution) and on which input port.
type Readers = (ValueRef, Vec<(usize, Option<Read>, usize)>);

/// How a step reads a value.
#[derive(Clone, Copy, PartialEq)]
enum Read {
    /// As an integer convolution's input (the bytes it stages).
    Staged,
    /// As the other operand of an integer convolution's fused add.
    Residual,
}

impl Compiler<'_> {
    /// Hands every value an integer convolution computes for integer
    /// convolutions alone over as their staged bytes; the values now held
    /// as bytes, with their slots' lengths in f32 elements.
    pub(super) fn hand_off_bytes(&mut self) -> HashMap<ValueRef, usize> {
        // Each value's producing step and readers (step, how), in step order.
        let mut reads: BTreeMap<(usize, usize), Readers> = BTreeMap::new();
        for (step, s) in self.steps.iter().enumerate() {
            for (k, &v) in s.outputs.iter().enumerate() {
                reads.insert((step, k), (v, vec![]));
            }
        }
        let writer_of: HashMap<ValueRef, (usize, usize)> =
            reads.iter().map(|(&w, (v, _))| (*v, w)).collect();
        let (relabels, root_of) = self.relabels();
        for (step, s) in self.steps.iter().enumerate() {
            if relabels.contains(&step) {
                continue;
            }
            for (port, v) in s.inputs.iter().enumerate() {
                let v = root_of.get(v).unwrap_or(v);
                let Some(w) = writer_of.get(v) else { continue };
                let how = match (&s.kernel, port) {
                    (Kernel::Conv(ConvKernel::Int8(_)), 0) => Some(Read::Staged),
                    (Kernel::Conv(ConvKernel::Int8(_)), 1) => Some(Read::Residual),
                    _ => None,
                };
                reads
                    .get_mut(w)
                    .expect("a writer")
                    .1
                    .push((step, how, port));
            }
        }
        let mut held = HashMap::new();
        // In step order: a fused add has decided how it reads its operand
        // (written before it) when its own output is handed off, which
        // needs the operand as bytes (`write_staged`).
        for ((writer, _), (v, readers)) in reads {
            if self.g.outputs().contains(&v) {
                continue;
            }
            let Some(to) = self.shared_staging(writer, &readers) else {
                continue;
            };
            // A depthwise convolution's fused residual is laid out like
            // float outputs.
            let before = &mut self.steps[writer];
            let residual = matches!(before.kernel, Kernel::Depthwise(_)) && before.inputs.len() > 1;
            if residual || !before.kernel.write_staged(to) {
                continue;
            }
            let len = before
                .kernel
                .output_len()
                .expect("the output is the staged bytes");
            before.kind.push_str(" -> u8");
            for (reader, how, port) in readers {
                // It reads the bytes where they are, not through a relabel.
                self.steps[reader].inputs[port] = v;
                let kernel = &mut self.steps[reader].kernel;
                match (how, kernel) {
                    (Some(Read::Staged), Kernel::Conv(ConvKernel::Int8(conv))) => {
                        conv.read_staged()
                    }
                    (_, Kernel::Conv(ConvKernel::Int8(conv))) => {
                        assert!(conv.read_residual_staged(to), "checked to fit")
                    }
                    _ => unreachable!("every reader is an integer convolution"),
                }
            }
            held.insert(v, len);
        }
        // Relabels whose output no kept step reads, last to first (a
        // relabel of a relabel).
        let mut read: HashSet<ValueRef> = self.g.outputs().iter().copied().collect();
        let mut kept = vec![true; self.steps.len()];
        for (step, s) in self.steps.iter().enumerate().rev() {
            kept[step] = !relabels.contains(&step) || read.contains(&s.outputs[0]);
            if kept[step] {
                read.extend(s.inputs.iter().copied());
            }
        }
        let mut kept = kept.into_iter();
        self.steps
            .retain(|_| kept.next().expect("one flag per step"));
        held
    }

    /// The steps that only relabel a value computed by a step: one input,
    /// their output the input's elements as they are (no graph output);
    /// and each such output's value before every relabel.
    fn relabels(&self) -> (HashSet<usize>, HashMap<ValueRef, ValueRef>) {
        let computed: HashSet<ValueRef> =
            self.steps.iter().flat_map(|s| s.outputs.clone()).collect();
        let mut relabels = HashSet::new();
        let mut root_of: HashMap<ValueRef, ValueRef> = HashMap::new();
        for (step, s) in self.steps.iter().enumerate() {
            let ([x], [y]) = (&s.inputs[..], &s.outputs[..]) else {
                continue;
            };
            let numel = |v: &ValueRef| self.g.value_type(*v).numel();
            let same = s.kernel.view_offset() == Some(0) && numel(x) == numel(y);
            if same && computed.contains(x) && !self.g.outputs().contains(y) {
                let root = root_of.get(x).copied().unwrap_or(*x);
                root_of.insert(*y, root);
                relabels.insert(step);
            }
        }
        (relabels, root_of)
    }

    /// The staged bytes every reader of the value `writer` computes can
    /// read: the staged input of those that read it as input (one, the same
    /// for all), else compact bytes, which those adding it fit; `None`
    /// where any reader reads floats.
    fn shared_staging(
        &self,
        writer: usize,
        readers: &[(usize, Option<Read>, usize)],
    ) -> Option<StagedInput> {
        if readers.is_empty() {
            return None;
        }
        let conv = |step: usize| match &self.steps[step].kernel {
            Kernel::Conv(ConvKernel::Int8(c)) => Some(c),
            _ => None,
        };
        let mut to: Option<StagedInput> = None;
        for &(step, how, _) in readers {
            if how? == Read::Staged {
                let staged = conv(step)?.staged_input()?;
                to = Some(match to {
                    Some(t) => t.shared_with(&staged)?,
                    None => staged,
                });
            }
        }
        let to = match to {
            Some(to) => to,
            None => conv(writer)?.compact_output()?,
        };
        let fits = |&(step, how, _): &(usize, Option<Read>, usize)| {
            how != Some(Read::Residual) || conv(step).is_some_and(|c| c.residual_fits(&to))
        };
        readers.iter().all(fits).then_some(to)
    }
}

impl Kernel {
    /// Writes the outputs as `to`, where the kernel can; whether it will.
    fn write_staged(&mut self, to: StagedInput) -> bool {
        match self {
            Kernel::Conv(ConvKernel::Int8(c)) => c.write_staged(to),
            Kernel::Depthwise(d) => d.write_staged(to),
            _ => false,
        }
    }

    /// Elements (f32) of the output slot where the outputs are bytes.
    fn output_len(&self) -> Option<usize> {
        match self {
            Kernel::Conv(ConvKernel::Int8(c)) => c.output_len(),
            Kernel::Depthwise(d) => d.output_len(),
            _ => None,
        }
    }
}
