//! Compile-time facts the code generator relies on: whether an access is inside its
//! buffer, whether a loop's iterations touch disjoint memory (for `parallel`), and
//! whether a loop body has the shape the vector path handles.
//!
//! All proofs go through the TIR interval sets and simplifier over the loops that
//! enclose the statement, and the constant bounds of those loops' variables (computed
//! here from the loops themselves, so nothing outside the function is trusted).

use std::collections::HashSet;

use crate::tir::expr::{Expr, Range, TensorId, Var};
use crate::tir::intset::{eval_set_in_order, IntSet};
use crate::tir::layout::{BufferLayout, PhysDim};
use crate::tir::simplify::{const_bounds, prove_equal, prove_ge_zero, prove_le_zero, VarBounds};
use crate::tir::stmt::{KernelArg, Stmt};

/// The loops around the statement being compiled, outermost first, with the constant
/// bounds of their variables.
#[derive(Clone, Default)]
pub(crate) struct LoopCtx {
    pub loops: Vec<(Var, Range)>,
    pub vb: VarBounds,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proof {
    Inside,
    /// Outside the buffer whenever it runs.
    Outside,
    Unknown,
}

impl LoopCtx {
    /// Enters a loop. Returns false when the loop provably runs no iteration.
    pub fn push(&mut self, var: &Var, min: &Expr, extent: &Expr) -> bool {
        let (lo, hi_min) = const_bounds(min, &self.vb);
        let (_, hi_ext) = const_bounds(extent, &self.vb);
        if hi_ext.is_some_and(|e| e <= 0) {
            return false;
        }
        if let (Some(lo), Some(a), Some(e)) = (lo, hi_min, hi_ext) {
            self.vb.set(var, lo, a + e - 1);
        }
        self.loops
            .push((var.clone(), Range::new(min.clone(), extent.clone())));
        true
    }

    pub fn pop(&mut self) {
        if let Some((v, _)) = self.loops.pop() {
            self.vb.remove(&v);
        }
    }

    /// The set of `e` over all enclosing loops.
    pub fn relax(&self, e: &Expr) -> IntSet {
        relax_over(e, &self.loops, &self.vb)
    }

    /// Whether `index` lies in `[0, size)` for every iteration of the enclosing loops.
    pub fn prove_inside(&self, index: &Expr, size: &Expr) -> Proof {
        let lo = self.relax(index);
        // One expression, so that terms of outer loops in the index and the size cancel.
        let over = self.relax(&(index.clone() - size.clone() + 1));
        let ge0 = lo.min().is_some_and(|m| prove_ge_zero(m, &self.vb));
        let lt = over.max().is_some_and(|m| prove_le_zero(m, &self.vb));
        if ge0 && lt {
            Proof::Inside
        } else if lo
            .max()
            .is_some_and(|m| prove_le_zero(&(m.clone() + 1), &self.vb))
            || over
                .min()
                .is_some_and(|m| prove_ge_zero(&(m.clone() - 1), &self.vb))
        {
            Proof::Outside
        } else {
            Proof::Unknown
        }
    }

    /// Whether an integer divisor is never 0 or -1 (sdiv traps on both).
    pub fn prove_safe_divisor(&self, d: &Expr) -> bool {
        let s = self.relax(d);
        s.min()
            .is_some_and(|m| prove_ge_zero(&(m.clone() - 1), &self.vb))
            || s.max()
                .is_some_and(|m| prove_le_zero(&(m.clone() + 2), &self.vb))
    }

    /// Constant upper bound of `e` over the enclosing loops.
    pub fn const_max(&self, e: &Expr) -> Option<i64> {
        self.relax(e)
            .max()
            .and_then(|m| const_bounds(m, &self.vb).1)
    }
}

/// Relaxes the loop variables innermost first: a loop's range may mention outer ones.
fn relax_over(e: &Expr, loops: &[(Var, Range)], vb: &VarBounds) -> IntSet {
    let sets: Vec<(u64, IntSet)> = loops
        .iter()
        .rev()
        .map(|(v, r)| (v.id, IntSet::from_range(r, vb)))
        .collect();
    eval_set_in_order(e, &sets, vb)
}

/// Whether `index` advances by exactly one when `var` does.
pub(crate) fn unit_stride(index: &Expr, var: &Var, vb: &VarBounds) -> bool {
    let next = index.substitute(&|v| (v == var).then(|| var.expr() + 1));
    prove_equal(&next, &(index.clone() + 1), vb)
}

/// Element strides of each logical axis of a buffer with logical extents `extents`, when
/// its layout is a permutation of the axes (no blocking).
pub(crate) fn strides(layout: &BufferLayout, extents: &[Expr]) -> Option<Vec<Expr>> {
    let mut strides = vec![Expr::Int(0); extents.len()];
    let mut run = Expr::Int(1);
    for d in layout.dims.iter().rev() {
        let PhysDim::Axis(a) = *d else { return None };
        strides[a] = run.clone();
        run = run * extents.get(a)?.clone();
    }
    Some(strides)
}

/// The flat offsets of the first and last element of a kernel argument's region
/// (strided buffers are monotone in every axis), relative to its buffer.
pub(crate) fn region_corners(a: &KernelArg) -> Option<(Expr, Expr)> {
    let view = a.buffer.as_ref()?;
    let st = strides(&view.layout, &view.extents)?;
    let mut lo = Expr::Int(0);
    let mut hi = Expr::Int(0);
    for ((r, o), s) in a.region.iter().zip(&view.origin).zip(st) {
        let rel = r.min.clone() - o.clone();
        lo = lo + rel.clone() * s.clone();
        hi = hi + (rel + r.extent.clone() - 1) * s;
    }
    Some((lo, hi))
}

/// One access of a buffer allocated outside a parallel loop, with the loops inside the
/// parallel loop that enclose it.
struct Access {
    buffer: TensorId,
    lo: Expr,
    hi: Expr,
    write: bool,
    loops: Vec<(Var, Range)>,
}

fn loads(e: &Expr, loops: &[(Var, Range)], inner: &HashSet<TensorId>, out: &mut Vec<Access>) {
    e.visit(&mut |x| {
        if let Expr::Load { buffer, index } = x {
            if !inner.contains(buffer) {
                out.push(Access {
                    buffer: *buffer,
                    lo: (**index).clone(),
                    hi: (**index).clone(),
                    write: false,
                    loops: loops.to_vec(),
                });
            }
        }
    });
}

/// Collects the accesses of outer buffers in `s`; false when one cannot be described.
fn collect(
    s: &Stmt,
    loops: &mut Vec<(Var, Range)>,
    inner: &mut HashSet<TensorId>,
    out: &mut Vec<Access>,
) -> bool {
    match s {
        Stmt::For {
            var,
            min,
            extent,
            body,
            ..
        } => {
            loads(min, loops, inner, out);
            loads(extent, loops, inner, out);
            loops.push((var.clone(), Range::new(min.clone(), extent.clone())));
            let ok = collect(body, loops, inner, out);
            loops.pop();
            ok
        }
        Stmt::Allocate { buffer, size, body } => {
            loads(size, loops, inner, out);
            let fresh = inner.insert(*buffer);
            let ok = collect(body, loops, inner, out);
            if fresh {
                inner.remove(buffer);
            }
            ok
        }
        Stmt::Store {
            buffer,
            index,
            value,
        } => {
            loads(index, loops, inner, out);
            loads(value, loops, inner, out);
            if !inner.contains(buffer) {
                out.push(Access {
                    buffer: *buffer,
                    lo: index.clone(),
                    hi: index.clone(),
                    write: true,
                    loops: loops.clone(),
                });
            }
            true
        }
        Stmt::Seq(v) => v.iter().all(|x| collect(x, loops, inner, out)),
        Stmt::IfThenElse {
            cond,
            then_case,
            else_case,
            ..
        } => {
            loads(cond, loops, inner, out);
            collect(then_case, loops, inner, out)
                && else_case
                    .as_ref()
                    .is_none_or(|e| collect(e, loops, inner, out))
        }
        Stmt::Assume { body, .. } => collect(body, loops, inner, out),
        Stmt::KernelCall { args, .. } => args.iter().enumerate().all(|(k, a)| {
            if inner.contains(&a.tensor) {
                return true;
            }
            match region_corners(a) {
                Some((lo, hi)) => {
                    out.push(Access {
                        buffer: a.tensor,
                        lo,
                        hi,
                        write: k == 0,
                        loops: loops.clone(),
                    });
                    true
                }
                None => false,
            }
        }),
        Stmt::Realize { .. } | Stmt::Provide { .. } => false,
    }
}

/// Whether the iterations of `for var in [min, min + extent) { body }` may run in any
/// order: for every buffer the body writes (other than its own scratch), the footprint
/// of iteration `v` lies entirely before that of iteration `v + 1`. A sufficient test;
/// when it fails the loop runs serially.
pub(crate) fn iterations_independent(
    ctx: &LoopCtx,
    var: &Var,
    min: &Expr,
    extent: &Expr,
    body: &Stmt,
) -> bool {
    let mut inner_ctx = ctx.clone();
    if !inner_ctx.push(var, min, extent) {
        return true;
    }
    let vb = &inner_ctx.vb;
    let mut acc = Vec::new();
    if !collect(body, &mut Vec::new(), &mut HashSet::new(), &mut acc) {
        return false;
    }
    let written: HashSet<TensorId> = acc.iter().filter(|a| a.write).map(|a| a.buffer).collect();
    let next = |e: &Expr| e.substitute(&|v| (v == var).then(|| var.expr() + 1));
    let mut bounds = Vec::new();
    for a in acc.iter().filter(|a| written.contains(&a.buffer)) {
        let lo = relax_over(&a.lo, &a.loops, vb).min().cloned();
        let hi = relax_over(&a.hi, &a.loops, vb).max().cloned();
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return false;
        };
        // A footprint that may be empty breaks the chain of "before" below.
        if !prove_le_zero(&(lo.clone() - hi.clone()), vb) {
            return false;
        }
        bounds.push((a.buffer, lo, hi));
    }
    bounds.iter().all(|(b, _, hi)| {
        bounds
            .iter()
            .filter(|(c, ..)| c == b)
            .all(|(_, lo, _)| prove_le_zero(&(hi.clone() - next(lo) + 1), vb))
    })
}

/// The vector path's requirements on `for var { buffer[index] = value }`: the store and
/// every load that depends on `var` are unit-stride in it, the value is float arithmetic
/// (+ - * / min max) of such loads and of loop-invariant scalars, and no load reads the
/// stored buffer elsewhere than the element being stored.
pub(crate) fn vectorizable(
    var: &Var,
    buffer: TensorId,
    index: &Expr,
    value: &Expr,
    vb: &VarBounds,
) -> bool {
    use crate::tir::expr::BinOp::*;
    fn ok(e: &Expr, var: &Var, vb: &VarBounds) -> bool {
        if !e.uses_var(var) {
            return true;
        }
        match e {
            Expr::Load { index, .. } => unit_stride(index, var, vb),
            Expr::Bin(Add | Sub | Mul | Div | Min | Max, a, b) => {
                !e.is_int()
                    && [a, b]
                        .iter()
                        .all(|x| ok(x, var, vb) && (!x.uses_var(var) || !x.is_int()))
            }
            _ => false,
        }
    }
    let mut self_reads_ok = true;
    value.visit(&mut |e| {
        if let Expr::Load {
            buffer: b,
            index: i,
        } = e
        {
            if *b == buffer && !prove_equal(i, index, vb) {
                self_reads_ok = false;
            }
        }
    });
    self_reads_ok && unit_stride(index, var, vb) && ok(value, var, vb)
}
