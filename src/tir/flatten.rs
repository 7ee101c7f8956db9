//! Storage flattening: realize regions become flat allocations; multi-dimensional reads
//! and writes become flat loads and stores through each buffer's layout.

use std::collections::HashMap;

use super::error::TirError;
use super::expr::{Expr, TensorId};
use super::layout::BufferLayout;
use super::stmt::{BufferView, KernelArg, Stmt};

/// Storage flattening: realize regions become flat allocations, multi-dimensional reads
/// and writes become flat loads and stores through each buffer's layout.
pub fn storage_flatten(
    s: &Stmt,
    layouts: &HashMap<TensorId, BufferLayout>,
    views: &mut HashMap<TensorId, BufferView>,
) -> Result<Stmt, TirError> {
    Ok(match s {
        Stmt::Realize {
            tensor,
            bounds,
            body,
        } => {
            let extents: Vec<Expr> = bounds.iter().map(|r| r.extent.clone()).collect();
            // The layout applies to the realized region (indices relative to its origin).
            let layout = layouts
                .get(tensor)
                .cloned()
                .unwrap_or_else(|| BufferLayout::row_major(bounds.len()));
            let size = layout.size(&extents);
            views.insert(
                *tensor,
                BufferView {
                    origin: bounds.iter().map(|r| r.min.clone()).collect(),
                    extents,
                    layout,
                },
            );
            Stmt::Allocate {
                buffer: *tensor,
                size,
                body: Box::new(storage_flatten(body, layouts, views)?),
            }
        }
        Stmt::Provide {
            tensor,
            indices,
            value,
        } => Stmt::Store {
            buffer: *tensor,
            index: flat_index(*tensor, indices, views)?,
            value: flatten_expr(value, views)?,
        },
        Stmt::For(_) | Stmt::Seq(_) | Stmt::Assume { .. } => {
            s.try_map_children(&mut |c| storage_flatten(c, layouts, views))?
        }
        Stmt::IfThenElse { cond, .. } => {
            // Its one expression, the condition, reads tensors too.
            let cond = flatten_expr(cond, views)?;
            s.try_map_children(&mut |c| storage_flatten(c, layouts, views))?
                .map_exprs(&mut |_| cond.clone())
        }
        Stmt::KernelCall { name, args } => Stmt::KernelCall {
            name: name.clone(),
            args: args
                .iter()
                .map(|a| {
                    let view = views.get(&a.tensor).ok_or_else(|| {
                        TirError::Lower(format!("kernel `{name}` uses a tensor with no buffer"))
                    })?;
                    Ok(KernelArg {
                        tensor: a.tensor,
                        region: a.region.clone(),
                        buffer: Some(view.clone()),
                        walk: a.walk.clone(),
                    })
                })
                .collect::<Result<_, TirError>>()?,
        },
        other @ (Stmt::Allocate { .. } | Stmt::Store { .. }) => other.clone(),
    })
}

fn flat_index(
    t: TensorId,
    indices: &[Expr],
    views: &HashMap<TensorId, BufferView>,
) -> Result<Expr, TirError> {
    let v = views.get(&t).ok_or_else(|| {
        TirError::Lower(format!(
            "tensor t{} is used outside the region where it is realized",
            t.0
        ))
    })?;
    let rel: Vec<Expr> = indices
        .iter()
        .zip(&v.origin)
        .map(|(i, o)| flatten_expr(i, views).map(|i| i - o.clone()))
        .collect::<Result<_, _>>()?;
    Ok(v.layout.flatten(&rel, &v.extents))
}

fn flatten_expr(e: &Expr, views: &HashMap<TensorId, BufferView>) -> Result<Expr, TirError> {
    let mut err = None;
    let out = e.rewrite(&mut |n| match n {
        Expr::Read { tensor, indices } => match flat_index(*tensor, indices, views) {
            Ok(ix) => Some(Expr::Load {
                buffer: *tensor,
                index: Box::new(ix),
            }),
            Err(x) => {
                err = Some(x);
                None
            }
        },
        _ => None,
    });
    err.map_or(Ok(out), Err)
}
