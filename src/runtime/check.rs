//! The non-finite check of `CompiledModel::run_checked`: the first step whose
//! logical output elements hold NaN or an infinity.

use super::exec::Buffers;
use super::kernels::gather::Gather;
use super::kernels::KernelError;
use super::model::{Slot, Step};
use super::storage::Storage;
use crate::graph::{numel, Span};
use crate::layout::Layout;

/// The first step of a run whose output holds NaN or an infinity
/// (`CompiledModel::run_checked`).
#[derive(Clone, Debug)]
pub struct NonFinite {
    /// The step's name (its last node's).
    pub step: String,
    /// The ops of the step, e.g. `Conv+Relu`.
    pub kind: String,
    /// The source layers the step computes.
    pub spans: Vec<Span>,
    /// Its logical output elements that are NaN, +inf and -inf.
    pub counts: [usize; 3],
    /// Its logical output elements.
    pub of: usize,
}

impl NonFinite {
    /// The step's non-finite elements among `values` (logical), if any.
    fn of_step(step: &Step, values: &[f32]) -> Option<NonFinite> {
        let mut counts = [0; 3];
        for v in values.iter().filter(|v| !v.is_finite()) {
            counts[if v.is_nan() {
                0
            } else if *v > 0.0 {
                1
            } else {
                2
            }] += 1;
        }
        (counts != [0; 3]).then(|| NonFinite {
            step: step.name.clone(),
            kind: step.kind.clone(),
            spans: step.spans.clone(),
            counts,
            of: values.len(),
        })
    }
}

/// NaN or infinities among the logical output elements of `step`, just run.
pub(super) fn first_non_finite(
    step: &Step,
    bufs: &Buffers,
) -> Result<Option<NonFinite>, KernelError> {
    for (slot, stored) in step.outputs.iter().zip(&step.storage) {
        if matches!(slot, Slot::Boxed(_)) {
            continue;
        }
        // SAFETY: the step has written its output and no step runs meanwhile.
        let values = unsafe { bufs.read(*slot) };
        let found = match stored {
            Storage::RowMajor => NonFinite::of_step(step, values),
            Storage::Padded | Storage::Bytes => None,
            Storage::Laid(layout, logical) => {
                let to = Layout::identity(logical.len())?;
                let gather = Gather::new(layout, &to, logical, 0.0)?;
                let mut row_major = vec![0f32; numel(logical)];
                gather.run(&[values], &mut row_major)?;
                NonFinite::of_step(step, &row_major)
            }
        };
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}
