//! Expressions shared by compute definitions and the statement IR.
//!
//! One expression type serves both index arithmetic (integers: loop variables, bounds,
//! buffer indices) and tensor values (floats). Integer semantics are floor division and
//! floor modulo, as in TVM's `indexdiv`/`indexmod`, so that negative offsets behave.

use crate::core::scalar::MathFn;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Identifies the tensor produced by one operation of a [`super::compute::ComputeGraph`].
/// After storage flattening it also names the buffer holding that tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);

/// A variable: loop variables, iteration variables of compute definitions.
/// Identity is the unique id; the name is only for printing.
#[derive(Clone, Debug)]
pub struct Var {
    /// The unique id: two variables are equal when their ids are.
    pub id: u64,
    /// The name, for printing.
    pub name: Arc<str>,
}

static NEXT_VAR: AtomicU64 = AtomicU64::new(1);

impl Var {
    /// A fresh variable named `name`.
    pub fn new(name: &str) -> Var {
        Var {
            id: NEXT_VAR.fetch_add(1, Ordering::Relaxed),
            name: Arc::from(name),
        }
    }
    /// The variable as an expression.
    pub fn expr(&self) -> Expr {
        Expr::Var(self.clone())
    }
}

impl PartialEq for Var {
    fn eq(&self, o: &Var) -> bool {
        self.id == o.id
    }
}
impl Eq for Var {}
impl std::hash::Hash for Var {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.id.hash(h)
    }
}

/// A binary operation of expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// Float division (values only).
    Div,
    /// Integer division rounding towards negative infinity.
    FloorDiv,
    /// The remainder of `FloorDiv`, with the sign of the divisor.
    FloorMod,
    /// The smaller of `a` and `b`.
    Min,
    /// The larger of `a` and `b`.
    Max,
    /// `a < b` (1 or 0).
    Lt,
    /// `a <= b` (1 or 0).
    Le,
    /// `a == b` (1 or 0).
    Eq,
    /// `a != b` (1 or 0).
    Ne,
    /// Both conditions hold.
    And,
    /// Either condition holds.
    Or,
}

/// A float function of the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intrinsic {
    /// `e^x`.
    Exp,
    /// The natural logarithm.
    Log,
    /// The square root.
    Sqrt,
    /// The hyperbolic tangent.
    Tanh,
    /// The error function.
    Erf,
    /// The logistic function 1 / (1 + e^−x).
    Sigmoid,
    /// `pow(base, exponent)`: the one intrinsic of two arguments.
    Pow,
    /// The nearest integer, halves to even.
    Round,
    /// The largest integer not above x.
    Floor,
    /// The smallest integer not below x.
    Ceil,
    /// A trigonometric or hyperbolic function (the math library's).
    Math(MathFn),
}

/// An expression of the tensor IR: index arithmetic and element values.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// An integer constant.
    Int(i64),
    /// A float constant.
    Float(f64),
    /// A variable.
    Var(Var),
    /// A binary operation.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// The negation of a condition.
    Not(Box<Expr>),
    /// `cond ? a : b`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// An intrinsic applied to its arguments.
    Call(Intrinsic, Vec<Expr>),
    /// A read of a tensor element by logical multi-dimensional index (compute bodies and
    /// the statement IR before storage flattening).
    Read {
        /// The tensor read.
        tensor: TensorId,
        /// One index per dimension.
        indices: Vec<Expr>,
    },
    /// A read of a flattened buffer (after storage flattening).
    Load {
        /// The buffer read.
        buffer: TensorId,
        /// The element's position in the buffer.
        index: Box<Expr>,
    },
}

/// A half-open range `[min, min + extent)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Range {
    /// The first value.
    pub min: Expr,
    /// How many values (the last is `min + extent - 1`).
    pub extent: Expr,
}

impl Range {
    /// Replaces the min and the extent by `f` of them, in place.
    pub fn map(&mut self, f: &mut impl FnMut(&mut Expr)) {
        f(&mut self.min);
        f(&mut self.extent);
    }

    /// The range `[min, min + extent)`.
    pub fn new(min: impl Into<Expr>, extent: impl Into<Expr>) -> Range {
        Range {
            min: min.into(),
            extent: extent.into(),
        }
    }
    /// `[0, extent)`.
    pub fn extent(extent: impl Into<Expr>) -> Range {
        Range::new(0, extent)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "[{}, {}]", self.min, self.extent)
    }
}

impl From<i64> for Expr {
    fn from(v: i64) -> Expr {
        Expr::Int(v)
    }
}
impl From<f64> for Expr {
    fn from(v: f64) -> Expr {
        Expr::Float(v)
    }
}
impl From<&Var> for Expr {
    fn from(v: &Var) -> Expr {
        Expr::Var(v.clone())
    }
}

/// `a op b`.
pub fn bin(op: BinOp, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
    Expr::Bin(op, Box::new(a.into()), Box::new(b.into()))
}

macro_rules! op_impl {
    ($tr:ident, $m:ident, $op:expr) => {
        impl<T: Into<Expr>> std::ops::$tr<T> for Expr {
            type Output = Expr;
            fn $m(self, rhs: T) -> Expr {
                bin($op, self, rhs)
            }
        }
    };
}
op_impl!(Add, add, BinOp::Add);
op_impl!(Sub, sub, BinOp::Sub);
op_impl!(Mul, mul, BinOp::Mul);
op_impl!(Div, div, BinOp::Div);

/// Builder methods that apply a binary operator to `self` and `b`, in that order.
macro_rules! bin_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Expr {
            $(
                $(#[$doc])*
                pub fn $name(self, b: impl Into<Expr>) -> Expr {
                    bin(BinOp::$op, self, b)
                }
            )*
        }
    };
}
bin_methods! {
    /// `floordiv(self, b)`.
    floordiv => FloorDiv;
    /// `floormod(self, b)`.
    floormod => FloorMod;
    /// `min(self, b)`.
    min => Min;
    /// `max(self, b)`.
    max => Max;
    /// `self < b`.
    lt => Lt;
    /// `self <= b`.
    le => Le;
    /// `self && b`.
    and => And;
}

impl Expr {
    /// `self >= b`.
    pub fn ge(self, b: impl Into<Expr>) -> Expr {
        bin(BinOp::Le, b, self)
    }
    /// `cond ? a : b`.
    pub fn select(cond: Expr, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        Expr::Select(Box::new(cond), Box::new(a.into()), Box::new(b.into()))
    }
    /// `f(args)`.
    pub fn call(f: Intrinsic, args: Vec<Expr>) -> Expr {
        Expr::Call(f, args)
    }

    /// The value of an integer constant.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Expr::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// Whether the expression has integer type (index arithmetic). Tensor reads, float
    /// literals, float division and intrinsics make an expression a float value.
    pub fn is_int(&self) -> bool {
        match self {
            Expr::Int(_) | Expr::Var(_) | Expr::Not(_) => true,
            Expr::Float(_) | Expr::Call(..) | Expr::Read { .. } | Expr::Load { .. } => false,
            Expr::Bin(op, a, b) => match op {
                BinOp::Div => false,
                BinOp::Lt | BinOp::Le | BinOp::Eq | BinOp::Ne | BinOp::And | BinOp::Or => true,
                _ => a.is_int() && b.is_int(),
            },
            Expr::Select(_, a, b) => a.is_int() && b.is_int(),
        }
    }

    /// Calls `f` on every sub-expression, parents before children.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Int(_) | Expr::Float(_) | Expr::Var(_) => {}
            Expr::Bin(_, a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Expr::Not(a) => a.visit(f),
            Expr::Select(c, a, b) => {
                c.visit(f);
                a.visit(f);
                b.visit(f);
            }
            Expr::Call(_, args) => args.iter().for_each(|a| a.visit(f)),
            Expr::Read { indices, .. } => indices.iter().for_each(|a| a.visit(f)),
            Expr::Load { index, .. } => index.visit(f),
        }
    }

    /// Rebuilds the expression bottom-up; `f` may replace a node (after its children were
    /// rewritten) by returning `Some`.
    pub fn rewrite(&self, f: &mut dyn FnMut(&Expr) -> Option<Expr>) -> Expr {
        let e = match self {
            Expr::Int(_) | Expr::Float(_) | Expr::Var(_) => self.clone(),
            Expr::Bin(op, a, b) => Expr::Bin(*op, Box::new(a.rewrite(f)), Box::new(b.rewrite(f))),
            Expr::Not(a) => Expr::Not(Box::new(a.rewrite(f))),
            Expr::Select(c, a, b) => Expr::Select(
                Box::new(c.rewrite(f)),
                Box::new(a.rewrite(f)),
                Box::new(b.rewrite(f)),
            ),
            Expr::Call(i, args) => Expr::Call(*i, args.iter().map(|a| a.rewrite(f)).collect()),
            Expr::Read { tensor, indices } => Expr::Read {
                tensor: *tensor,
                indices: indices.iter().map(|a| a.rewrite(f)).collect(),
            },
            Expr::Load { buffer, index } => Expr::Load {
                buffer: *buffer,
                index: Box::new(index.rewrite(f)),
            },
        };
        f(&e).unwrap_or(e)
    }

    /// Replaces variables by expressions.
    pub fn substitute(&self, map: &dyn Fn(&Var) -> Option<Expr>) -> Expr {
        self.rewrite(&mut |e| match e {
            Expr::Var(v) => map(v),
            _ => None,
        })
    }

    /// Whether `v` occurs in the expression.
    pub fn uses_var(&self, v: &Var) -> bool {
        let mut found = false;
        self.visit(&mut |e| {
            if let Expr::Var(w) = e {
                found |= w == v;
            }
        });
        found
    }

    /// The tensors this expression reads, in order of first appearance.
    pub fn tensors_read(&self) -> Vec<TensorId> {
        let mut out = Vec::new();
        self.visit(&mut |e| {
            if let Expr::Read { tensor, .. } = e {
                if !out.contains(tensor) {
                    out.push(*tensor);
                }
            }
        });
        out
    }
}

fn op_str(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::And => "&&",
        BinOp::Or => "||",
        BinOp::FloorDiv => "floordiv",
        BinOp::FloorMod => "floormod",
        BinOp::Min => "min",
        BinOp::Max => "max",
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write_expr(f, self, &|t| format!("t{}", t.0))
    }
}

/// Prints an expression, naming tensors with `names`.
pub(crate) fn write_expr(
    f: &mut fmt::Formatter,
    e: &Expr,
    names: &dyn Fn(TensorId) -> String,
) -> fmt::Result {
    let list = |f: &mut fmt::Formatter, items: &[Expr]| -> fmt::Result {
        for (k, x) in items.iter().enumerate() {
            if k > 0 {
                write!(f, ", ")?;
            }
            write_expr(f, x, names)?;
        }
        Ok(())
    };
    match e {
        Expr::Int(v) => write!(f, "{v}"),
        Expr::Float(v) => write!(f, "{v:?}f"),
        Expr::Var(v) => write!(f, "{}", v.name),
        Expr::Bin(op @ (BinOp::FloorDiv | BinOp::FloorMod | BinOp::Min | BinOp::Max), a, b) => {
            write!(f, "{}(", op_str(*op))?;
            list(f, &[(**a).clone(), (**b).clone()])?;
            write!(f, ")")
        }
        Expr::Bin(op, a, b) => {
            write!(f, "(")?;
            write_expr(f, a, names)?;
            write!(f, " {} ", op_str(*op))?;
            write_expr(f, b, names)?;
            write!(f, ")")
        }
        Expr::Not(a) => {
            write!(f, "!")?;
            write_expr(f, a, names)
        }
        Expr::Select(c, a, b) => {
            write!(f, "select(")?;
            list(f, &[(**c).clone(), (**a).clone(), (**b).clone()])?;
            write!(f, ")")
        }
        Expr::Call(i, args) => {
            write!(f, "{}(", format!("{i:?}").to_lowercase())?;
            list(f, args)?;
            write!(f, ")")
        }
        Expr::Read { tensor, indices } => {
            write!(f, "{}(", names(*tensor))?;
            list(f, indices)?;
            write!(f, ")")
        }
        Expr::Load { buffer, index } => {
            write!(f, "{}[", names(*buffer))?;
            write_expr(f, index, names)?;
            write!(f, "]")
        }
    }
}

/// Row-major multi-index of a flat offset.
pub fn unflatten(mut flat: i64, shape: &[i64]) -> Vec<i64> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    idx
}

/// Floor division of integers (rounds towards negative infinity).
pub fn floor_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) - if b < 0 && a.rem_euclid(b) != 0 { 1 } else { 0 }
}

/// Floor modulo: the result has the sign of the divisor.
pub fn floor_mod(a: i64, b: i64) -> i64 {
    a - b * floor_div(a, b)
}

/// Floating-point negation (−1 · x, so that −0 and NaN come out as IEEE says).
impl std::ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::Float(-1.0) * self
    }
}

/// Elementwise definitions (`crate::core::scalar`) build TIR expressions through
/// this: the compiled code computes exactly the function the reference does.
impl crate::core::scalar::Scalar for Expr {
    fn lit(v: f64) -> Expr {
        Expr::Float(v)
    }
    fn max(self, other: Expr) -> Expr {
        bin(BinOp::Max, self, other)
    }
    fn min(self, other: Expr) -> Expr {
        bin(BinOp::Min, self, other)
    }
    fn if_negative(self, neg: Expr, pos: Expr) -> Expr {
        Expr::select(self.lt(Expr::Float(0.0)), neg, pos)
    }
    fn exp(self) -> Expr {
        Expr::call(Intrinsic::Exp, vec![self])
    }
    fn ln(self) -> Expr {
        Expr::call(Intrinsic::Log, vec![self])
    }
    fn sqrt(self) -> Expr {
        Expr::call(Intrinsic::Sqrt, vec![self])
    }
    fn tanh(self) -> Expr {
        Expr::call(Intrinsic::Tanh, vec![self])
    }
    fn erf(self) -> Expr {
        Expr::call(Intrinsic::Erf, vec![self])
    }
    fn sigmoid(self) -> Expr {
        Expr::call(Intrinsic::Sigmoid, vec![self])
    }
    fn pow(self, e: Expr) -> Expr {
        Expr::call(Intrinsic::Pow, vec![self, e])
    }
    fn round_even(self) -> Expr {
        Expr::call(Intrinsic::Round, vec![self])
    }
    fn floor(self) -> Expr {
        Expr::call(Intrinsic::Floor, vec![self])
    }
    fn ceil(self) -> Expr {
        Expr::call(Intrinsic::Ceil, vec![self])
    }
    fn math(self, f: MathFn) -> Expr {
        Expr::call(Intrinsic::Math(f), vec![self])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_semantics() {
        assert_eq!(floor_div(7, 2), 3);
        assert_eq!(floor_div(-7, 2), -4);
        assert_eq!(floor_mod(-7, 2), 1);
        assert_eq!(floor_div(7, -2), -4);
        assert_eq!(floor_mod(7, -2), -1);
    }
}
