//! The f32 transcendental functions, each written once over [`LaneOps`]: one
//! sequence of operations, one set of coefficients and clamps, whichever machine
//! runs it. `f32` implements the trait (the scalar definition), the runtime's
//! SIMD vectors implement it (AVX-512, AVX2, portable), and codegen implements
//! it for Cranelift values, so the JIT emits the very same operations.
//!
//! NaN passes every step (the clamps keep it: [`LaneOps::max`] and
//! [`LaneOps::min`] return their second operand for it), ±inf go through the
//! clamps to the saturated results (exp: +inf and 0, erf and tanh: ±1), and −0
//! stays −0 where the function is odd.
//!
//! Logarithms, square roots and powers are not here: every path calls the same
//! correctly rounded or libm function for them, lane by lane where it must.

/// The operations of one value of lanes (one `f32`, a SIMD vector, a Cranelift
/// value) that the functions here are written in. `Ctx` is what building a
/// value needs (nothing for plain numbers, the function builder for emitted
/// code). Every method of an implementation must be `#[inline(always)]`, so a
/// function here compiles into the caller's instruction set.
pub trait LaneOps: Copy {
    /// What making a value needs.
    type Ctx;
    /// `c` in every lane.
    fn splat(cx: &mut Self::Ctx, c: f32) -> Self;
    /// a + b.
    fn add(cx: &mut Self::Ctx, a: Self, b: Self) -> Self;
    /// a − b.
    fn sub(cx: &mut Self::Ctx, a: Self, b: Self) -> Self;
    /// a · b.
    fn mul(cx: &mut Self::Ctx, a: Self, b: Self) -> Self;
    /// a / b.
    fn div(cx: &mut Self::Ctx, a: Self, b: Self) -> Self;
    /// a · b + c, rounded once (the portable vectors round twice: with their
    /// `round`, what makes them differ from the other paths).
    fn mul_add(cx: &mut Self::Ctx, a: Self, b: Self, c: Self) -> Self;
    /// `a > b ? a : b`: `b` when either is NaN (x86's `maxps`).
    fn max(cx: &mut Self::Ctx, a: Self, b: Self) -> Self;
    /// `a < b ? a : b`: `b` when either is NaN (x86's `minps`).
    fn min(cx: &mut Self::Ctx, a: Self, b: Self) -> Self;
    /// The nearest integer, ties to even (the portable vectors: away from 0).
    fn round(cx: &mut Self::Ctx, a: Self) -> Self;
    /// a · 2^n for integral n in [−150, 128] and a in [0.5, 2], rounded once
    /// (so subnormal and infinite results come out where the exact product
    /// has them).
    fn mul_pow2(cx: &mut Self::Ctx, a: Self, n: Self) -> Self;
    /// `mul_pow2` (the same result) for n in [−125, 128] only, where it can
    /// be (2a) · 2^(n−1) with 2^(n−1) one normal power of two built in the
    /// exponent bits: fewer operations where `mul_pow2` builds two factors.
    fn mul_pow2_normal(cx: &mut Self::Ctx, a: Self, n: Self) -> Self {
        Self::mul_pow2(cx, a, n)
    }
}

/// `c[0]·t^k + c[1]·t^(k−1) + … + c[k]` by Horner's rule.
#[inline(always)]
fn horner<L: LaneOps>(cx: &mut L::Ctx, t: L, c: &[f32]) -> L {
    let mut p = L::splat(cx, c[0]);
    for &k in &c[1..] {
        let k = L::splat(cx, k);
        p = L::mul_add(cx, p, t, k);
    }
    p
}

/// `x` clamped to `[lo, hi]`, NaN kept (it is the second operand of both).
#[inline(always)]
fn clamp<L: LaneOps>(cx: &mut L::Ctx, x: L, lo: f32, hi: f32) -> L {
    let (lo, hi) = (L::splat(cx, lo), L::splat(cx, hi));
    let x = L::max(cx, lo, x);
    L::min(cx, hi, x)
}

/// x·P(x²)/Q(x²) with x clamped to ±`saturates` and the result to [−1, 1]:
/// the form of the odd functions here that round to ±1 past the clamp (erf,
/// tanh), one divide and no exponential.
#[inline(always)]
fn odd_rational<L: LaneOps>(cx: &mut L::Ctx, x: L, saturates: f32, p: &[f32], q: &[f32]) -> L {
    let x = clamp(cx, x, -saturates, saturates);
    let t = L::mul(cx, x, x);
    let p = horner(cx, t, p);
    let q = horner(cx, t, q);
    let xp = L::mul(cx, x, p);
    let y = L::div(cx, xp, q);
    clamp(cx, y, -1.0, 1.0)
}

/// Below this e^x rounds to 0 in f32 (e^−104 < 2^−150).
pub const EXP_LO: f32 = -104.0;
/// Above this e^x overflows to +inf (e^88.73 > f32::MAX).
pub const EXP_HI: f32 = 89.0;

/// e^x. x = n·ln 2 + r with n = round(x / ln 2) and |r| ≤ ln(2)/2 (ln 2 in two
/// parts, the first exact in few bits, so n·ln2_hi and x − n·ln2_hi are exact);
/// e^r by the minimax polynomial of the Cephes library's expf; then times 2^n.
/// x is clamped first to [`EXP_LO`], [`EXP_HI`], which keeps n in [−150, 128]:
/// e^−inf = 0, e^+inf = +inf, subnormal results rounded once.
#[inline(always)]
pub fn exp<L: LaneOps>(cx: &mut L::Ctx, x: L) -> L {
    let x = clamp(cx, x, EXP_LO, EXP_HI);
    exp_clamped::<L, false>(cx, x)
}

/// e^x for x already clamped to [`EXP_LO`], [`EXP_HI`] (`NORMAL`: to
/// [[`SIGMOID_EXP_LO`], `EXP_HI`], where n ≥ −125 and `mul_pow2_normal`
/// serves).
#[inline(always)]
fn exp_clamped<L: LaneOps, const NORMAL: bool>(cx: &mut L::Ctx, x: L) -> L {
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ];
    let log2e = L::splat(cx, std::f32::consts::LOG2_E);
    let t = L::mul(cx, x, log2e);
    let n = L::round(cx, t);
    let ln2_hi = L::splat(cx, -0.693_359_4);
    let r = L::mul_add(cx, n, ln2_hi, x);
    let ln2_lo = L::splat(cx, 2.121_944_4e-4);
    let r = L::mul_add(cx, n, ln2_lo, r);
    let p = horner(cx, r, &P);
    let pr = L::mul(cx, p, r);
    let one = L::splat(cx, 1.0);
    let r1 = L::add(cx, r, one);
    let y = L::mul_add(cx, pr, r, r1);
    match NORMAL {
        true => L::mul_pow2_normal(cx, y, n),
        false => L::mul_pow2(cx, y, n),
    }
}

/// Below this, e^x no longer changes 1 + e^x: sigmoid's e^−x is clamped
/// here (n = −125), not at [`EXP_LO`].
pub const SIGMOID_EXP_LO: f32 = -86.5;

/// The logistic function 1 / (1 + e^−x), with e^−x as `exp` computes it where
/// that changes the result: −x is clamped to [[`SIGMOID_EXP_LO`], [`EXP_HI`]],
/// where `mul_pow2_normal` serves, so the result is the same as with `exp`'s
/// e^−x (sigmoid(x) for x ≥ 86.5 is 1 either way) in fewer operations on
/// AVX2, whose `mul_pow2` builds two factors: every epilogue with a sigmoid
/// or swish.
#[inline(always)]
pub fn sigmoid<L: LaneOps>(cx: &mut L::Ctx, x: L) -> L {
    let zero = L::splat(cx, 0.0);
    let minus_x = L::sub(cx, zero, x);
    let minus_x = clamp(cx, minus_x, SIGMOID_EXP_LO, EXP_HI);
    let e = exp_clamped::<L, true>(cx, minus_x);
    let one = L::splat(cx, 1.0);
    let d = L::add(cx, one, e);
    L::div(cx, one, d)
}

/// Past this |x|, erf(x) rounds to ±1 in f32.
const ERF_SATURATES: f32 = 3.92;

/// erf(x) as x·P(x²)/Q(x²), a rational least-squares fit (degree 5 over 5 in
/// x², |error| ≤ 4e-7) on |x| ≤ 3.92, past which erf rounds to ±1: one
/// divide and no exponential. The fit overshoots 1 by an ulp at the clamp, so
/// the result is clamped too.
#[inline(always)]
pub fn erf<L: LaneOps>(cx: &mut L::Ctx, x: L) -> L {
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
    odd_rational(cx, x, ERF_SATURATES, &P, &Q)
}

/// Past this |x|, tanh(x) rounds to ±1 in f32 (1 − tanh(9.02) < 2^−25).
const TANH_SATURATES: f32 = 9.1;

/// tanh(x) as x·P(x²)/Q(x²), a rational fit (degree 4 over 4 in x², relative
/// error 2.4e-8, P(0) = Q(0) = 1) on |x| ≤ 9.1, past which tanh rounds to ±1:
/// one divide and no exponential, about half the operations of
/// 1 − 2/(1 + e^2x). The fit was made here by iteratively reweighted least
/// squares on the relative error. With P(0) = Q(0) = 1, ±0 and subnormals come
/// out as they went in. The result is clamped to [−1, 1] like erf's.
#[inline(always)]
pub fn tanh<L: LaneOps>(cx: &mut L::Ctx, x: L) -> L {
    const P: [f32; 5] = [
        1.324_352_4e-8,
        2.053_464_2e-5,
        3.491_327e-3,
        0.133_775_31,
        1.0,
    ];
    const Q: [f32; 5] = [
        7.732_756_4e-7,
        3.278_478_4e-4,
        2.586_105_7e-2,
        0.467_108_5,
        1.0,
    ];
    odd_rational(cx, x, TANH_SATURATES, &P, &Q)
}

/// The scalar definition: one lane.
impl LaneOps for f32 {
    type Ctx = ();
    #[inline(always)]
    fn splat(_: &mut (), c: f32) -> f32 {
        c
    }
    #[inline(always)]
    fn add(_: &mut (), a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline(always)]
    fn sub(_: &mut (), a: f32, b: f32) -> f32 {
        a - b
    }
    #[inline(always)]
    fn mul(_: &mut (), a: f32, b: f32) -> f32 {
        a * b
    }
    #[inline(always)]
    fn div(_: &mut (), a: f32, b: f32) -> f32 {
        a / b
    }
    #[inline(always)]
    fn mul_add(_: &mut (), a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    #[inline(always)]
    fn max(_: &mut (), a: f32, b: f32) -> f32 {
        if a > b {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn min(_: &mut (), a: f32, b: f32) -> f32 {
        if a < b {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn round(_: &mut (), a: f32) -> f32 {
        a.round_ties_even()
    }
    #[inline(always)]
    fn mul_pow2(_: &mut (), a: f32, n: f32) -> f32 {
        // 2^n as two factors built from their exponent bits, each a normal
        // number where 2^n may not be; the first product is exact.
        let n = n as i32;
        let half = n >> 1;
        a * power_of_two(half, 127) * power_of_two(n - half, 127)
    }
    #[inline(always)]
    fn mul_pow2_normal(_: &mut (), a: f32, n: f32) -> f32 {
        (a * 2.0) * power_of_two(n as i32, 126)
    }
}

/// 2^(k + bias − 127): the biased exponent shifted into place (a normal power
/// of two for k + bias in [1, 254]).
#[inline(always)]
fn power_of_two(k: i32, bias: i32) -> f32 {
    f32::from_bits(((k + bias) << 23) as u32)
}

/// What the tests of every path share: the functions with their error bounds,
/// the sample inputs, and the error measure.
#[cfg(test)]
pub(crate) mod tests {
    use super::{ERF_SATURATES, EXP_HI, EXP_LO, SIGMOID_EXP_LO, TANH_SATURATES};
    use crate::core::scalar::UnaryOp;

    /// The ops whose f32 definition is this module's (Sigmoid by its e^−x),
    /// each with the most units in the last place its f32 result may be from
    /// the f64 reference (`UnaryOp::apply` on f64: the library's exp and
    /// tanh, the series `scalar::erf`), and from the fused paths' result on
    /// the portable vectors, which round their multiply-adds twice (and round
    /// ties of exp's n away from zero). ARCHITECTURE.md lists them.
    pub(crate) const FUNCTIONS: [(UnaryOp, f64, f64); 4] = [
        (UnaryOp::Exp, 1.5, 1.0),
        (UnaryOp::Erf, 5.0, 6.0),
        (UnaryOp::Tanh, 6.0, 9.0),
        (UnaryOp::Sigmoid, 3.0, 3.0),
    ];

    /// Every 2^12-th bit pattern (NaNs and both infinities among them), a
    /// grid of step 2^−10 over [−128, 128], the edges of every clamp and
    /// branch and of the results' range, with their neighbours, and the
    /// special values.
    pub(crate) fn samples() -> Vec<f32> {
        let patterns = (0..1u32 << 20).map(|k| f32::from_bits((k << 12) | (k & 0xfff)));
        let grid = (-(1 << 17)..=1 << 17).map(|k| k as f32 / 1024.0);
        let edges = [
            EXP_LO,
            EXP_HI,
            SIGMOID_EXP_LO,
            // n = 128 from here (e^88.38 is finite, 2^128 is not).
            -88.376_26,
            ERF_SATURATES,
            TANH_SATURATES,
            9.02,
            // e^x overflows, leaves the normal range, rounds to 0.
            88.722_84,
            -87.336_55,
            -103.972_08,
            f32::MIN_POSITIVE,
            f32::MAX,
        ];
        let near = edges.into_iter().flat_map(|e| {
            let mut around = vec![e];
            let (mut up, mut down) = (e, e);
            for _ in 0..4 {
                (up, down) = (up.next_up(), down.next_down());
                around.extend([up, down]);
            }
            around.into_iter().flat_map(|v| [v, -v])
        });
        let specials = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(1),
            -f32::from_bits(1),
            1e-40,
            -1e-40,
        ];
        patterns.chain(grid).chain(near).chain(specials).collect()
    }

    /// How many units in the last place of the f32 nearest `want` `got` is
    /// from it; 0 for NaN and NaN, and for the same infinity.
    pub(crate) fn ulps(got: f32, want: f64) -> f64 {
        let nearest = want as f32;
        if got.is_nan() || want.is_nan() || got.is_infinite() || nearest.is_infinite() {
            let same = (got.is_nan() && want.is_nan()) || got == nearest;
            return if same { 0.0 } else { f64::INFINITY };
        }
        let exponent = ((nearest.to_bits() >> 23) & 0xff).max(1) as i32;
        let ulp = 2f64.powi(exponent - 127 - 23);
        (got as f64 - want).abs() / ulp
    }

    /// Whether `got` is within `bound` units of `want`; below the normal
    /// range, within 2^−126 (sigmoid flushes to 0 where e^−x overflows).
    pub(crate) fn within(got: f32, want: f64, bound: f64) -> bool {
        if want.abs() < f32::MIN_POSITIVE as f64 {
            (got as f64 - want).abs() <= f32::MIN_POSITIVE as f64
        } else {
            ulps(got, want) <= bound
        }
    }

    #[test]
    fn the_scalar_definitions_are_within_their_bounds_of_f64() {
        let x = samples();
        for (op, bound, _) in FUNCTIONS {
            let mut worst = (0.0, 0.0);
            for &v in &x {
                let (got, want) = (op.apply(v), op.apply(v as f64));
                assert!(
                    within(got, want, bound),
                    "{op:?}({v:e}) = {got:e}, f64 gives {want:e}: {} ulps",
                    ulps(got, want)
                );
                if want.abs() >= f32::MIN_POSITIVE as f64 && ulps(got, want) > worst.0 {
                    worst = (ulps(got, want), v);
                }
            }
            eprintln!("{op:?}: at most {:.3} ulps (at {:e})", worst.0, worst.1);
        }
    }

    #[test]
    fn special_values_keep_their_rules() {
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        let cases = [
            (
                UnaryOp::Exp,
                [(inf, inf), (-inf, 0.0), (0.0, 1.0), (-0.0, 1.0)],
            ),
            (
                UnaryOp::Erf,
                [(inf, 1.0), (-inf, -1.0), (0.0, 0.0), (-0.0, -0.0)],
            ),
            (
                UnaryOp::Tanh,
                [(inf, 1.0), (-inf, -1.0), (0.0, 0.0), (-0.0, -0.0)],
            ),
            (
                UnaryOp::Sigmoid,
                [(inf, 1.0), (-inf, 0.0), (0.0, 0.5), (-0.0, 0.5)],
            ),
        ];
        for (op, pairs) in cases {
            assert!(op.apply(nan).is_nan(), "{op:?}(NaN)");
            for (x, want) in pairs {
                let got = op.apply(x);
                assert_eq!(got.to_bits(), want.to_bits(), "{op:?}({x}) = {got}");
            }
        }
        // Odd functions keep a subnormal as it is (tanh) or scale it (erf).
        let tiny = f32::from_bits(3);
        assert_eq!(UnaryOp::Tanh.apply(-tiny), -tiny);
        assert!(UnaryOp::Erf.apply(-tiny) < 0.0);
    }
}
