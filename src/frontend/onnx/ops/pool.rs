//! Pooling: MaxPool, AveragePool, LpPool and the global pools.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use super::window::{kernel_attr, window};
use crate::frontend::onnx::add_and_fold;
use crate::graph::{BinaryOp, Op, Pool, PoolKind, UnaryOp, ValueRef};
use crate::ops::{GlobalPool, MaxPoolIndices};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "MaxPool", |c| pool(c, PoolKind::Max));
    reg.add(AI_ONNX, "AveragePool", |c| pool(c, PoolKind::Avg));
    reg.add(AI_ONNX, "LpPool", lp_pool);
    reg.add(AI_ONNX, "GlobalMaxPool", |c| global_pool(c, PoolKind::Max));
    reg.add(AI_ONNX, "GlobalAveragePool", |c| {
        global_pool(c, PoolKind::Avg)
    });
}

fn global_pool(c: &mut NodeCtx, kind: PoolKind) -> Res<Vec<Option<ValueRef>>> {
    c.emit_all(Op::GlobalPool(GlobalPool { kind }))
}

/// LpPool: (Σ |x|^p)^(1/p) over each window, the padding counting as zeros:
/// the sum is an AveragePool of |x|^p that counts the padding, times the
/// window's size.
fn lp_pool(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let xs = c.ty(x).shape;
    if xs.len() < 3 {
        return Err(c.err(format!("input shape {xs:?} has no spatial axes")));
    }
    // p is a float attribute in opset 1, an int from opset 2.
    let p = if c.opset < 2 {
        f64::from(c.float("p", 2.0)?)
    } else {
        c.int("p", 2)? as f64
    };
    if p.is_nan() || p <= 0.0 {
        return Err(c.err(format!("LpPool p must be positive, got {p}")));
    }
    let kernel = kernel_attr(c, None)?;
    let size: usize = kernel.iter().product();
    let window = window(c, &xs[2..], kernel, false)?;
    let dtype = c.ty(x).dtype;
    // The common p as exact arithmetic, any other as a power.
    let powered = if p == 1.0 {
        c.emit_inner(Op::Unary(UnaryOp::Abs), &[x], "abs")?
    } else if p == 2.0 {
        c.emit_inner(Op::Binary(BinaryOp::Mul), &[x, x], "squared")?
    } else {
        let abs = c.emit_inner(Op::Unary(UnaryOp::Abs), &[x], "abs")?;
        let p = c.scalar("p", dtype, p);
        c.emit_inner(Op::Binary(BinaryOp::Pow), &[abs, p], "powered")?
    };
    let pool = Pool {
        kind: PoolKind::Avg,
        window,
        ceil_mode: c.bool_attr("ceil_mode", false)?,
        count_include_pad: true,
    };
    let mean = c.emit_inner(Op::Pool(pool), &[powered], "mean")?;
    let size = c.scalar("window_size", dtype, size as f64);
    let sum = c.emit_inner(Op::Binary(BinaryOp::Mul), &[mean, size], "sum")?;
    if p == 1.0 {
        c.emit(Op::Identity, &[sum])
    } else if p == 2.0 {
        c.emit(Op::Unary(UnaryOp::Sqrt), &[sum])
    } else {
        let root = c.scalar("root", dtype, 1.0 / p);
        c.emit(Op::Binary(BinaryOp::Pow), &[sum, root])
    }
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
