//! The conditions of the rules that recognize an activation spelled as
//! several elementwise ops (`rules/activations.rules`): each checks the ops
//! and constants of its spellings and binds the one op they compute.

use super::graph_conditions::{binary_op, row_major_op};
use super::{bind_atom, get, refuse, unary_op, Refusal};
use crate::graph::{BinaryOp, DType, Op, UnaryOp};
use crate::layout::egraph::{scalar_value, tensor_of, LEGraph};
use egg::Subst;

/// How far a spelling's constant may lie from the exact one, relative:
/// exporters write 1/6, 1/√2 and √(2/π) rounded to f32, or computed in f32.
const TOLERANCE: f64 = 1e-5;

/// The binary op of the op atom bound to `var`.
fn binary(eg: &LEGraph, s: &Subst, var: &str) -> Result<BinaryOp, Refusal> {
    binary_op(eg, get(s, var))
}

/// The unary op of the op atom bound to `var`.
fn unary(eg: &LEGraph, s: &Subst, var: &str) -> Result<UnaryOp, Refusal> {
    unary_op(eg, get(s, var))
}

/// Whether every op atom bound to `vars` is the binary op `op`.
fn all_binary(eg: &LEGraph, s: &Subst, vars: &[&str], op: BinaryOp) -> Result<bool, Refusal> {
    for v in vars {
        if binary(eg, s, v)? != op {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The value of the f32 constant of one element bound to `var`, which leaves
/// the shape of ?x as it is when it broadcasts against it (rank at most ?x's).
fn constant(eg: &LEGraph, s: &Subst, var: &str) -> Result<f32, Refusal> {
    let rank = tensor_of(eg, get(s, "?x"))?.logical.len();
    let c = tensor_of(eg, get(s, var))?;
    if !c.is_const || c.dtype != DType::F32 || c.logical.len() > rank {
        return refuse("not an f32 constant of at most x's rank");
    }
    scalar_value(eg, get(s, var)).map_or_else(|| refuse("not one value"), Ok)
}

/// Whether the constants bound to `vars` hold `want` (within [`TOLERANCE`]).
fn constants_are(eg: &LEGraph, s: &Subst, want: &[(&str, f64)]) -> Result<bool, Refusal> {
    for &(var, value) in want {
        let got = constant(eg, s, var)? as f64;
        if (got - value).abs() > TOLERANCE * value.abs() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Binds `var` to the unary op `u` of ?x (an f32 tensor), the op the matched
/// spelling computes.
fn bind_unary(eg: &mut LEGraph, s: &mut Subst, var: &str, u: UnaryOp) -> Result<(), Refusal> {
    let x = tensor_of(eg, get(s, "?x"))?;
    if x.dtype != DType::F32 {
        return refuse("not an f32 tensor");
    }
    let shape = x.logical.clone();
    let atom = row_major_op(eg, Op::Unary(u), shape)?;
    bind_atom(eg, s, var, atom);
    Ok(())
}

/// clamp(x ± k, lo, hi) · s (or / s) is HardSigmoid(x) = clamp(αx + β, 0, 1)
/// when the scale takes the clamp's bounds to exactly 0 and 1: α = s, β = ±k·s.
/// ?c is a relu or clip, ?a an Add or Sub of the constant ?k, ?m a Mul or Div
/// by the constant ?s. Binds ?h.
pub(super) fn hard_sigmoid_form(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let Some((lo, hi)) = unary(eg, s, "?c")?.clamp_bounds() else {
        return refuse("not a clamp");
    };
    let k = constant(eg, s, "?k")?;
    let shift = match binary(eg, s, "?a")? {
        BinaryOp::Add => k,
        BinaryOp::Sub => -k,
        _ => return refuse("not a shift"),
    };
    let by = constant(eg, s, "?s")?;
    let scale = match binary(eg, s, "?m")? {
        BinaryOp::Mul => by,
        BinaryOp::Div => 1.0 / by,
        _ => return refuse("not a scale"),
    };
    let top = (hi * scale) as f64;
    if lo != 0.0 || scale.is_nan() || scale <= 0.0 || (top - 1.0).abs() > TOLERANCE {
        return refuse("the scaled clamp is not 0..1");
    }
    let alpha = scale;
    let beta = shift * scale;
    bind_unary(eg, s, "?h", UnaryOp::HardSigmoid { alpha, beta })
}

/// x · HardSigmoid(x) with α = 1/6, β = 1/2 is HardSwish(x). ?m is a Mul.
/// Binds ?hs.
pub(super) fn hard_swish_form(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let UnaryOp::HardSigmoid { alpha, beta } = unary(eg, s, "?h")? else {
        return refuse("not a hard sigmoid");
    };
    let near = |v: f32, want: f64| (v as f64 - want).abs() <= TOLERANCE;
    if binary(eg, s, "?m")? != BinaryOp::Mul || !near(alpha, 1.0 / 6.0) || !near(beta, 0.5) {
        return refuse("not x times the hard swish gate");
    }
    bind_unary(eg, s, "?hs", UnaryOp::HardSwish)
}

/// Whether ?d divides by √2 or multiplies by 1/√2 (the constant ?k).
fn over_sqrt2(eg: &LEGraph, s: &Subst) -> Result<bool, Refusal> {
    let inv_sqrt2 = std::f64::consts::FRAC_1_SQRT_2;
    Ok(match binary(eg, s, "?d")? {
        BinaryOp::Div => constants_are(eg, s, &[("?k", std::f64::consts::SQRT_2)])?,
        BinaryOp::Mul => constants_are(eg, s, &[("?k", inv_sqrt2)])?,
        _ => false,
    })
}

/// Binds ?g to Gelu when `holds`.
fn gelu_if(eg: &mut LEGraph, s: &mut Subst, holds: bool, tanh_approx: bool) -> Result<(), Refusal> {
    match holds {
        true => bind_unary(eg, s, "?g", UnaryOp::Gelu { tanh_approx }),
        false => refuse("not this spelling of gelu"),
    }
}

/// x · (erf(x/√2) + 1) · ½, with the half on either product: ?m1 and ?m2
/// are Muls, ?a an Add of ?one, ?e an Erf, ?d a division by √2 (or a
/// product with 1/√2), ?half ½. Binds ?g.
pub(super) fn gelu_erf_form(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    erf_gelu(eg, s, ("?a", BinaryOp::Add), None)
}

/// (x · ½) · erfc(−x/√2), the erfc spelled 1 − erf: as `gelu_erf_form` with
/// ?s a Sub from ?one and ?n a Neg of x. Binds ?g.
pub(super) fn gelu_erfc_form(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    erf_gelu(eg, s, ("?s", BinaryOp::Sub), Some("?n"))
}

/// The erf spellings of gelu: `sum` names the op that joins erf and 1, and
/// `negation` the Neg of x inside the erf, when there is one.
fn erf_gelu(
    eg: &mut LEGraph,
    s: &mut Subst,
    sum: (&str, BinaryOp),
    negation: Option<&str>,
) -> Result<(), Refusal> {
    let negated = match negation {
        Some(n) => unary(eg, s, n)? == UnaryOp::Neg,
        None => true,
    };
    let holds = negated
        && all_binary(eg, s, &["?m1", "?m2"], BinaryOp::Mul)?
        && binary(eg, s, sum.0)? == sum.1
        && unary(eg, s, "?e")? == UnaryOp::Erf
        && over_sqrt2(eg, s)?
        && constants_are(eg, s, &[("?one", 1.0), ("?half", 0.5)])?;
    gelu_if(eg, s, holds, false)
}

/// (x · ½) · (tanh(√(2/π) · (x + 0.044715 · x³)) + 1), the cube (x · x) · x:
/// ?m1 to ?m4, ?p1 and ?p2 are Muls, ?a1 and ?a2 Adds, ?t a Tanh, ?c
/// 0.044715, ?k √(2/π), ?one 1, ?half ½. Binds ?g.
pub(super) fn gelu_tanh_form(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let sqrt_2_over_pi = (2.0 / std::f64::consts::PI).sqrt();
    let products = ["?m1", "?m2", "?m3", "?m4", "?p1", "?p2"];
    let holds = all_binary(eg, s, &products, BinaryOp::Mul)?
        && all_binary(eg, s, &["?a1", "?a2"], BinaryOp::Add)?
        && unary(eg, s, "?t")? == UnaryOp::Tanh
        && constants_are(
            eg,
            s,
            &[
                ("?c", 0.044715),
                ("?k", sqrt_2_over_pi),
                ("?one", 1.0),
                ("?half", 0.5),
            ],
        )?;
    gelu_if(eg, s, holds, true)
}
