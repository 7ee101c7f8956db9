//! Relabelling: a transpose or reshape whose output keeps its input's bytes
//! where they are, in another layout of the new shape, moves no data. The
//! candidates, the cost model and materialization all ask which layout that is.

use super::Layout;
use crate::graph::Op;
use crate::ops::{Reshape, Transpose};

/// The layout of a transpose's or reshape's output that keeps the bytes of its
/// input `x`, stored in `l`, where they are (a relabelling: no data moves).
pub fn relabelled(op: &Op, l: &Layout, x: &[usize]) -> Option<Layout> {
    match op {
        Op::Transpose(Transpose { perm }) => l.transposed(perm).ok(),
        Op::Reshape(Reshape { shape }) => l.reshaped(x, shape),
        _ => None,
    }
}

/// The input layout that [`relabelled`] takes to the output layout `l`, for
/// an input of shape `x` and an output of shape `y`.
pub fn relabelled_back(op: &Op, l: &Layout, x: &[usize], y: &[usize]) -> Option<Layout> {
    match op {
        Op::Transpose(Transpose { perm }) => {
            let mut inv = vec![0; perm.len()];
            for (j, &a) in perm.iter().enumerate() {
                inv[a] = j;
            }
            l.transposed(&inv).ok()
        }
        Op::Reshape(_) => l.reshaped(y, x),
        _ => None,
    }
}
