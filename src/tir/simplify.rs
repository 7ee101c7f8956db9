//! Arithmetic simplifier for index expressions.
//!
//! Integer sums are brought to a linear form (terms with integer coefficients plus a
//! constant), which folds constants and cancels terms (`(x + 3) - x` → `3`). Division
//! and modulo by a positive constant use the linear form and the known bounds of the
//! variables (`floordiv(o*8 + i, 8)` → `o` when `0 <= i < 8`). `min`/`max`/comparisons
//! are decided when the bounds of the difference of their operands decide them.
//! Float values are only constant-folded.

use std::collections::HashMap;

use super::expr::{floor_div, floor_mod, BinOp, Expr, Var};

/// Known constant bounds `[lo, hi]` (inclusive) of variables.
#[derive(Clone, Debug, Default)]
pub struct VarBounds {
    map: HashMap<u64, (i64, i64)>,
}

impl VarBounds {
    /// No bounds known.
    pub fn new() -> VarBounds {
        VarBounds::default()
    }
    /// Records `lo <= v <= hi`.
    pub fn set(&mut self, v: &Var, lo: i64, hi: i64) {
        self.map.insert(v.id, (lo, hi));
    }
    /// The bounds of `v`, when known.
    pub fn get(&self, v: &Var) -> Option<(i64, i64)> {
        self.map.get(&v.id).copied()
    }
    /// Forgets the bounds of `v`.
    pub fn remove(&mut self, v: &Var) {
        self.map.remove(&v.id);
    }
}

/// Simplifies without any knowledge of variable bounds.
pub fn simplify(e: &Expr) -> Expr {
    simplify_with(e, &VarBounds::new())
}

/// Simplifies using the constant bounds of variables.
pub fn simplify_with(e: &Expr, vb: &VarBounds) -> Expr {
    e.rewrite(&mut |n| simplify_node(n, vb))
}

/// Whether `a == b` can be proved (their difference simplifies to zero).
pub fn prove_equal(a: &Expr, b: &Expr, vb: &VarBounds) -> bool {
    a == b || simplify_with(&(a.clone() - b.clone()), vb) == Expr::Int(0)
}

/// Proves `e <= 0`.
pub fn prove_le_zero(e: &Expr, vb: &VarBounds) -> bool {
    matches!(const_bounds(&simplify_with(e, vb), vb).1, Some(h) if h <= 0)
}

/// Proves `e >= 0`.
pub fn prove_ge_zero(e: &Expr, vb: &VarBounds) -> bool {
    matches!(const_bounds(&simplify_with(e, vb), vb).0, Some(l) if l >= 0)
}

/// Constant interval bounds of an integer expression; `None` means unbounded.
pub fn const_bounds(e: &Expr, vb: &VarBounds) -> (Option<i64>, Option<i64>) {
    bounds(e, vb, 2)
}

/// `budget` limits how many nested `min`/`max` distributions are tried: each doubles the
/// work.
fn bounds(e: &Expr, vb: &VarBounds, budget: u32) -> (Option<i64>, Option<i64>) {
    let const_bounds = |e: &Expr, vb: &VarBounds| bounds(e, vb, budget);
    match e {
        Expr::Int(v) => (Some(*v), Some(*v)),
        Expr::Var(v) => match vb.get(v) {
            Some((l, h)) => (Some(l), Some(h)),
            None => (None, None),
        },
        Expr::Bin(op, a, b) => {
            // `x + min(p, q)` is bounded by `min(x + p, x + q)`: distributing lets terms
            // of x cancel inside each branch, which plain interval arithmetic cannot do.
            if budget > 0 && matches!(op, BinOp::Add | BinOp::Sub) {
                if let Some(d) = distribute_minmax(*op, a, b) {
                    return bounds(&d, vb, budget - 1);
                }
            }
            let (al, ah) = const_bounds(a, vb);
            let (bl, bh) = const_bounds(b, vb);
            match op {
                BinOp::Add => (add(al, bl), add(ah, bh)),
                BinOp::Sub => (sub(al, bh), sub(ah, bl)),
                BinOp::Mul => match (al, ah, bl, bh) {
                    (Some(a0), Some(a1), Some(b0), Some(b1)) => {
                        let c = [a0 * b0, a0 * b1, a1 * b0, a1 * b1];
                        (c.iter().min().copied(), c.iter().max().copied())
                    }
                    _ => match b.as_int().or(a.as_int()) {
                        Some(0) => (Some(0), Some(0)),
                        Some(c) => {
                            let (l, h) = if a.as_int().is_some() {
                                (bl, bh)
                            } else {
                                (al, ah)
                            };
                            if c > 0 {
                                (l.map(|x| x * c), h.map(|x| x * c))
                            } else {
                                (h.map(|x| x * c), l.map(|x| x * c))
                            }
                        }
                        None => (None, None),
                    },
                },
                BinOp::FloorDiv => match b.as_int() {
                    Some(c) if c > 0 => (al.map(|x| floor_div(x, c)), ah.map(|x| floor_div(x, c))),
                    _ => (None, None),
                },
                BinOp::FloorMod => match b.as_int() {
                    Some(c) if c > 0 => match (al, ah) {
                        (Some(l), Some(h)) if floor_div(l, c) == floor_div(h, c) => {
                            (Some(floor_mod(l, c)), Some(floor_mod(h, c)))
                        }
                        _ => (Some(0), Some(c - 1)),
                    },
                    _ => (None, None),
                },
                BinOp::Min => (opt2(al, bl, i64::min), opt_min_hi(ah, bh)),
                BinOp::Max => (opt_max_lo(al, bl), opt2(ah, bh, i64::max)),
                BinOp::Lt | BinOp::Le | BinOp::Eq | BinOp::Ne | BinOp::And | BinOp::Or => {
                    (Some(0), Some(1))
                }
                BinOp::Div => (None, None),
            }
        }
        Expr::Not(_) => (Some(0), Some(1)),
        Expr::Select(_, a, b) => {
            let (al, ah) = const_bounds(a, vb);
            let (bl, bh) = const_bounds(b, vb);
            (opt2(al, bl, i64::min), opt2(ah, bh, i64::max))
        }
        _ => (None, None),
    }
}

fn distribute_minmax(op: BinOp, a: &Expr, b: &Expr) -> Option<Expr> {
    match (a, b) {
        (_, Expr::Bin(m @ (BinOp::Min | BinOp::Max), p, q)) => {
            // x - min(p, q) = max(x - p, x - q)
            let m2 = match (op, m) {
                (BinOp::Sub, BinOp::Min) => BinOp::Max,
                (BinOp::Sub, BinOp::Max) => BinOp::Min,
                _ => *m,
            };
            Some(Expr::Bin(
                m2,
                Box::new(linear(Expr::Bin(op, Box::new(a.clone()), p.clone()))),
                Box::new(linear(Expr::Bin(op, Box::new(a.clone()), q.clone()))),
            ))
        }
        (Expr::Bin(m @ (BinOp::Min | BinOp::Max), p, q), _) => Some(Expr::Bin(
            *m,
            Box::new(linear(Expr::Bin(op, p.clone(), Box::new(b.clone())))),
            Box::new(linear(Expr::Bin(op, q.clone(), Box::new(b.clone())))),
        )),
        _ => None,
    }
}

/// The linear canonical form of a sum (cancels terms, without the bound-aware rules).
fn linear(e: Expr) -> Expr {
    Linear::of(&e).to_expr()
}

fn add(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a?.checked_add(b?)
}
fn sub(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a?.checked_sub(b?)
}
fn opt2(a: Option<i64>, b: Option<i64>, f: fn(i64, i64) -> i64) -> Option<i64> {
    Some(f(a?, b?))
}
/// Upper bound of min: bounded if either side is.
fn opt_min_hi(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) | (None, x) => x,
    }
}
fn opt_max_lo(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) | (None, x) => x,
    }
}

/// `sum(coef * atom) + constant` over non-linear atoms.
#[derive(Clone, Debug)]
pub(crate) struct Linear {
    pub terms: Vec<(Expr, i64)>,
    pub c: i64,
}

impl Linear {
    fn constant(c: i64) -> Linear {
        Linear { terms: vec![], c }
    }
    fn add_term(&mut self, atom: Expr, coef: i64) {
        if let Some(t) = self.terms.iter_mut().find(|t| t.0 == atom) {
            t.1 += coef;
        } else {
            self.terms.push((atom, coef));
        }
        self.terms.retain(|t| t.1 != 0);
    }
    fn add_scaled(&mut self, o: Linear, k: i64) {
        for (a, c) in o.terms {
            self.add_term(a, c * k);
        }
        self.c += o.c * k;
    }
    fn as_const(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.c)
    }

    pub(crate) fn of(e: &Expr) -> Linear {
        match e {
            Expr::Int(v) => Linear::constant(*v),
            Expr::Bin(op @ (BinOp::Add | BinOp::Sub), a, b) if e.is_int() => {
                let mut l = Linear::of(a);
                l.add_scaled(Linear::of(b), if *op == BinOp::Add { 1 } else { -1 });
                l
            }
            Expr::Bin(BinOp::Mul, a, b) if e.is_int() => {
                let (la, lb) = (Linear::of(a), Linear::of(b));
                match (la.as_const(), lb.as_const()) {
                    (Some(k), _) => scaled(lb, k),
                    (_, Some(k)) => scaled(la, k),
                    _ => atom(e),
                }
            }
            _ => atom(e),
        }
    }

    pub(crate) fn to_expr(&self) -> Expr {
        // A positive constant leads when every term is negative: `20 - o*16`.
        let mut out: Option<Expr> =
            (self.c > 0 && self.terms.iter().all(|t| t.1 < 0)).then_some(Expr::Int(self.c));
        let konst = if out.is_some() { 0 } else { self.c };
        // Positive terms first so that printing reads `a + b - c`.
        let mut terms: Vec<&(Expr, i64)> = self.terms.iter().filter(|t| t.1 > 0).collect();
        terms.extend(self.terms.iter().filter(|t| t.1 < 0));
        for (a, c) in terms {
            let mag = if c.abs() == 1 {
                a.clone()
            } else {
                a.clone() * c.abs()
            };
            out = Some(match out {
                None if *c < 0 => Expr::Int(0) - mag,
                None => mag,
                Some(acc) if *c < 0 => acc - mag,
                Some(acc) => acc + mag,
            });
        }
        match out {
            None => Expr::Int(konst),
            Some(acc) if konst > 0 => acc + konst,
            Some(acc) if konst < 0 => acc - (-konst),
            Some(acc) => acc,
        }
    }

    fn gcd(&self) -> i64 {
        self.terms
            .iter()
            .fold(self.c.abs(), |g, t| gcd(g, t.1.abs()))
    }
}

fn atom(e: &Expr) -> Linear {
    Linear {
        terms: vec![(e.clone(), 1)],
        c: 0,
    }
}

fn scaled(mut l: Linear, k: i64) -> Linear {
    if k == 0 {
        return Linear::constant(0);
    }
    for t in &mut l.terms {
        t.1 *= k;
    }
    l.c *= k;
    l
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Simplifies one node whose children are already simplified.
fn simplify_node(e: &Expr, vb: &VarBounds) -> Option<Expr> {
    match e {
        Expr::Bin(op, a, b) => simplify_bin(*op, a, b, e, vb),
        Expr::Not(a) => a.as_int().map(|v| Expr::Int((v == 0) as i64)),
        Expr::Select(c, a, b) => match c.as_int() {
            Some(0) => Some((**b).clone()),
            Some(_) => Some((**a).clone()),
            None => (a == b).then(|| (**a).clone()),
        },
        _ => None,
    }
}

fn simplify_bin(op: BinOp, a: &Expr, b: &Expr, e: &Expr, vb: &VarBounds) -> Option<Expr> {
    if !e.is_int() || !a.is_int() || !b.is_int() {
        return fold_float(op, a, b);
    }
    match op {
        BinOp::Add | BinOp::Sub | BinOp::Mul => {
            let l = Linear::of(e);
            Some(distribute_cancelling(&l, vb).unwrap_or_else(|| l.to_expr()))
        }
        BinOp::FloorDiv => simplify_div(a, b, vb),
        BinOp::FloorMod => simplify_mod(a, b, vb),
        BinOp::Min | BinOp::Max => {
            let (lo, hi) = const_bounds(&Linear::of(&(a.clone() - b.clone())).to_expr(), vb);
            let a_le_b = matches!(hi, Some(h) if h <= 0);
            let a_ge_b = matches!(lo, Some(l) if l >= 0);
            match (op, a_le_b, a_ge_b) {
                (BinOp::Min, true, _) | (BinOp::Max, _, true) => Some(a.clone()),
                (BinOp::Min, _, true) | (BinOp::Max, true, _) => Some(b.clone()),
                _ => None,
            }
        }
        BinOp::Lt | BinOp::Le | BinOp::Eq | BinOp::Ne => {
            let ld = Linear::of(&(a.clone() - b.clone()));
            let d = ld.to_expr();
            let (lo, hi) = const_bounds(&d, vb);
            let lo = lo.unwrap_or(i64::MIN);
            let hi = hi.unwrap_or(i64::MAX);
            let decided = match op {
                BinOp::Lt if hi < 0 => Some(true),
                BinOp::Lt if lo >= 0 => Some(false),
                BinOp::Le if hi <= 0 => Some(true),
                BinOp::Le if lo > 0 => Some(false),
                BinOp::Eq | BinOp::Ne if lo == 0 && hi == 0 => Some(op == BinOp::Eq),
                BinOp::Eq | BinOp::Ne if lo > 0 || hi < 0 => Some(op == BinOp::Ne),
                _ => None,
            };
            decided
                .map(|t| Expr::Int(t as i64))
                .or_else(|| cancel_sides(op, a, b, &ld))
        }
        BinOp::And => match (a.as_int(), b.as_int()) {
            (Some(0), _) | (_, Some(0)) => Some(Expr::Int(0)),
            (Some(_), _) => Some(b.clone()),
            (_, Some(_)) => Some(a.clone()),
            _ => None,
        },
        BinOp::Or => match (a.as_int(), b.as_int()) {
            (Some(x), _) if x != 0 => Some(Expr::Int(1)),
            (_, Some(x)) if x != 0 => Some(Expr::Int(1)),
            (Some(_), _) => Some(b.clone()),
            (_, Some(_)) => Some(a.clone()),
            _ => None,
        },
        BinOp::Div => None,
    }
}

/// `o*4 + min(4, 10 - o*4)` → `min(o*4 + 4, 10)`: a sum with one `min`/`max` term is
/// distributed into it when that cancels terms in a branch. Interval evaluation then
/// sees each variable once per branch, which keeps bounds of split tails exact.
fn distribute_cancelling(l: &Linear, vb: &VarBounds) -> Option<Expr> {
    let mut mm =
        l.terms.iter().enumerate().filter(|(_, (a, k))| {
            k.abs() == 1 && matches!(a, Expr::Bin(BinOp::Min | BinOp::Max, ..))
        });
    let (pos, (atom, k)) = mm.next()?;
    if mm.next().is_some() || l.terms.len() < 2 {
        return None;
    }
    let Expr::Bin(op, p, q) = atom else {
        return None;
    };
    let mut rest = l.clone();
    rest.terms.remove(pos);
    // rest - min(p, q) = max(rest - p, rest - q)
    let op = match (k, op) {
        (-1, BinOp::Min) => BinOp::Max,
        (-1, BinOp::Max) => BinOp::Min,
        _ => *op,
    };
    let branch = |x: &Expr| {
        let mut b = rest.clone();
        b.add_scaled(Linear::of(x), *k);
        b
    };
    let (bp, bq) = (branch(p), branch(q));
    let before = rest.terms.len() + Linear::of(p).terms.len().max(Linear::of(q).terms.len());
    if bp.terms.len().min(bq.terms.len()) >= before {
        return None;
    }
    let (a, b) = (bp.to_expr(), bq.to_expr());
    Some(
        simplify_bin(
            op,
            &a,
            &b,
            &Expr::Bin(op, Box::new(a.clone()), Box::new(b.clone())),
            vb,
        )
        .unwrap_or(Expr::Bin(op, Box::new(a), Box::new(b))),
    )
}

/// `x + i < i + 1` → `x < 1`: when terms cancel between the sides, the comparison is
/// rewritten as (positive terms of a - b) op (the rest), which is shorter.
fn cancel_sides(op: BinOp, a: &Expr, b: &Expr, d: &Linear) -> Option<Expr> {
    let before = Linear::of(a).terms.len() + Linear::of(b).terms.len();
    if d.terms.len() >= before {
        return None;
    }
    let lhs = Linear {
        terms: d.terms.iter().filter(|t| t.1 > 0).cloned().collect(),
        c: 0,
    };
    let rhs = Linear {
        terms: d
            .terms
            .iter()
            .filter(|t| t.1 < 0)
            .map(|(e, k)| (e.clone(), -k))
            .collect(),
        c: -d.c,
    };
    Some(Expr::Bin(
        op,
        Box::new(lhs.to_expr()),
        Box::new(rhs.to_expr()),
    ))
}

fn fold_float(op: BinOp, a: &Expr, b: &Expr) -> Option<Expr> {
    let num = |e: &Expr| match e {
        Expr::Int(v) => Some(*v as f64),
        Expr::Float(v) => Some(*v),
        _ => None,
    };
    let (x, y) = (num(a)?, num(b)?);
    Some(Expr::Float(match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        _ => return None,
    }))
}

/// Splits a linear form into the part whose coefficients are multiples of `c` (divided
/// by `c`) and the remainder.
fn split_multiples(l: &Linear, c: i64) -> (Linear, Linear) {
    let mut q = Linear::constant(floor_div(l.c, c));
    let mut r = Linear::constant(floor_mod(l.c, c));
    for (a, k) in &l.terms {
        if k % c == 0 {
            q.add_term(a.clone(), k / c);
        } else {
            r.add_term(a.clone(), *k);
        }
    }
    (q, r)
}

fn simplify_div(a: &Expr, b: &Expr, vb: &VarBounds) -> Option<Expr> {
    let c = b.as_int().filter(|c| *c > 0)?;
    if c == 1 {
        return Some(a.clone());
    }
    let la = Linear::of(a);
    if let Some(v) = la.as_const() {
        return Some(Expr::Int(floor_div(v, c)));
    }
    // floordiv(q*c + r, c) = q + floordiv(r, c); the latter is constant when r's bounds
    // stay within one multiple of c.
    let (mut q, r) = split_multiples(&la, c);
    if let (Some(lo), Some(hi)) = const_bounds(&r.to_expr(), vb) {
        if floor_div(lo, c) == floor_div(hi, c) {
            q.c += floor_div(lo, c);
            return Some(q.to_expr());
        }
    }
    // floordiv(g*x, g*k) = floordiv(x, k)
    let g = gcd(la.gcd(), c);
    if g > 1 {
        let inner = scaled_down(&la, g).to_expr();
        return Some(simplify_div(&inner, &Expr::Int(c / g), vb).unwrap_or(inner.floordiv(c / g)));
    }
    // floordiv(g*x + r, g*k) = floordiv(x + floordiv(r, g), k)
    if let Some((x, g, _)) = small_remainder(&la, c, vb) {
        let inner = x.to_expr();
        return Some(simplify_div(&inner, &Expr::Int(c / g), vb).unwrap_or(inner.floordiv(c / g)));
    }
    // floordiv(floordiv(x, c1), c2) = floordiv(x, c1*c2) for positive constants
    if let Expr::Bin(BinOp::FloorDiv, x, c1) = a {
        if let Some(c1) = c1.as_int().filter(|v| *v > 0) {
            return Some((**x).clone().floordiv(c1 * c));
        }
    }
    (!q.terms.is_empty() && !r.terms.is_empty()).then(|| {
        let mut sum = q.clone();
        sum.add_scaled(Linear::of(&r.to_expr().floordiv(c)), 1);
        sum.to_expr()
    })
}

/// `l` as g*x + r for a divisor g of `c` (1 < g < c) that divides the coefficients
/// of x, where floordiv(r, g) is one constant over the bounds: returns x with that
/// constant added, g, and r less g times it (in [0, g)). A loop split by 4 and
/// read per group of 16 (floordiv(j + 4*j.outer, 16), j < 4) divides as
/// floordiv(j.outer, 4): the rows share one group.
fn small_remainder(l: &Linear, c: i64, vb: &VarBounds) -> Option<(Linear, i64, Linear)> {
    let mut divisors: Vec<i64> = l.terms.iter().map(|(_, k)| gcd(*k, c)).collect();
    divisors.sort_unstable_by(|a, b| b.cmp(a));
    divisors.dedup();
    divisors
        .into_iter()
        .filter(|&g| g > 1 && g < c)
        .find_map(|g| {
            let (mut x, mut r) = split_multiples(l, g);
            let (Some(lo), Some(hi)) = const_bounds(&r.to_expr(), vb) else {
                return None;
            };
            let whole = floor_div(lo, g);
            (whole == floor_div(hi, g)).then(|| {
                x.c += whole;
                r.c -= whole * g;
                (x, g, r)
            })
        })
}

fn scaled_down(l: &Linear, g: i64) -> Linear {
    Linear {
        terms: l.terms.iter().map(|(a, k)| (a.clone(), k / g)).collect(),
        c: l.c / g,
    }
}

fn simplify_mod(a: &Expr, b: &Expr, vb: &VarBounds) -> Option<Expr> {
    let c = b.as_int().filter(|c| *c > 0)?;
    if c == 1 {
        return Some(Expr::Int(0));
    }
    let la = Linear::of(a);
    if let Some(v) = la.as_const() {
        return Some(Expr::Int(floor_mod(v, c)));
    }
    let (_, r) = split_multiples(&la, c);
    if let (Some(lo), Some(hi)) = const_bounds(&r.to_expr(), vb) {
        if floor_div(lo, c) == floor_div(hi, c) {
            let mut r = r.clone();
            r.c -= floor_div(lo, c) * c;
            return Some(r.to_expr());
        }
    }
    // floormod(g*x, g*k) = g * floormod(x, k)
    let g = gcd(r.gcd(), c);
    if g > 1 {
        let inner = scaled_down(&r, g).to_expr();
        let m = simplify_mod(&inner, &Expr::Int(c / g), vb).unwrap_or(inner.floormod(c / g));
        return Some(Linear::of(&(m * g)).to_expr());
    }
    // floormod(g*x + r, g*k) = g * floormod(x + floordiv(r, g), k) + floormod(r, g)
    if let Some((x, g, rest)) = small_remainder(&r, c, vb) {
        let inner = x.to_expr();
        let m = simplify_mod(&inner, &Expr::Int(c / g), vb).unwrap_or(inner.floormod(c / g));
        return Some(Linear::of(&(m * g + rest.to_expr())).to_expr());
    }
    let re = r.to_expr();
    (re != *a).then(|| re.floormod(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_folding_and_cancellation() {
        let x = Var::new("x");
        let y = Var::new("y");
        let e = (x.expr() + 3) - x.expr() + y.expr() * 2 - y.expr();
        assert_eq!(simplify(&e), y.expr() + 3);
        assert_eq!(simplify(&((x.expr() + 1) * 4 - 4)), x.expr() * 4);
    }

    #[test]
    fn div_mod_with_bounds() {
        let o = Var::new("o");
        let i = Var::new("i");
        let mut vb = VarBounds::new();
        vb.set(&i, 0, 7);
        vb.set(&o, 0, 511);
        let e = o.expr() * 8 + i.expr();
        assert_eq!(simplify_with(&e.clone().floordiv(8), &vb), o.expr());
        assert_eq!(simplify_with(&e.floormod(8), &vb), i.expr());
        // floordiv(o*8, 64) = floordiv(o, 8); floormod(o*8, 64) = floormod(o, 8)*8
        assert_eq!(
            simplify_with(&(o.expr() * 8).floordiv(64), &vb),
            o.expr().floordiv(8)
        );
        assert_eq!(
            simplify_with(&(o.expr() * 8).floormod(64), &vb),
            o.expr().floormod(8) * 8
        );
        assert_eq!(simplify(&Expr::Int(-7).floordiv(2)), Expr::Int(-4));
    }

    /// g*x + r with r inside one multiple of g divides by g*k as x by k, and
    /// every rewrite gives the value of the expression it replaces.
    #[test]
    fn div_mod_of_a_multiple_plus_a_small_remainder() {
        let (j, o) = (Var::new("j"), Var::new("o"));
        let mut vb = VarBounds::new();
        vb.set(&j, 0, 3);
        vb.set(&o, 0, 79);
        let e = j.expr() + o.expr() * 4;
        assert_eq!(
            simplify_with(&e.clone().floordiv(16), &vb),
            o.expr().floordiv(4)
        );
        assert_eq!(
            simplify_with(&e.clone().floormod(16), &vb),
            o.expr().floormod(4) * 4 + j.expr()
        );
        // A constant remainder: the unrolled row j = 1.
        let one = o.expr() * 4 + 1;
        assert_eq!(simplify(&one.clone().floordiv(16)), o.expr().floordiv(4));
        for (e, c) in [
            (e.clone(), 16),
            (e.clone() + 6, 16),
            (e * 3 + 2, 24),
            (one, 8),
        ] {
            for div in [true, false] {
                let whole = match div {
                    true => e.clone().floordiv(c),
                    false => e.clone().floormod(c),
                };
                let simple = simplify_with(&whole, &vb);
                for (jv, ov) in (0..4).flat_map(|a| (0..80).map(move |b| (a, b))) {
                    let at = |x: &Expr| {
                        let v = x.substitute(&|v| {
                            (*v == j)
                                .then_some(Expr::Int(jv))
                                .or((*v == o).then_some(Expr::Int(ov)))
                        });
                        simplify(&v).as_int()
                    };
                    assert_eq!(
                        at(&whole),
                        at(&simple),
                        "{whole} -> {simple} at j={jv}, o={ov}"
                    );
                }
            }
        }
    }

    #[test]
    fn min_max_and_comparisons_by_bounds() {
        let o = Var::new("o");
        let mut vb = VarBounds::new();
        vb.set(&o, 0, 0);
        let tail = Expr::Int(16).min(Expr::Int(20) - o.expr() * 16);
        assert_eq!(simplify_with(&tail, &vb), Expr::Int(16));
        vb.set(&o, 1, 1);
        assert_eq!(simplify_with(&tail, &vb), Expr::Int(20) - o.expr() * 16);
        let last = tail.substitute(&|v| (*v == o).then_some(Expr::Int(1)));
        assert_eq!(simplify(&last), Expr::Int(4));
        let x = Var::new("x");
        assert_eq!(simplify(&(x.expr() + 1).min(x.expr() + 3)), x.expr() + 1);
        let four = Expr::Int(4);
        let e = o.expr() * 4 + four.clone().min(Expr::Int(10) - o.expr() * 4);
        assert_eq!(simplify(&e), (o.expr() * 4 + 4).min(10));
        // o*16 + min(16, 20 - o*16) - 1 <= 19 needs distribution over min.
        vb.set(&o, 0, 1);
        let e = o.expr() * 16 + tail - 1 - 19;
        assert!(prove_le_zero(&e, &vb));
        assert_eq!(simplify_with(&o.expr().lt(2), &vb), Expr::Int(1));
        // Terms shared by both sides cancel.
        let (i, y) = (Var::new("i"), Var::new("y"));
        let c = (y.expr() + i.expr()).lt(i.expr() + 1);
        assert_eq!(simplify(&c), y.expr().lt(1));
        let c = i.expr().le(y.expr() + i.expr());
        assert_eq!(simplify(&c), Expr::Int(0).le(y.expr()));
    }
}
