//! What the padding of a tensor holds, and how that flows through ops.
//!
//! Following the padding RFC (seeds/002_…): padding holds either a known value
//! or `undef` (anything). A transform that pads writes a value it chooses; an op
//! maps the padding of its inputs to the padding of its output (relu keeps 0,
//! exp turns 0 into 1); and an op that reduces or slides a window over a padded
//! axis needs a particular value there (the reduction's identity), or else its
//! logical result is wrong. Knowledge that no op wrote, only a user or an
//! earlier pass asserted, is an `Assumption` that names its origin.

use crate::core::{PadFlow, PadValue, Requirement};
use crate::graph::{BinaryOp, Op, PoolKind, ReduceKind, UnaryOp};
use crate::ops::{BatchNorm, Cast, Concat, GlobalPool, LogSoftmax, Reduce, Slice, Softmax, Split};

/// The padding of a unary op's output.
pub fn unary_flow(u: UnaryOp, p: PadValue) -> PadValue {
    match p.known() {
        Some(x) if u.is_exact() || x == 0.0 => PadValue::Known(u.apply(x)),
        _ => PadValue::Undef,
    }
}

/// The padding of a binary op's output, given what each operand holds at the
/// padding positions (for an operand broadcast along the padded axes, that is
/// its value there: a scalar constant `c` contributes `Known(c)`).
pub fn binary_flow(b: BinaryOp, p: PadValue, q: PadValue) -> PadValue {
    match (p, q) {
        // Comparisons give 1 or 0.
        (PadValue::Known(x), PadValue::Known(y)) => PadValue::Known(
            b.apply(x, y)
                .or_else(|| b.compare(x, y).map(|c| if c { 1.0 } else { 0.0 }))
                .unwrap_or(f32::NAN),
        ),
        _ => PadValue::Undef,
    }
}

/// Pad-value flow of `op`. `inputs` is what each input holds in its padding
/// (as for `binary_flow`); `padded` lists the logical axes of the first input
/// that are padded (a blocked layout whose block does not divide the axis).
/// Ops the table does not know are `Unsupported` on padded axes with an undef
/// result: that never lets a rewrite rely on a value nobody established.
pub fn pad_flow(op: &Op, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
    let p = inputs.first().copied().unwrap_or(PadValue::Undef);
    let n = inputs.len();
    let any = |n: usize| vec![Requirement::Any; n];
    let padded_in = |axes: &[usize]| padded.iter().any(|a| axes.contains(a));
    let spatial_padded = padded.iter().any(|&a| a >= 2);
    let flow = |inputs: Vec<Requirement>, output: PadValue| PadFlow { inputs, output };
    match op {
        Op::Unary(u) => flow(any(n), unary_flow(*u, p)),
        Op::Binary(b) => {
            let q = inputs.get(1).copied().unwrap_or(PadValue::Undef);
            flow(any(n), binary_flow(*b, p, q))
        }
        // y = (x - mean) / sqrt(var + eps) * scale + bias, per channel; with the
        // parameters padded too, the padded channels compute the same formula.
        Op::BatchNorm(BatchNorm { epsilon }) => {
            let out = match inputs {
                [x, s, b, m, v] => match (x.known(), s.known(), b.known(), m.known(), v.known()) {
                    (Some(x), Some(s), Some(b), Some(m), Some(v)) => {
                        PadValue::Known((x - m) / (v + epsilon).sqrt() * s + b)
                    }
                    _ => PadValue::Undef,
                },
                _ => PadValue::Undef,
            };
            flow(any(n), out)
        }
        Op::Identity => flow(any(n), p),
        Op::Cast(Cast { to }) if to.is_float() => flow(any(n), p),
        // A transpose moves the padding with its axis.
        Op::Transpose(_) => flow(any(n), p),
        // Padded input channels meet weights that must be 0 there, so the input
        // padding must be finite (0 * inf is NaN). Padded output channels see
        // only padded weights: they hold the bias padding (or 0).
        Op::Conv(_) => {
            let mut req = any(n);
            if spatial_padded {
                req[0] = Requirement::Unsupported;
            } else if padded.contains(&1) {
                req[0] = Requirement::Finite;
                if n > 1 {
                    req[1] = Requirement::Value(0.0);
                }
            }
            let w = inputs.get(1).copied().unwrap_or(PadValue::Undef);
            let bias = inputs.get(2).copied().unwrap_or(PadValue::Known(0.0));
            let out = if w.is(0.0) && (p.is_finite() || padded.is_empty()) {
                bias
            } else {
                PadValue::Undef
            };
            flow(req, out)
        }
        Op::Pool(pool) => {
            let mut req = any(n);
            if spatial_padded {
                req[0] = match pool.kind {
                    // A window reaching into the padding must not win the max.
                    PoolKind::Max => Requirement::Value(f32::NEG_INFINITY),
                    // The divisor would count padding positions.
                    PoolKind::Avg => Requirement::Unsupported,
                };
            }
            // Padded channels pool only their own (constant) padding.
            flow(req, p)
        }
        Op::GlobalPool(GlobalPool { kind }) => {
            let mut req = any(n);
            if spatial_padded {
                req[0] = match kind {
                    PoolKind::Max => Requirement::Value(f32::NEG_INFINITY),
                    // A mean that divides by the logical count needs 0 there.
                    PoolKind::Avg => Requirement::Value(0.0),
                };
            }
            flow(req, p)
        }
        Op::Reduce(Reduce { kind, axes, .. }) => {
            let identity = match kind {
                ReduceKind::Sum | ReduceKind::Mean => 0.0,
                ReduceKind::Max => f32::NEG_INFINITY,
            };
            let mut req = any(n);
            if padded_in(axes) {
                req[0] = Requirement::Value(identity);
            }
            // Padding positions of kept axes reduce over constant padding: the
            // mean and max of p are p, the sum is only known when p is 0.
            let out = match kind {
                ReduceKind::Mean | ReduceKind::Max => p,
                ReduceKind::Sum if p.is(0.0) => p,
                ReduceKind::Sum => PadValue::Undef,
            };
            flow(req, out)
        }
        Op::Softmax(Softmax { axis }) | Op::LogSoftmax(LogSoftmax { axis }) => {
            let mut req = any(n);
            let mut out = PadValue::Undef;
            if padded.contains(axis) {
                // exp(-inf) = 0 adds nothing to the normaliser.
                req[0] = Requirement::Value(f32::NEG_INFINITY);
                if padded == [*axis] {
                    out = match op {
                        Op::Softmax(_) => PadValue::Known(0.0),
                        _ => PadValue::Known(f32::NEG_INFINITY),
                    };
                }
            }
            flow(req, out)
        }
        Op::MatMul | Op::Gemm(_) => {
            // The contraction may run over padding: both sides must hold 0 there
            // for the products to vanish whatever the other side holds.
            let req = if padded.is_empty() {
                any(n)
            } else {
                let mut r = vec![Requirement::Value(0.0); n.min(2)];
                r.resize(n, Requirement::Any);
                r
            };
            flow(req, PadValue::Undef)
        }
        Op::Concat(Concat { axis }) | Op::Split(Split { axis, .. }) => {
            let mut req = any(n);
            if padded.contains(axis) {
                req.iter_mut().for_each(|r| *r = Requirement::Unsupported);
            }
            let all_same = inputs.iter().all(|&q| q == p);
            flow(req, if all_same { p } else { PadValue::Undef })
        }
        Op::Slice(Slice { axes }) => {
            let sliced: Vec<usize> = axes.iter().map(|a| a.axis).collect();
            let mut req = any(n);
            if padded_in(&sliced) {
                req[0] = Requirement::Unsupported;
            }
            flow(req, p)
        }
        Op::Input | Op::Constant(_) => flow(vec![], PadValue::Undef),
        _ => {
            let mut req = any(n);
            if !padded.is_empty() && n > 0 {
                req[0] = Requirement::Unsupported;
            }
            flow(req, PadValue::Undef)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Pool, Window};

    const ZERO: PadValue = PadValue::Known(0.0);

    #[test]
    fn elementwise_flow_matches_the_functions() {
        assert_eq!(unary_flow(UnaryOp::Relu, ZERO), ZERO);
        assert_eq!(unary_flow(UnaryOp::Exp, ZERO), PadValue::Known(1.0));
        assert_eq!(unary_flow(UnaryOp::Sigmoid, ZERO), PadValue::Known(0.5));
        assert_eq!(unary_flow(UnaryOp::Relu, PadValue::Known(-3.0)), ZERO);
        assert_eq!(unary_flow(UnaryOp::Erf, ZERO), ZERO);
        // No exact erf(1) here: undef, never a guess.
        assert_eq!(
            unary_flow(UnaryOp::Erf, PadValue::Known(1.0)),
            PadValue::Undef
        );
        assert_eq!(unary_flow(UnaryOp::Exp, PadValue::Undef), PadValue::Undef);
        // A per-channel bias padded with 0 keeps 0 padding 0.
        assert_eq!(binary_flow(BinaryOp::Add, ZERO, ZERO), ZERO);
        assert_eq!(
            binary_flow(BinaryOp::Add, ZERO, PadValue::Undef),
            PadValue::Undef
        );
        assert_eq!(
            binary_flow(BinaryOp::Mul, PadValue::Known(2.0), PadValue::Known(3.0)),
            PadValue::Known(6.0)
        );
    }

    fn pool(kind: PoolKind) -> Op {
        Op::Pool(Pool {
            kind,
            window: Window {
                kernel: vec![2, 2],
                strides: vec![2, 2],
                dilations: vec![1, 1],
                pads: vec![0; 4],
            },
            ceil_mode: false,
            count_include_pad: false,
        })
    }

    #[test]
    fn reductions_need_their_identity_on_padded_axes() {
        let sum = Op::Reduce(Reduce {
            kind: ReduceKind::Sum,
            axes: vec![1],
            keepdims: true,
        });
        let f = pad_flow(&sum, &[ZERO], &[1]);
        assert_eq!(f.inputs, vec![Requirement::Value(0.0)]);
        assert!(f.inputs[0].is_met_by(ZERO));
        assert!(!f.inputs[0].is_met_by(PadValue::Undef));
        // Reducing another axis reads no padding into a logical result.
        assert_eq!(
            pad_flow(&sum, &[PadValue::Undef], &[2]).inputs,
            vec![Requirement::Any]
        );
        let max = Op::Reduce(Reduce {
            kind: ReduceKind::Max,
            axes: vec![1],
            keepdims: true,
        });
        assert_eq!(
            pad_flow(&max, &[ZERO], &[1]).inputs,
            vec![Requirement::Value(f32::NEG_INFINITY)]
        );
        // Max-pool over a padded spatial axis needs -inf; over padded channels, anything.
        assert_eq!(
            pad_flow(&pool(PoolKind::Max), &[ZERO], &[3]).inputs,
            vec![Requirement::Value(f32::NEG_INFINITY)]
        );
        let f = pad_flow(&pool(PoolKind::Max), &[ZERO], &[1]);
        assert_eq!((f.inputs[0], f.output), (Requirement::Any, ZERO));
        assert_eq!(
            pad_flow(&pool(PoolKind::Avg), &[ZERO], &[2]).inputs,
            vec![Requirement::Unsupported]
        );
        let sm = Op::Softmax(Softmax { axis: 1 });
        let f = pad_flow(&sm, &[PadValue::Known(f32::NEG_INFINITY)], &[1]);
        assert!(f.inputs[0].is_met_by(PadValue::Known(f32::NEG_INFINITY)));
        assert_eq!(f.output, ZERO);
    }

    /// A conv in NCHW16c consuming 17 channels padded to 32: finite input
    /// padding and zero weight padding give the bias padding on the output.
    #[test]
    fn conv_over_padded_channels() {
        let conv = Op::Conv(crate::graph::Conv {
            window: Window {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![1; 4],
            },
            group: 1,
        });
        let f = pad_flow(&conv, &[ZERO, ZERO, ZERO], &[1]);
        assert_eq!(
            f.inputs,
            vec![
                Requirement::Finite,
                Requirement::Value(0.0),
                Requirement::Any
            ]
        );
        assert_eq!(f.output, ZERO);
        let undef_in = pad_flow(&conv, &[PadValue::Undef, ZERO, ZERO], &[1]);
        assert!(!undef_in.inputs[0].is_met_by(PadValue::Undef));
        assert_eq!(undef_in.output, PadValue::Undef);
        assert_eq!(
            pad_flow(&conv, &[ZERO, ZERO], &[2]).inputs[0],
            Requirement::Unsupported
        );
    }

    #[test]
    fn pad_values_parse_and_print() {
        for s in ["0.0", "-inf", "inf", "nan", "undef", "0.5"] {
            assert_eq!(s.parse::<PadValue>().unwrap().to_string(), s);
        }
        assert!("zero".parse::<PadValue>().is_err());
        // NaN is a value: equal to itself bit for bit.
        assert_eq!(PadValue::Known(f32::NAN), PadValue::Known(f32::NAN));
        assert_ne!(PadValue::Known(0.0), PadValue::Undef);
    }
}
