//! Reads and writes at indices given as data: GatherND, ScatterND and
//! ScatterElements.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{Op, ValueRef};
use crate::ops::{GatherNd, ScatterElements, ScatterNd, ScatterReduction};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "GatherND", gather_nd);
    reg.add(AI_ONNX, "ScatterND", scatter_nd);
    reg.add(AI_ONNX, "ScatterElements", scatter_elements);
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
