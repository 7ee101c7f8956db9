//! Building blocks of the ops' TIR compute definitions (`OpDef::compute`): index
//! helpers, the padded-input stage of windowed ops, and what a definition returns.
//!
//! Rank-0 tensors are treated as rank 1 of extent 1 (the same flat buffer).

use crate::core::ValueType;
pub use crate::tir::compute::{ComputeGraph, ReduceOp, Tensor as TeTensor};
pub use crate::tir::expr::{Expr, Intrinsic};
pub use crate::tir::TirError;
use std::ops::RangeBounds;

pub(crate) fn e(v: usize) -> i64 {
    v as i64
}

pub(crate) fn ex(v: usize) -> Expr {
    Expr::Int(v as i64)
}

/// A shape as TIR extents; rank 0 becomes `[1]`.
pub(crate) fn extents(shape: &[usize]) -> Vec<i64> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.iter().map(|&d| e(d)).collect()
    }
}

/// The stages one op added to a compute graph.
pub struct Defined {
    /// The stage holding the op's result.
    pub output: TeTensor,
    /// Stages the schedule inlines into their consumer (padded copies).
    pub inline: Vec<TeTensor>,
    /// Stages computed once per row of the output, at the given output axis.
    pub per_row: Vec<(TeTensor, usize)>,
}

/// Where a compute definition adds its stages.
pub struct ComputeCx<'a> {
    /// The compute graph being built.
    pub g: &'a mut ComputeGraph,
    /// The operand placeholders, in the op's input order.
    pub ph: &'a [TeTensor],
    /// The operands' (logical) types.
    pub types: &'a [ValueType],
    /// Suffix of the stage names (tells apart the ops of a fused chain).
    pub sfx: &'a str,
}

/// A [`ComputeCx`] taken apart: the graph, the placeholders, their types and
/// the name suffix.
pub type ComputeParts<'a> = (
    &'a mut ComputeGraph,
    &'a [TeTensor],
    &'a [ValueType],
    &'a str,
);

impl<'a> ComputeCx<'a> {
    /// The graph, the placeholders, their types and the name suffix.
    pub fn parts(self) -> ComputeParts<'a> {
        (self.g, self.ph, self.types, self.sfx)
    }

    /// The parts (as [`ComputeCx::parts`]), once `op` is known to have a number
    /// of operands in `arity` and a 4-D (NCHW) first one: the windowed ops
    /// define their compute for 2-D images only.
    pub fn nchw_parts(
        self,
        op: &str,
        arity: impl RangeBounds<usize>,
    ) -> Result<ComputeParts<'a>, TirError> {
        if !arity.contains(&self.types.len()) || self.types[0].shape.len() != 4 {
            return Err(unsupported(op, "only 2-D NCHW is defined"));
        }
        Ok(self.parts())
    }

    /// The placeholders and types of the operands, once `op` is known to have at
    /// least `n` of them.
    pub fn operands(
        &self,
        op: &str,
        n: usize,
    ) -> Result<(&'a [TeTensor], &'a [ValueType]), TirError> {
        check_arity(op, self.types, n)?;
        Ok((self.ph, self.types))
    }

    /// An op computed as one stage: `Y[i] = element(i)` over `shape` (rank 0 as `[1]`).
    pub fn stage(
        self,
        shape: &[usize],
        element: impl FnOnce(&[Expr]) -> Expr,
    ) -> Result<Defined, TirError> {
        let y = self
            .g
            .compute(&format!("Y{}", self.sfx), &extents(shape), element)?;
        Ok(Defined::output(y))
    }
}

impl Defined {
    /// A definition whose output is its only stage the schedule must know.
    pub fn output(output: TeTensor) -> Defined {
        Defined {
            output,
            inline: vec![],
            per_row: vec![],
        }
    }
}

/// The error of an op without a compute definition for these operands.
pub(crate) fn unsupported(op: &str, why: &str) -> TirError {
    TirError::Unsupported(format!("{op} has no compute definition ({why})"))
}

/// The shape of operand `i` as TIR sees it (rank 0 as `[1]`).
pub(crate) fn operand_shape(types: &[ValueType], i: usize) -> Vec<usize> {
    match types[i].shape.as_slice() {
        [] => vec![1],
        s => s.to_vec(),
    }
}

/// An error unless `op` has at least `n` operands.
pub(crate) fn check_arity(op: &str, types: &[ValueType], n: usize) -> Result<(), TirError> {
    if types.len() < n {
        return Err(TirError::Definition(format!(
            "{op} needs {n} operands, it has {}",
            types.len()
        )));
    }
    Ok(())
}

/// The index into an operand of shape `s` that broadcasts to the output index `i`.
pub(crate) fn broadcast_index(i: &[Expr], s: &[usize]) -> Vec<Expr> {
    let off = i.len() - s.len();
    s.iter()
        .enumerate()
        .map(|(k, &d)| {
            if d == 1 {
                Expr::Int(0)
            } else {
                i[off + k].clone()
            }
        })
        .collect()
}

/// The row index of `i` with axis `axis` removed (rank 1 rows become `[0]`).
pub(crate) fn drop_axis(i: &[Expr], axis: usize) -> Vec<Expr> {
    let mut r: Vec<Expr> = i.to_vec();
    r.remove(axis);
    if r.is_empty() {
        r.push(Expr::Int(0));
    }
    r
}

/// `i` with the reduced index `k` put back at `axis`.
pub(crate) fn with_axis(i: &[Expr], axis: usize, k: Expr, rank: usize) -> Vec<Expr> {
    let mut r: Vec<Expr> = if rank == 1 { vec![] } else { i.to_vec() };
    r.insert(axis, k);
    r
}

/// A zero-padded (or `fill`-padded) copy of a 4-D `x`, when the window pads.
pub(crate) fn pad_stage(
    g: &mut ComputeGraph,
    sfx: &str,
    x: TeTensor,
    s: &[usize],
    pads: &[usize],
    fill: f64,
) -> Result<Option<TeTensor>, TirError> {
    if pads.iter().all(|&p| p == 0) {
        return Ok(None);
    }
    let (pt, pl, pb, pr) = (pads[0], pads[1], pads[2], pads[3]);
    let shape = [e(s[0]), e(s[1]), e(s[2] + pt + pb), e(s[3] + pl + pr)];
    let (h, w) = (s[2], s[3]);
    g.compute(&format!("Xpad{sfx}"), &shape, |i| {
        let inside = i[2]
            .clone()
            .ge(ex(pt))
            .and(i[2].clone().lt(ex(pt + h)))
            .and(i[3].clone().ge(ex(pl)))
            .and(i[3].clone().lt(ex(pl + w)));
        // Reads clamped into the input, so that no index leaves it even where
        // the select takes the fill (both branches may be evaluated).
        let clamp = |v: Expr, n: usize| v.max(ex(0)).min(ex(n - 1));
        let read = x.at(&[
            i[0].clone(),
            i[1].clone(),
            clamp(i[2].clone() - ex(pt), h),
            clamp(i[3].clone() - ex(pl), w),
        ]);
        Expr::select(inside, read, fill)
    })
    .map(Some)
}
