//! Ops without a hand-written kernel run as TIR: the op's compute definition and
//! default schedule (`lowering`), lowered in the storage layouts the planner chose
//! and compiled to native code (`codegen`).

use crate::codegen::{CodegenError, JitFunction};
use crate::core::AlgebraError;
use crate::graph::{LaidOut, Op, ValueType};
use crate::layout::{Layout, PadValue};
use crate::lowering::{lower_chain, Link};
use crate::tir::TirError;

/// Why a TIR step could not be built or run; the runtime adds the layer's span.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// Lowering the op's compute definition failed.
    #[error(transparent)]
    Tir(#[from] TirError),
    /// Compiling or calling the lowered function failed.
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    /// A storage layout does not fit the op's tensors.
    #[error(transparent)]
    Layout(#[from] AlgebraError),
    /// The lowered function does not address exactly the step's buffers.
    #[error("{0}")]
    Buffers(String),
}

/// A compiled op: which buffer each parameter of its function is.
pub(in crate::runtime) struct TirKernel {
    jit: JitFunction,
    /// For every parameter of the function: the step input it is, or `None` for the
    /// output.
    params: Vec<Option<usize>>,
    /// The output's padding value, written before the call when the output layout
    /// pads (the function writes logical elements only).
    fill: Option<f32>,
}

/// One node of a fused chain: its op (laid out or not), the (physical) types of its
/// operands, and which operand the previous node's output is.
pub(in crate::runtime) struct ChainNode<'a> {
    pub op: &'a Op,
    pub inputs: Vec<ValueType>,
    pub prev: Option<usize>,
}

/// What a node computes in logical terms: the op, its operands' logical types and
/// storage layouts, and its output's layout (`None`: as its type says) and padding.
struct LogicalNode<'a> {
    op: &'a Op,
    types: Vec<ValueType>,
    layouts: Vec<Layout>,
    output: (Option<Layout>, PadValue),
}

impl ChainNode<'_> {
    /// The items of `all` (one per operand) that are inputs of the step: every
    /// operand's but the chained one's.
    pub fn own<'t, T>(&self, all: &'t [T]) -> impl Iterator<Item = &'t T> {
        let prev = self.prev;
        all.iter()
            .enumerate()
            .filter(move |(i, _)| Some(*i) != prev)
            .map(|(_, t)| t)
    }

    fn logical(&self) -> Result<Option<LogicalNode<'_>>, StepError> {
        Ok(Some(match self.op {
            Op::InLayout(l) => {
                let LaidOut {
                    inner,
                    inputs,
                    outputs,
                } = l.as_ref();
                let Some((layout, pad)) = outputs.first() else {
                    return Ok(None);
                };
                LogicalNode {
                    op: inner,
                    types: inputs
                        .iter()
                        .zip(&self.inputs)
                        .map(|((_, shape), ty)| ValueType::new(ty.dtype, shape.clone()))
                        .collect(),
                    layouts: inputs.iter().map(|(l, _)| l.clone()).collect(),
                    output: (Some(layout.clone()), *pad),
                }
            }
            op => LogicalNode {
                op,
                types: self.inputs.clone(),
                layouts: self
                    .inputs
                    .iter()
                    .map(|t| Layout::identity(t.shape.len()))
                    .collect::<Result<_, _>>()?,
                output: (None, PadValue::Undef),
            },
        }))
    }
}

impl TirKernel {
    /// Lowers and compiles a chain of nodes (one node, or a producer and the
    /// elementwise nodes after it) whose last output has the (physical) type
    /// `output`. The step's inputs are the first node's operands, then every later
    /// node's operands but the chained one.
    ///
    /// `Ok(None)`: the chain has no TIR form (it runs another way).
    pub(in crate::runtime) fn new(
        chain: &[ChainNode],
        output: &ValueType,
    ) -> Result<Option<TirKernel>, StepError> {
        let mut logical = vec![];
        let mut layouts = vec![];
        let mut inners = vec![];
        let mut step_inputs = vec![];
        let mut out = (None, PadValue::Undef);
        for node in chain {
            let Some(view) = node.logical()? else {
                return Ok(None);
            };
            step_inputs.extend(node.own(&node.inputs).cloned());
            layouts.extend(node.own(&view.layouts).cloned());
            logical.push(view.types);
            inners.push(view.op);
            out = view.output;
        }
        let (out_layout, pad) = out;
        // Empty tensors have no loop nest (the reference executor handles them).
        if logical.iter().flatten().any(|t| t.numel() == 0) || output.numel() == 0 {
            return Ok(None);
        }
        let links: Vec<Link> = chain
            .iter()
            .zip(&inners)
            .zip(&logical)
            .map(|((node, op), types)| Link {
                op,
                types,
                prev: node.prev,
            })
            .collect();
        let out_layout = match out_layout {
            Some(l) => l,
            None => Layout::identity(output.shape.len())?,
        };
        let lowered = match lower_chain(&links, Some((&layouts, &out_layout))) {
            Ok(l) => l,
            Err(TirError::Unsupported(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let jit = JitFunction::compile(&lowered.func, &super::contract::kernel_table())?;
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
                Some(k) => step_inputs[*k].numel(),
                None => output.numel(),
            };
            if sizes[p] != have {
                return Err(StepError::Buffers(format!(
                    "the lowered {} addresses {} elements of parameter {p}, its buffer has {have}",
                    inners[0].kind_name(),
                    sizes[p]
                )));
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

    /// Runs the function on the step's buffers: `input(k)` is step input `k`.
    ///
    /// # Safety
    /// The inputs and `output` must have the sizes given to `new` and must not overlap.
    pub(in crate::runtime) unsafe fn run(
        &self,
        input: impl Fn(usize) -> *const f32,
        output: &mut [f32],
    ) -> Result<(), StepError> {
        if let Some(v) = self.fill {
            output.fill(v);
        }
        let out = output.as_mut_ptr();
        let ptrs: Vec<*mut f32> = self
            .params
            .iter()
            .map(|p| match p {
                // The function only reads its inputs.
                Some(k) => input(*k) as *mut f32,
                None => out,
            })
            .collect();
        Ok(self.jit.call_raw(&ptrs)?)
    }
}
