//! Compile-time facts the code generator relies on: whether an access is inside its
//! buffer, whether a loop's iterations touch disjoint memory (for `parallel`), and
//! whether a loop body has the shape the vector path handles.
//!
//! All proofs go through the TIR interval sets and simplifier over the loops that
//! enclose the statement, and the constant bounds of those loops' variables (computed
//! here from the loops themselves, so nothing outside the function is trusted).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use crate::tir::expr::{BinOp, Expr, Range, TensorId, Var};
use crate::tir::intset::{eval_set_in_order, IntSet};
use crate::tir::layout::{BufferLayout, PhysDim};
use crate::tir::simplify::{
    const_bounds, prove_equal, prove_ge_zero, prove_le_zero, simplify, simplify_with, VarBounds,
};
use crate::tir::stmt::{KernelArg, Stmt};

/// The loops around the statement being compiled, outermost first, with the constant
/// bounds of their variables and what the enclosing `if`s tell about them.
#[derive(Clone, Default)]
pub(crate) struct LoopCtx {
    pub loops: Vec<(Var, Range)>,
    pub vb: VarBounds,
    facts: Vec<Fact>,
    /// The proofs made in this context, by access: the copies of an unrolled
    /// statement and the lanes computed one by one ask the same question. Cleared
    /// whenever the context changes.
    proofs: RefCell<HashMap<String, Proof>>,
}

/// A bound on the variable of loop `depth` from a condition known to hold; it mentions
/// only variables of outer loops, so relaxation can apply it before relaxing those.
#[derive(Clone)]
struct Fact {
    depth: usize,
    upper: bool,
    bound: Expr,
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
        self.proofs.get_mut().clear();
        true
    }

    pub fn pop(&mut self) {
        if let Some((v, _)) = self.loops.pop() {
            self.vb.remove(&v);
        }
        self.proofs.get_mut().clear();
    }

    /// Records that `cond` holds (inside the `then` branch of an `if` on it, or the
    /// `else` branch when `negated`); returns how many facts to [`Self::forget`] after.
    /// Conjuncts `a < b` and `a <= b` where the innermost loop variable they mention
    /// occurs with coefficient 1 or -1 become a bound on that variable.
    pub fn assume(&mut self, cond: &Expr, negated: bool) -> usize {
        let mut conj = Vec::new();
        if negated {
            // !(a < b) is b <= a; the negation of a conjunction is not a conjunction.
            match cond {
                Expr::Bin(BinOp::Lt, a, b) => conj.push(((**b).clone() - (**a).clone(), 0)),
                Expr::Bin(BinOp::Le, a, b) => conj.push(((**b).clone() - (**a).clone(), -1)),
                _ => {}
            }
        } else {
            conjuncts(cond, &mut conj);
        }
        self.proofs.get_mut().clear();
        let before = self.facts.len();
        for (g, k) in conj {
            // g <= k
            if let Some(f) = self.fact(&g, k) {
                self.facts.push(f);
            }
        }
        self.facts.len() - before
    }

    pub fn forget(&mut self, n: usize) {
        self.facts.truncate(self.facts.len() - n);
        self.proofs.get_mut().clear();
    }

    fn fact(&self, g: &Expr, k: i64) -> Option<Fact> {
        if !g.is_int() {
            return None;
        }
        let depth = self.loops.iter().rposition(|(v, _)| g.uses_var(v))?;
        let v = &self.loops[depth].0;
        let step = simplify(&(g.substitute(&|w| (w == v).then(|| v.expr() + 1)) - g.clone()));
        let (upper, rest) = match step.as_int()? {
            // v + rest <= k: v <= k - rest
            1 => (true, g.clone() - v.expr()),
            // -v + rest <= k: v >= rest - k
            -1 => (false, g.clone() + v.expr()),
            _ => return None,
        };
        let rest = simplify(&rest);
        if rest.uses_var(v) {
            return None;
        }
        let bound = if upper { Expr::Int(k) - rest } else { rest - k };
        Some(Fact {
            depth,
            upper,
            bound: simplify(&bound),
        })
    }

    /// The set of `e` over all enclosing loops.
    pub fn relax(&self, e: &Expr) -> IntSet {
        relax_over(&recombine(e), &self.loops, &self.vb, &self.facts)
    }

    /// Whether `index` lies in `[0, size)` for every iteration of the enclosing loops.
    pub fn prove_inside(&self, index: &Expr, size: &Expr) -> Proof {
        // Debug names variables by id: two variables of one name stay apart.
        let key = format!("{index:?} < {size:?}");
        if let Some(p) = self.proofs.borrow().get(&key) {
            return *p;
        }
        let p = self.prove_inside_now(index, size);
        self.proofs.borrow_mut().insert(key, p);
        p
    }

    fn prove_inside_now(&self, index: &Expr, size: &Expr) -> Proof {
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

/// Rewrites `a*floordiv(x, c) + (a/c)*floormod(x, c)` into `(a/c)*x` in every sum. Fused
/// loops index with such pairs; relaxed separately, the two halves lose the fact that
/// together they are `x` (and the bound grows by up to `c - 1`).
fn recombine(e: &Expr) -> Expr {
    e.rewrite(&mut |n| {
        let Expr::Bin(BinOp::Add | BinOp::Sub, ..) = n else {
            return None;
        };
        let mut terms = Vec::new();
        sum_terms(n, 1, &mut terms);
        let mut changed = false;
        let mut k = 0;
        while k < terms.len() {
            let pair = match &terms[k] {
                (a, Expr::Bin(BinOp::FloorDiv, x, c)) => match c.as_int() {
                    Some(c) if c != 0 && a % c == 0 => terms
                        .iter()
                        .position(|(b, t)| {
                            *b == a / c
                                && matches!(t, Expr::Bin(BinOp::FloorMod, y, d)
                                if y == x && d.as_int() == Some(c))
                        })
                        .map(|m| (m, a / c, (**x).clone())),
                    _ => None,
                },
                _ => None,
            };
            match pair {
                Some((m, coef, x)) => {
                    terms[k] = (coef, x);
                    terms.remove(m);
                    changed = true;
                    k = 0;
                }
                None => k += 1,
            }
        }
        changed.then(|| {
            terms
                .into_iter()
                .map(|(a, t)| if a == 1 { t } else { t * a })
                .reduce(|x, y| x + y)
                .unwrap_or(Expr::Int(0))
        })
    })
}

/// The terms of a sum as (coefficient, expression).
fn sum_terms(e: &Expr, sign: i64, out: &mut Vec<(i64, Expr)>) {
    match e {
        Expr::Bin(BinOp::Add, a, b) => {
            sum_terms(a, sign, out);
            sum_terms(b, sign, out);
        }
        Expr::Bin(BinOp::Sub, a, b) => {
            sum_terms(a, sign, out);
            sum_terms(b, -sign, out);
        }
        Expr::Bin(BinOp::Mul, a, b) => match (a.as_int(), b.as_int()) {
            (Some(k), _) => out.push((sign * k, (**b).clone())),
            (_, Some(k)) => out.push((sign * k, (**a).clone())),
            _ => out.push((sign, e.clone())),
        },
        _ => out.push((sign, e.clone())),
    }
}

/// Relaxes the loop variables innermost first: a loop's range may mention outer ones.
fn relax_over(e: &Expr, loops: &[(Var, Range)], vb: &VarBounds, facts: &[Fact]) -> IntSet {
    let sets: Vec<(u64, IntSet)> = loops
        .iter()
        .enumerate()
        .rev()
        .map(|(d, (v, r))| {
            let mut lo = r.min.clone();
            let mut hi = r.min.clone() + r.extent.clone() - 1;
            for f in facts.iter().filter(|f| f.depth == d) {
                if f.upper {
                    hi = hi.min(f.bound.clone());
                } else {
                    lo = lo.max(f.bound.clone());
                }
            }
            (v.id, IntSet::interval(lo, simplify_with(&hi, vb)))
        })
        .collect();
    eval_set_in_order(e, &sets, vb)
}

/// The conjuncts `a < b`, `a <= b` of a condition, as `(g, k)` meaning `g <= k`.
fn conjuncts(c: &Expr, out: &mut Vec<(Expr, i64)>) {
    match c {
        Expr::Bin(BinOp::And, a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        Expr::Bin(BinOp::Lt, a, b) => out.push(((**a).clone() - (**b).clone(), -1)),
        Expr::Bin(BinOp::Le, a, b) => out.push(((**a).clone() - (**b).clone(), 0)),
        _ => {}
    }
}

/// Whether `index` advances by exactly `stride` when `var` advances by one.
pub(crate) fn has_stride(index: &Expr, var: &Var, stride: i64, vb: &VarBounds) -> bool {
    let next = index.substitute(&|v| (v == var).then(|| var.expr() + 1));
    prove_equal(&next, &(index.clone() + stride), vb)
}

/// Element strides of each logical axis of a buffer with logical extents `extents`, when
/// its layout is a permutation of the axes (no blocking).
pub(crate) fn strides(layout: &BufferLayout, extents: &[Expr]) -> Option<Vec<Expr>> {
    let mut strides = vec![Expr::Int(0); extents.len()];
    let mut run = Expr::Int(1);
    for d in layout.dims.iter().rev() {
        let PhysDim::Axis(a) = *d else { return None };
        *strides.get_mut(a)? = run.clone();
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
        Stmt::For(l) => {
            loads(&l.min, loops, inner, out);
            loads(&l.extent, loops, inner, out);
            loops.push((l.var.clone(), Range::new(l.min.clone(), l.extent.clone())));
            let ok = collect(&l.body, loops, inner, out);
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
        let lo = relax_over(&a.lo, &a.loops, vb, &[]).min().cloned();
        let hi = relax_over(&a.hi, &a.loops, vb, &[]).max().cloned();
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

/// The vector path's requirements on `for var { buffer[index] = value }`: the store is
/// unit-stride in `var`, the value is a float, and no load reads the stored buffer
/// elsewhere than the element being stored. What the value computes is not limited:
/// float arithmetic, the inline vector functions, selects and unit-stride loads run
/// on vectors, and any other part that moves with `var` (a periodic or strided load,
/// an integer condition, a call into Rust) is computed lane by lane.
pub(crate) fn vectorizable(
    var: &Var,
    buffer: TensorId,
    index: &Expr,
    value: &Expr,
    vb: &VarBounds,
) -> bool {
    !value.is_int() && !reads_elsewhere(value, buffer, index, vb) && has_stride(index, var, 1, vb)
}

/// Whether `value` loads `buffer` at an index not proved equal to `index`.
fn reads_elsewhere(value: &Expr, buffer: TensorId, index: &Expr, vb: &VarBounds) -> bool {
    let mut elsewhere = false;
    value.visit(&mut |e| {
        if let Expr::Load {
            buffer: b,
            index: i,
        } = e
        {
            elsewhere |= *b == buffer && !prove_equal(i, index, vb);
        }
    });
    elsewhere
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every claim of `prove_inside` under an `if` is checked by enumerating the loop
    /// iterations that satisfy the condition: "inside" must hold for all of them,
    /// "outside" for none.
    #[test]
    fn proofs_under_conditions_agree_with_enumeration() {
        let (i, j) = (Var::new("i"), Var::new("j"));
        let mut seed = 7u64;
        let mut next = |n: i64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            ((seed >> 33) % n as u64) as i64
        };
        let (mut inside, mut outside) = (0, 0);
        for _ in 0..300 {
            let (ni, nj) = (1 + next(5), 1 + next(6));
            let (a, b, c) = (next(7) - 1, next(3) - 1, next(9) - 4);
            let index = i.expr() * a + j.expr() * b + c;
            let size = 1 + next(24);
            // The guard `p*i + q*j < r`, with q = +-1 so that it bounds j.
            let (p, q, r) = (next(5) - 2, if next(2) == 0 { 1 } else { -1 }, next(20) - 5);
            let guard = (i.expr() * p + j.expr() * q).lt(r);
            let negated = next(2) == 0;
            let mut ctx = LoopCtx::default();
            ctx.push(&i, &Expr::Int(0), &Expr::Int(ni));
            ctx.push(&j, &Expr::Int(0), &Expr::Int(nj));
            ctx.assume(&guard, negated);
            let proof = ctx.prove_inside(&index, &Expr::Int(size));
            let runs = (0..ni).flat_map(|x| (0..nj).map(move |y| (x, y)));
            let runs = runs.filter(|(x, y)| (p * x + q * y < r) != negated);
            for (x, y) in runs {
                let k = a * x + b * y + c;
                match proof {
                    Proof::Inside => assert!((0..size).contains(&k), "{index} at {x},{y}"),
                    Proof::Outside => assert!(!(0..size).contains(&k), "{index} at {x},{y}"),
                    Proof::Unknown => {}
                }
            }
            inside += (proof == Proof::Inside) as i32;
            outside += (proof == Proof::Outside) as i32;
        }
        // The enumeration checked claims of both kinds.
        assert!(inside > 20 && outside > 20, "{inside} {outside}");
    }

    #[test]
    fn a_guard_proves_a_tail_access() {
        // for i in 0..4, j in 0..4: if (i*4 + j < 15) A[i*4 + j + 1], A of 16.
        let (i, j) = (Var::new("i"), Var::new("j"));
        let mut ctx = LoopCtx::default();
        ctx.push(&i, &Expr::Int(0), &Expr::Int(4));
        ctx.push(&j, &Expr::Int(0), &Expr::Int(4));
        let index = i.expr() * 4 + j.expr() + 1;
        assert_eq!(ctx.prove_inside(&index, &Expr::Int(16)), Proof::Unknown);
        let guard = (i.expr() * 4 + j.expr()).lt(15);
        let n = ctx.assume(&guard, false);
        assert_eq!(ctx.prove_inside(&index, &Expr::Int(16)), Proof::Inside);
        ctx.forget(n);
        // In the else branch, i*4 + j >= 15: the access is at 16.
        ctx.assume(&guard, true);
        assert_eq!(ctx.prove_inside(&index, &Expr::Int(16)), Proof::Outside);
    }

    #[test]
    fn fused_loop_indices_recombine() {
        let f = Var::new("f");
        let mut ctx = LoopCtx::default();
        ctx.push(&f, &Expr::Int(0), &Expr::Int(10));
        let index = f.expr().floordiv(4) * 4 + f.expr().floormod(4);
        assert_eq!(ctx.prove_inside(&index, &Expr::Int(10)), Proof::Inside);
    }
}
