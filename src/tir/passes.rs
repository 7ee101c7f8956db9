//! Statement passes: simplification under loop bounds, removal of one-iteration loops,
//! and loop partitioning of split tails.

use super::expr::{BinOp, Expr, Var};
use super::schedule::ForKind;
use super::simplify::{const_bounds, simplify, simplify_with, VarBounds};
use super::stmt::Stmt;

/// Simplifies every expression with the bounds of the enclosing loops; drops guards that
/// became constant and loops that run zero times.
pub fn simplify_stmt(s: &Stmt, vb: &mut VarBounds) -> Stmt {
    match s {
        Stmt::For(l) => {
            let var = &l.var;
            let min = simplify_with(&l.min, vb);
            let extent = simplify_with(&l.extent, vb);
            if matches!(const_bounds(&extent, vb).1, Some(h) if h <= 0) {
                return Stmt::Seq(vec![]);
            }
            let saved = vb.get(var);
            if let (Some(lo), Some(hi)) = (
                const_bounds(&min, vb).0,
                const_bounds(&(min.clone() + extent.clone() - 1), vb).1,
            ) {
                vb.set(var, lo, hi);
            }
            let body = simplify_stmt(&l.body, vb);
            restore(vb, var, saved);
            if body == Stmt::Seq(vec![]) {
                return body;
            }
            l.with(min, extent, body)
        }
        Stmt::IfThenElse {
            cond,
            then_case,
            else_case,
            likely,
        } => {
            let cond = simplify_with(cond, vb);
            match cond.as_int() {
                Some(0) => else_case
                    .as_ref()
                    .map(|e| simplify_stmt(e, vb))
                    .unwrap_or(Stmt::Seq(vec![])),
                Some(_) => simplify_stmt(then_case, vb),
                None => Stmt::IfThenElse {
                    cond,
                    then_case: Box::new(simplify_stmt(then_case, vb)),
                    else_case: else_case.as_ref().map(|e| Box::new(simplify_stmt(e, vb))),
                    likely: *likely,
                },
            }
        }
        Stmt::Seq(v) => Stmt::seq(v.iter().map(|x| simplify_stmt(x, vb)).collect()),
        // The condition of an assume is a fact for later passes: it is not simplified with
        // the loop bounds, which would turn it into a bare `1`.
        Stmt::Assume { cond, body } => Stmt::Assume {
            cond: simplify(cond),
            body: Box::new(simplify_stmt(body, vb)),
        },
        other => other
            .map_children(&mut |c| simplify_stmt(c, vb))
            .map_exprs(&mut |e| simplify_with(e, vb)),
    }
}

fn restore(vb: &mut VarBounds, v: &Var, saved: Option<(i64, i64)>) {
    match saved {
        Some((l, h)) => vb.set(v, l, h),
        None => vb.remove(v),
    }
}

/// Expressions in `s` that make its body depend on `var` in a way the last iteration of a
/// split leaves special: `min` in loop or realize extents, and likely guards.
fn partition_candidates(s: &Stmt, var: &Var) -> usize {
    let mut n = 0;
    let has_min = |e: &Expr| {
        let mut found = false;
        e.visit(&mut |x| {
            found |= matches!(x, Expr::Bin(BinOp::Min | BinOp::Max, ..)) && x.uses_var(var)
        });
        found
    };
    s.visit(&mut |x| match x {
        Stmt::For(l) => n += has_min(&l.extent) as usize,
        Stmt::Realize { bounds, .. } => n += bounds.iter().filter(|r| has_min(&r.extent)).count(),
        Stmt::IfThenElse {
            cond, likely: true, ..
        } => n += conjuncts(cond).iter().filter(|c| c.uses_var(var)).count(),
        _ => {}
    });
    n
}

/// The facts that hold in the main part of a partitioned loop over `var` (bounds in
/// `vb`): which side of each `min`/`max` extent wins, and the likely guards.
fn partition_facts(s: &Stmt, var: &Var, vb: &VarBounds) -> Vec<Expr> {
    let mut facts: Vec<Expr> = Vec::new();
    let mut add = |c: Expr| {
        if !facts.contains(&c) {
            facts.push(c);
        }
    };
    let from_extent = |e: &Expr, add: &mut dyn FnMut(Expr)| {
        e.visit(&mut |x| {
            if let Expr::Bin(op @ (BinOp::Min | BinOp::Max), a, b) = x {
                if x.uses_var(var) {
                    let a_le_b = (**a).clone().le((**b).clone());
                    let b_le_a = (**b).clone().le((**a).clone());
                    let (first, second) = if *op == BinOp::Min {
                        (a_le_b, b_le_a)
                    } else {
                        (b_le_a, a_le_b)
                    };
                    // `first`: the left operand wins.
                    for c in [first, second] {
                        if simplify_with(&c, vb) == Expr::Int(1) {
                            add(simplify(&c));
                            break;
                        }
                    }
                }
            }
        })
    };
    s.visit(&mut |x| match x {
        Stmt::For(l) => from_extent(&l.extent, &mut add),
        Stmt::Realize { bounds, .. } => {
            bounds.iter().for_each(|r| from_extent(&r.extent, &mut add))
        }
        Stmt::IfThenElse {
            cond, likely: true, ..
        } => {
            for c in conjuncts(cond) {
                if c.uses_var(var) && simplify_with(&c, vb) == Expr::Int(1) {
                    add(c);
                }
            }
        }
        _ => {}
    });
    // Only facts about variables bound outside `s` can stand at its top.
    let mut inner_vars = Vec::new();
    s.visit(&mut |x| {
        if let Stmt::For(l) = x {
            inner_vars.push(l.var.clone());
        }
    });
    facts.retain(|f| !inner_vars.iter().any(|v| f.uses_var(v)));
    facts
}

fn conjuncts(e: &Expr) -> Vec<Expr> {
    match e {
        Expr::Bin(BinOp::And, a, b) => {
            let mut v = conjuncts(a);
            v.extend(conjuncts(b));
            v
        }
        _ => vec![e.clone()],
    }
}

/// Loop partitioning: a loop whose body has a split tail (a `min` extent) or a likely
/// guard depending on the loop variable is split into a main loop over all but the last
/// iteration, simplified until it is free of them, and the last iteration on its own.
pub fn partition_loops(s: &Stmt, vb: &mut VarBounds) -> Stmt {
    match s {
        Stmt::For(l) => {
            let var = &l.var;
            let saved = vb.get(var);
            let (Some(lo), Some(ext)) = (l.min.as_int(), l.extent.as_int()) else {
                return with_bound(vb, var, None, |vb| {
                    s.map_children(&mut |b| partition_loops(b, vb))
                });
            };
            let body = with_bound(vb, var, Some((lo, lo + ext - 1)), |vb| {
                partition_loops(&l.body, vb)
            });
            let rebuilt = |b: Stmt, lo: i64, ext: i64| l.with(Expr::Int(lo), Expr::Int(ext), b);
            if ext >= 2 && partition_candidates(&body, var) > 0 {
                let (main, facts) = with_bound(vb, var, Some((lo, lo + ext - 2)), |vb| {
                    (simplify_stmt(&body, vb), partition_facts(&body, var, vb))
                });
                if partition_candidates(&main, var) == 0 {
                    let last = Expr::Int(lo + ext - 1);
                    let tail = body.rewrite(&mut |x| x, &mut |e| {
                        e.substitute(&|v| (v == var).then(|| last.clone()))
                    });
                    let tail = simplify_stmt(&tail, vb);
                    restore(vb, var, saved);
                    // What the main part's simplification relied on, for later passes.
                    let main = match facts.into_iter().reduce(|a, b| a.and(b)) {
                        Some(cond) => Stmt::Assume {
                            cond,
                            body: Box::new(main),
                        },
                        None => main,
                    };
                    return Stmt::seq(vec![rebuilt(main, lo, ext - 1), tail]);
                }
            }
            rebuilt(body, lo, ext)
        }
        other => other.map_children(&mut |c| partition_loops(c, vb)),
    }
}

fn with_bound<T>(
    vb: &mut VarBounds,
    v: &Var,
    b: Option<(i64, i64)>,
    f: impl FnOnce(&mut VarBounds) -> T,
) -> T {
    let saved = vb.get(v);
    match b {
        Some((l, h)) => vb.set(v, l, h),
        None => vb.remove(v),
    }
    let out = f(vb);
    restore(vb, v, saved);
    out
}

/// Replaces loops of one iteration by their body with the variable set to the loop's min.
pub fn remove_trivial_loops(s: &Stmt) -> Stmt {
    // Bottom-up: each loop's body has already lost its own trivial loops.
    s.rewrite(
        &mut |x| match x {
            Stmt::For(l) if l.extent == Expr::Int(1) => l.body.rewrite(&mut |y| y, &mut |e| {
                e.substitute(&|v| (*v == l.var).then(|| l.min.clone()))
            }),
            other => other,
        },
        &mut |e| e.clone(),
    )
}

/// How many loops deep peeling nests: each level can triple the code of its body.
const MAX_PEEL_DEPTH: usize = 3;

/// Loop peeling by conditions (as TVM's LoopPartition does for conditions): a
/// serial or vectorized loop of constant range whose body holds selects,
/// `min`/`max` or guards
/// that settle once its variable is past the first or before the last iterations
/// runs as up to three loops: the iterations before, the interior, simplified
/// free of what settled there, and the iterations after. The windows of pools and
/// convolutions that reach into padding, and pads, are the usual case: their
/// interior reads the input without clamps or selects, unit-stride, on the
/// vector path of code generation (a vectorized loop's pieces stay vectorized,
/// each with its own tail). A loop whose conditionals
/// change at points inside it rather than settle in an interior (a concatenation:
/// `select(c < 128, X[c], W[c - 128])`) runs as the segments between those points
/// ([`segments`]), each reading one input.
pub fn peel_conditions(s: &Stmt, vb: &mut VarBounds) -> Stmt {
    peel(s, vb, MAX_PEEL_DEPTH)
}

fn peel(s: &Stmt, vb: &mut VarBounds, depth: usize) -> Stmt {
    let Stmt::For(l) = s else {
        return s.map_children(&mut |c| peel(c, vb, depth));
    };
    let var = &l.var;
    let (Some(lo), Some(n)) = (l.min.as_int(), l.extent.as_int()) else {
        return with_bound(vb, var, None, |vb| {
            s.map_children(&mut |c| peel(c, vb, depth))
        });
    };
    let hi = lo + n - 1;
    let whole = Some((lo, hi));
    let splits = matches!(
        l.kind,
        ForKind::Serial | ForKind::Parallel | ForKind::Vectorized
    );
    if !splits || depth == 0 || n < 2 || conditionals(&l.body, Some(var)) == 0 {
        return with_bound(vb, var, whole, |vb| {
            s.map_children(&mut |c| peel(c, vb, depth))
        });
    }
    // What remains of the conditionals with the variable in [a, b].
    let mut left = |a: i64, b: i64| {
        with_bound(vb, var, Some((a, b)), |vb| {
            conditionals(&simplify_stmt(&l.body, vb), None)
        })
    };
    let all = left(lo, hi);
    let parts = match l.kind {
        ForKind::Parallel => None,
        _ => interior(lo, hi, all, &mut left),
    }
    .or_else(|| segments(lo, hi, all, &mut left))
    // A parallel loop is not cut into pieces of one iteration: each piece is a
    // dispatch to the threads.
    .filter(|p| l.kind != ForKind::Parallel || p.iter().all(|(a, b)| b > a));
    let Some(parts) = parts else {
        return with_bound(vb, var, whole, |vb| {
            s.map_children(&mut |c| peel(c, vb, depth))
        });
    };
    let loops = parts
        .into_iter()
        .filter(|(a, b)| a <= b)
        .map(|(a, b)| {
            with_bound(vb, var, Some((a, b)), |vb| {
                let body = peel(&simplify_stmt(&l.body, vb), vb, depth - 1);
                l.with(Expr::Int(a), Expr::Int(b - a + 1), body)
            })
        })
        .collect();
    Stmt::seq(loops)
}

/// The iterations before, in and after the interior of `[lo, hi]`: around the
/// middle iteration, where the fewest conditionals remain (`left`), as far as they
/// stay that few (conditions affine in the variable settle monotonically); `None`
/// when no iteration is left out of it or it keeps all `all` of them.
fn interior(
    lo: i64,
    hi: i64,
    all: usize,
    left: &mut impl FnMut(i64, i64) -> usize,
) -> Option<Vec<(i64, i64)>> {
    let mid = lo + (hi - lo + 1) / 2;
    let fewest = left(mid, mid);
    let first = partition_point(lo, mid, |x| left(x, x) != fewest);
    let last = partition_point(mid, hi + 1, |x| left(x, x) == fewest) - 1;
    let worth = (first > lo || last < hi) && fewest < all && left(first, last) == fewest;
    worth.then(|| vec![(lo, first - 1), (first, last), (last + 1, hi)])
}

/// Most pieces [`segments`] cuts a loop into: each is a copy of its body.
const MAX_SEGMENTS: usize = 4;

/// `[lo, hi]` cut where its conditionals change (`left`): each segment runs as far
/// as it keeps no more of them than its first iteration does. The inputs of a
/// concatenation side by side are the usual case: every iteration reads one input
/// without a select, but the loop as a whole selects and clamps. `None` unless
/// it cuts into 2 to [`MAX_SEGMENTS`] segments that each keep fewer than `all`.
fn segments(
    lo: i64,
    hi: i64,
    all: usize,
    left: &mut impl FnMut(i64, i64) -> usize,
) -> Option<Vec<(i64, i64)>> {
    let mut parts = vec![];
    let mut start = lo;
    while start <= hi && parts.len() < MAX_SEGMENTS {
        let at = left(start, start);
        if at >= all {
            return None;
        }
        let end = partition_point(start, hi + 1, |x| left(start, x) == at);
        parts.push((start, end - 1));
        start = end;
    }
    (start > hi && parts.len() > 1).then_some(parts)
}

/// The first `x` in `[lo, hi)` where `pred` is false, `pred` true before it and
/// false after (`hi` when it never is).
fn partition_point(mut lo: i64, mut hi: i64, mut pred: impl FnMut(i64) -> bool) -> i64 {
    while lo < hi {
        let m = lo + (hi - lo) / 2;
        if pred(m) {
            lo = m + 1;
        } else {
            hi = m;
        }
    }
    lo
}

/// The selects, `min`s, `max`s and guards in `s` (those using `var`, if given).
fn conditionals(s: &Stmt, var: Option<&Var>) -> usize {
    let uses = |e: &Expr| var.is_none_or(|v| e.uses_var(v));
    let mut n = 0;
    s.visit_exprs(&mut |e| {
        e.visit(&mut |x| {
            let conditional =
                matches!(x, Expr::Select(..) | Expr::Bin(BinOp::Min | BinOp::Max, ..));
            n += (conditional && uses(x)) as usize;
        })
    });
    s.visit(&mut |x| {
        if let Stmt::IfThenElse { cond, .. } = x {
            n += uses(cond) as usize;
        }
    });
    n
}
