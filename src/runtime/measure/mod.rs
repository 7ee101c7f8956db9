//! What the runtime measures on this machine, below the machine context: its
//! roofline peaks, the times of its kernels (cached per machine, the
//! convolution algorithms' among them), and how loaded it was meanwhile.

pub(in crate::runtime) mod conv_times;
pub(in crate::runtime) mod kernel_times;
pub mod load;
pub mod roofline;

#[cfg(test)]
mod tests;
