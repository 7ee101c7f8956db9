//! Translation of the flattened statement IR into Cranelift IR, one function at a time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, Block, ConstantData, Endianness, Function, InstBuilder, InstructionData,
    MemFlagsData, Opcode, Signature, StackSlot, StackSlotData, StackSlotKind, Type, UserFuncName,
    Value, ValueDef,
};
use cranelift_codegen::Context;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};

use super::analysis::{has_stride, iterations_independent, strides, vectorizable, LoopCtx, Proof};
use super::kernel::{layout as kl, Kernel, KernelTable, MAX_RANK};
use super::rt;
use super::vecmath as emitted;
use super::{CodegenError, CodegenStats};
use crate::core::vecmath;
use crate::tir::compute::ReduceOp;
use crate::tir::expr::{BinOp, Expr, Intrinsic, TensorId, Var};
use crate::tir::lower::LoweredFunc;
use crate::tir::schedule::ForKind;
use crate::tir::simplify::{prove_equal, simplify, Linear};
use crate::tir::stmt::{KernelArg, Loop, Stmt};

type R<T> = Result<T, CodegenError>;

/// Scratch buffers up to this many elements live in the stack frame.
pub(crate) const STACK_SCRATCH_ELEMS: i64 = 4096;
/// Unrolled loops of at most this many iterations are emitted as copies of the body.
const MAX_UNROLL: i64 = 16;
const LANES: i64 = 4;
/// Loops of at most this many iterations (vector steps for a vectorized loop) are
/// emitted as copies of their body when it is small (`UNROLL_BUDGET`).
const SHORT_LOOP: i64 = 4;
/// The most statement and expression nodes a short serial loop's copies may add up to.
const UNROLL_BUDGET: i64 = 400;
/// Scratch of at most this many elements (16 vectors, the SSE register file) lives in
/// registers when every access to it has a constant index (`registers_hold`).
const REGISTER_SCRATCH_ELEMS: i64 = 64;

const I64: Type = types::I64;
const F32: Type = types::F32;

/// State shared by all functions of one compilation.
pub(crate) struct Compiler<'a> {
    pub module: &'a mut JITModule,
    pub func: &'a LoweredFunc,
    pub kernels: &'a KernelTable,
    /// The kernels generated code calls, kept alive (and at a fixed address) by the
    /// compiled function.
    pub used_kernels: Vec<Arc<(String, Kernel)>>,
    pub stats: CodegenStats,
    /// The buffers the function stores to (its outputs and scratch); the others are
    /// read-only while it runs.
    written: HashSet<TensorId>,
    sig: Signature,
    n_funcs: usize,
}

impl<'a> Compiler<'a> {
    pub fn new(module: &'a mut JITModule, func: &'a LoweredFunc, kernels: &'a KernelTable) -> Self {
        let mut sig = module.make_signature();
        sig.params
            .extend([AbiParam::new(I64), AbiParam::new(I64), AbiParam::new(I64)]);
        Compiler {
            module,
            func,
            kernels,
            used_kernels: Vec::new(),
            stats: CodegenStats::default(),
            written: written_buffers(&func.body),
            sig,
            n_funcs: 0,
        }
    }

    fn name(&self, t: TensorId) -> String {
        self.func
            .graph
            .ops
            .get(t.0)
            .map_or_else(|| format!("t{}", t.0), |o| o.name.clone())
    }

    /// Compiles the entry function: its environment is the array of parameter pointers
    /// (`sizes`: their element counts, in order).
    pub fn compile_entry(&mut self, sizes: &[(String, i64)]) -> R<FuncId> {
        let func = self.func;
        self.function(|e| {
            for (k, (t, (_, size))) in func.params.iter().zip(sizes).enumerate() {
                let ptr =
                    e.b.ins()
                        .load(I64, MemFlagsData::trusted(), e.env, 8 * k as i32);
                let size_v = e.b.ins().iconst(I64, *size);
                e.bind_buffer(*t, ptr, size_v, Expr::Int(*size));
            }
            e.stmt(&func.body)
        })
    }

    /// Builds one generated function; `body` emits its contents after the entry block.
    fn function(&mut self, body: impl FnOnce(&mut FnEmitter) -> R<()>) -> R<FuncId> {
        let name = format!("tir_fn{}", self.n_funcs);
        self.n_funcs += 1;
        let id = self
            .module
            .declare_function(&name, Linkage::Local, &self.sig)
            .map_err(backend)?;
        let mut func =
            Function::with_name_signature(UserFuncName::user(0, id.as_u32()), self.sig.clone());
        let mut fctx = FunctionBuilderContext::new();
        let config = self.module.target_config();
        {
            let mut b = FunctionBuilder::new(&mut func, &mut fctx);
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let p = b.block_params(entry).to_vec();
            let mut e = FnEmitter {
                c: self,
                b,
                env: p[0],
                iter: p[1],
                ctx: p[2],
                vars: HashMap::new(),
                bufs: HashMap::new(),
                lc: LoopCtx::default(),
                hoisted: HashMap::new(),
                vloads: Vec::new(),
                regs: HashMap::new(),
                known: HashMap::new(),
            };
            body(&mut e)?;
            e.b.ins().return_(&[]);
            e.b.seal_all_blocks();
            e.b.finalize(config);
        }
        let mut ctx = Context::for_function(func);
        self.module.define_function(id, &mut ctx).map_err(backend)?;
        Ok(id)
    }
}

fn backend(e: impl std::fmt::Debug) -> CodegenError {
    CodegenError::Backend(format!("{e:?}"))
}

/// The integer (signed) and float condition codes of a comparison.
fn condition_codes(op: BinOp) -> (IntCC, FloatCC) {
    match op {
        BinOp::Lt => (IntCC::SignedLessThan, FloatCC::LessThan),
        BinOp::Le => (IntCC::SignedLessThanOrEqual, FloatCC::LessThanOrEqual),
        BinOp::Eq => (IntCC::Equal, FloatCC::Equal),
        BinOp::Ne => (IntCC::NotEqual, FloatCC::NotEqual),
        _ => unreachable!("{op:?} is not a comparison"),
    }
}

/// `x op y` for the operators that are one IEEE instruction, on f32 scalars and
/// vectors alike; `None` for the others.
fn float_arith(b: &mut FunctionBuilder, op: BinOp, x: Value, y: Value) -> Option<Value> {
    let ins = b.ins();
    Some(match op {
        BinOp::Add => ins.fadd(x, y),
        BinOp::Sub => ins.fsub(x, y),
        BinOp::Mul => ins.fmul(x, y),
        BinOp::Div => ins.fdiv(x, y),
        BinOp::Min => ins.fmin(x, y),
        BinOp::Max => ins.fmax(x, y),
        _ => return None,
    })
}

/// Vector accumulators of a vectorized reduction: an add has 3-4 cycles of
/// latency and two issue per cycle, so two chains left the adder idle (a global
/// average pool of 1x256x56x56 at 58% of the copy bandwidth).
const ACCUMULATORS: usize = 4;

/// Whether `e` is a float constant other than NaN: a maximum or minimum with it
/// needs a NaN rule for its other operand only.
fn never_nan(e: &Expr) -> bool {
    matches!(e, Expr::Float(v) if !v.is_nan())
}

/// The lanes of a vector comparison's mask as F32X4, for `bitselect` and `bor` with
/// float vectors.
fn float_lanes(b: &mut FunctionBuilder, mask: Value) -> Value {
    let little = MemFlagsData::new().with_endianness(Endianness::Little);
    b.ins().bitcast(types::F32X4, little, mask)
}

/// `cond ? x : y` on f32 scalars (`cond` a scalar comparison) or F32X4 vectors
/// (`cond` a vector comparison, lane by lane).
fn choose(b: &mut FunctionBuilder, cond: Value, x: Value, y: Value) -> Value {
    if b.func.dfg.value_type(x).is_vector() {
        let mask = float_lanes(b, cond);
        b.ins().bitselect(mask, x, y)
    } else {
        b.ins().select(cond, x, y)
    }
}

/// `max(kept, other)` or `min(kept, other)` (`op`) on f32 scalars or F32X4 vectors,
/// giving `kept` when either is NaN: written `kept < other ? other : kept`
/// (`other < kept ? other : kept`), which Cranelift emits as one `maxps`/`minps`
/// (`maxss`/`minss`), whose NaN rule returns that operand. With a constant other
/// than NaN as `other` this is the maximum with the NaN rule (a NaN `kept`
/// stays); with an accumulator as `kept` it skips a NaN value (`seen_nan` keeps
/// track of those). `fmax`/`fmin` spend eight instructions on NaN rules for both
/// sides and on the sign of zero; here a zero result may keep `kept`'s sign
/// (max(-0, +0) gives -0).
fn max_min_keeping(b: &mut FunctionBuilder, op: BinOp, kept: Value, other: Value) -> Value {
    let take_other = match op {
        BinOp::Max => b.ins().fcmp(FloatCC::LessThan, kept, other),
        _ => b.ins().fcmp(FloatCC::LessThan, other, kept),
    };
    choose(b, take_other, other, kept)
}

/// `a op b` on the values `x` of `a` and `y` of `b` where `op` is one IEEE
/// instruction ([`float_arith`]), a maximum or minimum with a constant taking the
/// short form of [`max_min_keeping`].
fn float_arith_of(
    b: &mut FunctionBuilder,
    op: BinOp,
    (a, x): (&Expr, Value),
    (c, y): (&Expr, Value),
) -> Option<Value> {
    match op {
        BinOp::Max | BinOp::Min if never_nan(c) => Some(max_min_keeping(b, op, x, y)),
        BinOp::Max | BinOp::Min if never_nan(a) => Some(max_min_keeping(b, op, y, x)),
        _ => float_arith(b, op, x, y),
    }
}

/// `op`'s combination of an accumulator and a new value (`ReduceOp::combine`), on
/// f32 scalars and F32X4 vectors alike.
fn combine(b: &mut FunctionBuilder, op: ReduceOp, acc: Value, x: Value) -> Value {
    match op {
        ReduceOp::Sum => b.ins().fadd(acc, x),
        ReduceOp::Prod => b.ins().fmul(acc, x),
        ReduceOp::Max => b.ins().fmax(acc, x),
        ReduceOp::Min => b.ins().fmin(acc, x),
        ReduceOp::MaxNumber => max_number(b, acc, x),
    }
}

/// IEEE maximumNumber of `acc` and `x` (f32 scalars or F32X4 vectors): `maxps`
/// with `acc` as the operand kept on NaN (so a NaN `x` is skipped), then `x` where
/// `acc` is NaN (nothing seen yet). Three instructions; the select that
/// `ReduceOp::MaxNumber` writes takes five or six.
fn max_number(b: &mut FunctionBuilder, acc: Value, x: Value) -> Value {
    let max = max_min_keeping(b, BinOp::Max, acc, x);
    let none = b.ins().fcmp(FloatCC::Unordered, acc, acc);
    choose(b, none, x, max)
}

/// The accumulator and the new value of a maximumNumber written as
/// `ReduceOp::MaxNumber` combines them, `select(v != v || v <= acc, acc, v)`
/// (a max pool's window held in registers); `None` for anything else.
fn max_number_parts(e: &Expr) -> Option<(&Expr, &Expr)> {
    let Expr::Select(keep, acc, v) = e else {
        return None;
    };
    let Expr::Bin(BinOp::Or, nan, le) = &**keep else {
        return None;
    };
    match (&**nan, &**le) {
        (Expr::Bin(BinOp::Ne, x, y), Expr::Bin(BinOp::Le, z, a))
            if [x, y, z].iter().all(|t| ***t == **v) && **a == **acc =>
        {
            Some((acc, v))
        }
        _ => None,
    }
}

/// `seen` with the lanes of `x` that are NaN set to all ones: a vector maximum or
/// minimum over values keeps its accumulator a number (`max_min_keeping` with the
/// accumulator kept) and sets the lanes that read a NaN to NaN at the end.
fn seen_nan(b: &mut FunctionBuilder, seen: Value, x: Value) -> Value {
    let nan = b.ins().fcmp(FloatCC::Unordered, x, x);
    let nan = float_lanes(b, nan);
    b.ins().bor(seen, nan)
}

/// The vector form of a vectorized loop's body (`FnEmitter::vector_form`).
enum VectorForm<'e> {
    /// `buffer[index] = value`, the index unit-stride in the loop.
    Store(TensorId, &'e Expr, &'e Expr),
    /// `buffer[index] = op(buffer[index], source)`, the index invariant.
    Reduce(ReduceOp, TensorId, &'e Expr, &'e Expr),
}

/// Whether a loop of `kind` over `extent` iterations (when constant) around `body` is
/// emitted as copies of its body (`FnEmitter::for_loop`, vector steps and tail
/// included), its variable a constant in each copy when the loop starts at one.
fn emitted_as_copies(kind: ForKind, extent: Option<i64>, body: &Stmt) -> bool {
    match (kind, extent) {
        (ForKind::Unrolled, Some(c)) => c <= MAX_UNROLL,
        (ForKind::Vectorized, Some(c)) => c / LANES <= SHORT_LOOP,
        (ForKind::Serial, Some(c)) => c <= SHORT_LOOP && c * size(body) <= UNROLL_BUDGET,
        _ => false,
    }
}

/// Whether scratch `t` can live in registers in `body` (its allocation's scope): every
/// access has an index whose variables are all of loops inside `body` emitted as copies
/// from a constant start (`copied`), so each access is to a known element; no parallel
/// loop (outlined into another function) or kernel call sees it. A reduction's
/// accumulators (`lowering`) are such scratch: rows unrolled, lanes vectorized.
fn registers_hold(t: TensorId, s: &Stmt, copied: &mut Vec<u64>, in_parallel: bool) -> bool {
    let constant = |index: &Expr, copied: &[u64]| {
        let mut ok = !in_parallel;
        index.visit(&mut |x| ok &= !matches!(x, Expr::Var(v) if !copied.contains(&v.id)));
        ok
    };
    let loads_ok = |e: &Expr, copied: &[u64]| {
        let mut ok = true;
        e.visit(&mut |x| {
            if let Expr::Load { buffer, index } = x {
                ok &= *buffer != t || constant(index, copied);
            }
        });
        ok
    };
    match s {
        Stmt::For(l) => {
            if !loads_ok(&l.min, copied) || !loads_ok(&l.extent, copied) {
                return false;
            }
            let extent = crate::tir::simplify::simplify(&l.extent).as_int();
            let from_constant = crate::tir::simplify::simplify(&l.min).as_int().is_some();
            let copies = from_constant && emitted_as_copies(l.kind, extent, &l.body);
            if copies {
                copied.push(l.var.id);
            }
            let parallel = in_parallel || l.kind == ForKind::Parallel;
            let ok = registers_hold(t, &l.body, copied, parallel);
            if copies {
                copied.pop();
            }
            ok
        }
        Stmt::Store {
            buffer,
            index,
            value,
        } => {
            (*buffer != t || constant(index, copied))
                && loads_ok(index, copied)
                && loads_ok(value, copied)
        }
        Stmt::Allocate { size, body, .. } => {
            loads_ok(size, copied) && registers_hold(t, body, copied, in_parallel)
        }
        Stmt::Seq(v) => v.iter().all(|x| registers_hold(t, x, copied, in_parallel)),
        Stmt::IfThenElse {
            cond,
            then_case,
            else_case,
            ..
        } => {
            loads_ok(cond, copied)
                && registers_hold(t, then_case, copied, in_parallel)
                && else_case
                    .as_ref()
                    .is_none_or(|e| registers_hold(t, e, copied, in_parallel))
        }
        Stmt::Assume { cond, body } => {
            loads_ok(cond, copied) && registers_hold(t, body, copied, in_parallel)
        }
        Stmt::KernelCall { args, .. } => args.iter().all(|a| a.tensor != t),
        Stmt::Realize { .. } | Stmt::Provide { .. } => false,
    }
}

/// The statement and expression nodes of `s`, a measure of the code it makes.
fn size(s: &Stmt) -> i64 {
    let mut n = 0;
    s.visit_exprs(&mut |e| e.visit(&mut |_| n += 1));
    s.visit(&mut |_| n += 1);
    n
}

/// Whether `e` is a float in every lane of `var`: a float, or an integer that does
/// not move with `var` (made a float once and splat).
fn floats(e: &Expr, var: &Var) -> bool {
    !e.is_int() || !e.uses_var(var)
}

/// The buffers `s` stores to or hands a kernel as its output (the first region).
fn written_buffers(s: &Stmt) -> HashSet<TensorId> {
    let mut out = HashSet::new();
    s.visit(&mut |x| match x {
        Stmt::Store { buffer, .. } | Stmt::Allocate { buffer, .. } => {
            out.insert(*buffer);
        }
        Stmt::KernelCall { args, .. } => out.extend(args.first().map(|a| a.tensor)),
        _ => {}
    });
    out
}

/// Whether `s` loads or stores `buffer` anywhere.
fn mentions(s: &Stmt, buffer: TensorId) -> bool {
    let mut found = false;
    s.visit(&mut |x| {
        found |= match x {
            Stmt::Store { buffer: b, .. } => *b == buffer,
            Stmt::KernelCall { args, .. } => args.iter().any(|a| a.tensor == buffer),
            _ => false,
        };
    });
    s.visit_exprs(&mut |e| found |= reads(e, buffer));
    found
}

/// Whether `e` loads from `buffer`.
fn reads(e: &Expr, buffer: TensorId) -> bool {
    let mut r = false;
    e.visit(&mut |x| r |= matches!(x, Expr::Load { buffer: b, .. } if *b == buffer));
    r
}

#[derive(Clone)]
struct Buf {
    ptr: Variable,
    size: Variable,
    size_expr: Expr,
}

/// Scratch kept in registers: element `k` is lane `k % 4` of vector `k / 4`.
struct Regs {
    vectors: Vec<Variable>,
    size: i64,
}

/// Emits one function.
pub(crate) struct FnEmitter<'c, 'a, 'f> {
    c: &'c mut Compiler<'a>,
    b: FunctionBuilder<'f>,
    env: Value,
    iter: Value,
    ctx: Value,
    vars: HashMap<u64, Variable>,
    bufs: HashMap<TensorId, Buf>,
    lc: LoopCtx,
    /// The vector loop being emitted: the splat of each of its value's parts that
    /// do not move with the loop, computed once before it (by address in the
    /// value's tree).
    hoisted: HashMap<*const Expr, Value>,
    /// The loads of the vector step being emitted, with their lanes (`vvalue`).
    vloads: Vec<(Expr, Value)>,
    /// Scratch held in registers (`registers_hold`).
    regs: HashMap<TensorId, Regs>,
    /// The loop variables (by Cranelift variable number) that are constants where the
    /// code is being emitted (in a copy of an unrolled body), with their values.
    known: HashMap<u32, i64>,
}

impl FnEmitter<'_, '_, '_> {
    fn bind_buffer(
        &mut self,
        t: TensorId,
        ptr: Value,
        size: Value,
        size_expr: Expr,
    ) -> Option<Buf> {
        let p = self.b.declare_var(I64);
        self.b.def_var(p, ptr);
        let s = self.b.declare_var(I64);
        self.b.def_var(s, size);
        self.bufs.insert(
            t,
            Buf {
                ptr: p,
                size: s,
                size_expr,
            },
        )
    }

    fn restore_buffer(&mut self, t: TensorId, old: Option<Buf>) {
        match old {
            Some(o) => self.bufs.insert(t, o),
            None => self.bufs.remove(&t),
        };
    }

    /// `e` with the loop variables known here (`known`) replaced by their values.
    fn with_known(&self, e: &Expr) -> Expr {
        e.substitute(&|w: &Var| {
            let v = self.vars.get(&w.id)?;
            self.known.get(&v.as_u32()).map(|&c| Expr::Int(c))
        })
    }

    /// The number of elements of buffer `t`, in memory or in registers.
    fn size_expr(&self, t: TensorId) -> R<Expr> {
        match self.regs.get(&t) {
            Some(r) => Ok(Expr::Int(r.size)),
            None => Ok(self.buf(t)?.size_expr),
        }
    }

    /// The element of register scratch `t` that `index` names where the code is
    /// emitted: every variable in it is a known constant (`registers_hold`).
    fn register_index(&self, t: TensorId, index: &Expr) -> R<i64> {
        crate::tir::simplify::simplify(&self.with_known(index))
            .as_int()
            .ok_or_else(|| {
                CodegenError::Backend(format!(
                    "`{}` is kept in registers but indexed by {index}",
                    self.c.name(t)
                ))
            })
    }

    /// The vector holding element `k` of register scratch `t`, if `k` is inside it.
    fn register_of(&self, t: TensorId, k: i64) -> Option<Variable> {
        let r = self.regs.get(&t)?;
        (0..r.size)
            .contains(&k)
            .then(|| r.vectors[(k / LANES) as usize])
    }

    /// Reports an access of register scratch `t` outside it, as a failed run-time
    /// check of memory is reported (the call returns the error; a load gives 0).
    fn register_outside(&mut self, t: TensorId, k: i64, store: bool) {
        self.c.stats.checked_accesses += 1;
        let size = self.regs.get(&t).map_or(0, |r| r.size);
        let ctx = self.ctx;
        let args = [t.0 as i64, k, size, store as i64].map(|x| self.b.ins().iconst(I64, x));
        self.call_rt_i64(
            rt::oob as *const (),
            None,
            &[ctx, args[0], args[1], args[2], args[3]],
        );
    }

    /// Element `k` of register scratch `t`.
    fn register_get(&mut self, t: TensorId, k: i64) -> Value {
        match self.register_of(t, k) {
            Some(v) => {
                let lanes = self.b.use_var(v);
                self.b.ins().extractlane(lanes, (k % LANES) as u8)
            }
            None => {
                self.register_outside(t, k, false);
                self.b.ins().f32const(0.0f32)
            }
        }
    }

    fn register_set(&mut self, t: TensorId, k: i64, x: Value) {
        match self.register_of(t, k) {
            Some(v) => {
                let lanes = self.b.use_var(v);
                let lanes = self.b.ins().insertlane(lanes, x, (k % LANES) as u8);
                self.b.def_var(v, lanes);
            }
            None => self.register_outside(t, k, true),
        }
    }

    /// Elements `k..k + 4` of register scratch `t`: one vector when `k` is aligned.
    fn register_vector(&mut self, t: TensorId, k: i64) -> Value {
        if let (0, Some(v)) = (k % LANES, self.register_of(t, k + LANES - 1)) {
            return self.b.use_var(v);
        }
        let zero = self.b.ins().f32const(0.0f32);
        let mut lanes = self.b.ins().splat(types::F32X4, zero);
        for j in 0..LANES {
            let x = self.register_get(t, k + j);
            lanes = self.b.ins().insertlane(lanes, x, j as u8);
        }
        lanes
    }

    fn register_set_vector(&mut self, t: TensorId, k: i64, x: Value) {
        if let (0, Some(v)) = (k % LANES, self.register_of(t, k + LANES - 1)) {
            self.b.def_var(v, x);
            return;
        }
        for j in 0..LANES {
            let lane = self.b.ins().extractlane(x, j as u8);
            self.register_set(t, k + j, lane);
        }
    }

    fn buf(&self, t: TensorId) -> R<Buf> {
        self.bufs.get(&t).cloned().ok_or_else(|| {
            CodegenError::Type(format!(
                "`{}` is accessed outside its allocation",
                self.c.name(t)
            ))
        })
    }

    /// Calls a Rust helper by address.
    fn call_rt(
        &mut self,
        f: *const (),
        params: &[Type],
        ret: Option<Type>,
        args: &[Value],
    ) -> Option<Value> {
        let mut sig = self.c.module.make_signature();
        sig.params.extend(params.iter().map(|t| AbiParam::new(*t)));
        sig.returns.extend(ret.map(AbiParam::new));
        let sr = self.b.import_signature(sig);
        let callee = self.b.ins().iconst(I64, f as i64);
        let call = self.b.ins().call_indirect(sr, callee, args);
        self.b.inst_results(call).first().copied()
    }

    /// Calls a Rust helper whose parameters are all i64 (ids, indices, sizes and
    /// pointers), one per argument.
    fn call_rt_i64(&mut self, f: *const (), ret: Option<Type>, args: &[Value]) -> Option<Value> {
        self.call_rt(f, &vec![I64; args.len()], ret, args)
    }

    // ---- expressions -------------------------------------------------------------

    fn var(&self, v: &Var) -> R<Variable> {
        self.vars.get(&v.id).copied().ok_or_else(|| {
            CodegenError::Type(format!(
                "variable `{}` is not bound by an enclosing loop",
                v.name
            ))
        })
    }

    /// An integer expression (index, extent, size); `what` names its use for errors.
    fn int(&mut self, e: &Expr, what: &dyn Fn() -> String) -> R<Value> {
        if !e.is_int() {
            return Err(CodegenError::Type(format!(
                "{} is a float expression: {e}",
                what()
            )));
        }
        self.expr(e)
    }

    fn float(&mut self, e: &Expr) -> R<Value> {
        let v = self.expr(e)?;
        Ok(if e.is_int() {
            self.b.ins().fcvt_from_sint(F32, v)
        } else {
            v
        })
    }

    /// `e != 0` as a boolean (i8).
    fn truth(&mut self, e: &Expr) -> R<Value> {
        let v = self.expr(e)?;
        Ok(if e.is_int() {
            self.b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
        } else {
            let z = self.b.ins().f32const(0.0f32);
            self.b.ins().fcmp(FloatCC::NotEqual, v, z)
        })
    }

    fn bool_to_int(&mut self, c: Value) -> Value {
        self.b.ins().uextend(I64, c)
    }

    /// Emits `e`; integer expressions give an i64, the others an f32. The type is static
    /// (`Expr::is_int`), the one the interpreter finds at run time.
    fn expr(&mut self, e: &Expr) -> R<Value> {
        Ok(match e {
            Expr::Int(v) => self.b.ins().iconst(I64, *v),
            Expr::Float(v) => self.b.ins().f32const(*v as f32),
            Expr::Var(v) => {
                let var = self.var(v)?;
                self.b.use_var(var)
            }
            Expr::Bin(op @ (BinOp::And | BinOp::Or), a, b) => self.logic(*op, a, b)?,
            Expr::Bin(op, a, b) if e.is_int() && *op != BinOp::Div && a.is_int() && b.is_int() => {
                self.int_bin(*op, a, b)?
            }
            Expr::Bin(op, a, b) => self.float_bin(*op, a, b)?,
            Expr::Not(a) => {
                let t = self.truth(a)?;
                let n = self.b.ins().bxor_imm_s(t, 1);
                self.bool_to_int(n)
            }
            Expr::Select(c, a, b) => self.select(e, c, a, b)?,
            Expr::Call(f, args) => {
                let x = args.first().ok_or_else(|| {
                    CodegenError::Type(format!("intrinsic without argument: {e}"))
                })?;
                let x = self.float(x)?;
                match f {
                    Intrinsic::Sqrt => self.b.ins().sqrt(x),
                    Intrinsic::Round => self.b.ins().nearest(x),
                    Intrinsic::Floor => self.b.ins().floor(x),
                    Intrinsic::Ceil => self.b.ins().ceil(x),
                    Intrinsic::Exp => emitted::emit(&mut self.b, x, vecmath::exp),
                    Intrinsic::Log => self.call_f32(rt::logf as *const (), x),
                    Intrinsic::Math(f) => self.call_f32(rt::math_fn(*f), x),
                    Intrinsic::Tanh => emitted::emit(&mut self.b, x, vecmath::tanh),
                    Intrinsic::Erf => emitted::emit(&mut self.b, x, vecmath::erf),
                    Intrinsic::Sigmoid => emitted::emit(&mut self.b, x, vecmath::sigmoid),
                    Intrinsic::Pow => {
                        let y = args.get(1).ok_or_else(|| {
                            CodegenError::Type(format!("pow without exponent: {e}"))
                        })?;
                        let y = self.float(y)?;
                        self.call_rt(rt::powf as *const (), &[F32, F32], Some(F32), &[x, y])
                            .expect("the helper returns a value")
                    }
                }
            }
            Expr::Load { buffer, index } => self.load(*buffer, index)?,
            Expr::Read { tensor, .. } => {
                return Err(CodegenError::Type(format!(
                    "read of `{}` survived storage flattening",
                    self.c.name(*tensor)
                )))
            }
        })
    }

    fn call_f32(&mut self, f: *const (), x: Value) -> Value {
        self.call_rt(f, &[F32], Some(F32), &[x])
            .expect("the helper returns a value")
    }

    fn int_bin(&mut self, op: BinOp, a: &Expr, b: &Expr) -> R<Value> {
        let x = self.expr(a)?;
        if let BinOp::FloorDiv | BinOp::FloorMod = op {
            return self.floor_div_mod(op == BinOp::FloorMod, x, b);
        }
        let y = self.expr(b)?;
        let ins = self.b.ins();
        Ok(match op {
            BinOp::Add => ins.iadd(x, y),
            BinOp::Sub => ins.isub(x, y),
            BinOp::Mul => ins.imul(x, y),
            BinOp::Min => ins.smin(x, y),
            BinOp::Max => ins.smax(x, y),
            BinOp::Lt | BinOp::Le | BinOp::Eq | BinOp::Ne => {
                let c = ins.icmp(condition_codes(op).0, x, y);
                self.bool_to_int(c)
            }
            BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod | BinOp::And | BinOp::Or => {
                unreachable!("handled before: float division, floor division and logic")
            }
        })
    }

    /// Floor division or modulo of i64 by `d`, as `tir::expr::floor_div`/`floor_mod`.
    /// `sdiv` traps on 0 and on `MIN / -1`: a constant divisor is handled by cases, one
    /// that cannot be proved safe is checked (zero is reported, as the interpreter does,
    /// and -1 is negation).
    fn floor_div_mod(&mut self, modulo: bool, x: Value, d: &Expr) -> R<Value> {
        match crate::tir::simplify::simplify(d).as_int() {
            Some(0) => Err(CodegenError::Type(format!(
                "integer division by zero (divisor {d})"
            ))),
            Some(c) if c > 0 && c.count_ones() == 1 => Ok(if modulo {
                self.b.ins().band_imm_s(x, c - 1)
            } else {
                self.b.ins().sshr_imm_s(x, i64::from(c.trailing_zeros()))
            }),
            Some(-1) => Ok(self.by_minus_one(modulo, x)),
            Some(_) => {
                let y = self.expr(d)?;
                Ok(self.floor_div_mod_safe(modulo, x, y))
            }
            None if self.lc.prove_safe_divisor(d) => {
                let y = self.expr(d)?;
                Ok(self.floor_div_mod_safe(modulo, x, y))
            }
            None => {
                let y = self.expr(d)?;
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                let (bad, done) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(zero, bad, &[], done, &[]);
                self.b.switch_to_block(bad);
                let ctx = self.ctx;
                self.call_rt_i64(rt::div_zero as *const (), None, &[ctx]);
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                let m1 = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                let unsafe_d = self.b.ins().bor(zero, m1);
                let one = self.b.ins().iconst(I64, 1);
                let safe = self.b.ins().select(unsafe_d, one, y);
                let general = self.floor_div_mod_safe(modulo, x, safe);
                let neg = self.by_minus_one(modulo, x);
                Ok(self.b.ins().select(m1, neg, general))
            }
        }
    }

    fn by_minus_one(&mut self, modulo: bool, x: Value) -> Value {
        if modulo {
            self.b.ins().iconst(I64, 0)
        } else {
            self.b.ins().ineg(x)
        }
    }

    /// Floor division or modulo by a divisor that is neither 0 nor -1.
    fn floor_div_mod_safe(&mut self, modulo: bool, x: Value, y: Value) -> Value {
        let q = self.b.ins().sdiv(x, y);
        let r = self.b.ins().srem(x, y);
        // Truncation rounds towards zero; step down when the remainder and the divisor
        // have opposite signs.
        let rx = self.b.ins().bxor(r, y);
        let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, rx, 0);
        let nz = self.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
        let adj = self.b.ins().band(neg, nz);
        if modulo {
            let zero = self.b.ins().iconst(I64, 0);
            let add = self.b.ins().select(adj, y, zero);
            self.b.ins().iadd(r, add)
        } else {
            let one = self.bool_to_int(adj);
            self.b.ins().isub(q, one)
        }
    }

    fn float_bin(&mut self, op: BinOp, a: &Expr, b: &Expr) -> R<Value> {
        let x = self.float(a)?;
        let y = self.float(b)?;
        if let Some(v) = float_arith_of(&mut self.b, op, (a, x), (b, y)) {
            return Ok(v);
        }
        let ins = self.b.ins();
        Ok(match op {
            BinOp::FloorDiv => {
                let q = ins.fdiv(x, y);
                self.b.ins().floor(q)
            }
            BinOp::FloorMod => {
                let q = ins.fdiv(x, y);
                let f = self.b.ins().floor(q);
                let m = self.b.ins().fmul(y, f);
                self.b.ins().fsub(x, m)
            }
            BinOp::Lt | BinOp::Le | BinOp::Eq | BinOp::Ne => {
                let c = ins.fcmp(condition_codes(op).1, x, y);
                self.bool_to_int(c)
            }
            BinOp::And | BinOp::Or => unreachable!("handled before: logic"),
            _ => unreachable!("float_arith emitted it"),
        })
    }

    /// `a && b` or `a || b` of the operands' truth (`!= 0`), as 0 or 1, whatever
    /// their types.
    fn logic(&mut self, op: BinOp, a: &Expr, b: &Expr) -> R<Value> {
        let p = self.truth(a)?;
        let q = self.truth(b)?;
        let r = if op == BinOp::And {
            self.b.ins().band(p, q)
        } else {
            self.b.ins().bor(p, q)
        };
        Ok(self.bool_to_int(r))
    }

    /// A select whose branches load is compiled to branches (only the chosen side runs,
    /// as in the interpreter: a guarded load must not be performed); others to `select`.
    fn select(&mut self, e: &Expr, c: &Expr, a: &Expr, b: &Expr) -> R<Value> {
        let int = e.is_int();
        let side = |s: &mut Self, x: &Expr| if int { s.expr(x) } else { s.float(x) };
        let loads = |x: &Expr| {
            let mut l = false;
            x.visit(&mut |n| l |= matches!(n, Expr::Load { .. }));
            l
        };
        let cond = self.truth(c)?;
        if !loads(a) && !loads(b) {
            let x = side(self, a)?;
            let y = side(self, b)?;
            return Ok(self.b.ins().select(cond, x, y));
        }
        let out = self.b.declare_var(if int { I64 } else { F32 });
        let (tb, eb, done) = self.branch(cond);
        for (blk, x, negated) in [(tb, a, false), (eb, b, true)] {
            self.b.switch_to_block(blk);
            let n = self.lc.assume(c, negated);
            let v = side(self, x);
            self.lc.forget(n);
            let v = v?;
            self.b.def_var(out, v);
            self.b.ins().jump(done, &[]);
        }
        self.b.switch_to_block(done);
        Ok(self.b.use_var(out))
    }

    /// Branches on the boolean `cond` to a new then-block or else-block; returns
    /// them with a new block for both to join at.
    fn branch(&mut self, cond: Value) -> (Block, Block, Block) {
        let (then_block, else_block, join) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(cond, then_block, &[], else_block, &[]);
        (then_block, else_block, join)
    }

    fn address(&mut self, buf: &Buf, idx: Value) -> Value {
        let base = self.b.use_var(buf.ptr);
        let off = self.b.ins().ishl_imm_s(idx, 2);
        self.b.ins().iadd(base, off)
    }

    /// The address of element `index` of `buf` (an access proved inside) as a pointer
    /// and a byte offset: the index's constant part, with the known constants of the
    /// copy being emitted put in, is the offset, so that the copies of an unrolled
    /// body share the arithmetic of the part that varies (one value after GVN).
    fn address_of(&mut self, buf: &Buf, index: &Expr) -> R<(Value, i32)> {
        if !index.is_int() {
            return Err(CodegenError::Type(format!(
                "an index is a float expression: {index}"
            )));
        }
        let mut linear = Linear::of(&self.with_known(index));
        let offset = linear
            .c
            .checked_mul(4)
            .and_then(|b| i32::try_from(b).ok())
            .filter(|b| b.checked_add(16).is_some());
        let (index, offset) = match offset {
            Some(offset) => {
                linear.c = 0;
                (linear.to_expr(), offset)
            }
            None => (index.clone(), 0),
        };
        let idx = self.expr(&index)?;
        Ok((self.address(buf, idx), offset))
    }

    /// The flags of a load of `t` proved inside it: `base`, and when the function
    /// never writes `t` (an operand), read-only and movable, so that Cranelift places
    /// the load where its value is first used instead of where it was emitted (with
    /// every load of an unrolled window first and their values spilled, as a body
    /// whose accumulators are in registers has no store to keep them in order).
    fn load_flags(&self, t: TensorId, base: MemFlagsData) -> MemFlagsData {
        if self.c.written.contains(&t) {
            base
        } else {
            base.with_readonly().with_can_move()
        }
    }

    /// Emits `access` of `index` in buffer `t`: at an address with the index's
    /// constant part as the offset when the index is proved inside the buffer,
    /// else behind a run-time check that reports an index outside it (the
    /// access then gets `checked` true and offset 0). An index proved outside
    /// is an error.
    fn access(
        &mut self,
        t: TensorId,
        index: &Expr,
        store: bool,
        access: &mut dyn FnMut(&mut Self, Value, i32, bool),
    ) -> R<()> {
        let buf = self.buf(t)?;
        let proof = match index.is_int() {
            true => self.lc.prove_inside(index, &buf.size_expr),
            false => Proof::Unknown,
        };
        match proof {
            Proof::Inside => {
                let (addr, offset) = self.address_of(&buf, index)?;
                access(self, addr, offset, false);
                return Ok(());
            }
            Proof::Outside => {
                return Err(CodegenError::OutOfBounds(format!(
                    "{} `{}` at index {index} is outside its {} elements",
                    if store { "store to" } else { "load of" },
                    self.c.name(t),
                    buf.size_expr
                )))
            }
            Proof::Unknown => {}
        }
        let name = self.c.name(t);
        let idx = self.int(index, &|| format!("the index of `{name}`"))?;
        self.c.stats.checked_accesses += 1;
        let size = self.b.use_var(buf.size);
        let ge = self
            .b
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, idx, 0);
        let lt = self.b.ins().icmp(IntCC::SignedLessThan, idx, size);
        let ok = self.b.ins().band(ge, lt);
        let (good, bad, done) = self.branch(ok);
        self.b.switch_to_block(bad);
        let id = self.b.ins().iconst(I64, t.0 as i64);
        let st = self.b.ins().iconst(I64, store as i64);
        let ctx = self.ctx;
        self.call_rt_i64(rt::oob as *const (), None, &[ctx, id, idx, size, st]);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(good);
        let addr = self.address(&buf, idx);
        access(self, addr, 0, true);
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        Ok(())
    }

    /// Loads the f32 at `index` of buffer `t` (0 where a checked index is outside).
    fn load(&mut self, t: TensorId, index: &Expr) -> R<Value> {
        if self.regs.contains_key(&t) {
            let k = self.register_index(t, index)?;
            return Ok(self.register_get(t, k));
        }
        let out = self.b.declare_var(F32);
        let zero = self.b.ins().f32const(0.0f32);
        self.b.def_var(out, zero);
        self.access(t, index, false, &mut |s, addr, offset, checked| {
            // A checked load must stay behind its check.
            let flags = match checked {
                true => MemFlagsData::trusted(),
                false => s.load_flags(t, MemFlagsData::trusted()),
            };
            let v = s.b.ins().load(F32, flags, addr, offset);
            s.b.def_var(out, v);
        })?;
        Ok(self.b.use_var(out))
    }

    /// Stores the f32 `v` at `index` of buffer `t`, proved or checked inside.
    fn store(&mut self, t: TensorId, index: &Expr, v: Value) -> R<()> {
        if self.regs.contains_key(&t) {
            let k = self.register_index(t, index)?;
            self.register_set(t, k, v);
            return Ok(());
        }
        self.access(t, index, true, &mut |s, addr, offset, _| {
            s.b.ins().store(MemFlagsData::trusted(), v, addr, offset);
        })
    }

    // ---- statements --------------------------------------------------------------

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s {
            Stmt::For(l) => self.for_loop(l),
            Stmt::Allocate { buffer, size, body } => self.allocate(*buffer, size, body),
            Stmt::Store {
                buffer,
                index,
                value,
            } => {
                let v = self.float(value)?;
                self.store(*buffer, index, v)
            }
            Stmt::Seq(v) => v.iter().try_for_each(|x| self.stmt(x)),
            Stmt::IfThenElse {
                cond,
                then_case,
                else_case,
                ..
            } => {
                let c = self.truth(cond)?;
                let (tb, eb, done) = self.branch(c);
                self.b.switch_to_block(tb);
                let n = self.lc.assume(cond, false);
                self.stmt(then_case)?;
                self.lc.forget(n);
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(eb);
                if let Some(e) = else_case {
                    let n = self.lc.assume(cond, true);
                    self.stmt(e)?;
                    self.lc.forget(n);
                }
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
                Ok(())
            }
            // Information for the passes that produced it; the interpreter checks it.
            Stmt::Assume { body, .. } => self.stmt(body),
            Stmt::KernelCall { name, args } => self.kernel_call(name, args),
            Stmt::Realize { tensor, .. } | Stmt::Provide { tensor, .. } => {
                Err(CodegenError::Type(format!(
                    "`{}` is not storage-flattened (realize/provide)",
                    self.c.name(*tensor)
                )))
            }
        }
    }

    fn allocate(&mut self, t: TensorId, size: &Expr, body: &Stmt) -> R<()> {
        if let Some(n) = crate::tir::simplify::simplify(size).as_int() {
            if (1..=REGISTER_SCRATCH_ELEMS).contains(&n)
                && registers_hold(t, body, &mut vec![], false)
            {
                self.c.stats.register_allocs += 1;
                // Undefined contents, as the IR allows; zeros keep every use defined.
                let zero = self.b.ins().f32const(0.0f32);
                let zeros = self.b.ins().splat(types::F32X4, zero);
                let vectors = (0..(n + LANES - 1) / LANES)
                    .map(|_| {
                        let v = self.b.declare_var(types::F32X4);
                        self.b.def_var(v, zeros);
                        v
                    })
                    .collect();
                let old = self.regs.insert(t, Regs { vectors, size: n });
                let r = self.stmt(body);
                match old {
                    Some(o) => self.regs.insert(t, o),
                    None => self.regs.remove(&t),
                };
                return r;
            }
        }
        let name = self.c.name(t);
        let n = self.int(size, &|| format!("the size of `{name}`"))?;
        let ctx = self.ctx;
        let id = self.b.ins().iconst(I64, t.0 as i64);
        let bound = self.lc.const_max(size);
        let on_stack = bound.is_some_and(|b| b <= STACK_SCRATCH_ELEMS);
        let ptr = if let (true, Some(b)) = (on_stack, bound) {
            self.c.stats.stack_allocs += 1;
            let bytes = (b.max(LANES) * 4) as u32;
            let slot = self.b.create_sized_stack_slot(StackSlotData::new(
                StackSlotKind::ExplicitSlot,
                bytes,
                4,
            ));
            if !self
                .lc
                .relax(size)
                .min()
                .is_some_and(|m| crate::tir::simplify::prove_ge_zero(m, &self.lc.vb))
            {
                // Reported as the interpreter does; the body's accesses all fail their
                // checks (no access of a negative-size buffer can be proved).
                let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, n, 0);
                let (bad, done) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(neg, bad, &[], done, &[]);
                self.b.switch_to_block(bad);
                self.call_rt_i64(rt::alloc_f32 as *const (), Some(I64), &[ctx, id, n]);
                self.b.ins().jump(done, &[]);
                self.b.switch_to_block(done);
            }
            self.b.ins().stack_addr(I64, slot, 0)
        } else {
            self.c.stats.heap_allocs += 1;
            self.call_rt_i64(rt::alloc_f32 as *const (), Some(I64), &[ctx, id, n])
                .expect("alloc returns a pointer")
        };
        let old = self.bind_buffer(t, ptr, n, size.clone());
        self.stmt(body)?;
        if !on_stack {
            self.call_rt_i64(rt::free_f32 as *const (), None, &[ptr, n]);
        }
        self.restore_buffer(t, old);
        Ok(())
    }

    /// A counted loop `var = lo, lo + step, ... < hi` around `body`.
    fn counted(
        &mut self,
        var: Variable,
        lo: Value,
        hi: Value,
        step: i64,
        body: &mut dyn FnMut(&mut Self) -> R<()>,
    ) -> R<()> {
        let (head, blk, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.def_var(var, lo);
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(head);
        let v = self.b.use_var(var);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, v, hi);
        self.b.ins().brif(more, blk, &[], done, &[]);
        self.b.switch_to_block(blk);
        body(self)?;
        let v = self.b.use_var(var);
        let next = self.b.ins().iadd_imm_s(v, step);
        self.b.def_var(var, next);
        self.b.ins().jump(head, &[]);
        self.b.switch_to_block(done);
        Ok(())
    }

    fn for_loop(&mut self, l: &Loop) -> R<()> {
        let (var, min, extent, kind, body) = (&l.var, &l.min, &l.extent, l.kind, &*l.body);
        let what = || format!("the range of loop `{}`", var.name);
        let lo = self.int(min, &what)?;
        let n = self.int(extent, &what)?;
        let independent =
            kind == ForKind::Parallel && iterations_independent(&self.lc, var, min, extent, body);
        if kind == ForKind::Parallel && !independent {
            self.c.stats.serialized_parallel_loops += 1;
        }
        if !self.lc.push(var, min, extent) {
            return Ok(()); // provably no iteration
        }
        let r = if independent {
            self.parallel(var, lo, n, body)
        } else {
            let v = self.b.declare_var(I64);
            let old = self.vars.insert(var.id, v);
            let const_n = crate::tir::simplify::simplify(extent).as_int();
            let copies = emitted_as_copies(kind, const_n, body);
            let r = match (kind, const_n) {
                (ForKind::Vectorized, Some(c)) => self.vector_loop(var, min, v, lo, c, body),
                (ForKind::Unrolled, Some(c)) if copies => {
                    self.c.stats.unrolled_loops += 1;
                    self.repeat(v, lo, c, 1, MAX_UNROLL, &mut |s| s.stmt(body))
                }
                // A short loop around a small body, a pooling or convolution window
                // say: its copies let the indices fold to constants.
                (ForKind::Serial, Some(c)) if copies => {
                    self.repeat(v, lo, c, 1, SHORT_LOOP, &mut |s| s.stmt(body))
                }
                _ => {
                    let hi = self.b.ins().iadd(lo, n);
                    self.counted(v, lo, hi, 1, &mut |s| s.stmt(body))
                }
            };
            match old {
                Some(o) => self.vars.insert(var.id, o),
                None => self.vars.remove(&var.id),
            };
            r
        };
        self.lc.pop();
        r
    }

    /// A vectorized loop of constant extent `n`: 4 lanes at a time while at least 4
    /// remain, then the scalar body for the tail. Two bodies have a vector form: a
    /// store that moves with the loop (`analysis::vectorizable`), and a reduction, an
    /// update of one element that does not (`ReduceOp::split`), accumulated in the
    /// lanes of a vector that are combined once at the end (a sum is added up in
    /// another order than the scalar loop's). Other bodies run as a scalar loop.
    fn vector_loop(
        &mut self,
        var: &Var,
        min: &Expr,
        v: Variable,
        lo: Value,
        n: i64,
        body: &Stmt,
    ) -> R<()> {
        let main = n / LANES * LANES;
        let hi = self.b.ins().iadd_imm_s(lo, n);
        let form = match body {
            Stmt::Store {
                buffer,
                index,
                value,
            } if main > 0 => self.vector_form(var, *buffer, index, value)?,
            _ => None,
        };
        let Some(form) = form else {
            if self.regs.keys().any(|t| mentions(body, *t)) {
                // Its copies keep the indices of register scratch constants
                // (`registers_hold` counted on them).
                return self.repeat(v, lo, n, 1, n, &mut |s| s.stmt(body));
            }
            return self.counted(v, lo, hi, 1, &mut |s| s.stmt(body));
        };
        self.c.stats.vector_loops += 1;
        // The vector steps cover the first `main` iterations: bounded to them, the
        // element after a stride-2 pair's last lane is proved inside its buffer
        // where the loop's last iteration would put it outside.
        self.lc.pop();
        self.lc.push(var, min, &Expr::Int(main));
        let split = self.offset(lo, main);
        let lanes = match form {
            VectorForm::Store(_, _, value) => value,
            VectorForm::Reduce(_, _, _, source) => source,
        };
        // A loop, not copies: what is hoisted must stay before it.
        let anchor = main / LANES > SHORT_LOOP;
        self.hoist(var, lanes, anchor)?;
        match form {
            VectorForm::Store(buffer, index, value) => {
                self.repeat(v, lo, main / LANES, LANES, SHORT_LOOP, &mut |s| {
                    let x = s.vvalue(var, value)?;
                    if s.regs.contains_key(&buffer) {
                        let k = s.register_index(buffer, index)?;
                        s.register_set_vector(buffer, k, x);
                        return Ok(());
                    }
                    let buf = s.buf(buffer)?;
                    let (addr, offset) = s.address_of(&buf, index)?;
                    s.b.ins()
                        .store(MemFlagsData::new().with_notrap(), x, addr, offset);
                    Ok(())
                })?;
            }
            VectorForm::Reduce(op, buffer, index, source) => {
                // Several accumulators, so that consecutive steps do not wait on
                // each other's result.
                let identity = self.b.ins().f32const(op.identity() as f32);
                let start = self.b.ins().splat(types::F32X4, identity);
                let accs = [0; ACCUMULATORS].map(|_| {
                    let acc = self.b.declare_var(types::F32X4);
                    self.b.def_var(acc, start);
                    acc
                });
                // A maximum or minimum keeps the lanes that read a NaN apart
                // (`seen_nan`) and takes the values with one instruction each.
                let bin = if op == ReduceOp::Max {
                    BinOp::Max
                } else {
                    BinOp::Min
                };
                let seen = matches!(op, ReduceOp::Max | ReduceOp::Min).then(|| {
                    let zero = self.b.ins().f32const(0.0f32);
                    let none = self.b.ins().splat(types::F32X4, zero);
                    [0; ACCUMULATORS].map(|_| {
                        let seen = self.b.declare_var(types::F32X4);
                        self.b.def_var(seen, none);
                        seen
                    })
                });
                let step = |s: &mut Self, k: usize, at: i64| -> R<()> {
                    let x = s.shifted(v, at, &mut |s| s.vvalue(var, source))?;
                    let a = s.b.use_var(accs[k]);
                    let a = match seen {
                        Some(seen) => {
                            let nan = s.b.use_var(seen[k]);
                            let nan = seen_nan(&mut s.b, nan, x);
                            s.b.def_var(seen[k], nan);
                            max_min_keeping(&mut s.b, bin, a, x)
                        }
                        None => combine(&mut s.b, op, a, x),
                    };
                    s.b.def_var(accs[k], a);
                    Ok(())
                };
                let width = ACCUMULATORS as i64 * LANES;
                let steps = |s: &mut Self, count: i64| -> R<()> {
                    (0..count).try_for_each(|k| step(s, k as usize, k * LANES))
                };
                self.repeat(v, lo, main / width, width, SHORT_LOOP, &mut |s| {
                    steps(s, ACCUMULATORS as i64)
                })?;
                if main % width != 0 {
                    let rest = self.offset(lo, main - main % width);
                    self.repeat(v, rest, 1, LANES, 1, &mut |s| {
                        steps(s, main % width / LANES)
                    })?;
                }
                let mut lanes = accs.map(|acc| self.b.use_var(acc));
                if let Some(seen) = seen {
                    // A lane that read a NaN becomes NaN (all bits set).
                    for (a, seen) in lanes.iter_mut().zip(seen) {
                        let nan = self.b.use_var(seen);
                        *a = self.b.ins().bor(*a, nan);
                    }
                }
                let lanes = lanes
                    .into_iter()
                    .reduce(|a, b| combine(&mut self.b, op, a, b))
                    .expect("accumulators");
                let mut r = self.b.ins().extractlane(lanes, 0);
                for k in 1..LANES {
                    let x = self.b.ins().extractlane(lanes, k as u8);
                    r = combine(&mut self.b, op, r, x);
                }
                let old = self.load(buffer, index)?;
                let new = combine(&mut self.b, op, old, r);
                // Combined here once, whatever reads the result later.
                let new = self.anchored(new);
                self.store(buffer, index, new)?;
            }
        }
        self.hoisted.clear();
        self.lc.pop();
        self.lc.push(var, min, &Expr::Int(n));
        self.repeat(v, split, n - main, 1, SHORT_LOOP, &mut |s| s.stmt(body))
    }

    /// Computes the parts of `e` that do not move with `var` (a row's
    /// normalization factor, a loaded scalar, an integer count) once, as float
    /// splats for `vexpr`; with `anchor` (before a loop), each is `anchored` there.
    fn hoist(&mut self, var: &Var, e: &Expr, anchor: bool) -> R<()> {
        if !e.uses_var(var) {
            if !matches!(e, Expr::Float(_) | Expr::Int(_)) {
                let x = self.float(e)?;
                let mut lanes = self.b.ins().splat(types::F32X4, x);
                if anchor {
                    lanes = self.anchored(lanes);
                }
                self.hoisted.insert(e as *const Expr, lanes);
            }
            return Ok(());
        }
        match e {
            // A condition that does not move is a scalar test, not hoisted.
            Expr::Bin(BinOp::And | BinOp::Or, p, q) => [p, q]
                .into_iter()
                .filter(|c| c.uses_var(var))
                .try_for_each(|c| self.hoist(var, c, anchor)),
            Expr::Bin(_, a, b) => {
                self.hoist(var, a, anchor)?;
                self.hoist(var, b, anchor)
            }
            Expr::Select(c, a, b) => {
                if c.uses_var(var) {
                    self.hoist(var, c, anchor)?;
                }
                self.hoist(var, a, anchor)?;
                self.hoist(var, b, anchor)
            }
            Expr::Not(c) => self.hoist(var, c, anchor),
            Expr::Call(_, args) => args.iter().try_for_each(|a| self.hoist(var, a, anchor)),
            _ => Ok(()),
        }
    }

    /// `x` stored to a stack slot and loaded back: the load is a side effect, which
    /// Cranelift keeps where it is emitted. Its e-graph pass places a pure value
    /// where it is first used instead, and so moved the combination of a row
    /// maximum held in registers into the loop after it, computed again in every
    /// iteration (softmax 1.4 -> 2.3 ms).
    fn anchored(&mut self, x: Value) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            ty.bytes(),
            4,
        ));
        self.b.ins().stack_store(I64, x, slot, 0);
        self.b.ins().stack_load(I64, ty, slot, 0)
    }

    /// `body` for `var = lo, lo + step, ...`, `count` times: copies of it when the
    /// count is at most `most_copies`, else a counted loop. The statistics count the
    /// first copy only: they describe the function's statements.
    fn repeat(
        &mut self,
        var: Variable,
        lo: Value,
        count: i64,
        step: i64,
        most_copies: i64,
        body: &mut dyn FnMut(&mut Self) -> R<()>,
    ) -> R<()> {
        if count > most_copies {
            let hi = self.b.ins().iadd_imm_s(lo, count * step);
            return self.counted(var, lo, hi, step, body);
        }
        let start = self.constant(lo);
        for k in 0..count {
            let stats = (k > 0).then(|| self.c.stats.clone());
            let x = self.offset(lo, k * step);
            self.b.def_var(var, x);
            if let Some(c) = start {
                self.known.insert(var.as_u32(), c + k * step);
            }
            let r = body(self);
            self.known.remove(&var.as_u32());
            r?;
            if let Some(stats) = stats {
                self.c.stats = stats;
            }
        }
        Ok(())
    }

    /// The value of `v` if it is an integer constant.
    fn constant(&self, v: Value) -> Option<i64> {
        let dfg = &self.b.func.dfg;
        match dfg.value_def(v) {
            ValueDef::Result(inst, _) => match dfg.insts[inst] {
                InstructionData::UnaryImm {
                    opcode: Opcode::Iconst,
                    imm,
                } => Some(imm.bits()),
                _ => None,
            },
            _ => None,
        }
    }

    /// `v + k`, a constant when `v` is one.
    fn offset(&mut self, v: Value, k: i64) -> Value {
        match self.constant(v) {
            Some(c) => self.b.ins().iconst(I64, c + k),
            None => self.b.ins().iadd_imm_s(v, k),
        }
    }

    /// Runs `f` with loop variable `v` moved on by `by` (a later lane), then puts it
    /// back; a known constant moves with it.
    fn shifted<T>(&mut self, v: Variable, by: i64, f: &mut dyn FnMut(&mut Self) -> R<T>) -> R<T> {
        let base = self.b.use_var(v);
        let at = self.b.ins().iadd_imm_s(base, by);
        self.b.def_var(v, at);
        let known = self.known.get(&v.as_u32()).copied();
        if let Some(c) = known {
            self.known.insert(v.as_u32(), c + by);
        }
        let r = f(self);
        self.b.def_var(v, base);
        if let Some(c) = known {
            self.known.insert(v.as_u32(), c);
        }
        r
    }

    /// The vector form of `buffer[index] = value` in a loop over `var`, if it has one
    /// whose vector accesses are all proved: lanes are not checked one by one. Under
    /// a select every load must be, since the vector path computes both sides where
    /// the scalar code reads only the chosen one.
    fn vector_form<'e>(
        &self,
        var: &Var,
        buffer: TensorId,
        index: &'e Expr,
        value: &'e Expr,
    ) -> R<Option<VectorForm<'e>>> {
        let vb = &self.lc.vb;
        let form = if vectorizable(var, buffer, index, value, vb) {
            VectorForm::Store(buffer, index, value)
        } else if index.uses_var(var) {
            return Ok(None);
        } else {
            let is_acc = |e: &Expr| matches!(e, Expr::Load { buffer: b, index: i } if *b == buffer && prove_equal(i, index, vb));
            match ReduceOp::split(value, is_acc) {
                Some((op, source)) if !source.is_int() && !reads(source, buffer) => {
                    VectorForm::Reduce(op, buffer, index, source)
                }
                _ => return Ok(None),
            }
        };
        let lanes = match form {
            VectorForm::Store(..) => {
                if self.lc.prove_inside(index, &self.size_expr(buffer)?) != Proof::Inside {
                    return Ok(None);
                }
                value
            }
            VectorForm::Reduce(_, _, _, source) => source,
        };
        let mut selects = false;
        lanes.visit(&mut |e| selects |= matches!(e, Expr::Select(..)));
        let mut proved = true;
        lanes.visit(&mut |e| {
            if let Expr::Load { buffer, index } = e {
                if selects || e.uses_var(var) {
                    proved &= self
                        .size_expr(*buffer)
                        .is_ok_and(|size| self.lc.prove_inside(index, &size) == Proof::Inside);
                }
            }
        });
        Ok(proved.then_some(form))
    }

    /// The F32X4 value of a vector step (`vexpr`), each distinct load in it emitted
    /// once: a maximum with the NaN rules, say, reads its operand three times.
    fn vvalue(&mut self, var: &Var, e: &Expr) -> R<Value> {
        self.vloads.clear();
        let r = self.vexpr(var, e);
        self.vloads.clear();
        r
    }

    /// An F32X4 value of `e` for lanes `var, var + 1, var + 2, var + 3`: float
    /// arithmetic, selects, unit-stride and stride-2 loads and the inline functions
    /// as vector operations, anything else that moves with `var` computed lane by
    /// lane.
    fn vexpr(&mut self, var: &Var, e: &Expr) -> R<Value> {
        if let Some(&lanes) = self.hoisted.get(&(e as *const Expr)) {
            return Ok(lanes);
        }
        if !e.uses_var(var) {
            let x = self.float(e)?;
            return Ok(self.b.ins().splat(types::F32X4, x));
        }
        if let Expr::Load { .. } = e {
            // Values are emitted in the block the step continues in, so an earlier
            // one dominates every later use.
            if let Some((_, lanes)) = self.vloads.iter().find(|(l, _)| l == e) {
                return Ok(*lanes);
            }
            let lanes = self.vload(var, e)?;
            self.vloads.push((e.clone(), lanes));
            return Ok(lanes);
        }
        if let Some((acc, v)) = max_number_parts(e) {
            let acc = self.vexpr(var, acc)?;
            let v = self.vexpr(var, v)?;
            return Ok(max_number(&mut self.b, acc, v));
        }
        match e {
            Expr::Select(c, a, b) if !e.is_int() => {
                let mask = self.vmask(var, c)?;
                let x = self.vexpr(var, a)?;
                let y = self.vexpr(var, b)?;
                Ok(choose(&mut self.b, mask, x, y))
            }
            Expr::Bin(op, a, b) if !e.is_int() && floats(a, var) && floats(b, var) => {
                let x = self.vexpr(var, a)?;
                let y = self.vexpr(var, b)?;
                match float_arith_of(&mut self.b, *op, (a, x), (b, y)) {
                    Some(v) => Ok(v),
                    None => self.per_lane(var, types::F32X4, &mut |s| s.float(e)),
                }
            }
            Expr::Call(f, args) if args.len() == 1 && !args[0].is_int() => {
                let inline: Option<fn(&mut FunctionBuilder, Value) -> Value> = match f {
                    Intrinsic::Sqrt => Some(|b, x| b.ins().sqrt(x)),
                    Intrinsic::Round => Some(|b, x| b.ins().nearest(x)),
                    Intrinsic::Floor => Some(|b, x| b.ins().floor(x)),
                    Intrinsic::Ceil => Some(|b, x| b.ins().ceil(x)),
                    Intrinsic::Exp => Some(|b, x| emitted::emit(b, x, vecmath::exp)),
                    Intrinsic::Tanh => Some(|b, x| emitted::emit(b, x, vecmath::tanh)),
                    Intrinsic::Erf => Some(|b, x| emitted::emit(b, x, vecmath::erf)),
                    Intrinsic::Sigmoid => Some(|b, x| emitted::emit(b, x, vecmath::sigmoid)),
                    _ => None,
                };
                match inline {
                    Some(f) => {
                        let x = self.vexpr(var, &args[0])?;
                        Ok(f(&mut self.b, x))
                    }
                    None => self.per_lane(var, types::F32X4, &mut |s| s.float(e)),
                }
            }
            _ => self.per_lane(var, types::F32X4, &mut |s| s.float(e)),
        }
    }

    /// The lanes of load `e` (which moves with `var`): one vector load when
    /// unit-stride; two, their even lanes taken, at stride 2 (a window stepping by
    /// 2) when the odd element after the last is proved inside the buffer too;
    /// else lane by lane.
    fn vload(&mut self, var: &Var, e: &Expr) -> R<Value> {
        let Expr::Load { buffer, index } = e else {
            return self.per_lane(var, types::F32X4, &mut |s| s.float(e));
        };
        let vb = &self.lc.vb;
        if has_stride(index, var, 1, vb) {
            if self.regs.contains_key(buffer) {
                let k = self.register_index(*buffer, index)?;
                return Ok(self.register_vector(*buffer, k));
            }
            let buf = self.buf(*buffer)?;
            let (addr, offset) = self.address_of(&buf, index)?;
            let flags = self.load_flags(*buffer, MemFlagsData::new().with_notrap());
            return Ok(self.b.ins().load(types::F32X4, flags, addr, offset));
        }
        let pairs = has_stride(index, var, 2, vb)
            && !self.regs.contains_key(buffer)
            && self.bufs.get(buffer).is_some_and(|b| {
                self.lc.prove_inside(&((**index).clone() + 1), &b.size_expr) == Proof::Inside
            });
        if !pairs {
            return self.per_lane(var, types::F32X4, &mut |s| s.float(e));
        }
        let buf = self.buf(*buffer)?;
        let (addr, offset) = self.address_of(&buf, index)?;
        let flags = self.load_flags(*buffer, MemFlagsData::new().with_notrap());
        let little = MemFlagsData::new().with_endianness(Endianness::Little);
        let mut bytes = [0u8; 16];
        for (lane, chunk) in bytes.chunks_mut(4).enumerate() {
            for (k, b) in chunk.iter_mut().enumerate() {
                // Lane `lane` takes element 2 * lane of the 8 loaded (bytes of both).
                *b = (8 * lane + k) as u8;
            }
        }
        let (lo, hi) = (
            self.b.ins().load(types::I8X16, flags, addr, offset),
            self.b.ins().load(types::I8X16, flags, addr, offset + 16),
        );
        let mask = self
            .b
            .func
            .dfg
            .immediates
            .push(ConstantData::from(&bytes[..]));
        let even = self.b.ins().shuffle(lo, hi, mask);
        Ok(self.b.ins().bitcast(types::F32X4, little, even))
    }

    /// The I32X4 mask (all ones where true) of condition `c` for the four lanes of
    /// `var`: float comparisons, not, and, or as vector operations, any other
    /// condition (an integer comparison of indices, say) lane by lane.
    fn vmask(&mut self, var: &Var, c: &Expr) -> R<Value> {
        if !c.uses_var(var) {
            let t = self.truth(c)?;
            let m = self.b.ins().bmask(types::I32, t);
            return Ok(self.b.ins().splat(types::I32X4, m));
        }
        Ok(match c {
            Expr::Bin(op @ (BinOp::Lt | BinOp::Le | BinOp::Eq | BinOp::Ne), x, y)
                if floats(x, var) && floats(y, var) && !(x.is_int() && y.is_int()) =>
            {
                let (x, y) = (self.vexpr(var, x)?, self.vexpr(var, y)?);
                self.b.ins().fcmp(condition_codes(*op).1, x, y)
            }
            Expr::Bin(op @ (BinOp::And | BinOp::Or), p, q) => {
                let (p, q) = (self.vmask(var, p)?, self.vmask(var, q)?);
                match op {
                    BinOp::And => self.b.ins().band(p, q),
                    _ => self.b.ins().bor(p, q),
                }
            }
            Expr::Not(p) => {
                let p = self.vmask(var, p)?;
                self.b.ins().bnot(p)
            }
            _ => self.per_lane(var, types::I32X4, &mut |s| {
                let t = s.truth(c)?;
                Ok(s.b.ins().bmask(types::I32, t))
            })?,
        })
    }

    /// A vector of type `ty` whose lane `k` is `scalar` computed at `var + k`.
    fn per_lane(
        &mut self,
        var: &Var,
        ty: Type,
        scalar: &mut dyn FnMut(&mut Self) -> R<Value>,
    ) -> R<Value> {
        let v = self.var(var)?;
        let zero = match ty.lane_type() {
            F32 => self.b.ins().f32const(0.0f32),
            t => self.b.ins().iconst(t, 0),
        };
        let mut lanes = self.b.ins().splat(ty, zero);
        for k in 0..LANES {
            let x = self.shifted(v, k, scalar)?;
            lanes = self.b.ins().insertlane(lanes, x, k as u8);
        }
        Ok(lanes)
    }

    /// Outlines `body` as a function of (environment, iteration) and runs it through the
    /// parallel-loop trampoline (`rt::parallel_for`). The environment captures every loop variable and buffer in
    /// scope; scratch allocated in the body lives in the outlined function's frame or
    /// heap, so each iteration has its own.
    fn parallel(&mut self, var: &Var, lo: Value, n: Value, body: &Stmt) -> R<()> {
        self.c.stats.parallel_loops += 1;
        let mut vars: Vec<(u64, Variable)> = self.vars.iter().map(|(k, v)| (*k, *v)).collect();
        vars.sort_by_key(|p| p.0);
        let mut bufs: Vec<(TensorId, Buf)> =
            self.bufs.iter().map(|(k, v)| (*k, v.clone())).collect();
        bufs.sort_by_key(|p| p.0);
        let slots = vars.len() + 2 * bufs.len();
        let env = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (8 * slots.max(1)) as u32,
            3,
        ));
        let mut k = 0;
        let mut put = |s: &mut Self, v: Value| {
            s.b.ins().stack_store(I64, v, env, 8 * k);
            k += 1;
        };
        for (_, v) in &vars {
            let x = self.b.use_var(*v);
            put(self, x);
        }
        for (_, b) in &bufs {
            let p = self.b.use_var(b.ptr);
            put(self, p);
            let s = self.b.use_var(b.size);
            put(self, s);
        }
        let lc = self.lc.clone();
        let loop_var = var.id;
        let id = self.c.function(|e| {
            e.lc = lc;
            let mut k = 0;
            let mut get = |e: &mut FnEmitter| {
                let v = e.b.ins().load(I64, MemFlagsData::trusted(), e.env, 8 * k);
                k += 1;
                v
            };
            for (id, _) in &vars {
                let x = get(e);
                let v = e.b.declare_var(I64);
                e.b.def_var(v, x);
                e.vars.insert(*id, v);
            }
            for (t, b) in &bufs {
                let p = get(e);
                let s = get(e);
                e.bind_buffer(*t, p, s, b.size_expr.clone());
            }
            let v = e.b.declare_var(I64);
            let it = e.iter;
            e.b.def_var(v, it);
            e.vars.insert(loop_var, v);
            e.stmt(body)
        })?;
        let fref = self.c.module.declare_func_in_func(id, self.b.func);
        let fptr = self.b.ins().func_addr(I64, fref);
        let envp = self.b.ins().stack_addr(I64, env, 0);
        let ctx = self.ctx;
        self.call_rt_i64(
            rt::parallel_for as *const (),
            None,
            &[fptr, envp, lo, n, ctx],
        );
        Ok(())
    }

    /// Axis `d` of the kernel argument at `base` in `slot`: its extent and stride.
    fn kernel_axis(
        &mut self,
        slot: StackSlot,
        base: i32,
        d: usize,
        extent: &Expr,
        stride: &Expr,
        what: &dyn Fn() -> String,
    ) -> R<()> {
        let ext = self.int(extent, what)?;
        self.b
            .ins()
            .stack_store(I64, ext, slot, base + kl::EXTENTS + 8 * d as i32);
        let sv = self.int(&simplify(stride), what)?;
        self.b
            .ins()
            .stack_store(I64, sv, slot, base + kl::STRIDES + 8 * d as i32);
        Ok(())
    }

    fn kernel_call(&mut self, name: &str, args: &[KernelArg]) -> R<()> {
        let kerr = |m: String| CodegenError::Kernel(format!("micro-kernel `{name}`: {m}"));
        let kernel = self
            .c
            .kernels
            .get(name)
            .ok_or_else(|| kerr("not registered".into()))?
            .clone();
        let kptr = match self.c.used_kernels.iter().find(|k| k.0 == name) {
            Some(k) => Arc::as_ptr(k) as usize,
            None => {
                let b = Arc::new((name.to_string(), kernel));
                let p = Arc::as_ptr(&b) as usize;
                self.c.used_kernels.push(b);
                p
            }
        };
        self.c.stats.kernel_calls += 1;
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            kl::SIZE * args.len().max(1) as u32,
            3,
        ));
        let (call_blk, skip) = (self.b.create_block(), self.b.create_block());
        for (k, a) in args.iter().enumerate() {
            let tname = self.c.name(a.tensor);
            if args[..k].iter().any(|p| p.tensor == a.tensor) {
                return Err(kerr(format!("gets the buffer of `{tname}` twice")));
            }
            let view = a
                .buffer
                .as_ref()
                .ok_or_else(|| kerr(format!("argument `{tname}` is not storage-flattened")))?;
            let rank = a.region.len();
            if rank > MAX_RANK || view.origin.len() != rank || view.extents.len() != rank {
                return Err(kerr(format!(
                    "argument `{tname}` has a region of rank {rank} on a {}-d buffer (at most {MAX_RANK})",
                    view.extents.len()
                )));
            }
            if a.walk.len() > MAX_RANK || a.walk.iter().any(|w| w.moves.len() != rank) {
                return Err(kerr(format!(
                    "argument `{tname}` walks {} loops of {rank}-d moves (at most {MAX_RANK} loops)",
                    a.walk.len()
                )));
            }
            let st = strides(&view.layout, &view.extents).ok_or_else(|| {
                kerr(format!(
                    "argument `{tname}` has a blocked layout; kernel regions are strided"
                ))
            })?;
            let buf = self.buf(a.tensor)?;
            let base = k as i32 * kl::SIZE as i32;
            let mut offset = Expr::Int(0);
            for (d, ((r, o), e)) in a
                .region
                .iter()
                .zip(&view.origin)
                .zip(&view.extents)
                .enumerate()
            {
                let rel = r.min.clone() - o.clone();
                offset = offset + rel.clone() * st[d].clone();
                let what = || format!("the region of `{tname}` in micro-kernel `{name}`");
                let lo_ok = self.lc.prove_inside(&rel, e);
                let end = rel.clone() + r.extent.clone() - 1;
                let hi_ok = self.lc.prove_inside(&end, e);
                if lo_ok == Proof::Outside || hi_ok == Proof::Outside {
                    return Err(CodegenError::OutOfBounds(format!(
                        "{} leaves the buffer along axis {d}",
                        what()
                    )));
                }
                if lo_ok != Proof::Inside || hi_ok != Proof::Inside {
                    self.c.stats.checked_accesses += 1;
                    let relv = self.int(&rel, &what)?;
                    let endv = self.int(&end, &what)?;
                    let ev = self.int(e, &what)?;
                    let a0 = self
                        .b
                        .ins()
                        .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, relv, 0);
                    let a1 = self.b.ins().icmp(IntCC::SignedLessThan, endv, ev);
                    let ok = self.b.ins().band(a0, a1);
                    let (next, bad) = (self.b.create_block(), self.b.create_block());
                    self.b.ins().brif(ok, next, &[], bad, &[]);
                    self.b.switch_to_block(bad);
                    let (ctx, id, dim) = (
                        self.ctx,
                        self.b.ins().iconst(I64, a.tensor.0 as i64),
                        self.b.ins().iconst(I64, d as i64),
                    );
                    self.call_rt_i64(rt::region_oob as *const (), None, &[ctx, id, dim]);
                    self.b.ins().jump(skip, &[]);
                    self.b.switch_to_block(next);
                }
                if a.walk.is_empty() {
                    self.kernel_axis(slot, base, d, &r.extent, &st[d], &what)?;
                }
            }
            // A walk's view: per loop, its extent and the buffer stride of its moves.
            for (l, w) in a.walk.iter().enumerate() {
                let stride = w
                    .moves
                    .iter()
                    .zip(&st)
                    .fold(Expr::Int(0), |acc, (m, s)| acc + s.clone() * *m);
                let what = || format!("the walk of `{tname}` in micro-kernel `{name}`");
                self.kernel_axis(slot, base, l, &Expr::Int(w.extent), &stride, &what)?;
            }
            let off = self.int(&offset, &|| format!("the region of `{tname}`"))?;
            let ptr = self.b.use_var(buf.ptr);
            let axes = if a.walk.is_empty() {
                rank
            } else {
                a.walk.len()
            };
            let rk = self.b.ins().iconst(I64, axes as i64);
            self.b.ins().stack_store(I64, ptr, slot, base + kl::BASE);
            self.b.ins().stack_store(I64, off, slot, base + kl::OFFSET);
            self.b.ins().stack_store(I64, rk, slot, base + kl::RANK);
        }
        self.b.ins().jump(call_blk, &[]);
        self.b.switch_to_block(call_blk);
        let kp = self.b.ins().iconst(I64, kptr as i64);
        let rp = self.b.ins().stack_addr(I64, slot, 0);
        let nv = self.b.ins().iconst(I64, args.len() as i64);
        let ctx = self.ctx;
        self.call_rt_i64(rt::call_kernel as *const (), None, &[kp, rp, nv, ctx]);
        self.b.ins().jump(skip, &[]);
        self.b.switch_to_block(skip);
        Ok(())
    }
}
