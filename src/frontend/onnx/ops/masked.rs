//! Trilu and OneHot: a comparison of positions picks, with Where, between an
//! input and a fill. They import as those ops, so a constant operand folds
//! and the rest runs on the kernels Where and Equal have.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::frontend::compose::{one_hot_mask, NegativeIndices};
use crate::graph::{DType, Op, Tensor, TensorData, ValueRef};
use crate::ops::Gather;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Trilu", trilu);
    reg.add(AI_ONNX, "OneHot", one_hot);
}

impl NodeCtx<'_> {
    /// The single integer of constant input `i` (floats truncated), if given.
    fn const_scalar_int(&self, i: usize, what: &str) -> Res<Option<i64>> {
        match self.const_input(i)? {
            None => Ok(None),
            Some(t) if t.numel() == 1 => Ok(Some(t.data.to_i64()[0])),
            Some(t) => Err(self.err(format!(
                "{what} must hold one value, got shape {:?}",
                t.shape
            ))),
        }
    }
}

/// Trilu: x where the column minus the row of the last two axes is at least
/// k (upper) or at most k (lower), else 0.
fn trilu(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let upper = c.bool_attr("upper", true)?;
    let k = c.const_scalar_int(1, "Trilu k")?.unwrap_or(0);
    let x = c.input(0)?;
    let ty = c.ty(x);
    let &[.., rows, cols] = &ty.shape[..] else {
        return Err(c.err(format!(
            "Trilu needs an input of rank 2 or more, got shape {:?}",
            ty.shape
        )));
    };
    c.check_size(DType::Bool, &[rows, cols])?;
    let keep = (0..rows as i64)
        .flat_map(|r| (0..cols as i64).map(move |col| (r, col)))
        .map(|(r, col)| {
            let d = col - r;
            if upper {
                d >= k
            } else {
                d <= k
            }
        })
        .collect();
    let keep = c.inner_constant(
        "keep",
        Tensor::new(vec![rows, cols], TensorData::Bool(keep)),
    );
    let zero = c.scalar("zero", ty.dtype, 0.0);
    c.emit(Op::Where, &[keep, x, zero])
}

/// OneHot: `values[1]` where an index (negative ones count from `depth`)
/// equals the position along the new axis, else `values[0]`.
fn one_hot(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let depth = c
        .const_scalar_int(1, "OneHot depth")?
        .ok_or_else(|| c.err("OneHot needs input 1 (depth), which is missing"))?;
    let depth = usize::try_from(depth)
        .map_err(|_| c.err(format!("OneHot depth must not be negative, got {depth}")))?;
    let (indices, values) = (c.input(0)?, c.input(2)?);
    let values_ty = c.ty(values);
    if values_ty.numel() != 2 || values_ty.shape.len() != 1 {
        return Err(c.err(format!(
            "OneHot values must be [off, on], got shape {:?}",
            values_ty.shape
        )));
    }
    let axis = c.axis(c.int("axis", -1)?, c.ty(indices).shape.len() + 1)?;

    let hot = one_hot_mask(c, indices, depth, axis, NegativeIndices::FromEnd)?;
    let [off, on] = [("off", 0), ("on", 1)].map(|(what, k)| {
        let at = c.inner_constant(&format!("{what}_at"), Tensor::from_i64(vec![], vec![k]));
        c.emit_inner(Op::Gather(Gather { axis: 0 }), &[values, at], what)
    });
    c.emit(Op::Where, &[hot, on?, off?])
}
