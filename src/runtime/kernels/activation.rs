//! Activations in the epilogues of the convolution kernels, on whole vectors.
//!
//! A vector of lanes implements the crate's `Scalar` trait, so an activation is
//! evaluated from its op's one scalar definition (`UnaryOp::apply`), the same
//! that the reference executor and the TIR compute use; only the elementary
//! functions are written here: e^x with Cephes expf's polynomial, tanh from
//! e^2x, erf as a rational function of x² (|error| ≤ 4e-7). Logarithms,
//! square roots and powers go lane by lane, so ops that need them stay out of
//! epilogues (`vectorizes`).

use super::simd::Vector;
use crate::core::scalar::{Scalar, UnaryOp};
use crate::fusion::Activation;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// One vector of lanes as a `Scalar`. A value of it exists only inside the
/// kernels that run with the vector type's instruction set (a `V` is made only
/// by `Vector`'s unsafe constructors there), which makes its safe operators sound.
#[derive(Clone, Copy)]
pub(super) struct Lanewise<V>(pub V);

/// `act` applied to every lane of `v`.
///
/// # Safety
/// `V`'s instruction set must be available (the caller holds a `V`).
#[inline(always)]
pub(super) unsafe fn activate<V: Vector>(act: Activation, v: V) -> V {
    let x = Lanewise(v);
    match act {
        Activation::Unary(u) => u.apply(x).0,
        Activation::Swish => (x * UnaryOp::Sigmoid.apply(x)).0,
    }
}

/// Whether `activate` evaluates `act` with vector arithmetic only.
pub fn vectorizes(act: Activation) -> bool {
    match act {
        Activation::Swish => true,
        Activation::Unary(u) => matches!(
            u,
            UnaryOp::Relu
                | UnaryOp::LeakyRelu { .. }
                | UnaryOp::Clip { .. }
                | UnaryOp::Sigmoid
                | UnaryOp::HardSigmoid { .. }
                | UnaryOp::HardSwish
                | UnaryOp::Tanh
                | UnaryOp::Erf
                | UnaryOp::Gelu { .. }
                | UnaryOp::Exp
                | UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Elu { .. }
                | UnaryOp::Selu { .. }
                | UnaryOp::Celu { .. }
        ),
    }
}

impl<V: Vector> Lanewise<V> {
    #[inline(always)]
    fn splat(x: f32) -> Self {
        unsafe { Lanewise(V::splat(x)) }
    }

    /// `f` on each lane (for the functions without a vector form here).
    #[inline(always)]
    fn per_lane(self, mut f: impl FnMut(f32) -> f32) -> Self {
        let mut lanes = [0f32; 16];
        unsafe {
            self.0.store(lanes.as_mut_ptr());
            for x in &mut lanes[..V::LANES] {
                *x = f(*x);
            }
            Lanewise(V::load(lanes.as_ptr()))
        }
    }
}

macro_rules! lanewise_op {
    ($trait:ident, $method:ident, $vector:ident) => {
        impl<V: Vector> $trait for Lanewise<V> {
            type Output = Self;
            #[inline(always)]
            fn $method(self, other: Self) -> Self {
                unsafe { Lanewise(V::$vector(self.0, other.0)) }
            }
        }
    };
}
lanewise_op!(Add, add, add);
lanewise_op!(Sub, sub, sub);
lanewise_op!(Mul, mul, mul);
lanewise_op!(Div, div, div);

impl<V: Vector> Neg for Lanewise<V> {
    type Output = Self;
    #[inline(always)]
    fn neg(self) -> Self {
        Lanewise::splat(0.0) - self
    }
}

impl<V: Vector> Scalar for Lanewise<V> {
    #[inline(always)]
    fn lit(v: f64) -> Self {
        Lanewise::splat(v as f32)
    }
    #[inline(always)]
    fn max(self, other: Self) -> Self {
        // The instruction gives `other` when either is NaN; a NaN `self` is put back.
        unsafe { Lanewise(V::nan_of(V::max(self.0, other.0), self.0)) }
    }
    #[inline(always)]
    fn min(self, other: Self) -> Self {
        unsafe { Lanewise(V::nan_of(V::min(self.0, other.0), self.0)) }
    }
    #[inline(always)]
    fn if_negative(self, neg: Self, pos: Self) -> Self {
        unsafe { Lanewise(V::select_negative(self.0, neg.0, pos.0)) }
    }
    #[inline(always)]
    fn exp(self) -> Self {
        // e^x = 2^n · e^r with n = round(x / ln 2) and |r| ≤ ln(2)/2 (ln 2 in two
        // parts, so r is exact). x is clamped first: below -88 e^x is 0 or a
        // denormal, above 88.8 it overflows to inf either way. NaN passes the
        // clamps (the instructions return their second operand for it).
        unsafe {
            let x = V::min(V::splat(88.8), V::max(V::splat(-88.0), self.0));
            let n = V::round(V::mul(x, V::splat(std::f32::consts::LOG2_E)));
            let r = V::fma(n, V::splat(-0.693_359_4), x);
            let r = V::fma(n, V::splat(2.121_944_4e-4), r);
            let mut p = V::splat(1.987_569_1e-4);
            for c in [
                1.398_199_9e-3,
                8.333_452e-3,
                4.166_579_6e-2,
                0.166_666_65,
                0.5,
            ] {
                p = V::fma(p, r, V::splat(c));
            }
            let y = V::fma(V::mul(p, r), r, V::add(r, V::splat(1.0)));
            // n is in [-127, 128] after the clamps.
            Lanewise(V::scale2(y, n))
        }
    }
    fn ln(self) -> Self {
        self.per_lane(f32::ln)
    }
    fn sqrt(self) -> Self {
        self.per_lane(f32::sqrt)
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        // 1 - 2 / (1 + e^2x): ±1 at ±inf, NaN for NaN.
        let one = Lanewise::splat(1.0);
        one - Lanewise::splat(2.0) / (one + (self + self).exp())
    }
    #[inline(always)]
    fn erf(self) -> Self {
        // x·P(x²)/Q(x²), a rational least-squares fit (degree 5 over 5 in x²,
        // |error| ≤ 4e-7) on |x| ≤ 3.92, past which erf rounds to ±1 in f32:
        // one divide and no exponential. The fit overshoots 1 by an ulp at the
        // clamp, so the result is clamped too. NaN passes both clamps.
        const P: [f32; 6] = [
            2.118_073_3e-6,
            2.845_206_5e-4,
            3.618_840_1e-3,
            5.230_501e-2,
            0.186_594_4,
            std::f32::consts::FRAC_2_SQRT_PI,
        ];
        const Q: [f32; 6] = [
            3.877_655_4e-5,
            1.132_428_9e-3,
            1.467_267_9e-2,
            0.112_588_43,
            0.498_698_03,
            1.0,
        ];
        unsafe {
            let x = V::min(V::splat(3.92), V::max(V::splat(-3.92), self.0));
            let t = V::mul(x, x);
            let horner = |c: [f32; 6]| {
                c[1..]
                    .iter()
                    .fold(V::splat(c[0]), |p, &k| V::fma(p, t, V::splat(k)))
            };
            let y = V::div(V::mul(x, horner(P)), horner(Q));
            Lanewise(V::min(V::splat(1.0), V::max(V::splat(-1.0), y)))
        }
    }
    fn pow(self, e: Self) -> Self {
        let mut lanes = [0f32; 16];
        unsafe { e.0.store(lanes.as_mut_ptr()) };
        let mut i = 0;
        self.per_lane(|x| {
            i += 1;
            x.powf(lanes[i - 1])
        })
    }
}
