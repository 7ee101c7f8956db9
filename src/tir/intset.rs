//! Integer sets used by bound inference.
//!
//! Today an [`IntSet`] is a (possibly symbolic) closed interval, as in TVM. Users only go
//! through the methods below (`eval_set`, `union`, `cover_range`, `match_range`, ...), so
//! strided or modular sets can be added as further variants without changing them.

use std::collections::HashMap;

use super::expr::{BinOp, Expr, Range};
use super::simplify::{prove_equal, simplify_with, VarBounds};

/// A set of integers, as symbolic bounds.
#[derive(Clone, Debug, PartialEq)]
pub enum IntSet {
    /// `[min, max]`, both inclusive; `None` is an infinite end.
    Interval {
        /// The least element (`None`: unbounded).
        min: Option<Expr>,
        /// The greatest element (`None`: unbounded).
        max: Option<Expr>,
    },
}

/// Sets for variables, keyed by variable id.
pub type DomMap = HashMap<u64, IntSet>;

impl IntSet {
    /// All integers.
    pub fn everything() -> IntSet {
        IntSet::Interval {
            min: None,
            max: None,
        }
    }
    /// The single value `e`.
    pub fn point(e: Expr) -> IntSet {
        IntSet::Interval {
            min: Some(e.clone()),
            max: Some(e),
        }
    }
    /// `[min, max]`, both inclusive.
    pub fn interval(min: Expr, max: Expr) -> IntSet {
        IntSet::Interval {
            min: Some(min),
            max: Some(max),
        }
    }
    /// The values of range `r`.
    pub fn from_range(r: &Range, vb: &VarBounds) -> IntSet {
        IntSet::interval(
            r.min.clone(),
            simplify_with(&(r.min.clone() + r.extent.clone() - 1), vb),
        )
    }
    /// The least element, when bounded.
    pub fn min(&self) -> Option<&Expr> {
        let IntSet::Interval { min, .. } = self;
        min.as_ref()
    }
    /// The greatest element, when bounded.
    pub fn max(&self) -> Option<&Expr> {
        let IntSet::Interval { max, .. } = self;
        max.as_ref()
    }
    /// Whether the set provably holds one value.
    pub fn is_single_point(&self, vb: &VarBounds) -> bool {
        matches!((self.min(), self.max()), (Some(a), Some(b)) if prove_equal(a, b, vb))
    }
    /// That value, when the set provably holds one.
    pub fn point_value(&self, vb: &VarBounds) -> Option<&Expr> {
        self.is_single_point(vb).then(|| self.min()).flatten()
    }
    /// Whether the set is exactly the range `r`.
    pub fn match_range(&self, r: &Range, vb: &VarBounds) -> bool {
        match (self.min(), self.max()) {
            (Some(a), Some(b)) => {
                prove_equal(a, &r.min, vb)
                    && prove_equal(b, &(r.min.clone() + r.extent.clone() - 1), vb)
            }
            _ => false,
        }
    }
    /// The smallest range covering the set; infinite ends are taken from `dom`.
    pub fn cover_range(&self, dom: &Range, vb: &VarBounds) -> Range {
        match (self.min(), self.max()) {
            (Some(a), Some(b)) => {
                Range::new(a.clone(), simplify_with(&(b.clone() - a.clone() + 1), vb))
            }
            _ => dom.clone(),
        }
    }
    /// Convex union (interval hull).
    pub fn union(&self, o: &IntSet, vb: &VarBounds) -> IntSet {
        let end = |a: Option<&Expr>, b: Option<&Expr>, op: BinOp| match (a, b) {
            (Some(a), Some(b)) => Some(simplify_with(
                &Expr::Bin(op, Box::new(a.clone()), Box::new(b.clone())),
                vb,
            )),
            _ => None,
        };
        IntSet::Interval {
            min: end(self.min(), o.min(), BinOp::Min),
            max: end(self.max(), o.max(), BinOp::Max),
        }
    }
    /// Number of elements when both ends are constants.
    pub fn const_size(&self) -> Option<i64> {
        Some(self.max()?.as_int()? - self.min()?.as_int()? + 1)
    }
}

/// Evaluates the set of values `e` takes when each variable in `dom` ranges over its set
/// (variables not in `dom` stay symbolic, i.e. are single points).
pub fn eval_set(e: &Expr, dom: &DomMap, vb: &VarBounds) -> IntSet {
    // Simplified first, so that a variable occurring twice (`o*4 + min(4, 10 - o*4)`)
    // is, where possible, brought to one occurrence per branch before it is relaxed.
    let s = eval(&simplify_with(e, vb), dom, vb);
    let simp = |x: Option<Expr>| x.map(|x| simplify_with(&x, vb));
    let IntSet::Interval { min, max } = s;
    IntSet::Interval {
        min: simp(min),
        max: simp(max),
    }
}

/// The set of `e` when the given variables are relaxed one at a time, in order. A
/// variable's set may mention variables later in the list (an inner loop whose extent
/// depends on an outer one): list inner loops first.
pub fn eval_set_in_order(e: &Expr, vars: &[(u64, IntSet)], vb: &VarBounds) -> IntSet {
    let (mut lo, mut hi) = (Some(e.clone()), Some(e.clone()));
    for (id, set) in vars {
        let one: DomMap = [(*id, set.clone())].into_iter().collect();
        lo = lo.and_then(|x| eval_set(&x, &one, vb).min().cloned());
        hi = hi.and_then(|x| eval_set(&x, &one, vb).max().cloned());
    }
    IntSet::Interval { min: lo, max: hi }
}

fn eval(e: &Expr, dom: &DomMap, vb: &VarBounds) -> IntSet {
    match e {
        Expr::Int(_) => IntSet::point(e.clone()),
        Expr::Var(v) => dom
            .get(&v.id)
            .cloned()
            .unwrap_or_else(|| IntSet::point(e.clone())),
        Expr::Bin(op, a, b) if e.is_int() => {
            let sa = eval(a, dom, vb);
            let sb = eval(b, dom, vb);
            let f = |op: BinOp, x: Option<&Expr>, y: Option<&Expr>| match (x, y) {
                (Some(x), Some(y)) => Some(Expr::Bin(op, Box::new(x.clone()), Box::new(y.clone()))),
                _ => None,
            };
            match op {
                BinOp::Add => IntSet::Interval {
                    min: f(BinOp::Add, sa.min(), sb.min()),
                    max: f(BinOp::Add, sa.max(), sb.max()),
                },
                BinOp::Sub => IntSet::Interval {
                    min: f(BinOp::Sub, sa.min(), sb.max()),
                    max: f(BinOp::Sub, sa.max(), sb.min()),
                },
                BinOp::Mul => eval_mul(&sa, &sb, vb),
                BinOp::FloorDiv => match b.as_int() {
                    Some(c) if c > 0 => IntSet::Interval {
                        min: sa.min().map(|x| x.clone().floordiv(c)),
                        max: sa.max().map(|x| x.clone().floordiv(c)),
                    },
                    _ => point_or_everything(&sa, &sb, e, vb),
                },
                BinOp::FloorMod => match b.as_int() {
                    Some(c) if c > 0 => {
                        if let Some(p) = sa.point_value(vb) {
                            return IntSet::point(p.clone().floormod(c));
                        }
                        // Exact when the whole interval lies within one period.
                        if let (Some(lo), Some(hi)) = (sa.min(), sa.max()) {
                            let q_lo = simplify_with(&lo.clone().floordiv(c), vb);
                            let q_hi = simplify_with(&hi.clone().floordiv(c), vb);
                            if prove_equal(&q_lo, &q_hi, vb) {
                                return IntSet::interval(
                                    lo.clone().floormod(c),
                                    hi.clone().floormod(c),
                                );
                            }
                        }
                        IntSet::interval(Expr::Int(0), Expr::Int(c - 1))
                    }
                    _ => point_or_everything(&sa, &sb, e, vb),
                },
                BinOp::Min | BinOp::Max => IntSet::Interval {
                    min: f(*op, sa.min(), sb.min()),
                    max: f(*op, sa.max(), sb.max()),
                },
                _ => point_or_everything(&sa, &sb, e, vb),
            }
        }
        Expr::Select(_, a, b) if e.is_int() => eval(a, dom, vb).union(&eval(b, dom, vb), vb),
        _ => IntSet::everything(),
    }
}

fn eval_mul(sa: &IntSet, sb: &IntSet, vb: &VarBounds) -> IntSet {
    let konst = |s: &IntSet| {
        s.point_value(vb)
            .and_then(|p| simplify_with(p, vb).as_int())
    };
    let scale = |s: &IntSet, k: i64| {
        let m = |x: Option<&Expr>| x.map(|x| x.clone() * k);
        if k >= 0 {
            IntSet::Interval {
                min: m(s.min()),
                max: m(s.max()),
            }
        } else {
            IntSet::Interval {
                min: m(s.max()),
                max: m(s.min()),
            }
        }
    };
    match (konst(sa), konst(sb)) {
        (_, Some(k)) => scale(sa, k),
        (Some(k), _) => scale(sb, k),
        _ => match (sa.point_value(vb), sb.point_value(vb)) {
            (Some(a), Some(b)) => IntSet::point(a.clone() * b.clone()),
            _ => {
                // Both sides vary: use their constant corners when known.
                let c = |x: Option<&Expr>| x.and_then(|x| simplify_with(x, vb).as_int());
                match (c(sa.min()), c(sa.max()), c(sb.min()), c(sb.max())) {
                    (Some(a0), Some(a1), Some(b0), Some(b1)) => {
                        let p = [a0 * b0, a0 * b1, a1 * b0, a1 * b1];
                        IntSet::interval(
                            Expr::Int(*p.iter().min().unwrap_or(&0)),
                            Expr::Int(*p.iter().max().unwrap_or(&0)),
                        )
                    }
                    _ => IntSet::everything(),
                }
            }
        },
    }
}

fn point_or_everything(sa: &IntSet, sb: &IntSet, e: &Expr, vb: &VarBounds) -> IntSet {
    match (sa.point_value(vb), sb.point_value(vb), e) {
        (Some(a), Some(b), Expr::Bin(op, ..)) => {
            IntSet::point(Expr::Bin(*op, Box::new(a.clone()), Box::new(b.clone())))
        }
        _ => IntSet::everything(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::expr::Var;

    #[test]
    fn interval_arithmetic_is_symbolic() {
        let o = Var::new("o");
        let i = Var::new("i");
        let vb = VarBounds::new();
        let mut dom = DomMap::new();
        dom.insert(i.id, IntSet::interval(Expr::Int(0), Expr::Int(7)));
        let s = eval_set(&(o.expr() * 8 + i.expr()), &dom, &vb);
        assert_eq!(s, IntSet::interval(o.expr() * 8, o.expr() * 8 + 7));
        let m = eval_set(&(o.expr() * 8 + i.expr()).floormod(4), &dom, &vb);
        assert_eq!(m, IntSet::interval(Expr::Int(0), Expr::Int(3)));
        let u = IntSet::point(o.expr()).union(&IntSet::point(o.expr() + 2), &vb);
        assert_eq!(
            u.cover_range(&Range::extent(10), &vb),
            Range::new(o.expr(), 3)
        );
    }
}
