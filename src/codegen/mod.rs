//! Native code for lowered TIR functions, through Cranelift, in process.
//!
//! [`JitFunction::compile`] takes a storage-flattened [`LoweredFunc`] (after
//! `tir::lower::lower`) and emits one Cranelift function for its body; its parameters
//! are the flat f32 buffers of `func.params`, in that order. The statement IR maps as
//! follows:
//!
//! - Types are static: an expression is an i64 when `Expr::is_int` says so (loop
//!   variables, index arithmetic, comparisons), else an f32 — the interpreter's rules,
//!   decided at compile time. Integer `floordiv`/`floormod` have floor semantics (shifts
//!   and masks for powers of two). A float expression where an index, extent or size is
//!   needed is refused with [`CodegenError::Type`].
//! - Memory safety: every load and store is proved inside its buffer at compile time
//!   (`analysis`: interval sets over the enclosing loops, innermost first, narrowed by
//!   the `a < b` / `a <= b` conditions of enclosing `if`s and selects, with fused-loop
//!   indices `floordiv(f, c) * c + floormod(f, c)` put back together). An access proved
//!   outside for every iteration is refused with [`CodegenError::OutOfBounds`]. One that
//!   cannot be proved either way gets a run-time check instead of a trap: a failing
//!   access is skipped (a load gives 0) and reported, the code runs on (so scopes free
//!   their scratch), and the call returns [`CodegenError::Run`] naming the buffer and
//!   index. [`CodegenStats::checked_accesses`] counts such accesses. Integer divisors
//!   that may be 0 or -1 (`sdiv` traps on both) are checked the same way. Kernel regions
//!   are proved or checked axis by axis before the call.
//! - `Allocate`: scratch of at most 64 elements whose every access has an index that
//!   is a constant where it is emitted (its variables are all of loops emitted as
//!   copies: unrolled rows, vector lanes) lives in registers, as 4-lane SSA variables
//!   (a reduction's accumulators across its reduction loops, `lowering`); other
//!   scratch whose size has a constant bound of at most
//!   4096 elements is a stack slot (reused by every iteration of enclosing loops, which
//!   see fresh, undefined contents as the IR allows); larger or unbounded scratch is
//!   allocated through a Rust function and freed at the end of its scope.
//! - Loop kinds: `Unrolled` with a constant extent of at most 16 is emitted as copies of
//!   the body, and so is a serial loop of at most 4 iterations around a small body (a
//!   pooling window), so that its indices fold to constants. `Vectorized` with a
//!   constant extent runs 4 lanes of F32X4 at a time, then a scalar tail, when its
//!   body has a vector form:
//!   - a unit-stride store `b[i] = value` of a float value that reads `b` only at the
//!     element stored;
//!   - a reduction `b[k] = op(b[k], value)` (`tir::compute::ReduceOp::split`) whose
//!     element does not move with the loop: two vector accumulators, combined lane by
//!     lane at the end (a sum is added in another order than the scalar loop's).
//!
//!   In the value, float arithmetic (+ - * / min max), exp, tanh, erf, sqrt and
//!   rounding, selects (a condition of float comparisons, with not, and, or, as lane
//!   masks) and unit-stride loads are vector operations, a stride-2 load two vector
//!   loads and a shuffle (each distinct load once per vector step); parts that do not
//!   move with the loop are computed once before it and splat (through the stack
//!   before a loop, which keeps them there); any other part that moves (a periodic or
//!   other strided load, an integer condition of the index, a call into Rust) is
//!   computed lane by lane.
//! - Addresses: an index's constant part, with the loop constants of the copy being
//!   emitted put in, is the access's byte offset, so that copies share the rest. A
//!   proved load of a buffer the function never writes is read-only and movable:
//!   Cranelift's e-graph pass places it where its value is first used. Every vector access that moves must be proved, and
//!   every load under a select (both sides are computed).
//!   Other vectorized loops run scalar. `Parallel` loops whose
//!   iterations touch disjoint memory (`analysis::iterations_independent`) are outlined
//!   into a function of (environment, iteration) that captures every loop variable and
//!   buffer in scope, and run by a Rust trampoline on the pool installed on the calling thread
//!   (`core::par`);
//!   scratch allocated inside is per iteration. A parallel loop that fails the test
//!   runs serially (counted in [`CodegenStats::serialized_parallel_loops`]).
//! - `KernelCall`: a call into a Rust [`kernel::Kernel`] registered by name in a
//!   [`KernelTable`], with one [`KernelRegion`] per argument (see [`kernel`]).
//! - Intrinsics: `sqrt` is Cranelift's instruction; `exp`, `tanh` and `erf` are
//!   `core::vecmath`'s, emitted inline on f32 or F32X4 (`vecmath`); `log` and `pow`
//!   call Rust `f32` functions (`rt`, with the other helpers generated code calls).
//! - Every generated function has one signature, `(environment, iteration, context)`:
//!   the entry's environment is the array of parameter pointers, an outlined parallel
//!   body's is its captured values; the context carries the call's first error.
//! - `Assume` is information only: the code runs its body (the interpreter checks it).
//! - Differences from the interpreter: arithmetic is f32 (the interpreter's is f64), and
//!   float `min`/`max` propagate NaN where Rust's `f64::min` ignores it.

mod analysis;
mod emit;
pub mod kernel;
mod rt;
mod vecmath;

use std::sync::{Arc, Mutex};

use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::default_libcall_names;
use thiserror::Error;

use crate::tir::lower::LoweredFunc;
pub use kernel::{gemm_update, KernelRegion, KernelTable, MAX_RANK};

/// Errors of compiling or calling generated code. Messages name the buffer (tensor),
/// loop variable or kernel involved.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CodegenError {
    /// The function has a shape the code generator cannot type or compile.
    #[error("codegen: {0}")]
    Type(String),
    /// An access is provably outside its buffer.
    #[error("codegen: {0}")]
    OutOfBounds(String),
    /// A kernel call that cannot be compiled (unknown kernel, bad region).
    #[error("codegen: {0}")]
    Kernel(String),
    /// Cranelift refused the generated IR (a bug of this module) or the host.
    #[error("codegen backend: {0}")]
    Backend(String),
    /// The buffers handed to a call do not match the parameters.
    #[error("jit call: {0}")]
    Call(String),
    /// A run-time check failed during a call (checked access, kernel error).
    #[error("jit run: {0}")]
    Run(String),
}

/// What the code generator did, for tests and reports, per statement of the lowered
/// function: the copies of a statement that unrolling emits count once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodegenStats {
    /// Accesses (and kernel region axes) checked at run time, not proved.
    pub checked_accesses: usize,
    /// Loops emitted as 4-lane vector loops.
    pub vector_loops: usize,
    /// Loops unrolled at compile time.
    pub unrolled_loops: usize,
    /// Parallel loops run on the thread pool.
    pub parallel_loops: usize,
    /// Loops marked parallel that run serially (iterations not proved independent).
    pub serialized_parallel_loops: usize,
    /// Buffers allocated on the stack.
    pub stack_allocs: usize,
    /// Buffers allocated on the heap (too large for the stack).
    pub heap_allocs: usize,
    /// Buffers held in registers (small scratch indexed by constants, e.g. a
    /// reduction's accumulators).
    pub register_allocs: usize,
    /// Calls of external kernels.
    pub kernel_calls: usize,
}

/// Name and element count of every parameter buffer, checked: a hand-built function
/// may name a tensor that does not exist or give a layout that does not fit.
fn params(func: &LoweredFunc) -> Result<Vec<(String, i64)>, CodegenError> {
    use crate::tir::layout::PhysDim;
    func.params
        .iter()
        .map(|t| {
            let op = func.graph.ops.get(t.0).ok_or_else(|| {
                CodegenError::Type(format!(
                    "parameter t{} is not a tensor of the function",
                    t.0
                ))
            })?;
            let layout = func.layouts.get(t).ok_or_else(|| {
                CodegenError::Type(format!("parameter `{}` has no layout", op.name))
            })?;
            layout
                .validate(op.shape.len(), &op.name)
                .map_err(|e| CodegenError::Type(e.to_string()))?;
            let blocks_ok = layout.dims.iter().all(|d| match d {
                PhysDim::Axis(_) => true,
                PhysDim::Outer(_, f) | PhysDim::Inner(_, f) => *f > 0,
            });
            let size = blocks_ok
                .then(|| layout.size_const(&op.shape))
                .filter(|n| *n >= 0 && op.shape.iter().all(|e| *e >= 0));
            let size = size.ok_or_else(|| {
                CodegenError::Type(format!(
                    "parameter `{}` of shape {:?} has no valid size in its layout",
                    op.name, op.shape
                ))
            })?;
            Ok((op.name.clone(), size))
        })
        .collect()
}

/// Owns the JIT's code memory.
struct Code(Option<JITModule>);

impl Drop for Code {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            // SAFETY: the only pointer into this memory is `JitFunction::entry`, which
            // is dropped with it.
            unsafe { m.free_memory() }
        }
    }
}

/// A compiled function.
pub struct JitFunction {
    entry: rt::GenFn,
    param_names: Vec<String>,
    param_sizes: Vec<usize>,
    /// Tensor names by id, for run-time messages.
    names: Vec<String>,
    stats: CodegenStats,
    /// Kept alive for the generated code, which holds their addresses.
    _kernels: Vec<Arc<(String, kernel::Kernel)>>,
    _code: Code,
}

// SAFETY: after `finalize_definitions` the code memory is immutable and only dropped;
// generated code keeps no state between calls (each call gets its own context), and the
// kernels it calls are `Send + Sync`.
unsafe impl Send for JitFunction {}
unsafe impl Sync for JitFunction {}

impl JitFunction {
    /// Compiles a lowered, storage-flattened function for this CPU.
    pub fn compile(func: &LoweredFunc, kernels: &KernelTable) -> Result<JitFunction, CodegenError> {
        let backend = |e: &dyn std::fmt::Debug| CodegenError::Backend(format!("{e:?}"));
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").map_err(|e| backend(&e))?;
        let isa = cranelift_native::builder()
            .map_err(|e| backend(&e))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| backend(&e))?;
        if isa.pointer_type() != cranelift_codegen::ir::types::I64 {
            return Err(CodegenError::Backend("the JIT needs a 64-bit host".into()));
        }
        let params = params(func)?;
        let mut code = Code(Some(JITModule::new(JITBuilder::with_isa(
            isa,
            default_libcall_names(),
        ))));
        let module = code.0.as_mut().expect("just created");
        let mut c = emit::Compiler::new(module, func, kernels);
        let id = c.compile_entry(&params)?;
        let (used_kernels, stats) = (std::mem::take(&mut c.used_kernels), c.stats.clone());
        module.finalize_definitions().map_err(|e| backend(&e))?;
        let ptr = module.get_finalized_function(id);
        // SAFETY: the entry function was compiled with the `GenFn` signature.
        let entry = unsafe { std::mem::transmute::<*const u8, rt::GenFn>(ptr) };
        Ok(JitFunction {
            entry,
            param_names: params.iter().map(|p| p.0.clone()).collect(),
            param_sizes: params.iter().map(|p| p.1 as usize).collect(),
            names: func.graph.ops.iter().map(|o| o.name.clone()).collect(),
            stats,
            _kernels: used_kernels,
            _code: code,
        })
    }

    /// The parameters' names, in call order.
    pub fn param_names(&self) -> &[String] {
        &self.param_names
    }

    /// The number of f32 elements each parameter buffer must have.
    pub fn param_sizes(&self) -> &[usize] {
        &self.param_sizes
    }

    /// What the code generator did for this function.
    pub fn stats(&self) -> &CodegenStats {
        &self.stats
    }

    /// Runs the function on `buffers` (one per parameter, in order, each of its size).
    pub fn call(&self, buffers: &mut [&mut [f32]]) -> Result<(), CodegenError> {
        if buffers.len() != self.param_sizes.len() {
            return Err(CodegenError::Call(format!(
                "{} buffers given, the function takes {} ({})",
                buffers.len(),
                self.param_sizes.len(),
                self.param_names.join(", ")
            )));
        }
        for ((b, n), name) in buffers.iter().zip(&self.param_sizes).zip(&self.param_names) {
            if b.len() != *n {
                return Err(CodegenError::Call(format!(
                    "buffer `{name}` has {} elements, its layout needs {n}",
                    b.len()
                )));
            }
        }
        let ptrs: Vec<*mut f32> = buffers.iter_mut().map(|b| b.as_mut_ptr()).collect();
        // SAFETY: one distinct (`&mut`) buffer of the right size per parameter.
        unsafe { self.call_raw(&ptrs) }
    }

    /// Runs the function on raw parameter pointers.
    ///
    /// # Safety
    /// `ptrs[k]` must point to `param_sizes()[k]` valid f32 elements, the buffers must
    /// not overlap, and nothing else may access them during the call.
    pub unsafe fn call_raw(&self, ptrs: &[*mut f32]) -> Result<(), CodegenError> {
        if ptrs.len() != self.param_sizes.len() {
            return Err(CodegenError::Call(format!(
                "{} pointers given, the function takes {}",
                ptrs.len(),
                self.param_sizes.len()
            )));
        }
        let ctx = rt::CallCtx {
            names: &self.names,
            error: Mutex::new(None),
        };
        let env: Vec<i64> = ptrs.iter().map(|p| *p as i64).collect();
        (self.entry)(env.as_ptr(), 0, &ctx);
        match ctx.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(m) => Err(CodegenError::Run(m)),
            None => Ok(()),
        }
    }
}
