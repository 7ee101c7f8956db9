//! Why a native kernel could not be built for its tensors, or run on the
//! buffers it was given (the runtime adds the layer: `RuntimeError::Kernel`).

use crate::core::AlgebraError;

/// An error building or running a native kernel.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The buffers given do not have the lengths the kernel was built for.
    #[error("{kernel}: buffers of {given:?} elements, expected {expected:?}")]
    Buffers {
        /// Which kernel.
        kernel: &'static str,
        /// The lengths given, operands first, the output last.
        given: Vec<usize>,
        /// The lengths it was built for, in the same order.
        expected: Vec<usize>,
    },
    /// An index lies outside the axis it indexes.
    #[error("index {index} is out of range for an axis of extent {extent}")]
    Index {
        /// The index.
        index: i64,
        /// The axis's extent.
        extent: usize,
    },
    /// A reshape between shapes of different sizes.
    #[error("cannot reshape {from:?} to {to:?}")]
    Reshape {
        /// The input shape.
        from: Vec<usize>,
        /// The output shape.
        to: Vec<usize>,
    },
    /// A tensor whose offsets do not fit the kernel's 32-bit indices.
    #[error("a tensor of {elements} stored elements is too large for a 32-bit gather")]
    TooLarge {
        /// Its stored elements, padding included.
        elements: usize,
    },
    /// A value the op is not defined on (an integer modulo by zero).
    #[error("{0}")]
    Value(String),
    /// A layout does not fit a tensor's shape.
    #[error(transparent)]
    Layout(#[from] AlgebraError),
}

impl KernelError {
    /// `Ok` when the one buffer `kernel` is given holds the `expected`
    /// elements it was built for, else a [`KernelError::Buffers`].
    pub fn check_len(kernel: &'static str, given: usize, expected: usize) -> Result<(), Self> {
        match given == expected {
            true => Ok(()),
            false => Err(KernelError::Buffers {
                kernel,
                given: vec![given],
                expected: vec![expected],
            }),
        }
    }
}
