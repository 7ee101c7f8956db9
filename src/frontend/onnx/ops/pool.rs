//! Pooling: MaxPool, AveragePool and the global pools.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use super::window::{kernel_attr, window};
use crate::frontend::onnx::add_and_fold;
use crate::graph::{Op, Pool, PoolKind, ValueRef};
use crate::ops::{GlobalPool, MaxPoolIndices};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "MaxPool", |c| pool(c, PoolKind::Max));
    reg.add(AI_ONNX, "AveragePool", |c| pool(c, PoolKind::Avg));
    reg.add(AI_ONNX, "GlobalMaxPool", |c| global_pool(c, PoolKind::Max));
    reg.add(AI_ONNX, "GlobalAveragePool", |c| {
        global_pool(c, PoolKind::Avg)
    });
}

fn global_pool(c: &mut NodeCtx, kind: PoolKind) -> Res<Vec<Option<ValueRef>>> {
    c.emit_all(Op::GlobalPool(GlobalPool { kind }))
}

/// MaxPool (with its optional indices output) and AveragePool.
fn pool(c: &mut NodeCtx, kind: PoolKind) -> Res<Vec<Option<ValueRef>>> {
    let indices = c.node.output.get(1).filter(|o| !o.is_empty()).cloned();
    let column_major = match c.int("storage_order", 0)? {
        0 => false,
        1 => true,
        s => return Err(c.err(format!("storage_order {s} is neither 0 nor 1"))),
    };
    let x = c.input(0)?;
    let xs = c.ty(x).shape;
    if xs.len() < 3 {
        return Err(c.err(format!("input shape {xs:?} has no spatial axes")));
    }
    let kernel = kernel_attr(c, None)?;
    let window = window(c, &xs[2..], kernel, false)?;
    let pool = Pool {
        kind,
        window,
        ceil_mode: c.bool_attr("ceil_mode", false)?,
        count_include_pad: c.bool_attr("count_include_pad", false)?,
    };
    let mut outs = c.emit(Op::Pool(pool.clone()), &[x])?;
    outs.truncate(1);
    if let Some(name) = indices {
        if kind != PoolKind::Max {
            return Err(c.err("AveragePool has one output"));
        }
        let op = Op::MaxPoolIndices(MaxPoolIndices {
            window: pool.window,
            ceil_mode: pool.ceil_mode,
            column_major,
        });
        let layer = c.layer();
        outs.extend(
            add_and_fold(c.g, op, &layer, &[x], &[name], c.span)?
                .into_iter()
                .map(Some),
        );
    }
    Ok(outs)
}
