//! Ops without a hand-written kernel run as TIR: the op's compute definition and
//! default schedule (`tir::ops`), lowered in the storage layouts the planner chose
//! and compiled to native code (`codegen`).

use crate::codegen::{JitFunction, KernelTable};
use crate::graph::{LaidOut, Op, ValueType};
use crate::layout::Layout;
use crate::layout::PadValue;
use crate::tir::ops::lower_op;
use crate::tir::TirError;

/// A compiled op: which buffer each parameter of its function is.
pub(super) struct TirKernel {
    jit: JitFunction,
    /// For every parameter of the function: the step input it is, or `None` for the
    /// output.
    params: Vec<Option<usize>>,
    /// The output's padding value, written before the call when the output layout
    /// pads (the function writes logical elements only).
    fill: Option<f32>,
}

impl TirKernel {
    /// Lowers and compiles `op` (a node's op, laid out or not) whose operands and
    /// output have the (physical) types `inputs` and `output`.
    ///
    /// `Ok(None)`: the op has no TIR form (it runs on the reference executor).
    pub(super) fn new(
        op: &Op,
        inputs: &[ValueType],
        output: &ValueType,
    ) -> Result<Option<TirKernel>, String> {
        let (inner, logical, layouts, pad) = match op {
            Op::InLayout(l) => {
                let LaidOut {
                    inner,
                    inputs: ins,
                    outputs,
                } = l.as_ref();
                let Some((out_layout, pad)) = outputs.first() else {
                    return Ok(None);
                };
                let types: Vec<ValueType> = ins
                    .iter()
                    .zip(inputs)
                    .map(|((_, shape), ty)| ValueType::new(ty.dtype, shape.clone()))
                    .collect();
                let lays: Vec<Layout> = ins.iter().map(|(l, _)| l.clone()).collect();
                (inner, types, Some((lays, out_layout.clone())), *pad)
            }
            op => (op, inputs.to_vec(), None, PadValue::Undef),
        };
        // Empty tensors have no loop nest (the reference executor handles them).
        if logical.iter().any(|t| t.numel() == 0) || output.numel() == 0 {
            return Ok(None);
        }
        let lay = layouts.as_ref().map(|(i, o)| (i.as_slice(), o));
        let lowered = match lower_op(inner, &logical, lay) {
            Ok(l) => l,
            Err(TirError::Unsupported(_)) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let jit = JitFunction::compile(&lowered.func, &KernelTable::standard())
            .map_err(|e| e.to_string())?;
        let mut params = vec![None; lowered.func.params.len()];
        for (k, p) in lowered.inputs.iter().enumerate() {
            if let Some(p) = p {
                params[*p] = Some(k);
            }
        }
        // Every buffer the function addresses must be exactly the step's buffer.
        let sizes = jit.param_sizes();
        for (p, input) in params.iter().enumerate() {
            let have = match input {
                Some(k) => inputs[*k].numel(),
                None => output.numel(),
            };
            if sizes[p] != have {
                return Err(format!(
                    "the lowered {} addresses {} elements of parameter {p}, its buffer has {have}",
                    inner.kind_name(),
                    sizes[p]
                ));
            }
        }
        let out_shape = &lowered
            .func
            .graph
            .op(lowered.func.params[lowered.output])
            .shape;
        let logical_out = out_shape.iter().product::<i64>() as usize;
        let fill = pad.known().filter(|_| logical_out < output.numel());
        Ok(Some(TirKernel { jit, params, fill }))
    }

    /// Runs the function on the step's buffers.
    ///
    /// # Safety
    /// `inputs` and `output` must have the sizes given to `new` and must not overlap.
    pub(super) unsafe fn run(&self, inputs: &[&[f32]], output: &mut [f32]) -> Result<(), String> {
        if let Some(v) = self.fill {
            output.fill(v);
        }
        let out = output.as_mut_ptr();
        let ptrs: Vec<*mut f32> = self
            .params
            .iter()
            .map(|p| match p {
                // The function only reads its inputs.
                Some(k) => inputs[*k].as_ptr() as *mut f32,
                None => out,
            })
            .collect();
        self.jit.call_raw(&ptrs).map_err(|e| e.to_string())
    }
}
