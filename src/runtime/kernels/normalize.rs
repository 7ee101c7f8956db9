//! Softmax, LogSoftmax, LayerNormalization and ReduceMean over rows: the normalized or
//! reduced axes are the innermost ones of a row-major buffer, so every row is a
//! contiguous run of floats. Rows are split over the worker threads; a row is
//! walked in whole vectors of the widest instruction set, its tail through a
//! partly filled vector on the stack.

use super::activation::Lanewise;
use super::simd::{
    load_part, run_vectorized, store_part, Isa, Lanes, Vector, VectorKernel, ELEMENTS_PER_TASK,
    MAX_LANES,
};
use super::KernelError;
use crate::core::par;
use crate::core::scalar::Scalar;

/// What a [`RowKernel`] computes over each row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RowOp {
    /// exp(x - max) / sum(exp(x - max)).
    Softmax,
    /// x - max - ln(sum(exp(x - max))).
    LogSoftmax,
    /// (x - mean) / sqrt(var + epsilon) · scale + bias, with the population
    /// variance; scale and bias (either may be missing) hold one value per
    /// row element. Not `centered`, the mean is taken as 0 (RMSNormalization).
    LayerNorm {
        /// Added to the variance.
        epsilon: f32,
        /// Whether the row's mean is subtracted.
        centered: bool,
    },
    /// The row's mean: one output per row.
    Mean,
}

/// A [`RowOp`] over rows of `len` contiguous floats.
#[derive(Clone, Debug)]
pub struct RowKernel {
    op: RowOp,
    len: usize,
    lanes: Lanes,
}

impl RowKernel {
    /// The kernel for rows of `len` elements (none for empty rows).
    pub fn new(op: RowOp, len: usize, isa: Isa) -> Option<RowKernel> {
        (len > 0).then(|| RowKernel {
            op,
            len,
            lanes: Lanes::for_block(isa, isa.lanes()),
        })
    }

    /// The elements of a row.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Runs over all rows of `x` into `y`. `scale` and `bias` are LayerNorm's
    /// (a missing scale multiplies by 1, a missing bias adds nothing); the
    /// other ops take neither.
    pub fn run(
        &self,
        x: &[f32],
        scale: Option<&[f32]>,
        bias: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), KernelError> {
        let len = self.len;
        let rows = x.len() / len;
        let out_per_row = match self.op {
            RowOp::Mean => 1,
            _ => len,
        };
        if !x.len().is_multiple_of(len) || y.len() != rows * out_per_row {
            return Err(KernelError::Buffers {
                kernel: "row normalization",
                given: vec![x.len(), y.len()],
                expected: vec![rows * len, rows * out_per_row],
            });
        }
        if let RowOp::LayerNorm { .. } = self.op {
            let per_element = |p: Option<&[f32]>| p.map_or(len, <[f32]>::len);
            if per_element(scale) != len || per_element(bias) != len {
                return Err(KernelError::Buffers {
                    kernel: "LayerNormalization's scale and bias",
                    given: vec![per_element(scale), per_element(bias)],
                    expected: vec![len, len],
                });
            }
        }
        let rows_per_task = (ELEMENTS_PER_TASK / len).max(1);
        par::for_each_chunk_mut(y, rows_per_task * out_per_row, |i, y| {
            let x = &x[i * rows_per_task * len..][..y.len() / out_per_row * len];
            let task = Rows {
                op: self.op,
                len,
                x,
                scale,
                bias,
                y: y.as_mut_ptr(),
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; the task reads
            // whole rows of `x` and writes `y`, whose lengths were checked.
            unsafe { run_vectorized(self.lanes, &task) }
        });
        Ok(())
    }
}

/// The rows of one task, written through `y` (the task's exclusive chunk).
struct Rows<'a> {
    op: RowOp,
    len: usize,
    x: &'a [f32],
    scale: Option<&'a [f32]>,
    bias: Option<&'a [f32]>,
    y: *mut f32,
}

impl VectorKernel for Rows<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let n = self.len;
        for (r, x) in self.x.chunks_exact(n).enumerate() {
            let x = x.as_ptr();
            match self.op {
                RowOp::Softmax => softmax::<V>(x, n, false, self.y.add(r * n)),
                RowOp::LogSoftmax => softmax::<V>(x, n, true, self.y.add(r * n)),
                RowOp::LayerNorm { epsilon, centered } => {
                    let scale = self.scale.map(<[f32]>::as_ptr);
                    let bias = self.bias.map(<[f32]>::as_ptr);
                    let y = self.y.add(r * n);
                    layer_norm::<V>(x, n, (epsilon, centered), scale, bias, y)
                }
                RowOp::Mean => *self.y.add(r) = row_sum::<V>(x, n) / n as f32,
            }
        }
    }
}

/// One row of softmax, or of its logarithm when `log`. The maximum is
/// subtracted before exp so it cannot overflow; a row with NaN or +inf becomes
/// all NaN, as in the reference. The exponentials are staged in `y` and summed
/// as they are made, four vectors at a time so that their polynomials overlap.
#[inline(always)]
unsafe fn softmax<V: Vector>(x: *const f32, n: usize, log: bool, y: *mut f32) {
    let max = V::splat(row_max::<V>(x, n));
    let sum = fold::<V, V>(
        n,
        V::splat(0.0),
        #[inline(always)]
        |sum, at, k| {
            // A tail lane is -inf: its exponential (e^-88 at the least, the
            // clamp's) cannot change a sum of at least 1 (that of the maximum).
            let e = Lanewise(V::sub(load_part(x.add(at), k, f32::NEG_INFINITY), max))
                .exp()
                .0;
            store_part(e, y.add(at), k);
            V::add(sum, e)
        },
        #[inline(always)]
        |a, b| V::add(a, b),
    );
    let sum = horizontal_sum(sum);
    if log {
        let shift = V::add(max, V::splat(sum.ln()));
        map::<V>(
            n,
            y,
            #[inline(always)]
            |at, k| V::sub(load_part(x.add(at), k, 0.0), shift),
        );
    } else {
        let inv = V::splat(1.0 / sum);
        map::<V>(
            n,
            y,
            #[inline(always)]
            |at, k| V::mul(load_part(y.add(at), k, 0.0), inv),
        );
    }
}

/// One row of layer normalization. The variance is taken around a first
/// estimate of the mean, and the sum of the deviations from it corrects both
/// (the corrected two-pass algorithm), so a large offset costs no accuracy.
/// Not `centered` (RMS normalization), the mean is 0: no estimate, and the
/// mean square is the sum of squares alone.
#[inline(always)]
unsafe fn layer_norm<V: Vector>(
    x: *const f32,
    n: usize,
    (epsilon, centered): (f32, bool),
    scale: Option<*const f32>,
    bias: Option<*const f32>,
    y: *mut f32,
) {
    let zero = V::splat(0.0);
    let estimate = match centered {
        true => row_sum::<V>(x, n) / n as f32,
        false => 0.0,
    };
    let center = V::splat(estimate);
    // Tails are padded with the estimate: they deviate by nothing.
    let (dev, sq) = fold::<V, (V, V)>(
        n,
        (zero, zero),
        #[inline(always)]
        |(dev, sq), at, k| {
            let d = V::sub(load_part(x.add(at), k, estimate), center);
            (V::add(dev, d), V::fma(d, d, sq))
        },
        #[inline(always)]
        |a, b| (V::add(a.0, b.0), V::add(a.1, b.1)),
    );
    let sq = horizontal_sum(sq) / n as f32;
    // The mean square of an RMS row is its variance as is (a NaN stays NaN,
    // where `max` would drop it).
    let (dev, var) = match centered {
        true => {
            let dev = horizontal_sum(dev) / n as f32;
            (dev, (sq - dev * dev).max(0.0))
        }
        false => (0.0, sq),
    };
    let mean = V::splat(estimate + dev);
    let inv = V::splat(1.0 / (var + epsilon).sqrt());
    map::<V>(
        n,
        y,
        #[inline(always)]
        |at, k| {
            let v = V::mul(V::sub(load_part(x.add(at), k, 0.0), mean), inv);
            let b = match bias {
                Some(b) => load_part(b.add(at), k, 0.0),
                None => zero,
            };
            match scale {
                Some(s) => V::fma(v, load_part(s.add(at), k, 0.0), b),
                None => V::add(v, b),
            }
        },
    );
}

/// The sum of the `n` floats at `x`.
#[inline(always)]
unsafe fn row_sum<V: Vector>(x: *const f32, n: usize) -> f32 {
    let sum = fold::<V, V>(
        n,
        V::splat(0.0),
        #[inline(always)]
        |a, at, k| V::add(a, load_part(x.add(at), k, 0.0)),
        #[inline(always)]
        |a, b| V::add(a, b),
    );
    horizontal_sum(sum)
}

/// The dot product of the `n` floats at `x` and at `y`.
#[inline(always)]
pub(super) unsafe fn dot<V: Vector>(x: *const f32, y: *const f32, n: usize) -> f32 {
    let sum = fold::<V, V>(
        n,
        V::splat(0.0),
        #[inline(always)]
        |a, at, k| {
            V::fma(
                load_part(x.add(at), k, 0.0),
                load_part(y.add(at), k, 0.0),
                a,
            )
        },
        #[inline(always)]
        |a, b| V::add(a, b),
    );
    horizontal_sum(sum)
}

/// The largest of the `n` floats at `x`, taken past NaN (a row of NaN
/// alone gives negative infinity): a softmax row with NaN is NaN through its
/// sum anyway, and a quantized softmax reads NaN as the largest value's grid
/// point.
#[inline(always)]
pub(super) unsafe fn row_max<V: Vector>(x: *const f32, n: usize) -> f32 {
    let neg_inf = f32::NEG_INFINITY;
    let max = fold::<V, V>(
        n,
        V::splat(neg_inf),
        // `max` keeps its second operand where the first is NaN.
        #[inline(always)]
        |a, at, k| V::max(load_part(x.add(at), k, neg_inf), a),
        #[inline(always)]
        |a, b| V::max(a, b),
    );
    horizontal::<V>(max, f32::max)
}

/// The sum of the lanes of `v`.
#[inline(always)]
unsafe fn horizontal_sum<V: Vector>(v: V) -> f32 {
    horizontal::<V>(v, |a, b| a + b)
}

/// The lanes of `v` joined by `f` as a tree: each level joins the upper half
/// of the lanes into the lower (a few vector instructions, where one lane
/// after another is a chain as long as the vector, paid twice per row).
#[inline(always)]
unsafe fn horizontal<V: Vector>(v: V, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut l = lanes(v);
    let mut width = V::LANES;
    while width > 1 {
        width /= 2;
        let (low, high) = l.split_at_mut(width);
        for (a, &b) in low.iter_mut().zip(&high[..width]) {
            *a = f(*a, b);
        }
    }
    l[0]
}

/// The lanes of `v` (the first `V::LANES` of the array).
#[inline(always)]
unsafe fn lanes<V: Vector>(v: V) -> [f32; MAX_LANES] {
    let mut out = [0.0; MAX_LANES];
    v.store(out.as_mut_ptr());
    out
}

/// Writes `f(at, k)` for every vector of the `n` floats at `y`: `at` is its
/// offset, `k` how many of its lanes lie inside the row (only those are stored).
#[inline(always)]
unsafe fn map<V: Vector>(n: usize, y: *mut f32, f: impl Fn(usize, usize) -> V) {
    let mut at = 0;
    while at < n {
        let k = (n - at).min(V::LANES);
        store_part(f(at, k), y.add(at), k);
        at += V::LANES;
    }
}

/// A row of `n` floats folded vector by vector: `step(acc, at, k)` takes in
/// the vector at offset `at` of which `k` lanes lie inside the row (a tail
/// vector's others must leave the accumulator unchanged). Four independent
/// accumulators (their chains overlap in the pipeline, and each adds up fewer
/// terms) are joined by `merge`.
#[inline(always)]
unsafe fn fold<V: Vector, A: Copy>(
    n: usize,
    init: A,
    step: impl Fn(A, usize, usize) -> A,
    merge: impl Fn(A, A) -> A,
) -> A {
    let l = V::LANES;
    let mut acc = [init; 4];
    let mut at = 0;
    while at + 4 * l <= n {
        for (j, a) in acc.iter_mut().enumerate() {
            *a = step(*a, at + j * l, l);
        }
        at += 4 * l;
    }
    while at < n {
        acc[0] = step(acc[0], at, (n - at).min(l));
        at += l;
    }
    merge(merge(acc[0], acc[1]), merge(acc[2], acc[3]))
}

#[cfg(test)]
mod tests {
    use crate::graph::{DType, Graph, Op, Tensor, ValueRef, ValueType};
    use crate::ops::{LayerNorm, LogSoftmax, Reduce, ReduceKind, Softmax};
    use crate::runtime::test_support::{assert_close, compile_on, Rng};

    /// `op` on `x` of `shape` (and the constant operands `params`), compiled
    /// and run, against the reference executor (`assert_close`). Returns the
    /// compiled steps.
    fn check(op: Op, shape: &[usize], x: Vec<f32>, params: Vec<Tensor>) -> Vec<String> {
        let mut g = Graph::new("rows");
        let ty = ValueType::new(DType::F32, shape.to_vec());
        let mut ins = vec![g.add_input("x", ty, vec![])];
        for (i, p) in params.into_iter().enumerate() {
            ins.push(g.add_constant(&format!("p{i}"), p, vec![]));
        }
        let y = g.add_node(op, "op", &ins, &[], vec![]).unwrap();
        g.set_outputs(vec![ValueRef::new(y, 0)]);
        let m = compile_on(2, &g);
        let inputs = vec![Tensor::from_f32(shape.to_vec(), x)];
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let got = m.run(&inputs).unwrap()[0].to_f32();
        assert_close(&got, &expected, &format!("{shape:?}"));
        m.describe()
    }

    fn native(steps: &[String]) -> bool {
        steps
            .iter()
            .all(|s| s.ends_with("] native") && !s.contains("(tir)"))
    }

    /// Row lengths around the vector widths (1, 7, 16, 33) and a BERT row
    /// (768), one row or many.
    const SHAPES: [&[usize]; 6] = [&[5, 1], &[3, 7], &[2, 4, 16], &[300, 33], &[9, 768], &[33]];

    #[test]
    fn softmax_and_log_softmax_over_the_last_axis_match_the_reference() {
        let mut rng = Rng(21);
        for shape in SHAPES {
            let axis = shape.len() - 1;
            for op in [
                Op::Softmax(Softmax { axis }),
                Op::LogSoftmax(LogSoftmax { axis }),
            ] {
                let x = rng
                    .f32s(shape.iter().product())
                    .iter()
                    .map(|v| v * 20.0)
                    .collect();
                let steps = check(op, shape, x, vec![]);
                assert!(native(&steps), "{steps:?}");
            }
        }
    }

    #[test]
    fn softmax_rows_with_nan_and_infinities_match_the_reference() {
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        let rows = [
            [1.0, nan, 2.0, 3.0, 0.5],
            [1.0, inf, 2.0, 3.0, 0.5],
            [-inf, 1.0, -inf, 2.0, 0.0],
            [-inf; 5],
            [1e30, -1e30, 0.0, 88.0, -88.0],
        ];
        for op in [
            Op::Softmax(Softmax { axis: 1 }),
            Op::LogSoftmax(LogSoftmax { axis: 1 }),
        ] {
            let steps = check(op, &[5, 5], rows.concat(), vec![]);
            assert!(native(&steps), "{steps:?}");
        }
    }

    /// Rows of 67 (four whole 16-lane vectors and a tail; eight 8-lane ones
    /// and a tail) with -inf scattered, at the very end (in the tail's last
    /// lane), values near exp's clamps and beyond, one finite value among
    /// -inf, and +inf: the exponentials summed as they are made in blocks of
    /// four vectors, the tail's lanes outside the row adding nothing.
    #[test]
    fn long_softmax_rows_with_infinities_and_large_values_match_the_reference() {
        let (n, inf) = (67, f32::INFINITY);
        let mut rng = Rng(8);
        let mut rows: Vec<Vec<f32>> = (0..5).map(|_| rng.f32s(n)).collect();
        for v in rows[0].iter_mut().step_by(3) {
            *v = -inf;
        }
        rows[0][n - 1] = -inf;
        rows[1].iter_mut().for_each(|v| *v *= 1e30);
        rows[1][20] = 88.7;
        rows[1][n - 1] = -88.5;
        rows[2].fill(-inf);
        rows[2][n - 2] = -5.0;
        rows[3][40] = inf;
        rows[4].iter_mut().for_each(|v| *v = *v * 100.0 - 50.0);
        for op in [
            Op::Softmax(Softmax { axis: 1 }),
            Op::LogSoftmax(LogSoftmax { axis: 1 }),
        ] {
            let steps = check(op, &[5, n], rows.concat(), vec![]);
            assert!(native(&steps), "{steps:?}");
        }
    }

    #[test]
    fn softmax_over_an_outer_axis_stays_a_loop_nest() {
        let x = Rng(3).f32s(24);
        let steps = check(Op::Softmax(Softmax { axis: 1 }), &[2, 3, 4], x, vec![]);
        assert!(steps.iter().all(|s| s.contains("(tir)")), "{steps:?}");
    }

    /// Layer and RMS normalization, with and without a bias, and once
    /// without a scale.
    #[test]
    fn layer_norm_matches_the_reference() {
        let mut rng = Rng(5);
        for (k, shape) in SHAPES.into_iter().enumerate() {
            // Over the last axis, or the last two when there are three.
            let axis = if shape.len() == 3 { 1 } else { shape.len() - 1 };
            let norm = &shape[axis..];
            let n = norm.iter().product();
            // An offset the mean must not lose precision to.
            let x = rng
                .f32s(shape.iter().product())
                .iter()
                .map(|v| v + 10.0)
                .collect();
            // Without a scale (x / std alone) once.
            let mut params = vec![Tensor::from_f32(norm.to_vec(), rng.f32s(n))];
            match k {
                3 => params.clear(),
                _ if k % 2 == 0 => params.push(Tensor::from_f32(norm.to_vec(), rng.f32s(n))),
                _ => {}
            }
            let op = Op::LayerNorm(LayerNorm {
                axis,
                epsilon: 1e-5,
                centered: k % 4 < 2,
            });
            let steps = check(op, shape, x, params);
            assert!(native(&steps), "{steps:?}");
        }
    }

    #[test]
    fn layer_norm_rows_with_nan_and_infinities_match_the_reference() {
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        let x = [[1.0, nan, 2.0], [1.0, inf, 2.0], [3.0, 3.0, 3.0]].concat();
        let scale = Tensor::from_f32(vec![3], vec![1.0, 2.0, 3.0]);
        for centered in [true, false] {
            let op = Op::LayerNorm(LayerNorm {
                axis: 1,
                epsilon: 1e-5,
                centered,
            });
            let steps = check(op, &[3, 3], x.clone(), vec![scale.clone()]);
            assert!(native(&steps), "{steps:?}");
        }
    }

    #[test]
    fn mean_over_the_innermost_axes_matches_the_reference() {
        let mut rng = Rng(8);
        let cases: [(&[usize], &[usize], bool); 5] = [
            (&[2, 5, 7, 9], &[2, 3], true),
            (&[2, 5, 7, 9], &[3, 2], false),
            (&[3, 33], &[1], true),
            (&[1, 8, 56, 56], &[2, 3], true),
            (&[4, 16], &[0, 1], false),
        ];
        for (shape, axes, keepdims) in cases {
            let op = Op::Reduce(Reduce {
                kind: ReduceKind::Mean,
                axes: axes.to_vec(),
                keepdims,
            });
            let steps = check(op, shape, rng.f32s(shape.iter().product()), vec![]);
            assert!(native(&steps), "{shape:?} {axes:?}: {steps:?}");
        }
        // Axes that leave an inner one are not rows.
        let op = Op::Reduce(Reduce {
            kind: ReduceKind::Mean,
            axes: vec![1],
            keepdims: true,
        });
        let steps = check(op, &[2, 3, 4], rng.f32s(24), vec![]);
        assert!(!native(&steps), "{steps:?}");
    }
}
