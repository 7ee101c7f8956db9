//! Quantization onto a grid fitted to the values themselves, at every run:
//! what TFLite's hybrid kernels (a dynamic-range model's convolutions and
//! fully connected layers: int8 weights, float activations) do to their
//! input, and ONNX's DynamicQuantizeLinear followed by its dequantization.
//! The op's output is the float meaning of the quantized values, so a
//! convolution reading it sums integers exactly where its weights are
//! integers too.
//!
//! Over each group of elements (one per index of the axes before `axis`;
//! the whole tensor for axis 0), with `lo` and `hi` the least and greatest
//! value widened to hold 0 (NaN left out):
//! - asymmetric: 256 integers `0..=255`, step `(hi - lo) / 255`, the zero
//!   point `-lo / step` rounded half to even into that range;
//! - symmetric: the integers `-127..=127`, step `max(-lo, hi) / 127`, zero
//!   point 0.
//!
//! Each value is stored as the byte `b = x * (1 / step) + (zero_point -
//! least)`, each operation rounded to f32, then rounded half to even and
//! clamped to the integers (NaN to the least), and stands for `(b -
//! (zero_point - least)) * step`. Where the step has no finite inverse (every
//! value 0, or within 1e-38 of it) the step is 1. The native kernels compute
//! exactly this, so their outputs match the reference bit for bit (ONNX's
//! DynamicQuantizeLinear divides by the step instead: a value within an ulp
//! of a half step may round the other way).

use super::onnx::*;
use super::shape::*;
use super::*;
use crate::core::{numel, Tensor, TensorData, ValueType};

/// DynamicQuantize: x (f32) -> the same values rounded onto a grid of bytes
/// fitted to each group's range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DynamicQuantize {
    /// The axes before it index independent groups (0: one grid for the
    /// whole tensor; TFLite quantizes each batch item, or each row of a fully
    /// connected layer's input, on its own).
    pub axis: usize,
    /// Integers `-127..=127` around 0 (TFLite's symmetric hybrid kernels)
    /// instead of `0..=255` with a zero point.
    pub symmetric: bool,
}

/// The grid one group's values are quantized onto.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FittedGrid {
    /// The step between consecutive integers.
    pub scale: f32,
    /// The integer that stands for 0.
    pub zero_point: f32,
    /// The least integer.
    pub min: f32,
    /// The greatest integer.
    pub max: f32,
}

impl FittedGrid {
    /// The byte (the integer less `min`) of `x` on this grid.
    pub fn byte(&self, x: f32) -> f32 {
        if x.is_nan() {
            return 0.0;
        }
        let shifted = x * (1.0 / self.scale) + (self.zero_point - self.min);
        shifted.round_ties_even().clamp(0.0, self.max - self.min)
    }

    /// The value the byte of `x` stands for.
    pub fn dequantized(&self, x: f32) -> f32 {
        (self.byte(x) - (self.zero_point - self.min)) * self.scale
    }
}

impl DynamicQuantize {
    /// The least and greatest integer of its grids.
    fn integers(&self) -> (f32, f32) {
        match self.symmetric {
            true => (-127.0, 127.0),
            false => (0.0, 255.0),
        }
    }

    /// The grid of a group whose least and greatest non-NaN values are `lo`
    /// and `hi` (`lo > hi` for a group of NaN alone).
    pub fn grid(&self, lo: f32, hi: f32) -> FittedGrid {
        let (lo, hi) = (lo.min(0.0), hi.max(0.0));
        let (min, max) = self.integers();
        let scale = match self.symmetric {
            true => (-lo).max(hi) / 127.0,
            false => (hi - lo) / 255.0,
        };
        let scale = match (1.0 / scale).is_finite() {
            true => scale,
            false => 1.0,
        };
        let zero_point = match self.symmetric {
            true => 0.0,
            false => (-lo / scale).round_ties_even().clamp(min, max),
        };
        FittedGrid {
            scale,
            zero_point,
            min,
            max,
        }
    }

    /// The least and greatest non-NaN value of `values` (`+inf, -inf` where
    /// there is none); infinities left out as well where there are finite
    /// values, so that one infinite value does not make the grid infinite.
    pub fn range(values: &[f32]) -> (f32, f32) {
        let (lo, hi) = values
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                (if v < lo { v } else { lo }, if v > hi { v } else { hi })
            });
        if lo.is_finite() && hi.is_finite() {
            return (lo, hi);
        }
        (values.iter().filter(|v| v.is_finite()))
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            })
    }

    /// Elements per group of a tensor of shape `shape`.
    pub fn group_len(&self, shape: &[usize]) -> usize {
        numel(&shape[self.axis.min(shape.len())..])
    }

    /// `x` quantized and dequantized, group by group, into `y`.
    pub fn apply(&self, x: &[f32], group_len: usize, y: &mut [f32]) {
        for (x, y) in x
            .chunks(group_len.max(1))
            .zip(y.chunks_mut(group_len.max(1)))
        {
            let (lo, hi) = DynamicQuantize::range(x);
            let grid = self.grid(lo, hi);
            for (y, &x) in y.iter_mut().zip(x) {
                *y = grid.dequantized(x);
            }
        }
    }
}

impl OpDef for DynamicQuantize {
    fn name(&self) -> &'static str {
        "DynamicQuantize"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        if x.dtype != DType::F32 {
            return Err(OpError::DType(format!(
                "DynamicQuantize takes f32, got {}",
                x.dtype.name()
            )));
        }
        if self.axis > x.shape.len() {
            return Err(OpError::Attribute(format!(
                "axis {} is past the rank {} of the input",
                self.axis,
                x.shape.len()
            )));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let values = x[0].f32s();
        let mut y = vec![0f32; values.len()];
        self.apply(&values, self.group_len(&outputs[0].shape), &mut y);
        let shape = outputs[0].shape.clone();
        Ok(vec![Tensor::new(shape, TensorData::F32(y))])
    }

    /// One grid per tensor: any storage order, padding included where it
    /// holds 0 (which widens no range and stays 0). Several grids: the groups
    /// must lie one after the other, as in row-major storage.
    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn runs_in(&self, l: &Layout, ins: &[&ValueType]) -> bool {
        let groups = numel(&ins[0].shape[..self.axis.min(ins[0].shape.len())]);
        groups == 1 || l.is_identity()
    }

    /// The arithmetic above as ONNX ops: each group's range by ReduceMin
    /// and ReduceMax, the step (1 where its reciprocal is infinite), the
    /// zero point, the bytes and their values. (ONNX's DynamicQuantizeLinear
    /// divides by the step, and takes one grid, asymmetric.)
    fn to_onnx(&self, cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let (b, inputs, types, outputs) = cx.parts();
        let x = inputs[0].clone();
        let rank = types[0].shape.len();
        let axes: Vec<i64> = (self.axis.min(rank)..rank).map(|a| a as i64).collect();
        let f =
            |b: &mut dyn OnnxWriter, what: &str, v: f32| b.constant(what, &Tensor::scalar_f32(v));
        let zero = f(b, "zero", 0.0);
        let reduce = |b: &mut dyn OnnxWriter, op: &str, with_zero: &str| {
            let mut attrs = vec![("keepdims", Attr::Int(1))];
            let mut ins = vec![x.clone()];
            match b.opset() >= 18 {
                true => ins.push(b.ints("axes", &axes)),
                false => attrs.push(("axes", Attr::Ints(axes.clone()))),
            }
            let r = b.node(op, &ins, attrs, None);
            b.node(with_zero, &[r, zero.clone()], vec![], None)
        };
        let lo = reduce(b, "ReduceMin", "Min");
        let hi = reduce(b, "ReduceMax", "Max");
        let (min, max) = self.integers();
        let spread = match self.symmetric {
            true => {
                let below = b.node("Neg", std::slice::from_ref(&lo), vec![], None);
                b.node("Max", &[below, hi], vec![], None)
            }
            false => b.node("Sub", &[hi, lo.clone()], vec![], None),
        };
        let levels = f(b, "levels", if self.symmetric { 127.0 } else { 255.0 });
        let step = b.node("Div", &[spread, levels], vec![], None);
        let inverse = b.node("Reciprocal", std::slice::from_ref(&step), vec![], None);
        let degenerate = b.node("IsInf", std::slice::from_ref(&inverse), vec![], None);
        let one = f(b, "one", 1.0);
        let step = b.node(
            "Where",
            &[degenerate.clone(), one.clone(), step],
            vec![],
            None,
        );
        let inverse = b.node("Where", &[degenerate, one, inverse], vec![], None);
        let shift = match self.symmetric {
            true => f(b, "shift", -min),
            false => {
                let below = b.node("Neg", &[lo], vec![], None);
                let at = b.node("Div", &[below, step.clone()], vec![], None);
                let at = b.node("Round", &[at], vec![], None);
                let (lo_c, hi_c) = (f(b, "least", min), f(b, "greatest", max));
                b.node("Clip", &[at, lo_c, hi_c], vec![], None)
            }
        };
        let scaled = b.node("Mul", &[x.clone(), inverse], vec![], None);
        let shifted = b.node("Add", &[scaled, shift.clone()], vec![], None);
        let rounded = b.node("Round", &[shifted], vec![], None);
        let top = f(b, "top", max - min);
        let byte = b.node("Clip", &[rounded, zero, top], vec![], None);
        let centered = b.node("Sub", &[byte, shift], vec![], None);
        Ok(single(b, outputs, "Mul", &[centered, step], vec![]))
    }

    fn min_onnx_opset(&self) -> i64 {
        // Clip's bounds as inputs.
        11
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        let mut flow = refuse_padded(inputs, padded);
        if !padded.is_empty() {
            flow.inputs[0] = Requirement::Value(0.0);
            flow.output = PadValue::Known(0.0);
        }
        flow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantized(op: DynamicQuantize, x: &[f32]) -> Vec<f32> {
        let t = Tensor::new(vec![x.len()], TensorData::F32(x.to_vec()));
        let out = ValueType::new(DType::F32, vec![x.len()]);
        op.eval(&[&t], &[out]).unwrap()[0].f32s().to_vec()
    }

    #[test]
    fn asymmetric_grids_span_the_range_with_zero_on_the_grid() {
        let op = DynamicQuantize {
            axis: 0,
            symmetric: false,
        };
        // Range [-1, 3]: step 4/255, zero point round(63.75) = 64.
        let grid = op.grid(-1.0, 3.0);
        assert_eq!(grid.scale, 4.0 / 255.0);
        assert_eq!(grid.zero_point, 64.0);
        let y = quantized(op, &[-1.0, 0.0, 3.0, 1.0, f32::NAN]);
        let step = grid.scale;
        assert_eq!(y[1], 0.0, "0 is on the grid");
        assert_eq!(y[0], -64.0 * step);
        assert_eq!(y[2], (255.0 - 64.0) * step);
        assert!(
            (y[3] - 1.0).abs() <= step / 2.0,
            "{} is the nearest to 1",
            y[3]
        );
        assert_eq!(y[4], -64.0 * step, "NaN is the least integer");
        // Positive values alone still put 0 on the grid, at integer 0.
        assert_eq!(op.grid(0.5, 2.0).zero_point, 0.0);
    }

    #[test]
    fn symmetric_grids_center_on_zero() {
        let op = DynamicQuantize {
            axis: 0,
            symmetric: true,
        };
        let y = quantized(op, &[-2.54, 1.0, 0.013]);
        let step = 2.54f32 / 127.0;
        assert_eq!(y[0], -127.0 * step);
        assert!(
            (y[1] - 1.0).abs() <= step / 2.0,
            "{} is the nearest to 1",
            y[1]
        );
        assert!(
            (y[2] - step).abs() <= step * 1e-6,
            "0.013 rounds to one step"
        );
    }

    #[test]
    fn groups_get_grids_of_their_own_and_zeros_stay_zero() {
        let op = DynamicQuantize {
            axis: 1,
            symmetric: false,
        };
        let t = Tensor::new(vec![3, 2], TensorData::F32(vec![0., 0., 10., 4.2, -1., 0.]));
        let out = ValueType::new(DType::F32, vec![3, 2]);
        let y = op.eval(&[&t], &[out]).unwrap()[0].f32s().to_vec();
        assert_eq!(&y[..2], &[0.0, 0.0], "a group of zeros takes step 1");
        assert_eq!(y[2], 10.0);
        assert!((y[3] - 4.2).abs() <= 10.0 / 255.0 / 2.0, "{}", y[3]);
        assert_eq!(y[4], -1.0);
        // An infinity does not widen the grid of the finite values.
        assert_eq!(
            DynamicQuantize::range(&[1.0, f32::INFINITY, -2.0]),
            (-2.0, 1.0)
        );
    }
}
