//! What the padding of a tensor holds, and how that flows through ops.
//!
//! Following the "Buffer Layout Padding" RFC for TVM: padding holds either a known value
//! or `undef` (anything). A transform that pads writes a value it chooses; an op
//! maps the padding of its inputs to the padding of its output (relu keeps 0,
//! exp turns 0 into 1); and an op that reduces or slides a window over a padded
//! axis needs a particular value there (the reduction's identity), or else its
//! logical result is wrong. Knowledge that no op wrote, only a user or an
//! earlier pass asserted, is an `Assumption` that names its origin.

use super::{BinaryOp, Op, UnaryOp};
use crate::core::{Layout, PadFlow, PadValue, Requirement};

/// Whether layout `l` leaves every axis in `axes` unblocked.
pub(super) fn unblocked(l: &Layout, axes: &[usize]) -> bool {
    axes.iter().all(|&a| l.factors(a).is_empty())
}

/// Whether the blocks of `axis` divide every extent in `extents` (so the op's
/// pieces meet on block boundaries and no padding sits between them).
pub(super) fn blocks_divide(l: &Layout, axis: usize, extents: &[usize]) -> bool {
    let b: usize = l.factors(axis).iter().product();
    extents.iter().all(|e| e % b == 0)
}

/// The flow of an op that runs on any padding: every input may hold anything
/// there, and the output's padding holds what its data input's (the first)
/// does. Ops that need more start from this and refine it.
pub(super) fn pass_through(inputs: &[PadValue]) -> PadFlow {
    PadFlow {
        inputs: vec![Requirement::Any; inputs.len()],
        output: inputs.first().copied().unwrap_or(PadValue::Undef),
    }
}

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

/// Pad-value flow of `op` (see [`crate::ops::OpDef::pad_flow`]).
pub fn pad_flow(op: &Op, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
    op.def().pad_flow(inputs, padded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Requirement;
    use crate::ops::testutil::{conv_3x3, pool_2x2};
    use crate::ops::*;

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

    /// A Pad of H and W over a layout that pads the channels (NASNet's
    /// zero-padding before a strided separable conv in NCHW16c).
    #[test]
    fn pad_passes_the_layout_padding_of_axes_it_does_not_pad() {
        let pad = |value: f32| {
            Op::Pad(Pad {
                begins: vec![0, 0, 1, 1],
                ends: vec![0, 0, 1, 1],
                mode: PadMode::Constant(value),
            })
        };
        let f = pad_flow(&pad(0.0), &[ZERO], &[1]);
        assert_eq!(f.inputs, vec![Requirement::Any]);
        assert_eq!(f.output, ZERO);
        // The border holds 1 in the padding channels, the rest 0: nothing is known.
        assert_eq!(pad_flow(&pad(1.0), &[ZERO], &[1]).output, PadValue::Undef);
        // Padding an axis the layout pads is refused.
        assert_eq!(
            pad_flow(&pad(0.0), &[ZERO], &[2]).inputs,
            vec![Requirement::Unsupported]
        );
    }

    /// A constant Pad of channels in NCHW16c (BlazeFace's zero-padded
    /// shortcut): it runs there when it adds whole blocks before an input of
    /// whole blocks, and then writes all of its output's padding itself.
    #[test]
    fn a_channel_pad_of_whole_blocks_runs_blocked() {
        let pad = |begin: i64, end: i64, mode: PadMode| {
            Op::Pad(Pad {
                begins: vec![0, begin, 0, 0],
                ends: vec![0, end, 0, 0],
                mode,
            })
        };
        let zero = PadMode::Constant(0.0);
        let blocked = crate::core::Layout::parse("NCHW16c").unwrap();
        let x = |c: usize| crate::core::ValueType::new(crate::core::DType::F32, vec![1, c, 4, 4]);
        let runs = |op: &Op, c: usize| op.def().runs_in(&blocked, &[&x(c)]);
        assert!(runs(&pad(0, 16, zero), 16));
        assert!(runs(&pad(16, 8, zero), 32));
        assert!(!runs(&pad(8, 8, zero), 16), "a begin inside a block");
        assert!(
            !runs(&pad(0, 8, zero), 24),
            "an input ending inside a block"
        );
        assert!(!runs(&pad(0, -16, zero), 32), "a crop");
        assert!(!runs(&pad(0, 16, PadMode::Edge), 16));
        // Its input has no padding: the output's (channels 40..48) holds the constant.
        let f = pad_flow(&pad(16, 8, PadMode::Constant(2.0)), &[PadValue::Undef], &[]);
        assert_eq!(f.inputs, vec![Requirement::Any]);
        assert_eq!(f.output, PadValue::Known(2.0));
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
            pad_flow(&pool_2x2(PoolKind::Max), &[ZERO], &[3]).inputs,
            vec![Requirement::Value(f32::NEG_INFINITY)]
        );
        let f = pad_flow(&pool_2x2(PoolKind::Max), &[ZERO], &[1]);
        assert_eq!((f.inputs[0], f.output), (Requirement::Any, ZERO));
        assert_eq!(
            pad_flow(&pool_2x2(PoolKind::Avg), &[ZERO], &[2]).inputs,
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
        let conv = conv_3x3();
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
