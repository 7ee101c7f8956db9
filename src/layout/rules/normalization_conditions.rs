//! The conditions of the rules that recognize a layer or RMS normalization
//! spelled as reductions and elementwise ops (`rules/normalizations.rules`):
//! the op kinds are the rules' typed variables (`?ReduceMean`, `?Mul`, ...);
//! these check what kinds cannot say (the reduced axes, the constants) and
//! bind the one op the spelling computes.

use super::graph_conditions::{reshape_to, row_major_op};
use super::{bind_atom, get, refuse, Refusal};
use crate::graph::{DType, Op};
use crate::layout::egraph::{entry_of, scalar_value, tensor_of, LEGraph};
use crate::ops::{LayerNorm, Reduce, ReduceKind};
use egg::Subst;

/// ?ReduceMean averages the f32 tensor ?x over its trailing axes from some
/// axis on, keeping them, and ?eps is one non-negative f32 value: binds ?ln
/// to the normalization over those axes, subtracting the mean when
/// `centered`.
fn normalization(eg: &mut LEGraph, s: &mut Subst, centered: bool) -> Result<(), Refusal> {
    let x = tensor_of(eg, get(s, "?x"))?;
    if x.dtype != DType::F32 || x.is_const {
        return refuse("not a computed f32 tensor");
    }
    let shape = x.logical.clone();
    let rank = shape.len();
    let Op::Reduce(Reduce {
        kind: ReduceKind::Mean,
        axes,
        keepdims: true,
    }) = &entry_of(eg, get(s, "?ReduceMean"))?.op
    else {
        return refuse("not a mean that keeps the reduced axes");
    };
    let mut axes = axes.clone();
    axes.sort_unstable();
    let axis = rank.saturating_sub(axes.len());
    if axes.is_empty() || !axes.into_iter().eq(axis..rank) {
        return refuse("the mean is not over the trailing axes");
    }
    let eps = tensor_of(eg, get(s, "?eps"))?;
    if !eps.is_const || eps.dtype != DType::F32 || eps.logical.len() > rank {
        return refuse("epsilon is not an f32 constant");
    }
    let epsilon = match scalar_value(eg, get(s, "?eps")) {
        Some(e) if e >= 0.0 && e.is_finite() => e,
        _ => return refuse("epsilon is not one non-negative value"),
    };
    let op = Op::LayerNorm(LayerNorm {
        axis,
        epsilon,
        centered,
    });
    let atom = row_major_op(eg, op, shape)?;
    bind_atom(eg, s, "?ln", atom);
    Ok(())
}

/// The spelling's reductions and epsilon make a layer normalization
/// (`normalization`, centered). Binds ?ln.
pub(super) fn layer_norm_form(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    normalization(eg, s, true)
}

/// The same for an RMS normalization (the mean not subtracted). Binds ?ln.
pub(super) fn rms_norm_form(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    normalization(eg, s, false)
}

/// ?GlobalAveragePool averages the computed f32 tensor ?x of rank 3 over its
/// last axis (tf2onnx writes a row's mean so): binds ?mean to that mean as a
/// ReduceMean keeping the axis, the form the normalization spellings read.
pub(super) fn global_pool_row_mean(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let x = tensor_of(eg, get(s, "?x"))?;
    if x.dtype != DType::F32 || x.is_const || x.logical.len() != 3 {
        return refuse("not a computed f32 tensor of rank 3");
    }
    let mut shape = x.logical.clone();
    shape[2] = 1;
    let op = Op::Reduce(Reduce {
        kind: ReduceKind::Mean,
        axes: vec![2],
        keepdims: true,
    });
    let atom = row_major_op(eg, op, shape)?;
    bind_atom(eg, s, "?mean", atom);
    Ok(())
}

/// The f32 constant bound to `var`, which varies along the normalized axes
/// of ?ln only, reshaped to their rank (to one value per row element when it
/// has as many, the form the row kernel reads), bound to `to`.
fn per_row_element(eg: &mut LEGraph, s: &mut Subst, var: &str, to: &str) -> Result<(), Refusal> {
    let entry = entry_of(eg, get(s, "?ln"))?.clone();
    let Op::LayerNorm(norm) = &entry.op else {
        return refuse("not a normalization");
    };
    let [(shape, _)] = &entry.outputs[..] else {
        return refuse("not one output");
    };
    let c = tensor_of(eg, get(s, var))?;
    let row = &shape[norm.axis..];
    if !c.is_const || c.dtype != DType::F32 || c.logical.len() > shape.len() {
        return refuse("not an f32 constant of at most the normalized rank");
    }
    let lead = c.logical.len().saturating_sub(row.len());
    if c.logical[..lead].iter().any(|&d| d != 1) {
        return refuse("the constant varies along an axis that is not normalized");
    }
    let tail = &c.logical[lead..];
    let fits = (0..tail.len()).all(|i| {
        let d = tail[tail.len() - 1 - i];
        d == 1 || d == row[row.len() - 1 - i]
    });
    if !fits {
        return refuse("the constant does not broadcast along the rows");
    }
    let target = match tail.iter().product::<usize>() == row.iter().product::<usize>() {
        true => row.to_vec(),
        false => tail.to_vec(),
    };
    let reshape = reshape_to(eg, target)?;
    bind_atom(eg, s, to, reshape);
    Ok(())
}

/// ?gamma is an f32 constant that varies along ?ln's normalized axes only:
/// binds ?rg, the reshape that gives it their rank.
pub(super) fn normalization_scale(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    per_row_element(eg, s, "?gamma", "?rg")
}

/// The same for ?beta: binds ?rb.
pub(super) fn normalization_shift(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    per_row_element(eg, s, "?beta", "?rb")
}
