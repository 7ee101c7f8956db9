//! Elementwise integer arithmetic of the index computations exporters write
//! (PyTorch's ONNX export of windowed attention and patching): Mod, which
//! covers floats too as C's fmod, BitShift, and BitwiseAnd, BitwiseOr and
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
    /// sign of a (C's fmod, required for floats); else floored division, the
    /// sign of b (Python's %).
    Mod {
        /// ONNX attribute fmod = 1.
        fmod: bool,
    },
    /// a shifted by b bits, on unsigned types; bits shifted past the type's
    /// width are lost.
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
            IntegerArith::Mod { fmod: false } if dtype.is_float() => {
                return Err(OpError::DType(format!(
                    "Mod of {dtype} tensors needs attribute fmod=1 (the sign of the dividend)"
                )))
            }
            IntegerArith::BitShift { .. } if !is_unsigned(dtype) => {
                return Err(OpError::DType(format!(
                    "BitShift is defined on unsigned integers, got {dtype}"
                )))
            }
            IntegerArith::BitwiseAnd | IntegerArith::BitwiseOr | IntegerArith::BitwiseXor
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
            // Only fmod reaches here (inference refuses the rest). The
            // remainder is exact, so computing in f64 rounds nothing.
            let (a, b) = (x[0].data.to_f64(), x[1].data.to_f64());
            TensorData::from_f64(out.dtype, pairs.map(|(&i, &j)| a[i] % b[j]).collect())
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
    fn apply_int(self, a: i128, b: i128, bits: i128) -> Result<i128, OpError> {
        Ok(match self {
            IntegerArith::Mod { .. } if b == 0 => {
                return Err(OpError::Value("integer modulo by zero".into()))
            }
            IntegerArith::Mod { fmod: true } => a % b,
            IntegerArith::Mod { fmod: false } => match a % b {
                r if r != 0 && (r < 0) != (b < 0) => r + b,
                r => r,
            },
            IntegerArith::BitShift { .. } if b >= bits => 0,
            IntegerArith::BitShift { left: true } => a << b,
            IntegerArith::BitShift { left: false } => a >> b,
            // On the two's complement of i128, which wraps back to the type's.
            IntegerArith::BitwiseAnd => a & b,
            IntegerArith::BitwiseOr => a | b,
            IntegerArith::BitwiseXor => a ^ b,
        })
    }
}

fn is_unsigned(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::U4
    )
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
    fn float_mod_is_fmod_and_needs_the_attribute() {
        let a = f32s(&[4], &[5.5, -5.5, 5.5, -0.0]);
        let b = f32s(&[4], &[2.0, 2.0, -2.0, 3.0]);
        let got = eval1(
            Op::IntegerArith(IntegerArith::Mod { fmod: true }),
            &[&a, &b],
        );
        assert_close(&got, &[4], &[1.5, -1.5, 1.5, 0.0], 0.0);
        let refused = try_eval(
            Op::IntegerArith(IntegerArith::Mod { fmod: false }),
            &[&a, &b],
        );
        assert!(refused.unwrap_err().to_string().contains("fmod=1"));
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
        let signed = i64s(&[1], &[1]);
        let refused = try_eval(
            Op::IntegerArith(IntegerArith::BitShift { left: true }),
            &[&signed, &signed],
        );
        assert!(refused.unwrap_err().to_string().contains("unsigned"));
    }
}
