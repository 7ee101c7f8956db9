//! One step of a run: its kernel called on views of the slots it reads and
//! writes.

use super::kernels::{elementwise, gather, pool, resize, KernelError};
use super::model::{CompiledModel, Kernel, Slot, Step};
use super::RuntimeError;
use crate::graph::{DType, Tensor, TensorData, ValueType};

/// Fills a slot of the arena from a slice, for the safe paths.
pub(super) struct Buffers<'a> {
    pub(super) arena: *mut f32,
    pub(super) arena_len: usize,
    pub(super) consts: &'a [Tensor],
    pub(super) inputs: &'a [(*const f32, usize)],
    pub(super) outputs: &'a [(*mut f32, usize)],
    pub(super) boxes: &'a mut [Option<Tensor>],
}

impl Buffers<'_> {
    /// A read view of an f32 slot.
    ///
    /// # Safety
    /// No live mutable view may overlap it; the memory plan guarantees this for
    /// a step's inputs and outputs.
    pub(super) unsafe fn read(&self, s: Slot) -> &[f32] {
        match s {
            Slot::Arena { offset, len } => {
                assert!(offset + len <= self.arena_len);
                std::slice::from_raw_parts(self.arena.add(offset), len)
            }
            Slot::Const(i) => match &*self.consts[i].data {
                TensorData::F32(v) => v,
                // Steps take non-f32 constants as tensors (`tensor`), never as f32.
                _ => &[],
            },
            Slot::Input(i) => {
                let (ptr, len) = self.inputs[i];
                std::slice::from_raw_parts(ptr, len)
            }
            Slot::Output(k) => {
                let (ptr, len) = self.outputs[k];
                std::slice::from_raw_parts(ptr, len)
            }
            Slot::Boxed(_) => unreachable!("native kernels only read f32 slots"),
        }
    }

    /// # Safety
    /// As `read`: the slot must not overlap any other view in use.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn write(&self, s: Slot) -> &mut [f32] {
        match s {
            Slot::Arena { offset, len } => {
                assert!(offset + len <= self.arena_len);
                std::slice::from_raw_parts_mut(self.arena.add(offset), len)
            }
            Slot::Output(k) => {
                let (ptr, len) = self.outputs[k];
                std::slice::from_raw_parts_mut(ptr, len)
            }
            _ => unreachable!("native kernels only write arena and output slots"),
        }
    }

    pub(super) fn tensor(&self, s: Slot, ty: &ValueType) -> Tensor {
        match s {
            Slot::Arena { .. } | Slot::Output(_) => {
                Tensor::from_f32(ty.shape.clone(), unsafe { self.read(s) }.to_vec())
            }
            Slot::Const(i) => self.consts[i].clone(),
            Slot::Input(_) => Tensor::from_f32(ty.shape.clone(), unsafe { self.read(s) }.to_vec()),
            Slot::Boxed(i) => self.boxes[i]
                .clone()
                .expect("a boxed value is set before use"),
        }
    }
}

impl CompiledModel {
    pub(super) fn exec(&self, step: &Step, bufs: &mut Buffers) -> Result<(), RuntimeError> {
        let at_node = |message: String| RuntimeError::AtNode {
            spans: step.spans.clone(),
            message,
        };
        let kernel = |source: KernelError| RuntimeError::Kernel {
            spans: step.spans.clone(),
            source,
        };
        // SAFETY (all views below): the memory plan never lets a step's output
        // overlap its inputs, and a step's inputs are only read.
        unsafe {
            // The step's input `i`, where it has one (a residual, a parameter,
            // an operand).
            let optional = |i: usize| step.inputs.get(i).map(|&s| bufs.read(s));
            match &step.kernel {
                Kernel::Conv(c) => c.run(
                    bufs.read(step.inputs[0]),
                    optional(1),
                    bufs.write(step.outputs[0]),
                    step.scratch.map_or(&mut [], |s| bufs.write(s)),
                ),
                Kernel::Depthwise(d) => d.run(
                    bufs.read(step.inputs[0]),
                    optional(1),
                    bufs.write(step.outputs[0]),
                ),
                Kernel::Pool(g) => {
                    pool::pool(g, bufs.read(step.inputs[0]), bufs.write(step.outputs[0]))
                }
                Kernel::Resize(g) => {
                    resize::resize(g, bufs.read(step.inputs[0]), bufs.write(step.outputs[0]))
                }
                Kernel::Sampled(s) => s
                    .run(
                        bufs.read(step.inputs[0]),
                        bufs.read(step.inputs[1]),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(kernel)?,
                Kernel::RoiAligned(k) => {
                    let batch = bufs.tensor(step.inputs[2], &step.input_types[2]);
                    k.run(
                        bufs.read(step.inputs[0]),
                        bufs.read(step.inputs[1]),
                        &batch.data.to_i64(),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(kernel)?
                }
                Kernel::Gather(g) => {
                    let inputs: [&[f32]; gather::MAX_GATHER_INPUTS] =
                        std::array::from_fn(|i| optional(i).unwrap_or(&[]));
                    g.run(&inputs[..step.inputs.len()], bufs.write(step.outputs[0]))
                        .map_err(kernel)?
                }
                Kernel::Dense(d) => d.run(bufs.read(step.inputs[0]), bufs.write(step.outputs[0])),
                Kernel::IntegerDense(c) => c.run(
                    bufs.read(step.inputs[0]),
                    None,
                    bufs.write(step.outputs[0]),
                    step.scratch.map_or(&mut [], |s| bufs.write(s)),
                ),
                Kernel::MatMul(m) => m.run(
                    bufs.read(step.inputs[0]),
                    bufs.read(step.inputs[1]),
                    bufs.write(step.outputs[0]),
                    step.scratch.map_or(&mut [], |s| bufs.write(s)),
                ),
                Kernel::QuantizedMatMul(m) => m
                    .run(
                        bufs.read(step.inputs[0]),
                        bufs.read(step.inputs[1]),
                        bufs.write(step.outputs[0]),
                        step.scratch.map_or(&mut [], |s| bufs.write(s)),
                    )
                    .map_err(kernel)?,
                Kernel::Copy => bufs
                    .write(step.outputs[0])
                    .copy_from_slice(bufs.read(step.inputs[0])),
                Kernel::Picked(r) => {
                    let indices = bufs.tensor(step.inputs[1], &step.input_types[1]);
                    r.run(
                        bufs.read(step.inputs[0]),
                        &indices.data.to_i64(),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(kernel)?
                }
                Kernel::Scatter(k) => {
                    let indices = bufs.tensor(step.inputs[1], &step.input_types[1]);
                    k.run_f32(
                        bufs.read(step.inputs[0]),
                        &indices.data.to_i64(),
                        bufs.read(step.inputs[2]),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(kernel)?
                }
                Kernel::Scattered(k) => {
                    on_tensors(step, bufs, |xs| k.run_tensors(xs[0], xs[1], xs[2]))
                        .map_err(kernel)?
                }
                Kernel::Elementwise(k) => {
                    let operands: [&[f32]; elementwise::MAX_OPERANDS] =
                        std::array::from_fn(|i| optional(i).unwrap_or(&[]));
                    k.run(&operands[..step.inputs.len()], bufs.write(step.outputs[0]))
                        .map_err(kernel)?
                }
                Kernel::Select(k) => {
                    let mask = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    let TensorData::Bool(mask) = &*mask.data else {
                        return Err(at_node("the Where condition is not boolean".into()));
                    };
                    k.run(
                        mask,
                        bufs.read(step.inputs[1]),
                        bufs.read(step.inputs[2]),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(kernel)?
                }
                Kernel::Normalize(k) => k
                    .run(
                        bufs.read(step.inputs[0]),
                        optional(1),
                        optional(2),
                        bufs.write(step.outputs[0]),
                    )
                    .map_err(kernel)?,
                Kernel::QuantizedSoftmax(k) => k
                    .run(bufs.read(step.inputs[0]), bufs.write(step.outputs[0]))
                    .map_err(kernel)?,
                Kernel::ToF32 => {
                    let t = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    t.data.write_f32s(bufs.write(step.outputs[0]))
                }
                Kernel::Typed(k) => on_tensors(step, bufs, |xs| k.run(xs)).map_err(kernel)?,
                Kernel::Scanned(k) => on_tensors(step, bufs, |xs| k.run(xs[0])).map_err(kernel)?,
                Kernel::Reduced(k) => on_tensors(step, bufs, |xs| k.run(xs[0])).map_err(kernel)?,
                Kernel::Moved(k) => on_tensors(step, bufs, |xs| k.run(xs)).map_err(kernel)?,
                Kernel::Gathered(k) => {
                    on_tensors(step, bufs, |xs| k.run(xs[0], xs[1])).map_err(kernel)?
                }
                Kernel::Arg(k) if step.input_types[0].dtype == DType::F32 => {
                    let y = k.run(bufs.read(step.inputs[0])).map_err(kernel)?;
                    store(step, bufs, vec![y])
                }
                Kernel::Arg(k) => {
                    on_tensors(step, bufs, |xs| k.run_integers(xs[0])).map_err(kernel)?
                }
                Kernel::TopK(k) if step.input_types[0].dtype == DType::F32 => {
                    let ys = k.run(bufs.read(step.inputs[0])).map_err(kernel)?;
                    store(step, bufs, ys)
                }
                Kernel::TopK(k) => {
                    let x = step_arguments(step, bufs).remove(0);
                    let ys = k.run_integers(&x).map_err(kernel)?;
                    store(step, bufs, ys)
                }
                Kernel::Cast(cast) => {
                    let t = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    let Slot::Boxed(i) = step.outputs[0] else {
                        unreachable!("non-f32 values are boxed")
                    };
                    bufs.boxes[i] = Some(t.cast_saturating(cast.to, cast.saturate));
                }
                Kernel::BitCast(to) => {
                    let t = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    let y = t.bitcast(*to).map_err(|e| at_node(e.to_string()))?;
                    store(step, bufs, vec![y])
                }
                Kernel::DynamicQuantize(k) => {
                    let y = bufs.write(step.outputs[0]);
                    let x = bufs.read(step.inputs[0]);
                    k.run(&x[..y.len()], y)
                }
                Kernel::NgramCounts(op) => {
                    let x = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    let rows = match x.shape[..] {
                        [rows, _] => rows,
                        _ => 1,
                    };
                    let y = bufs.write(step.outputs[0]);
                    y.copy_from_slice(&op.run(&x.data.to_i64(), rows));
                }
                Kernel::Det(m) => {
                    let mut x: Vec<f64> = bufs
                        .read(step.inputs[0])
                        .iter()
                        .map(|&v| v as f64)
                        .collect();
                    let y = bufs.write(step.outputs[0]);
                    let dets = crate::ops::determinants(&mut x, *m, y.len());
                    for (y, d) in y.iter_mut().zip(dets) {
                        *y = d as f32;
                    }
                }
                Kernel::Rebox(shape) => {
                    let t = bufs.tensor(step.inputs[0], &step.input_types[0]);
                    let Slot::Boxed(i) = step.outputs[0] else {
                        unreachable!("non-f32 values are boxed")
                    };
                    bufs.boxes[i] = Some(t.reshaped(shape.clone()));
                }
                Kernel::Tir(k) => {
                    let input = |i: usize| bufs.read(step.inputs[i]).as_ptr();
                    k.run(input, bufs.write(step.outputs[0]))
                        .map_err(|source| RuntimeError::Step {
                            spans: step.spans.clone(),
                            source,
                        })?
                }
                Kernel::Detection(op) => {
                    let x: Vec<&[f32]> = step.inputs.iter().map(|&s| bufs.read(s)).collect();
                    let shapes: Vec<&[usize]> =
                        step.input_types.iter().map(|t| &t.shape[..]).collect();
                    let results = op.run(&x, &shapes).map_err(|e| at_node(e.to_string()))?;
                    store(step, bufs, results)
                }
                Kernel::Fallback { op, outputs } => {
                    let args = step_arguments(step, bufs);
                    let refs: Vec<&Tensor> = args.iter().collect();
                    let results = crate::reference::eval_op(op, &refs, outputs)
                        .map_err(|e| at_node(e.to_string()))?;
                    store(step, bufs, results)
                }
                Kernel::Control(k) => {
                    let args = step_arguments(step, bufs);
                    let refs: Vec<&Tensor> = args.iter().collect();
                    let results = (k.op.0)
                        .run(&refs, &k.outputs, &mut |i, ins| {
                            let model = &k.subgraphs[i];
                            let declared = model.inputs.iter().map(|(_, ty, _)| ty.dtype);
                            let ins: Vec<Tensor> = (ins.iter().zip(declared))
                                .map(|(t, dtype)| at_interface(t, dtype))
                                .collect();
                            (model.run(&ins))
                                .map_err(|e| crate::graph::OpError::Value(e.to_string()))
                        })
                        .map_err(|e| at_node(e.to_string()))?;
                    let results = (results.iter().zip(&k.outputs))
                        .map(|(t, ty)| at_interface(t, ty.dtype))
                        .collect();
                    store(step, bufs, results)
                }
            }
        }
        Ok(())
    }
}

/// `t` as a value of `dtype` crossing between a graph and the compiled model
/// of one of its subgraphs: a graph stored in f16 computes in f32 inside
/// (`Graph::widened_f16`), and each model rounds to f16 at its own
/// interface, so an f16 value crosses as f32 one way and f16 the other.
/// Every other value crosses as it is.
fn at_interface(t: &Tensor, dtype: DType) -> Tensor {
    match (t.dtype(), dtype) {
        (DType::F32, DType::F16) | (DType::F16, DType::F32) => t.cast(dtype),
        _ => t.clone(),
    }
}

/// The step's inputs as tensors, for the steps that run whole ops on them.
fn step_arguments(step: &Step, bufs: &Buffers) -> Vec<Tensor> {
    (step.inputs.iter())
        .zip(&step.input_types)
        .map(|(s, ty)| bufs.tensor(*s, ty))
        .collect()
}

/// Runs a kernel of whole tensors on the step's inputs and stores its output.
///
/// # Safety
/// As `store`.
unsafe fn on_tensors(
    step: &Step,
    bufs: &mut Buffers,
    kernel: impl FnOnce(&[&Tensor]) -> Result<Tensor, KernelError>,
) -> Result<(), KernelError> {
    let args = step_arguments(step, bufs);
    let refs: Vec<&Tensor> = args.iter().collect();
    let y = kernel(&refs)?;
    store(step, bufs, vec![y]);
    Ok(())
}

/// Writes a step's output tensors into its slots.
///
/// # Safety
/// As `Buffers::write`: no other view of the output slots may be in use.
unsafe fn store(step: &Step, bufs: &mut Buffers, results: Vec<Tensor>) {
    for (t, s) in results.into_iter().zip(&step.outputs) {
        match *s {
            Slot::Arena { .. } | Slot::Output(_) => bufs.write(*s).copy_from_slice(&t.f32s()),
            Slot::Boxed(i) => bufs.boxes[i] = Some(t),
            Slot::Const(_) | Slot::Input(_) => {
                unreachable!("outputs are never constants or inputs")
            }
        }
    }
}
