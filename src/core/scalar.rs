//! The scalar meaning of every elementwise function, written once.
//!
//! Each function is defined over the [`Scalar`] arithmetic, so the same
//! definition runs on `f64` (the reference executor), on `f32` (what padding holds
//! after a kernel ran; its exp, tanh and erf are those of `vecmath`, as in the
//! compiled code and the SIMD kernels) and on TIR expressions (what the compiled
//! code computes; `tir` implements `Scalar` for its `Expr`). NaN semantics follow ONNX (and
//! numpy): a NaN operand gives a NaN result, in max and min too, so Relu and Clip
//! pass NaN through.

use super::vecmath;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// Whose integer arithmetic a quantized model's ops follow where the peers'
/// differ: the engine the model's format is run on. A quantized add, for
/// one, rounds by onnxruntime's f32 ratios of scales in an ONNX model and
/// by XNNPACK's fixed-point multipliers in a TFLite one; a value a step
/// away from the peer's is passed on to every later layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuantizedArithmetic {
    /// onnxruntime's (MLAS) kernels.
    #[default]
    Onnxruntime,
    /// The TFLite interpreter's default delegate, XNNPACK.
    Tflite,
}

/// Unary elementwise functions (with their parameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// max(x, 0).
    Relu,
    /// x < 0 ? alpha·x : x.
    LeakyRelu {
        /// Slope below zero.
        alpha: f32,
    },
    /// min(max(x, min), max); an absent bound is ±inf.
    Clip {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// max(0, min(1, alpha·x + beta)).
    HardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
    /// x · HardSigmoid(x) with alpha 1/6, beta 1/2.
    HardSwish,
    /// Hyperbolic tangent.
    Tanh,
    /// The error function.
    Erf,
    /// Gelu; `tanh_approx` selects the tanh approximation.
    Gelu {
        /// Use 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
        tanh_approx: bool,
    },
    /// e^x.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// 1 / x.
    Reciprocal,
    /// −x.
    Neg,
    /// |x|.
    Abs,
    /// x < 0 ? alpha·(e^x − 1) : x.
    Elu {
        /// The scale of the negative part.
        alpha: f32,
    },
    /// gamma · (x < 0 ? alpha·(e^x − 1) : x).
    Selu {
        /// The scale of the negative part.
        alpha: f32,
        /// The scale of the whole.
        gamma: f32,
    },
    /// max(0, x) + min(0, alpha·(e^(x/alpha) − 1)).
    Celu {
        /// The scale of the negative part (and of x within it).
        alpha: f32,
    },
    /// x > alpha ? x : 0.
    ThresholdedRelu {
        /// The threshold.
        alpha: f32,
    },
    /// ln(1 + e^x), computed as max(x, 0) + ln(1 + e^−|x|) so large x stay finite.
    Softplus,
    /// x / (1 + |x|).
    Softsign,
    /// x · tanh(softplus(x)).
    Mish,
    /// The nearest integer, halves to even (ONNX Round; what quantization rounds with).
    Round,
    /// The largest integer not above x.
    Floor,
    /// The smallest integer not below x.
    Ceil,
    /// −1, 0 or 1 by the sign of x (NaN stays NaN).
    Sign,
    /// A trigonometric or hyperbolic function or its inverse.
    Math(MathFn),
    /// x rounded onto a quantization grid and back (a QuantizeLinear and a
    /// DequantizeLinear): `(clip(round(x / scale) + zero_point, min, max) -
    /// zero_point) * scale`, halves to even.
    QuantizeDequantize {
        /// The grid's step.
        scale: f32,
        /// The integer that stands for 0.
        zero_point: f32,
        /// The least integer of the quantized type.
        min: f32,
        /// The greatest integer of the quantized type.
        max: f32,
    },
}

/// The trigonometric and hyperbolic functions and their inverses. No kernel
/// has a vector form of them: every path computes them with the math
/// library, in f64 in the reference and in f32 elsewhere (lane by lane in
/// vectors, by a call from generated code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum MathFn {
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
}

/// `$f` of `$x` for a float `$x` (f32 or f64): one definition for both.
macro_rules! math_fn {
    ($f:expr, $x:expr) => {
        match $f {
            MathFn::Sin => $x.sin(),
            MathFn::Cos => $x.cos(),
            MathFn::Tan => $x.tan(),
            MathFn::Asin => $x.asin(),
            MathFn::Acos => $x.acos(),
            MathFn::Atan => $x.atan(),
            MathFn::Sinh => $x.sinh(),
            MathFn::Cosh => $x.cosh(),
            MathFn::Asinh => $x.asinh(),
            MathFn::Acosh => $x.acosh(),
            MathFn::Atanh => $x.atanh(),
        }
    };
}

impl MathFn {
    /// Every function.
    pub const ALL: [MathFn; 11] = [
        MathFn::Sin,
        MathFn::Cos,
        MathFn::Tan,
        MathFn::Asin,
        MathFn::Acos,
        MathFn::Atan,
        MathFn::Sinh,
        MathFn::Cosh,
        MathFn::Asinh,
        MathFn::Acosh,
        MathFn::Atanh,
    ];

    /// The ONNX operator type.
    pub fn name(self) -> &'static str {
        match self {
            MathFn::Sin => "Sin",
            MathFn::Cos => "Cos",
            MathFn::Tan => "Tan",
            MathFn::Asin => "Asin",
            MathFn::Acos => "Acos",
            MathFn::Atan => "Atan",
            MathFn::Sinh => "Sinh",
            MathFn::Cosh => "Cosh",
            MathFn::Asinh => "Asinh",
            MathFn::Acosh => "Acosh",
            MathFn::Atanh => "Atanh",
        }
    }

    /// The function in f64.
    pub fn f64(self, x: f64) -> f64 {
        math_fn!(self, x)
    }

    /// The function in f32.
    pub fn f32(self, x: f32) -> f32 {
        math_fn!(self, x)
    }
}

/// Binary elementwise functions with numpy broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
    /// x < 0 ? slope·x : x, with the slope (second operand) broadcast.
    PRelu,
}

/// The arithmetic elementwise functions are written in.
pub trait Scalar:
    Clone
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// A constant.
    fn lit(v: f64) -> Self;
    /// The larger operand; NaN if either is NaN.
    fn max(self, other: Self) -> Self;
    /// The smaller operand; NaN if either is NaN.
    fn min(self, other: Self) -> Self;
    /// `neg` where `self < 0`, else `pos` (so a NaN `self` selects `pos`).
    fn if_negative(self, neg: Self, pos: Self) -> Self;
    /// e^self.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// The error function.
    fn erf(self) -> Self;
    /// The logistic function 1 / (1 + e^−self).
    fn sigmoid(self) -> Self;
    /// self^e.
    fn pow(self, e: Self) -> Self;
    /// |self| (NaN stays NaN).
    #[inline(always)] // like `UnaryOp::apply`
    fn abs(self) -> Self {
        self.clone().max(-self)
    }
    /// The nearest integer, halves to even.
    fn round_even(self) -> Self;
    /// The largest integer not above self.
    fn floor(self) -> Self;
    /// The smallest integer not below self.
    fn ceil(self) -> Self;
    /// A trigonometric or hyperbolic function of self.
    fn math(self, f: MathFn) -> Self;
}

/// `Scalar` for a float type; `$exp`, `$tanh`, `$erf` and `$sigmoid` are its
/// elementary functions: for f64 (the reference) the library's, the series
/// below and 1/(1 + e^−x), for f32 those of `vecmath`, which the compiled code
/// and the SIMD kernels run too.
macro_rules! float_scalar {
    ($t:ty, $exp:expr, $tanh:expr, $erf:expr, $sigmoid:expr) => {
        impl Scalar for $t {
            fn lit(v: f64) -> $t {
                v as $t
            }
            fn max(self, other: $t) -> $t {
                if self.is_nan() || other.is_nan() {
                    <$t>::NAN
                } else {
                    <$t>::max(self, other)
                }
            }
            fn min(self, other: $t) -> $t {
                if self.is_nan() || other.is_nan() {
                    <$t>::NAN
                } else {
                    <$t>::min(self, other)
                }
            }
            fn if_negative(self, neg: $t, pos: $t) -> $t {
                if self < 0.0 {
                    neg
                } else {
                    pos
                }
            }
            fn exp(self) -> $t {
                $exp(self)
            }
            fn ln(self) -> $t {
                <$t>::ln(self)
            }
            fn sqrt(self) -> $t {
                <$t>::sqrt(self)
            }
            fn tanh(self) -> $t {
                $tanh(self)
            }
            fn erf(self) -> $t {
                $erf(self)
            }
            fn sigmoid(self) -> $t {
                $sigmoid(self)
            }
            fn pow(self, e: $t) -> $t {
                self.powf(e)
            }
            fn abs(self) -> $t {
                <$t>::abs(self)
            }
            fn round_even(self) -> $t {
                self.round_ties_even()
            }
            fn floor(self) -> $t {
                <$t>::floor(self)
            }
            fn ceil(self) -> $t {
                <$t>::ceil(self)
            }
            fn math(self, f: MathFn) -> $t {
                math_fn!(f, self)
            }
        }
    };
}

float_scalar!(
    f32,
    |x| vecmath::exp(&mut (), x),
    |x| vecmath::tanh(&mut (), x),
    |x| vecmath::erf(&mut (), x),
    |x| vecmath::sigmoid(&mut (), x)
);
float_scalar!(f64, f64::exp, f64::tanh, erf, sigmoid);

impl UnaryOp {
    /// Every variant, with typical parameters: what tests run through each
    /// path that evaluates elementwise functions.
    pub const EVERY: [UnaryOp; 39] = [
        UnaryOp::Relu,
        UnaryOp::LeakyRelu { alpha: 0.1 },
        UnaryOp::Clip {
            min: -1.0,
            max: 6.0,
        },
        UnaryOp::Sigmoid,
        UnaryOp::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
        UnaryOp::HardSwish,
        UnaryOp::Tanh,
        UnaryOp::Erf,
        UnaryOp::Gelu { tanh_approx: false },
        UnaryOp::Gelu { tanh_approx: true },
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Reciprocal,
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Elu { alpha: 0.7 },
        UnaryOp::Selu {
            alpha: 1.67,
            gamma: 1.05,
        },
        UnaryOp::Celu { alpha: 0.5 },
        UnaryOp::ThresholdedRelu { alpha: 0.25 },
        UnaryOp::Softplus,
        UnaryOp::Softsign,
        UnaryOp::Mish,
        UnaryOp::Round,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Sign,
        UnaryOp::Math(MathFn::Sin),
        UnaryOp::Math(MathFn::Cos),
        UnaryOp::Math(MathFn::Tan),
        UnaryOp::Math(MathFn::Asin),
        UnaryOp::Math(MathFn::Acos),
        UnaryOp::Math(MathFn::Atan),
        UnaryOp::Math(MathFn::Sinh),
        UnaryOp::Math(MathFn::Cosh),
        UnaryOp::Math(MathFn::Asinh),
        UnaryOp::Math(MathFn::Acosh),
        UnaryOp::Math(MathFn::Atanh),
        UnaryOp::QuantizeDequantize {
            scale: 0.05,
            zero_point: -3.0,
            min: -128.0,
            max: 127.0,
        },
    ];

    /// The bounds `(lo, hi)` when the op clamps its input (relu, clip): kernels
    /// apply these as one clamp, fused or not.
    pub fn clamp_bounds(self) -> Option<(f32, f32)> {
        match self {
            UnaryOp::Relu => Some((0.0, f32::INFINITY)),
            UnaryOp::Clip { min, max } => Some((min, max)),
            _ => None,
        }
    }

    /// The ONNX operator type.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Relu => "Relu",
            UnaryOp::LeakyRelu { .. } => "LeakyRelu",
            UnaryOp::Clip { .. } => "Clip",
            UnaryOp::Sigmoid => "Sigmoid",
            UnaryOp::HardSigmoid { .. } => "HardSigmoid",
            UnaryOp::HardSwish => "HardSwish",
            UnaryOp::Tanh => "Tanh",
            UnaryOp::Erf => "Erf",
            UnaryOp::Gelu { .. } => "Gelu",
            UnaryOp::Exp => "Exp",
            UnaryOp::Log => "Log",
            UnaryOp::Sqrt => "Sqrt",
            UnaryOp::Reciprocal => "Reciprocal",
            UnaryOp::Neg => "Neg",
            UnaryOp::Abs => "Abs",
            UnaryOp::Elu { .. } => "Elu",
            UnaryOp::Selu { .. } => "Selu",
            UnaryOp::Celu { .. } => "Celu",
            UnaryOp::ThresholdedRelu { .. } => "ThresholdedRelu",
            UnaryOp::Softplus => "Softplus",
            UnaryOp::Softsign => "Softsign",
            UnaryOp::Mish => "Mish",
            UnaryOp::Round => "Round",
            UnaryOp::Floor => "Floor",
            UnaryOp::Ceil => "Ceil",
            UnaryOp::Sign => "Sign",
            UnaryOp::Math(f) => f.name(),
            UnaryOp::QuantizeDequantize { .. } => "QuantizeDequantize",
        }
    }

    /// The function applied to `x`.
    #[inline(always)] // into the vector epilogues, compiled for their instruction set
    pub fn apply<T: Scalar>(self, x: T) -> T {
        let c = T::lit;
        match self {
            UnaryOp::Relu => x.max(c(0.0)),
            UnaryOp::LeakyRelu { alpha } => x.clone().if_negative(x.clone() * c(alpha as f64), x),
            UnaryOp::Clip { min, max } => clip(x, min as f64, max as f64),
            UnaryOp::Sigmoid => x.sigmoid(),
            UnaryOp::HardSigmoid { alpha, beta } => {
                clip(x * c(alpha as f64) + c(beta as f64), 0.0, 1.0)
            }
            UnaryOp::HardSwish => x.clone() * clip(x * c(1.0 / 6.0) + c(0.5), 0.0, 1.0),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Erf => x.erf(),
            UnaryOp::Gelu { tanh_approx: false } => {
                x.clone() * c(0.5) * (c(1.0) + (x * c(std::f64::consts::FRAC_1_SQRT_2)).erf())
            }
            UnaryOp::Gelu { tanh_approx: true } => {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                let inner = (x.clone() + x.clone() * x.clone() * x.clone() * c(0.044715)) * c(k);
                x * c(0.5) * (c(1.0) + inner.tanh())
            }
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Reciprocal => c(1.0) / x,
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Elu { alpha } => elu(x, alpha as f64),
            UnaryOp::Selu { alpha, gamma } => elu(x, alpha as f64) * c(gamma as f64),
            UnaryOp::Celu { alpha } => {
                let a = alpha as f64;
                let neg = c(a) * ((x.clone() * c(1.0 / a)).exp() - c(1.0));
                x.max(c(0.0)) + neg.min(c(0.0))
            }
            UnaryOp::ThresholdedRelu { alpha } => {
                (c(alpha as f64) - x.clone()).if_negative(x, c(0.0))
            }
            UnaryOp::Softplus => softplus(x),
            UnaryOp::Softsign => x.clone() / (c(1.0) + x.abs()),
            UnaryOp::Mish => x.clone() * softplus(x).tanh(),
            UnaryOp::Round => x.round_even(),
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            // x · 0 keeps a NaN (and the sign of a zero).
            UnaryOp::Sign => {
                (-x.clone()).if_negative(c(1.0), x.clone().if_negative(c(-1.0), x * c(0.0)))
            }
            UnaryOp::Math(f) => x.math(f),
            UnaryOp::QuantizeDequantize {
                scale,
                zero_point,
                min,
                max,
            } => {
                let (scale, zero_point) = (scale as f64, zero_point as f64);
                let q = (x / c(scale)).round_even() + c(zero_point);
                (clip(q, min as f64, max as f64) - c(zero_point)) * c(scale)
            }
        }
    }

    /// Whether every implementation computes the same value bit for bit: the
    /// function uses only correctly rounded operations (no exp, log, tanh or erf,
    /// which compiled code approximates). Pad-value flow trusts a computed
    /// padding value only then, or at 0, where every function here is exact.
    pub fn is_exact(self) -> bool {
        !matches!(
            self,
            UnaryOp::Sigmoid
                | UnaryOp::Tanh
                | UnaryOp::Erf
                | UnaryOp::Gelu { .. }
                | UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Elu { .. }
                | UnaryOp::Selu { .. }
                | UnaryOp::Celu { .. }
                | UnaryOp::Softplus
                | UnaryOp::Mish
                | UnaryOp::Math(_)
        )
    }
}

// The pieces `UnaryOp::apply` shares between functions, inlined like it: one
// left out of line would be compiled without the vector epilogue's instruction
// set, and every vector operation in it would become a call.

/// `x` clamped to `[lo, hi]`.
#[inline(always)]
fn clip<T: Scalar>(x: T, lo: f64, hi: f64) -> T {
    x.max(T::lit(lo)).min(T::lit(hi))
}

/// alpha · (e^x − 1) for negative `x`, else `x`.
#[inline(always)]
fn elu<T: Scalar>(x: T, alpha: f64) -> T {
    x.clone()
        .if_negative(T::lit(alpha) * (x.clone().exp() - T::lit(1.0)), x)
}

/// ln(1 + e^x) in a form that does not overflow: max(x, 0) + ln(1 + e^-|x|).
#[inline(always)]
fn softplus<T: Scalar>(x: T) -> T {
    x.clone().max(T::lit(0.0)) + (T::lit(1.0) + (-x.abs()).exp()).ln()
}

impl BinaryOp {
    /// The ops with an f32 result (the others compare).
    pub const ARITHMETIC: [BinaryOp; 8] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::PRelu,
    ];

    /// The ONNX operator type.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Pow => "Pow",
            BinaryOp::Max => "Max",
            BinaryOp::Min => "Min",
            BinaryOp::Equal => "Equal",
            BinaryOp::Less => "Less",
            BinaryOp::Greater => "Greater",
            BinaryOp::LessOrEqual => "LessOrEqual",
            BinaryOp::GreaterOrEqual => "GreaterOrEqual",
            BinaryOp::PRelu => "PRelu",
        }
    }

    /// Comparisons produce booleans.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Equal
                | BinaryOp::Less
                | BinaryOp::Greater
                | BinaryOp::LessOrEqual
                | BinaryOp::GreaterOrEqual
        )
    }

    /// The arithmetic function applied to `x` and `y`; `None` for comparisons,
    /// whose result is a boolean (see [`BinaryOp::compare`]).
    #[inline(always)] // into the vector kernels, compiled for their instruction set
    pub fn apply<T: Scalar>(self, x: T, y: T) -> Option<T> {
        Some(match self {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
            BinaryOp::Pow => x.pow(y),
            BinaryOp::Max => x.max(y),
            BinaryOp::Min => x.min(y),
            BinaryOp::PRelu => x.clone().if_negative(x.clone() * y, x),
            BinaryOp::Equal
            | BinaryOp::Less
            | BinaryOp::Greater
            | BinaryOp::LessOrEqual
            | BinaryOp::GreaterOrEqual => return None,
        })
    }

    /// The comparison of `x` and `y` (IEEE: any comparison with NaN is false);
    /// `None` for arithmetic ops.
    pub fn compare<T: PartialOrd>(self, x: T, y: T) -> Option<bool> {
        Some(match self {
            BinaryOp::Equal => x == y,
            BinaryOp::Less => x < y,
            BinaryOp::Greater => x > y,
            BinaryOp::LessOrEqual => x <= y,
            BinaryOp::GreaterOrEqual => x >= y,
            _ => return None,
        })
    }
}

/// The error function in f64, the reference's (f32 computes `vecmath::erf`), from
/// its everywhere-convergent series with positive terms
/// erf(x) = 2/√π · e^(−x²) · Σₙ 2ⁿ x^(2n+1) / (1·3·…·(2n+1)),
/// which suffers no cancellation. Beyond |x| = 6, erf is ±1 in double precision.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a >= 6.0 {
        return x.signum();
    }
    let a2 = a * a;
    let (mut term, mut sum, mut n) = (a, a, 0.0);
    loop {
        n += 1.0;
        term *= 2.0 * a2 / (2.0 * n + 1.0);
        sum += term;
        if term <= sum * 1e-17 {
            break;
        }
    }
    (2.0 / std::f64::consts::PI.sqrt()) * (-a2).exp() * sum * x.signum()
}

/// The logistic function 1 / (1 + e^−x) in f64: the reference's.
pub fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}
