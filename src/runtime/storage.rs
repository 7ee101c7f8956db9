//! How a step's output holds its logical elements, for the non-finite check
//! of `run_checked`.

use crate::fusion::{output_layout, output_shape};
use crate::graph::{Graph, Op, ValueRef};
use crate::layout::Layout;

/// How a step's output holds its logical elements.
#[derive(Clone, Debug)]
pub(super) enum Storage {
    /// All of them, row-major, nothing else.
    RowMajor,
    /// In this layout of this logical shape (with padding, or permuted).
    Laid(Layout, Vec<usize>),
    /// Beside padding the check cannot tell apart (a PadWith's output, whose
    /// logical elements its input's step already showed).
    Padded,
    /// As the bytes of a quantization grid, which are all finite.
    Bytes,
}

impl Storage {
    /// How value `v` of a planned graph is stored.
    pub(super) fn of(g: &Graph, v: ValueRef) -> Storage {
        let laid = |layout: &Layout, logical: Vec<usize>| match layout.is_identity() {
            true => Storage::RowMajor,
            false => Storage::Laid(layout.clone(), logical),
        };
        match &g.node(v.node).op {
            Op::InLayout(_) if v.output == 0 => {
                match (output_layout(g, v.node), output_shape(g, v.node)) {
                    (Some((layout, _)), Some(logical)) => laid(&layout, logical),
                    _ => Storage::Padded,
                }
            }
            Op::InLayout(_) | Op::PadWith(_) => Storage::Padded,
            Op::LayoutTransform(t) => laid(&t.to, t.logical.clone()),
            _ => Storage::RowMajor,
        }
    }
}
