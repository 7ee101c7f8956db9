//! The memory one run of a model leaves for the next, so that a run in a loop
//! allocates nothing.

use crate::core::PageBuf;
use crate::graph::{Tensor, TensorData};
use std::sync::Arc;

/// Memory a run leaves for the next: the arena, and the buffer of each output
/// it returned, which the next run writes again once the caller has dropped
/// that output (so a run in a loop allocates and clears nothing).
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) arena: PageBuf,
    pub(super) outputs: Vec<Option<Arc<TensorData>>>,
    pub(super) lists: RunLists,
}

/// Where a run reads its inputs and writes its outputs, and its non-f32
/// values: filled at the start of every run and used by that run only, kept
/// so that a run allocates no lists.
#[derive(Default)]
pub(super) struct RunLists {
    /// The f32 elements of each graph input with an `Input` slot (null elsewhere).
    pub(super) inputs: Vec<(*const f32, usize)>,
    /// Inputs converted to f32 for the run (an f16 model's).
    pub(super) converted: Vec<Vec<f32>>,
    /// The buffer of each graph output with an `Output` slot (null elsewhere).
    pub(super) outputs: Vec<(*mut f32, usize)>,
    pub(super) boxes: Vec<Option<Tensor>>,
}

// SAFETY: the pointers are dereferenced only by the run that set them, while
// it borrows the buffers they point to.
unsafe impl Send for RunLists {}

/// Bytes the arena's start is aligned to: its slots are aligned to this
/// relative to the start (`compile/arena.rs`), so every slot then starts on a
/// cache line and a kernel's full vectors never straddle two lines.
const ARENA_ALIGN: usize = 64;

impl Scratch {
    /// The arena's first `len` elements, starting on an `ARENA_ALIGN` boundary
    /// (the buffer holds a few more so that one exists). A longer arena is a
    /// new one: what the old one held is not needed.
    pub(super) fn aligned_arena(&mut self, len: usize) -> *mut f32 {
        let slack = ARENA_ALIGN / std::mem::size_of::<f32>() - 1;
        if self.arena.len() < len + slack {
            self.arena = PageBuf::zeroed(len + slack);
        }
        let skip = self.arena.as_ptr().align_offset(ARENA_ALIGN).min(slack);
        self.arena[skip..].as_mut_ptr()
    }
}

/// A buffer of `len` f32 for an output: last run's when nobody else holds it
/// any more (its stale contents are overwritten, as the arena's are), else a
/// new one.
pub(super) fn output_buffer(last: Option<Arc<TensorData>>, len: usize) -> Arc<TensorData> {
    if let Some(mut last) = last {
        if matches!(Arc::get_mut(&mut last), Some(TensorData::F32(v)) if v.len() == len) {
            return last;
        }
    }
    Arc::new(TensorData::F32(vec![0.0; len]))
}
