//! Elementwise ops: unary functions, broadcasting binary ops, Where.
//! Floats compute in f64; integers compute exactly in i128, which holds every
//! integer dtype (u64 included), and wrap to the dtype at the end.

use super::index::broadcast_indices;
use super::onnx::*;
use super::pad_flow::*;
use super::shape::*;
use super::te::*;
use super::*;
use crate::core::{DType, Tensor, TensorData, ValueType};
use crate::ops::{BinaryOp, UnaryOp};

impl OpDef for UnaryOp {
    fn name(&self) -> &'static str {
        UnaryOp::name(*self)
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        // These are defined on integers too.
        if !matches!(
            self,
            UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Clip { .. } | UnaryOp::Sign
        ) {
            expect_float(x, "input")?;
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![unary(*self, x[0])?])
    }

    fn pad_flow(&self, inputs: &[PadValue], _: &[usize]) -> PadFlow {
        let flow = pass_through(inputs);
        PadFlow {
            output: unary_flow(*self, flow.output),
            ..flow
        }
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (ph, types) = cx.operands(self.name(), 1)?;
        let (u, x) = (*self, ph[0]);
        cx.stage(&types[0].shape, |i| u.apply(x.at(i)))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        match self {
            UnaryOp::Clip { min, max } => {
                let dtype = cx.in_types[0].dtype;
                let bound = |b: &mut dyn OnnxWriter, what: &str, v: f32| {
                    if v.is_infinite() {
                        String::new()
                    } else {
                        b.constant(what, &Tensor::new(vec![], scalar(dtype, v as f64)))
                    }
                };
                let lo = bound(cx.b, "min", *min);
                let hi = bound(cx.b, "max", *max);
                let mut ins = vec![cx.input(0), lo, hi];
                while ins.last().is_some_and(String::is_empty) {
                    ins.pop();
                }
                cx.single("Clip", &ins, vec![])
            }

            UnaryOp::QuantizeDequantize {
                scale,
                zero_point,
                min,
                max,
            } => {
                // The quantized type is the one whose range the clip is.
                let q = DType::quantized_with_range(f64::from(*min), f64::from(*max))
                    .ok_or_else(|| {
                        OpError::Unsupported(format!(
                            "a quantization grid clipped to [{min}, {max}] is no ONNX quantized type"
                        ))
                    })?;
                let float = cx.in_types[0].dtype;
                let s = Tensor::new(vec![], scalar(float, f64::from(*scale)));
                let s = cx.b.constant("scale", &s);
                let zp = Tensor::new(vec![], scalar(q, f64::from(*zero_point)));
                let zp = cx.b.constant("zero_point", &zp);
                let quantized = cx.b.node(
                    "QuantizeLinear",
                    &[cx.input(0), s.clone(), zp.clone()],
                    vec![],
                    None,
                );
                cx.single("DequantizeLinear", &[quantized, s, zp], vec![])
            }
            u => {
                let (op_type, attrs) = (u.name(), unary_attrs(*u));
                cx.single(op_type, cx.inputs, attrs)
            }
        }
    }

    /// Gelu came in opset 20, Mish in 18.
    fn min_onnx_opset(&self) -> i64 {
        match self {
            UnaryOp::Gelu { .. } => 20,
            UnaryOp::Mish => 18,
            _ => 17,
        }
    }
}

impl OpDef for BinaryOp {
    fn name(&self) -> &'static str {
        BinaryOp::name(*self)
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 2, 2)?;
        let (x, y) = (inputs[0], inputs[1]);
        if x.dtype != y.dtype && *self != BinaryOp::Pow {
            return Err(OpError::DType(format!(
                "operands have different types {} and {}",
                x.dtype, y.dtype
            )));
        }
        let shape = broadcast_shapes(&x.shape, &y.shape)?;
        let dtype = if self.is_comparison() {
            DType::Bool
        } else {
            x.dtype
        };
        Ok(vec![ValueType::new(dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![binary(*self, x[0], x[1], &outputs[0])?])
    }

    fn pad_flow(&self, inputs: &[PadValue], _: &[usize]) -> PadFlow {
        let operand = |k: usize| inputs.get(k).copied().unwrap_or(PadValue::Undef);
        PadFlow {
            inputs: vec![Requirement::Any; inputs.len()],
            output: binary_flow(*self, operand(0), operand(1)),
        }
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (ph, types) = cx.operands(self.name(), 2)?;
        let b = *self;
        if b.is_comparison() {
            return Err(unsupported(self.name(), "comparisons give booleans"));
        }
        let (sa, sb) = (operand_shape(types, 0), operand_shape(types, 1));
        let out = broadcast_shapes(&sa, &sb)?;
        let (a, bb) = (ph[0], ph[1]);
        cx.stage(&out, |i| {
            b.apply(
                a.at(&broadcast_index(i, &sa)),
                bb.at(&broadcast_index(i, &sb)),
            )
            .expect("comparisons were refused above")
        })
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let bop = self;
        cx.single(bop.name(), cx.inputs, vec![])
    }
}

impl OpDef for Where {
    fn name(&self) -> &'static str {
        "Where"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 3, 3)?;
        if inputs[0].dtype != DType::Bool {
            return Err(OpError::DType(format!(
                "condition must be bool, got {}",
                inputs[0].dtype
            )));
        }
        if inputs[1].dtype != inputs[2].dtype {
            return Err(OpError::DType(format!(
                "branches have different types {} and {}",
                inputs[1].dtype, inputs[2].dtype
            )));
        }
        let s = broadcast_shapes(&inputs[0].shape, &inputs[1].shape)?;
        let s = broadcast_shapes(&s, &inputs[2].shape)?;
        Ok(vec![ValueType::new(inputs[1].dtype, s)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        Ok(vec![where_(x[0], x[1], x[2], out)?])
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        cx.single("Where", cx.inputs, vec![])
    }
}

pub(super) fn unary(u: UnaryOp, x: &Tensor) -> Result<Tensor, OpError> {
    let dtype = x.dtype();
    let data = if dtype.is_float() {
        TensorData::from_f64(
            dtype,
            x.data.to_f64().into_iter().map(|v| u.apply(v)).collect(),
        )
    } else if dtype == DType::Bool {
        return Err(OpError::DType("not defined on bool tensors".into()));
    } else {
        let v = x.data.to_i128();
        let v = v
            .into_iter()
            .map(|v| unary_int(u, v))
            .collect::<Option<Vec<_>>>();
        let v = v.ok_or_else(|| OpError::DType(format!("not defined on {dtype} tensors")))?;
        TensorData::from_i128(dtype, v)
    };
    Ok(Tensor::new(x.shape.clone(), data))
}

/// The integer version of the ops ONNX defines on integers; `None` for the others.
fn unary_int(u: UnaryOp, x: i128) -> Option<i128> {
    Some(match u {
        UnaryOp::Relu => x.max(0),
        // Bounds round inwards; `as` saturates infinite bounds. min > max gives max,
        // as ONNX specifies.
        UnaryOp::Clip { min, max } => x
            .max((min as f64).ceil() as i128)
            .min((max as f64).floor() as i128),
        UnaryOp::Neg => x.wrapping_neg(),
        UnaryOp::Abs => x.wrapping_abs(),
        UnaryOp::Sign => x.signum(),
        _ => return None,
    })
}

pub(super) fn binary(
    b: BinaryOp,
    x: &Tensor,
    y: &Tensor,
    out: &ValueType,
) -> Result<Tensor, OpError> {
    let (xi, yi) = (
        broadcast_indices(&x.shape, &out.shape),
        broadcast_indices(&y.shape, &out.shape),
    );
    let float = x.dtype().is_float();
    if b.is_comparison() {
        let v: Vec<bool> = if float {
            let (xv, yv) = (x.data.to_f64(), y.data.to_f64());
            xi.iter()
                .zip(&yi)
                .map(|(&i, &j)| b.compare(xv[i], yv[j]) == Some(true))
                .collect()
        } else {
            let (xv, yv) = (x.data.to_i128(), y.data.to_i128());
            xi.iter()
                .zip(&yi)
                .map(|(&i, &j)| b.compare(xv[i], yv[j]) == Some(true))
                .collect()
        };
        return Ok(Tensor::new(out.shape.clone(), TensorData::Bool(v)));
    }
    if x.dtype() == DType::Bool {
        return Err(OpError::DType(
            "arithmetic is not defined on bool tensors".into(),
        ));
    }
    let data = if float {
        // Any exponent type converts to f64 for a float base.
        let (xv, yv) = (x.data.to_f64(), y.data.to_f64());
        let v = xi
            .iter()
            .zip(&yi)
            .map(|(&i, &j)| b.apply(xv[i], yv[j]))
            .collect::<Option<Vec<f64>>>()
            .ok_or_else(|| OpError::DType("comparisons give booleans".into()))?;
        TensorData::from_f64(out.dtype, v)
    } else if b == BinaryOp::Pow && y.dtype().is_float() {
        // Integer base, float exponent: compute in f64, truncate like a C cast.
        let (xv, yv) = (x.data.to_f64(), y.data.to_f64());
        let v = xi
            .iter()
            .zip(&yi)
            .map(|(&i, &j)| xv[i].powf(yv[j]).trunc())
            .collect();
        TensorData::from_f64(out.dtype, v)
    } else {
        let (xv, yv) = (x.data.to_i128(), y.data.to_i128());
        let v = xi
            .iter()
            .zip(&yi)
            .map(|(&i, &j)| arith_int(b, xv[i], yv[j]))
            .collect::<Result<Vec<_>, _>>()?;
        TensorData::from_i128(out.dtype, v)
    };
    Ok(Tensor::new(out.shape.clone(), data))
}

/// Wrapping in i128 keeps the low bits exact, so the result wraps to the dtype
/// as the dtype's own arithmetic would; the rest is exact on every dtype.
fn arith_int(b: BinaryOp, x: i128, y: i128) -> Result<i128, OpError> {
    Ok(match b {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        // Truncating division, as in C.
        BinaryOp::Div if y == 0 => return Err(OpError::Value("integer division by zero".into())),
        BinaryOp::Div => x.wrapping_div(y),
        BinaryOp::Pow => int_pow(x, y)?,
        BinaryOp::Max => x.max(y),
        BinaryOp::Min => x.min(y),
        BinaryOp::PRelu if x < 0 => x.wrapping_mul(y),
        BinaryOp::PRelu => x,
        BinaryOp::Equal
        | BinaryOp::Less
        | BinaryOp::Greater
        | BinaryOp::LessOrEqual
        | BinaryOp::GreaterOrEqual => {
            return Err(OpError::DType("comparisons give booleans".into()))
        }
    })
}

/// x^e on integers, wrapping on overflow. A negative exponent gives the truncated
/// real result: 1 and -1 stay ±1, other bases give 0.
fn int_pow(x: i128, e: i128) -> Result<i128, OpError> {
    if e < 0 {
        return match x {
            0 => Err(OpError::Value(
                "integer zero raised to a negative power".into(),
            )),
            1 => Ok(1),
            -1 => Ok(if e % 2 == 0 { 1 } else { -1 }),
            _ => Ok(0),
        };
    }
    let (mut base, mut e, mut acc) = (x, e as u128, 1i128);
    while e > 0 {
        if e & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        e >>= 1;
    }
    Ok(acc)
}

pub(super) fn where_(
    c: &Tensor,
    x: &Tensor,
    y: &Tensor,
    out: &ValueType,
) -> Result<Tensor, OpError> {
    let cond = c.data.to_bool();
    let (ci, xi, yi) = (
        broadcast_indices(&c.shape, &out.shape),
        broadcast_indices(&x.shape, &out.shape),
        broadcast_indices(&y.shape, &out.shape),
    );
    // Pick from x and y joined end to end.
    let nx = x.numel();
    let src = (0..out.numel()).map(|k| if cond[ci[k]] { xi[k] } else { nx + yi[k] });
    let both = TensorData::concat(&[&x.data, &y.data])?;
    Ok(Tensor::new(out.shape.clone(), both.gather(src)))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::core::scalar::erf;
    use crate::core::{DType, Tensor, TensorData};
    use crate::ops::{BinaryOp as B, Op, UnaryOp as U};

    fn un(u: U, x: &[f32]) -> Tensor {
        eval1(Op::Unary(u), &[&f32s(&[x.len()], x)])
    }

    #[test]
    fn erf_matches_libm_values() {
        // Reference values: Python's math.erf (C libm), printed with repr().
        let cases = [
            (-3.0, -0.9999779095030014),
            (-0.5, -0.5204998778130465),
            (0.0, 0.0),
            (0.1, 0.1124629160182849),
            (1.0, 0.8427007929497149),
            (2.5, 0.999593047982555),
            (4.0, 0.9999999845827421),
            (5.9, 0.9999999999999999),
            (7.0, 1.0),
        ];
        // A grid over [-6.2, 6.2] in steps of 0.01 showed at most 1.6e-15 absolute
        // error (about 7 ulp near ±1), far below f32 resolution.
        for (x, want) in cases {
            assert!(
                (erf(x) - want).abs() <= 2e-15,
                "erf({x}) = {} want {want}",
                erf(x)
            );
        }
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn float_unary_functions() {
        // Hand-derived or from the ONNX operator spec examples (LeakyRelu, Clip,
        // HardSigmoid); transcendental values from Python's math module.
        let t = 1e-7;
        assert_close(&un(U::Relu, &[-1.0, 0.0, 2.0]), &[3], &[0.0, 0.0, 2.0], 0.0);
        assert_close(
            &un(U::LeakyRelu { alpha: 0.1 }, &[-1.0, 0.0, 1.0]),
            &[3],
            &[-0.1, 0.0, 1.0],
            t,
        );
        let clip = U::Clip {
            min: -1.0,
            max: 1.0,
        };
        assert_close(&un(clip, &[-2.0, 0.0, 2.0]), &[3], &[-1.0, 0.0, 1.0], 0.0);
        // min > max: every element becomes max.
        let clip = U::Clip { min: 2.0, max: 1.0 };
        assert_close(&un(clip, &[-2.0, 5.0]), &[2], &[1.0, 1.0], 0.0);
        let sig = [0.2689414213699951, 0.5, 0.7310585786300049];
        assert_close(&un(U::Sigmoid, &[-1.0, 0.0, 1.0]), &[3], &sig, t);
        let hs = U::HardSigmoid {
            alpha: 0.5,
            beta: 0.6,
        };
        assert_close(&un(hs, &[-1.0, 0.0, 1.0]), &[3], &[0.1, 0.6, 1.0], t);
        // x * clip(x/6 + 1/2, 0, 1)
        let want = [0.0, -1.0 / 3.0, 0.0, 2.0 / 3.0, 4.0];
        assert_close(
            &un(U::HardSwish, &[-4.0, -1.0, 0.0, 1.0, 4.0]),
            &[5],
            &want,
            t,
        );
        assert_close(
            &un(U::Tanh, &[0.0, 1.0]),
            &[2],
            &[0.0, 0.7615941559557649],
            t,
        );
        assert_close(
            &un(U::Erf, &[-0.5, 1.0]),
            &[2],
            &[-0.5204998778130465, 0.8427007929497149],
            t,
        );
        // Exact Gelu: x * Phi(x); Phi(1) = 0.8413447460685429.
        let gelu = U::Gelu { tanh_approx: false };
        assert_close(
            &un(gelu, &[1.0, -0.5]),
            &[2],
            &[0.8413447460685429, -0.15426876936299344],
            t,
        );
        let gelu = U::Gelu { tanh_approx: true };
        assert_close(&un(gelu, &[1.0]), &[1], &[0.8411919906082768], t);
        assert_close(
            &un(U::Exp, &[0.0, 1.0]),
            &[2],
            &[1.0, std::f64::consts::E],
            1e-6,
        );
        assert_close(
            &un(U::Log, &[1.0, 0.0]),
            &[2],
            &[0.0, f64::NEG_INFINITY],
            0.0,
        );
        assert_close(
            &un(U::Sqrt, &[4.0, 2.0]),
            &[2],
            &[2.0, std::f64::consts::SQRT_2],
            t,
        );
        assert_close(&un(U::Reciprocal, &[4.0, -0.5]), &[2], &[0.25, -2.0], 0.0);
        assert_close(&un(U::Neg, &[4.0, -0.5]), &[2], &[-4.0, 0.5], 0.0);
        assert_close(&un(U::Abs, &[4.0, -0.5]), &[2], &[4.0, 0.5], 0.0);
        // NaN passes through Relu and Clip.
        assert!(un(U::Relu, &[f32::NAN]).to_f32()[0].is_nan());
    }

    #[test]
    fn unary_keeps_the_float_dtype() {
        let x = Tensor::new(vec![2], TensorData::from_f64(DType::F16, vec![0.0, 1.0]));
        let y = eval1(Op::Unary(U::Sigmoid), &[&x]);
        assert_eq!(y.dtype(), DType::F16);
        // f16 has 11 significant bits: 0.7310586 rounds to 0.73095703125.
        assert_close(&y, &[2], &[0.5, 0.73095703125], 0.0);
    }

    #[test]
    fn integer_unary_is_exact() {
        let x = i64s(&[4], &[i64::MIN, -3, 0, 5]);
        assert_i64(
            &eval1(Op::Unary(U::Neg), &[&x]),
            &[4],
            &[i64::MIN, 3, 0, -5],
        );
        assert_i64(&eval1(Op::Unary(U::Abs), &[&x]), &[4], &[i64::MIN, 3, 0, 5]);
        assert_i64(&eval1(Op::Unary(U::Relu), &[&x]), &[4], &[0, 0, 0, 5]);
        let clip = Op::Unary(U::Clip {
            min: -1.5,
            max: 2.5,
        });
        assert_i64(&eval1(clip, &[&x]), &[4], &[-1, -1, 0, 2]);
        let unbounded = Op::Unary(U::Clip {
            min: f32::NEG_INFINITY,
            max: f32::INFINITY,
        });
        assert_i64(&eval1(unbounded, &[&x]), &[4], &[i64::MIN, -3, 0, 5]);
        // Float-only functions are refused, not computed.
        assert!(try_eval(Op::Unary(U::Exp), &[&x]).is_err());
        let b = Tensor::new(vec![1], TensorData::Bool(vec![true]));
        assert!(try_eval(Op::Unary(U::Neg), &[&b]).is_err());
    }

    #[test]
    fn binary_broadcasts_like_numpy() {
        let a = iota(&[2, 3]);
        let b = f32s(&[3], &[10.0, 20.0, 30.0]);
        let y = eval1(Op::Binary(B::Add), &[&a, &b]);
        assert_close(&y, &[2, 3], &[10.0, 21.0, 32.0, 13.0, 24.0, 35.0], 0.0);
        // [2,1] - [1,3] → [2,3]
        let c = f32s(&[2, 1], &[1.0, 2.0]);
        let d = f32s(&[1, 3], &[0.0, 1.0, 2.0]);
        let y = eval1(Op::Binary(B::Sub), &[&c, &d]);
        assert_close(&y, &[2, 3], &[1.0, 0.0, -1.0, 2.0, 1.0, 0.0], 0.0);
        let y = eval1(Op::Binary(B::Mul), &[&a, &f32s(&[], &[2.0])]);
        assert_close(&y, &[2, 3], &[0.0, 2.0, 4.0, 6.0, 8.0, 10.0], 0.0);
        let y = eval1(
            Op::Binary(B::Div),
            &[&f32s(&[2], &[1.0, -3.0]), &f32s(&[2], &[4.0, 0.0])],
        );
        assert_close(&y, &[2], &[0.25, f64::NEG_INFINITY], 0.0);
        let (p, q) = (
            f32s(&[3], &[1.0, f32::NAN, -2.0]),
            f32s(&[3], &[2.0, 0.0, -3.0]),
        );
        assert_close(
            &eval1(Op::Binary(B::Max), &[&p, &q]),
            &[3],
            &[2.0, f64::NAN, -2.0],
            0.0,
        );
        assert_close(
            &eval1(Op::Binary(B::Min), &[&p, &q]),
            &[3],
            &[1.0, f64::NAN, -3.0],
            0.0,
        );
    }

    #[test]
    fn integer_binary_is_exact_and_truncates() {
        let x = i64s(&[4], &[7, -7, 7, -7]);
        let y = i64s(&[4], &[2, 2, -2, -2]);
        assert_i64(&eval1(Op::Binary(B::Div), &[&x, &y]), &[4], &[3, -3, -3, 3]);
        let zero = i64s(&[1], &[0]);
        let err = try_eval(Op::Binary(B::Div), &[&x, &zero]).unwrap_err();
        assert!(err.to_string().contains("division by zero"), "{err}");
        // 2^62 + 1 is not representable in f64; the sum must still be exact.
        let big = i64s(&[1], &[(1 << 62) + 1]);
        let one = i64s(&[1], &[1]);
        assert_i64(
            &eval1(Op::Binary(B::Add), &[&big, &one]),
            &[1],
            &[(1 << 62) + 2],
        );
        assert_i64(
            &eval1(Op::Binary(B::Max), &[&big, &one]),
            &[1],
            &[(1 << 62) + 1],
        );
        // i32 wraps like C: 2^30 * 4 = 2^32 ≡ 0, and 2^30 * 3 ≡ -2^30.
        let a = Tensor::new(vec![2], TensorData::I32(vec![1 << 30, 1 << 30]));
        let b = Tensor::new(vec![2], TensorData::I32(vec![4, 3]));
        let y = eval1(Op::Binary(B::Mul), &[&a, &b]);
        assert_eq!(*y.data, TensorData::I32(vec![0, -(1 << 30)]));
        // u8 subtraction wraps.
        let (p, q) = (
            Tensor::new(vec![1], TensorData::U8(vec![1])),
            Tensor::new(vec![1], TensorData::U8(vec![2])),
        );
        assert_eq!(
            *eval1(Op::Binary(B::Sub), &[&p, &q]).data,
            TensorData::U8(vec![255])
        );
    }

    /// u64 values above i64::MAX order and divide as unsigned numbers, and
    /// add, subtract and multiply modulo 2^64.
    #[test]
    fn u64_arithmetic_is_unsigned() {
        let u64s = |v: &[u64]| Tensor::new(vec![v.len()], TensorData::U64(v.to_vec()));
        let big = u64::MAX - 1;
        let (x, y) = (u64s(&[big, 7, big]), u64s(&[3, big, 2]));
        let run = |b: B| eval1(Op::Binary(b), &[&x, &y]).data.as_ref().clone();
        let expect = |v: [u64; 3]| TensorData::U64(v.to_vec());
        assert_eq!(run(B::Add), expect([1, 5, 0]));
        assert_eq!(run(B::Sub), expect([big - 3, 9, big - 2]));
        assert_eq!(
            run(B::Mul),
            expect([
                big.wrapping_mul(3),
                big.wrapping_mul(7),
                big.wrapping_mul(2)
            ])
        );
        assert_eq!(run(B::Div), expect([big / 3, 0, big / 2]));
        assert_eq!(run(B::Max), expect([big, big, big]));
        assert_eq!(run(B::Min), expect([3, 7, 2]));
        assert_eq!(run(B::Greater), TensorData::Bool(vec![true, false, true]));
        // Relu and Clip keep large values: nothing is negative.
        let relu = eval1(Op::Unary(U::Relu), &[&x]);
        assert_eq!(*relu.data, *x.data);
        // Casts wrap like C; an index that large is out of range, never negative.
        assert_eq!(*x.cast(DType::I64).data, TensorData::I64(vec![-2, 7, -2]));
        assert_eq!(x.data.to_i64(), vec![i64::MAX, 7, i64::MAX]);
    }

    #[test]
    fn pow_mixes_base_and_exponent_types() {
        let y = eval1(
            Op::Binary(B::Pow),
            &[&f32s(&[2], &[2.0, 3.0]), &i64s(&[2], &[3, -1])],
        );
        assert_eq!(y.dtype(), DType::F32);
        assert_close(&y, &[2], &[8.0, 1.0 / 3.0], 1e-7);
        let y = eval1(
            Op::Binary(B::Pow),
            &[&i64s(&[4], &[3, 2, -2, 5]), &i64s(&[4], &[4, 62, 3, -1])],
        );
        assert_i64(&y, &[4], &[81, 1 << 62, -8, 0]);
        // Integer base, float exponent: truncated real result.
        let y = eval1(
            Op::Binary(B::Pow),
            &[&i64s(&[2], &[2, 9]), &f32s(&[2], &[0.5, 0.5])],
        );
        assert_i64(&y, &[2], &[1, 3]);
        assert!(try_eval(Op::Binary(B::Pow), &[&i64s(&[1], &[0]), &i64s(&[1], &[-1])]).is_err());
    }

    #[test]
    fn comparisons_give_bools() {
        let a = f32s(&[2, 2], &[1.0, 2.0, 3.0, f32::NAN]);
        let b = f32s(&[2], &[2.0, 2.0]);
        let eq = eval1(Op::Binary(B::Equal), &[&a, &b]);
        assert_eq!(*eq.data, TensorData::Bool(vec![false, true, false, false]));
        let lt = eval1(Op::Binary(B::Less), &[&a, &b]);
        assert_eq!(*lt.data, TensorData::Bool(vec![true, false, false, false]));
        let gt = eval1(Op::Binary(B::Greater), &[&a, &b]);
        assert_eq!(*gt.data, TensorData::Bool(vec![false, false, true, false]));
        // Exact on i64 values f64 cannot tell apart.
        let (p, q) = (i64s(&[1], &[(1 << 60) + 1]), i64s(&[1], &[1 << 60]));
        let gt = eval1(Op::Binary(B::Greater), &[&p, &q]);
        assert_eq!(*gt.data, TensorData::Bool(vec![true]));
    }

    #[test]
    fn where_selects_and_broadcasts() {
        // ONNX Where example.
        let c = Tensor::new(vec![2, 2], TensorData::Bool(vec![true, false, true, true]));
        let x = i64s(&[2, 2], &[1, 2, 3, 4]);
        let y = i64s(&[2, 2], &[9, 8, 7, 6]);
        assert_i64(&eval1(Op::Where, &[&c, &x, &y]), &[2, 2], &[1, 8, 3, 4]);
        // cond [2,1], x scalar, y [3] → [2,3]
        let c = Tensor::new(vec![2, 1], TensorData::Bool(vec![false, true]));
        let x = f32s(&[], &[-1.0]);
        let y = f32s(&[3], &[1.0, 2.0, 3.0]);
        let w = eval1(Op::Where, &[&c, &x, &y]);
        assert_close(&w, &[2, 3], &[1.0, 2.0, 3.0, -1.0, -1.0, -1.0], 0.0);
    }
}
