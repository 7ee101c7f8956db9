//! Deterministic test values that vary without any random source.

/// `n` values `((i * step) % period) / scale - offset`, a sawtooth whose
/// teeth do not line up with the tensors' rows.
pub fn sawtooth(n: usize, step: usize, period: usize, scale: f32, offset: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * step) % period) as f32 / scale - offset)
        .collect()
}
