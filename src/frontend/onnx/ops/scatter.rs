//! Reads and writes at indices given as data: GatherND, ScatterND and
//! ScatterElements (with Scatter, its name before opset 11), and TensorScatter
//! as a ScatterElements.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{BinaryOp, Expand, Op, Reshape, Tensor, ValueRef};
use crate::ops::{GatherNd, IntegerArith, ScatterElements, ScatterNd, ScatterReduction};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "GatherND", gather_nd);
    reg.add(AI_ONNX, "ScatterND", scatter_nd);
    reg.add(AI_ONNX, "ScatterElements", scatter_elements);
    reg.add(AI_ONNX, "Scatter", scatter_elements);
    reg.add(AI_ONNX, "TensorScatter", tensor_scatter);
}

/// TensorScatter (opset 24): a cache (input 0) with an update (input 1)
/// written along `axis` from each batch's write index (input 2; 0 where
/// absent), wrapping around the cache in circular mode. That is a
/// ScatterElements whose indices are the write index plus the position
/// within the update, broadcast over the other axes.
fn tensor_scatter(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (past, update) = (c.input(0)?, c.input(1)?);
    let (cache, new) = (c.ty(past).shape, c.ty(update).shape);
    let r = cache.len();
    let axis = c.axis(c.int("axis", -2)?, r)?;
    let circular = match c.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => return Err(c.err(format!("TensorScatter mode '{other}' is not known"))),
    };
    let fits = new.len() == r
        && (0..r).all(|a| match a == axis {
            true => new[a] <= cache[a],
            false => new[a] == cache[a],
        });
    if axis == 0 || !fits {
        return Err(c.err(format!(
            "update {new:?} does not fit cache {cache:?} along axis {axis} (after the batch axis)"
        )));
    }
    let mut along = vec![1; r];
    along[axis] = new[axis];
    let steps = Tensor::from_i64(along, (0..new[axis] as i64).collect());
    let mut at = c.inner_constant("steps", steps);
    if let Some(start) = c.opt_input(2) {
        let mut per_batch = vec![1; r];
        per_batch[0] = cache[0];
        let reshape = Op::Reshape(Reshape { shape: per_batch });
        let start = c.emit_inner(reshape, &[start], "write_indices")?;
        at = c.emit_inner(Op::Binary(BinaryOp::Add), &[start, at], "positions")?;
    }
    if circular {
        let capacity = Tensor::from_i64(vec![], vec![cache[axis] as i64]);
        let capacity = c.inner_constant("capacity", capacity);
        let wrap = Op::IntegerArith(IntegerArith::Mod { fmod: false });
        at = c.emit_inner(wrap, &[at, capacity], "wrapped")?;
    }
    let indices = c.emit_inner(Op::Expand(Expand { shape: new }), &[at], "indices")?;
    let reduction = ScatterReduction::None;
    let op = Op::ScatterElements(ScatterElements { axis, reduction });
    c.emit(op, &[past, indices, update])
}

fn gather_nd(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let batch_dims = c.int("batch_dims", 0)?;
    let batch_dims = usize::try_from(batch_dims).map_err(|_| {
        c.err(format!(
            "GatherND batch_dims must not be negative, got {batch_dims}"
        ))
    })?;
    c.emit_all(Op::GatherNd(GatherNd { batch_dims }))
}

fn reduction(c: &NodeCtx) -> Res<ScatterReduction> {
    let name = c.string("reduction", "none")?;
    ScatterReduction::from_onnx(&name).ok_or_else(|| {
        c.err(format!(
            "reduction '{name}' is not one of none, add, mul, max, min"
        ))
    })
}

fn scatter_nd(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let reduction = reduction(c)?;
    c.emit_all(Op::ScatterNd(ScatterNd { reduction }))
}

fn scatter_elements(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let reduction = reduction(c)?;
    let data = c.input(0)?;
    let axis = c.axis(c.int("axis", 0)?, c.ty(data).shape.len())?;
    c.emit_all(Op::ScatterElements(ScatterElements { axis, reduction }))
}
