//! Elementwise integer arithmetic of the index computations exporters write
//! (PyTorch's ONNX export of windowed attention and patching): Mod, which
//! covers floats too, BitShift, and BitwiseAnd, BitwiseOr and
//! BitwiseXor. All broadcast like numpy and have no compiled kernel (the
//! native kernels compute on floats); the runtime evaluates them on the
//! reference executor, and the importer folds them when their operands are
//! constants.

use super::index::broadcast_indices;
use super::onnx::*;
use super::shape::*;
use super::*;
use crate::core::{Tensor, TensorData, ValueType};

/// A broadcasting binary op on integers: a, b -> a op b.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntegerArith {
    /// The remainder of a / b. `fmod`: truncated division, the result has the
    /// sign of a (C's fmod); else floored division, the sign of b (Python's %).
    Mod {
        /// ONNX attribute fmod = 1.
        fmod: bool,
    },
    /// a shifted by b bits; bits shifted past the type's width are lost, and a
    /// right shift of a signed value keeps its sign.
    BitShift {
        /// Towards the most significant bit (ONNX direction "LEFT").
        left: bool,
    },
    /// The bits set in both.
    BitwiseAnd,
    /// The bits set in either.
    BitwiseOr,
    /// The bits set in exactly one.
    BitwiseXor,
}

impl OpDef for IntegerArith {
    fn name(&self) -> &'static str {
        match self {
            IntegerArith::Mod { .. } => "Mod",
            IntegerArith::BitShift { .. } => "BitShift",
            IntegerArith::BitwiseAnd => "BitwiseAnd",
            IntegerArith::BitwiseOr => "BitwiseOr",
            IntegerArith::BitwiseXor => "BitwiseXor",
        }
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 2, 2)?;
        let (a, b) = (inputs[0], inputs[1]);
        if a.dtype != b.dtype {
            return Err(OpError::DType(format!(
                "operands have different types {} and {}",
                a.dtype, b.dtype
            )));
        }
        let dtype = a.dtype;
        match self {
            _ if dtype == DType::Bool => {
                return Err(OpError::DType("not defined on bool tensors".into()))
            }
            IntegerArith::BitShift { .. }
            | IntegerArith::BitwiseAnd
            | IntegerArith::BitwiseOr
            | IntegerArith::BitwiseXor
                if dtype.is_float() =>
            {
                return Err(OpError::DType(format!(
                    "{} is defined on integers, got {dtype}",
                    self.name()
                )))
            }
            _ => {}
        }
        let shape = broadcast_shapes(&a.shape, &b.shape)?;
        Ok(vec![ValueType::new(dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let (ai, bi) = (
            broadcast_indices(&x[0].shape, &out.shape),
            broadcast_indices(&x[1].shape, &out.shape),
        );
        let pairs = ai.iter().zip(&bi);
        let data = if out.dtype.is_float() {
            // Only Mod reaches here (inference refuses the rest).
            let (a, b) = (x[0].data.to_f64(), x[1].data.to_f64());
            let fmod = matches!(self, IntegerArith::Mod { fmod: true });
            let v = pairs.map(|(&i, &j)| float_mod(a[i], b[j], fmod)).collect();
            TensorData::from_f64(out.dtype, v)
        } else {
            let (a, b) = (x[0].data.to_i128(), x[1].data.to_i128());
            let bits = 8 * out.dtype.size_bytes() as i128;
            let v = pairs
                .map(|(&i, &j)| self.apply_int(a[i], b[j], bits))
                .collect::<Result<Vec<_>, _>>()?;
            TensorData::from_i128(out.dtype, v)
        };
        Ok(vec![Tensor::new(out.shape.clone(), data)])
    }

    fn flops(&self, _: &[&ValueType], outs: &[&ValueType]) -> f64 {
        outs[0].numel() as f64
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let attrs = match *self {
            IntegerArith::Mod { fmod } => vec![("fmod", Attr::Int(fmod as i64))],
            IntegerArith::BitShift { left } => {
                vec![("direction", Attr::Str(if left { "LEFT" } else { "RIGHT" }))]
            }
            IntegerArith::BitwiseAnd | IntegerArith::BitwiseOr | IntegerArith::BitwiseXor => {
                vec![]
            }
        };
        cx.single(self.name(), cx.inputs, attrs)
    }
}

impl IntegerArith {
    /// The op on two integers of a type `bits` wide, exact in i128 (the
    /// caller wraps the result to the type). A zero divisor is an error:
    /// onnxruntime divides regardless, which traps on x86.
    pub fn apply_int(self, a: i128, b: i128, bits: i128) -> Result<i128, OpError> {
        Ok(match self {
            IntegerArith::Mod { .. } if b == 0 => {
                return Err(OpError::Value("integer modulo by zero".into()))
            }
            IntegerArith::Mod { fmod: true } => a % b,
            IntegerArith::Mod { fmod: false } => match a % b {
                r if r != 0 && (r < 0) != (b < 0) => r + b,
                r => r,
            },
            // A shift by a negative count or the whole width or more (defined
            // for signed types since opset 28) shifts every bit out: left
            // leaves 0, right the sign (0 or -1).
            IntegerArith::BitShift { left: true } if !(0..bits).contains(&b) => 0,
            IntegerArith::BitShift { left: false } if !(0..bits).contains(&b) => -((a < 0) as i128),
            IntegerArith::BitShift { left: true } => a << b,
            // Arithmetic on signed values: the sign bit fills in.
            IntegerArith::BitShift { left: false } => a >> b,
            // On the two's complement of i128, which wraps back to the type's.
            IntegerArith::BitwiseAnd => a & b,
            IntegerArith::BitwiseOr => a | b,
            IntegerArith::BitwiseXor => a ^ b,
        })
    }
}

/// The remainder of a / b on floats. `fmod`: C's fmod, with the sign of a;
/// else numpy's mod (opset 28's fmod=0), with the sign of b: a nonzero
/// remainder of the other sign moves by b, and a zero one takes b's sign.
/// Computed in f64, where the remainder of narrower floats is exact.
fn float_mod(a: f64, b: f64, fmod: bool) -> f64 {
    let r = a % b;
    match r {
        _ if fmod || r.is_nan() => r,
        0.0 => 0f64.copysign(b),
        _ if (r < 0.0) != (b < 0.0) => r + b,
        _ => r,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::IntegerArith;
    use crate::core::{DType, Tensor, TensorData};
    use crate::ops::Op;

    fn ints(dtype: DType, v: &[i128]) -> Tensor {
        Tensor::new(vec![v.len()], TensorData::from_i128(dtype, v.to_vec()))
    }

    #[test]
    fn integer_mod_takes_the_sign_of_the_divisor_or_with_fmod_of_the_dividend() {
        // Python: [a % b for a, b in ...] gives the floored remainders;
        // math.fmod (C) the truncated ones.
        let a = i64s(&[6], &[7, -7, 7, -7, 6, -6]);
        let b = i64s(&[6], &[3, 3, -3, -3, -3, 3]);
        let floored = eval1(
            Op::IntegerArith(IntegerArith::Mod { fmod: false }),
            &[&a, &b],
        );
        assert_i64(&floored, &[6], &[1, 2, -2, -1, 0, 0]);
        let truncated = eval1(
            Op::IntegerArith(IntegerArith::Mod { fmod: true }),
            &[&a, &b],
        );
        assert_i64(&truncated, &[6], &[1, -1, 1, -1, 0, 0]);
    }

    #[test]
    fn mod_broadcasts_and_keeps_narrow_types() {
        let a = ints(DType::I8, &[-128, 127, -5, 5]);
        let b = ints(DType::I8, &[-1]);
        let got = eval1(
            Op::IntegerArith(IntegerArith::Mod { fmod: false }),
            &[&a, &b],
        );
        assert_eq!(got.data.to_i128(), vec![0, 0, 0, 0]);
        let a = Tensor::new(vec![2, 1], TensorData::U8(vec![200, 7]));
        let b = Tensor::new(vec![3], TensorData::U8(vec![3, 5, 255]));
        let got = eval1(
            Op::IntegerArith(IntegerArith::Mod { fmod: false }),
            &[&a, &b],
        );
        assert_eq!(got.shape, vec![2, 3]);
        assert_eq!(got.data.to_i128(), vec![2, 0, 200, 1, 2, 7]);
    }

    #[test]
    fn float_mod_takes_the_sign_of_the_dividend_or_without_fmod_of_the_divisor() {
        let a = f32s(&[6], &[5.5, -5.5, 5.5, -0.0, -3.0, 1.0]);
        let b = f32s(&[6], &[2.0, 2.0, -2.0, 3.0, f32::INFINITY, 0.0]);
        let got = eval1(
            Op::IntegerArith(IntegerArith::Mod { fmod: true }),
            &[&a, &b],
        );
        let v = got.data.to_f64();
        assert_eq!(&v[..5], &[1.5, -1.5, 1.5, 0.0, -3.0]);
        assert!(v[5].is_nan());
        // numpy.mod: 5.5 % -2 = -0.5, -0.0 % 3 = +0.0, -3 % inf = inf.
        let got = eval1(
            Op::IntegerArith(IntegerArith::Mod { fmod: false }),
            &[&a, &b],
        );
        let v = got.data.to_f64();
        assert_eq!(&v[..5], &[1.5, 0.5, -0.5, 0.0, f64::INFINITY]);
        assert!(v[3].is_sign_positive() && v[5].is_nan());
    }

    #[test]
    fn integer_modulo_by_zero_is_an_error_not_a_panic() {
        let (a, b) = (i64s(&[2], &[5, 6]), i64s(&[2], &[2, 0]));
        for fmod in [false, true] {
            let err = try_eval(Op::IntegerArith(IntegerArith::Mod { fmod }), &[&a, &b]);
            assert!(err.unwrap_err().to_string().contains("modulo by zero"));
        }
    }

    #[test]
    fn bitwise_ops_on_signed_and_unsigned_bits() {
        let op = |o| Op::IntegerArith(o);
        let (a, b) = (
            ints(DType::I8, &[-1, -128, 12, 5]),
            ints(DType::I8, &[7, 127, 10, -6]),
        );
        // -1 is all ones, -128 only the sign bit, -6 = 0b1111_1010.
        let and = eval1(op(IntegerArith::BitwiseAnd), &[&a, &b]);
        assert_eq!(and.data.to_i128(), vec![7, 0, 8, 0]);
        let or = eval1(op(IntegerArith::BitwiseOr), &[&a, &b]);
        assert_eq!(or.data.to_i128(), vec![-1, -1, 14, -1]);
        let xor = eval1(op(IntegerArith::BitwiseXor), &[&a, &b]);
        assert_eq!(xor.data.to_i128(), vec![-8, -1, 6, -1]);
        let (a, b) = (ints(DType::U8, &[255, 240]), ints(DType::U8, &[15]));
        let xor = eval1(op(IntegerArith::BitwiseXor), &[&a, &b]);
        assert_eq!(xor.data.to_i128(), vec![240, 255]);
        let floats = f32s(&[1], &[1.0]);
        let refused = try_eval(op(IntegerArith::BitwiseAnd), &[&floats, &floats]);
        assert!(refused.unwrap_err().to_string().contains("integers"));
    }

    #[test]
    fn bit_shifts_lose_the_bits_past_the_width() {
        let a = ints(DType::U8, &[16, 4, 1, 255]);
        let b = ints(DType::U8, &[1, 2, 8, 4]);
        let left = eval1(
            Op::IntegerArith(IntegerArith::BitShift { left: true }),
            &[&a, &b],
        );
        assert_eq!(left.data.to_i128(), vec![32, 16, 0, 240]);
        let right = eval1(
            Op::IntegerArith(IntegerArith::BitShift { left: false }),
            &[&a, &b],
        );
        assert_eq!(right.data.to_i128(), vec![8, 1, 0, 15]);
        // Signed (opset 28): left wraps, right keeps the sign, and a count
        // outside 0..8 shifts everything out.
        let a = ints(DType::I8, &[64, -8, -128, -8, -1, -5]);
        let b = ints(DType::I8, &[1, 1, 1, 8, -1, 127]);
        let left = eval1(
            Op::IntegerArith(IntegerArith::BitShift { left: true }),
            &[&a, &b],
        );
        assert_eq!(left.data.to_i128(), vec![-128, -16, 0, 0, 0, 0]);
        let right = eval1(
            Op::IntegerArith(IntegerArith::BitShift { left: false }),
            &[&a, &b],
        );
        assert_eq!(right.data.to_i128(), vec![32, -4, -64, -1, -1, -1]);
    }
}
