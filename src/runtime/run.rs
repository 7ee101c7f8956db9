//! Running a compiled model: its inputs checked and placed, its memory reused
//! from the last run, its steps run in order (timed or checked on request),
//! its outputs returned.

use super::check::{first_non_finite, NonFinite};
use super::exec::Buffers;
use super::measure::roofline::StepWork;
use super::model::{CompiledModel, Kernel, Slot};
use super::scratch::{output_buffer, Scratch};
use super::threads::threads_for;
use super::RuntimeError;
use crate::core::par;
use crate::graph::{Tensor, TensorData, ValueType};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One input of a run: a tensor, or f32 elements in row-major order borrowed
/// from the caller (read in place where the input's slot allows).
#[derive(Clone, Copy, Debug)]
pub enum ModelInput<'a> {
    /// A tensor of any element type.
    Tensor(&'a Tensor),
    /// Row-major f32 elements of the given shape.
    F32 {
        /// Extent of every axis.
        shape: &'a [usize],
        /// The elements.
        data: &'a [f32],
    },
}

impl<'a> ModelInput<'a> {
    fn dtype(&self) -> crate::graph::DType {
        match self {
            ModelInput::Tensor(t) => t.dtype(),
            ModelInput::F32 { .. } => crate::graph::DType::F32,
        }
    }

    /// The extent of every axis.
    pub fn shape(&self) -> &'a [usize] {
        match self {
            ModelInput::Tensor(t) => &t.shape,
            ModelInput::F32 { shape, .. } => shape,
        }
    }

    fn len(&self) -> usize {
        match self {
            ModelInput::Tensor(t) => t.data.len(),
            ModelInput::F32 { data, .. } => data.len(),
        }
    }

    fn f32s(&self) -> Cow<'a, [f32]> {
        match self {
            ModelInput::Tensor(t) => t.f32s(),
            ModelInput::F32 { data, .. } => Cow::Borrowed(data),
        }
    }

    /// An owned tensor, for the slots that hold one (a copy of borrowed elements).
    pub fn to_tensor(self) -> Tensor {
        match self {
            ModelInput::Tensor(t) => t.clone(),
            ModelInput::F32 { shape, data } => Tensor::from_f32(shape.to_vec(), data.to_vec()),
        }
    }
}

/// Time spent in one step over the profiled runs.
#[derive(Clone, Debug)]
pub struct StepProfile {
    /// The step's name (its last node's).
    pub name: String,
    /// The ops of the step, e.g. `Conv+BatchNormalization+Relu`.
    pub kind: String,
    /// Whether the step runs on the reference executor.
    pub fallback: bool,
    /// The bytes it moves and the flops it computes in one run.
    pub work: StepWork,
    /// Its time in each profiled run, in run order.
    pub times: Vec<Duration>,
}

impl StepProfile {
    /// The median of its times, nearest-rank as the run latencies' p50: one
    /// preempted run does not move it, as it moves a mean on a shared machine.
    pub fn median(&self) -> Duration {
        let mut sorted = self.times.clone();
        sorted.sort();
        percentile(&sorted, 50.0)
    }
}

impl CompiledModel {
    /// Runs the model on one tensor per graph input; returns the graph outputs.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_inputs(&inputs.iter().map(ModelInput::Tensor).collect::<Vec<_>>())
    }

    /// Runs the model like `run` on inputs that may be borrowed f32 buffers (a
    /// caller's array, read in place without a copy).
    pub fn run_inputs(&self, inputs: &[ModelInput]) -> Result<Vec<Tensor>, RuntimeError> {
        self.run_inner(inputs, None, None)
    }

    /// Runs the model like `run`, and looks after every step for NaN or an
    /// infinity among its logical output elements (layout padding, which may
    /// hold -inf or NaN by design, is skipped): the first such step, if any.
    pub fn run_checked(
        &self,
        inputs: &[Tensor],
    ) -> Result<(Vec<Tensor>, Option<NonFinite>), RuntimeError> {
        let mut found = None;
        let inputs: Vec<ModelInput> = inputs.iter().map(ModelInput::Tensor).collect();
        let outputs = self.run_inner(&inputs, None, Some(&mut found))?;
        Ok((outputs, found))
    }

    /// Runs the model and appends each step's time to `profile` (one entry per step,
    /// created on the first call).
    pub fn run_profiled(
        &self,
        inputs: &[Tensor],
        profile: &mut Vec<StepProfile>,
    ) -> Result<Vec<Tensor>, RuntimeError> {
        if profile.is_empty() {
            *profile = self
                .steps
                .iter()
                .map(|s| StepProfile {
                    name: s.name.clone(),
                    kind: s.kind.clone(),
                    fallback: matches!(s.kernel, Kernel::Fallback { .. }),
                    work: s.work,
                    times: vec![],
                })
                .collect();
        }
        let inputs: Vec<ModelInput> = inputs.iter().map(ModelInput::Tensor).collect();
        self.run_inner(&inputs, Some(profile), None)
    }

    fn run_inner(
        &self,
        inputs: &[ModelInput],
        mut profile: Option<&mut Vec<StepProfile>>,
        mut check: Option<&mut Option<NonFinite>>,
    ) -> Result<Vec<Tensor>, RuntimeError> {
        if inputs.len() != self.inputs.len() {
            return Err(RuntimeError::InputCount {
                expected: self.inputs.len(),
                got: inputs.len(),
            });
        }
        for ((name, ty, _), t) in self.inputs.iter().zip(inputs) {
            if t.dtype() != ty.dtype || t.shape() != ty.shape || t.len() != ty.numel() {
                return Err(RuntimeError::Input {
                    name: name.clone(),
                    expected: ty.to_string(),
                    got: ValueType::new(t.dtype(), t.shape().to_vec()).to_string(),
                });
            }
        }
        // Another thread running this model concurrently gets its own memory.
        let mut guard = self.scratch.try_lock();
        let mut own = Scratch::default();
        let scratch: &mut Scratch = match guard.as_mut() {
            Ok(s) => s,
            Err(_) => &mut own,
        };
        let arena = scratch.aligned_arena(self.arena_len);
        let Scratch {
            outputs: returned,
            lists,
            ..
        } = scratch;
        // The buffer of each output that owns an `Output` slot (a value listed
        // twice as an output is owned by its first listing, copied for the rest).
        returned.resize(self.outputs.len(), None);
        for (k, ((ty, slot), buffer)) in self.outputs.iter().zip(returned.iter_mut()).enumerate() {
            *buffer = match slot {
                Slot::Output(owner) if *owner == k => {
                    Some(output_buffer(buffer.take(), ty.numel()))
                }
                _ => None,
            };
        }
        lists.outputs.clear();
        lists.outputs.extend(returned.iter_mut().map(
            |b| match b.as_mut().and_then(Arc::get_mut) {
                Some(TensorData::F32(v)) => (v.as_mut_ptr(), v.len()),
                _ => (std::ptr::null_mut(), 0),
            },
        ));
        lists.inputs.clear();
        lists.converted.clear();
        lists.boxes.clear();
        lists.boxes.resize(self.boxes, None);
        for ((_, _, slot), t) in self.inputs.iter().zip(inputs) {
            let at = match *slot {
                Slot::Input(_) => match t.f32s() {
                    Cow::Borrowed(v) => (v.as_ptr(), v.len()),
                    Cow::Owned(v) => {
                        lists.converted.push(v);
                        let v = lists.converted.last().expect("just pushed");
                        (v.as_ptr(), v.len())
                    }
                },
                Slot::Boxed(i) => {
                    lists.boxes[i] = Some(t.to_tensor());
                    (std::ptr::null(), 0)
                }
                _ => (std::ptr::null(), 0),
            };
            lists.inputs.push(at);
        }
        let mut bufs = Buffers {
            arena,
            arena_len: self.arena_len,
            consts: &self.consts,
            inputs: &lists.inputs,
            outputs: &lists.outputs,
            boxes: &mut lists.boxes,
        };
        self.pool.install(|| -> Result<(), RuntimeError> {
            for (i, step) in self.steps.iter().enumerate() {
                let t0 = Instant::now();
                par::with_threads(threads_for(&step.work), || self.exec(step, &mut bufs))?;
                if let Some(p) = profile.as_deref_mut() {
                    p[i].times.push(t0.elapsed());
                }
                if let Some(found) = check.as_deref_mut().filter(|f| f.is_none()) {
                    *found =
                        first_non_finite(step, &bufs).map_err(|source| RuntimeError::Kernel {
                            spans: step.spans.clone(),
                            source,
                        })?;
                }
            }
            Ok(())
        })?;
        let outputs = self
            .outputs
            .iter()
            .zip(returned.iter())
            .map(|((ty, slot), data)| {
                let t = match data {
                    Some(data) => Tensor {
                        shape: ty.shape.clone(),
                        data: data.clone(),
                    },
                    None => bufs.tensor(*slot, ty),
                };
                match t.dtype() == ty.dtype {
                    true => t,
                    false => t.cast(ty.dtype),
                }
            })
            .collect();
        // Nothing of this run is kept alive by the lists.
        lists.converted.clear();
        lists.boxes.clear();
        Ok(outputs)
    }
}

/// The nearest-rank `p`th percentile of `sorted` (zero when it is empty).
pub(in crate::runtime) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}
