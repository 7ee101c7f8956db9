//! Comparing computed tensors with expected ones, to a tolerance that
//! depends on the element type.

use layoutopt::graph::Tensor;

/// The relative tolerance for outputs of `expected`'s type: `f32_tol`, and at
/// least 2e-3 for float16 (one f16 rounding is up to 4.9e-4 relative, and the
/// reference executor rounds after every op).
pub fn tolerance(expected: &Tensor, f32_tol: f64) -> f64 {
    match expected.dtype() {
        layoutopt::graph::DType::F16 => f32_tol.max(2e-3),
        _ => f32_tol,
    }
}

/// Asserts that `actual` is `expected` to within [`tolerance`]`(expected,
/// f32_tol)` of the largest expected magnitude; `what` names the case when it
/// is not. Returns the max abs difference and that magnitude.
pub fn assert_close(expected: &Tensor, actual: &Tensor, f32_tol: f64, what: &str) -> (f64, f64) {
    let (err, mag) = max_abs_err(expected, actual);
    let tol = tolerance(expected, f32_tol);
    assert!(err <= tol * mag, "{what}: error {err} > {tol} * {mag}");
    (err, mag)
}

/// Asserts that the reference executor gives `rewritten` the outputs it gives
/// `original` on `inputs`: the same shapes, and values within `tol` of
/// max(1, largest expected magnitude).
pub fn assert_rewrite_keeps_outputs(
    original: &layoutopt::graph::Graph,
    rewritten: &layoutopt::graph::Graph,
    inputs: &[Tensor],
    tol: f64,
) {
    let expected = layoutopt::reference::run(original, inputs).unwrap();
    let got = layoutopt::reference::run(rewritten, inputs).unwrap();
    assert_eq!(expected.len(), got.len());
    for (e, a) in expected.iter().zip(&got) {
        assert_eq!(e.shape, a.shape);
        let (err, mag) = max_abs_err(e, a);
        assert!(err <= tol * mag.max(1.0), "error {err} at magnitude {mag}");
    }
}

/// Asserts that a model's `outputs` are the `expected` ones: as many, each of
/// the same shape and type, integers equal, floats within `tol` of max(1,
/// the largest expected magnitude); `what` names the case when they are not.
pub fn assert_outputs_match(what: &str, outputs: &[Tensor], expected: &[Tensor], tol: f64) {
    assert_eq!(outputs.len(), expected.len(), "{what}");
    for (i, (out, exp)) in outputs.iter().zip(expected).enumerate() {
        assert_eq!(out.shape, exp.shape, "{what} output {i}");
        assert_eq!(out.dtype(), exp.dtype(), "{what} output {i}");
        if !exp.dtype().is_float() {
            assert_eq!(out.data, exp.data, "{what} output {i}");
            continue;
        }
        let (err, mag) = max_abs_err(exp, out);
        assert!(
            err <= tol * mag.max(1.0),
            "{what} output {i}: error {err} against magnitude {mag}"
        );
    }
}

/// Max abs difference, and the max magnitude of the expected values.
pub fn max_abs_err(expected: &Tensor, actual: &Tensor) -> (f64, f64) {
    let (e, a) = (expected.data.to_f64(), actual.data.to_f64());
    assert_eq!(e.len(), a.len(), "element counts differ");
    let err = e
        .iter()
        .zip(&a)
        .map(|(x, y)| {
            if x == y || (x.is_nan() && y.is_nan()) {
                0.0
            } else if x.is_nan() || y.is_nan() {
                // A NaN on one side only is as wrong as can be (`f64::max`
                // would drop its NaN difference).
                f64::INFINITY
            } else {
                (x - y).abs()
            }
        })
        .fold(0.0, f64::max);
    let mag = e
        .iter()
        .map(|x| x.abs())
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    (err, mag)
}
