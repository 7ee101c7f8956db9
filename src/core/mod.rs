//! The bottom layer: types every stage shares and that depend on nothing else in
//! the crate — element types and tensors, value types, source spans, the layout
//! algebra, what padding holds, the scalar meaning of elementwise functions and the
//! vector math (exp, erf, tanh) every path computes them with.

pub mod budget;
mod choice;
pub mod float8;
mod layout;
mod pad;
mod pages;
pub mod par;
pub mod scalar;
mod span;
mod tensor;
pub mod vecmath;

pub use choice::{parse_choice, UnknownChoice};
#[cfg(test)]
pub(crate) use layout::tests;
pub use layout::{with_fill, AlgebraError, Digit, Layout};
pub use pad::{Assumption, NotAPadValue, PadFlow, PadValue, Requirement};
pub use pages::{HugePageAdvice, PageBuf};
pub use span::{format_spans, format_spans_portable, merge_spans, Span};
pub use tensor::{
    checked_numel, next_index, numel, strides, DType, Rearrange, Tensor, TensorData, TensorError,
    ValueType,
};
