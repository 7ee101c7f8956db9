//! The vector types of plain Rust: `Portable`, 8 lanes the compiler may
//! vectorize, and `Scalar`, one lane.

use super::{held_as_results, Isa, Lanes, LookUpTable, Vector};
use crate::core::vecmath::LaneOps;

#[derive(Clone, Copy)]
pub(in crate::runtime) struct Portable([f32; 8]);

/// One f32 as a vector, for data whose blocks no wider vector divides.
#[derive(Clone, Copy)]
pub(in crate::runtime) struct Scalar(pub(in crate::runtime) f32);

impl Scalar {
    /// The larger operand, a NaN skipped: NaN only when both are (IEEE
    /// maximumNumber, `f32::max`).
    #[inline(always)]
    pub(in crate::runtime) fn max_number(self, b: Self) -> Self {
        Scalar(self.0.max(b.0))
    }
}

impl Vector for Scalar {
    const LANES: usize = 1;
    const KIND: Lanes = Lanes::One;
    held_as_results!();
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Scalar(*p)
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Scalar(x)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        // Not `mul_add`: without FMA in the baseline it is a library call.
        Scalar(a.0 * b.0 + c.0)
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        Scalar(a.0 + b.0)
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        *p = self.0
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        Scalar(a.0 - b.0)
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        Scalar(a.0 * b.0)
    }
    #[inline(always)]
    unsafe fn div(a: Self, b: Self) -> Self {
        Scalar(a.0 / b.0)
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        Scalar(if a.0 > b.0 { a.0 } else { b.0 })
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        Scalar(if a.0 < b.0 { a.0 } else { b.0 })
    }
    #[inline(always)]
    unsafe fn even(a: Self, _: Self) -> Self {
        a
    }
    #[inline(always)]
    unsafe fn select_negative(a: Self, neg: Self, pos: Self) -> Self {
        Scalar(if a.0 < 0.0 { neg.0 } else { pos.0 })
    }
    #[inline(always)]
    unsafe fn nan_of(a: Self, b: Self) -> Self {
        Scalar(if b.0.is_nan() { b.0 } else { a.0 })
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        Scalar(a.0.round_ties_even())
    }
    #[inline(always)]
    unsafe fn floor(a: Self) -> Self {
        Scalar(a.0.floor())
    }
    #[inline(always)]
    unsafe fn sqrt(a: Self) -> Self {
        Scalar(a.0.sqrt())
    }
    #[inline(always)]
    unsafe fn scale2(a: Self, n: Self) -> Self {
        // One lane computes as the scalar definition of the vector math does.
        Scalar(<f32 as LaneOps>::mul_pow2(&mut (), a.0, n.0))
    }
    #[inline(always)]
    unsafe fn any_at_most(a: Self, x: f32) -> bool {
        a.0 <= x
    }
    #[inline(always)]
    unsafe fn spread<const G: usize>(a: Self, _: usize) -> Self {
        debug_assert_eq!(G, 1, "one lane holds a group of one");
        a
    }
}

/// The binary ops of `Portable`, each lane computed as `Scalar` computes it.
macro_rules! lane_by_lane {
    ($($op:ident),*) => {$(
        #[inline(always)]
        unsafe fn $op(a: Self, b: Self) -> Self {
            Portable(std::array::from_fn(|i| Scalar::$op(Scalar(a.0[i]), Scalar(b.0[i])).0))
        }
    )*};
}

/// Every lane computes as `Scalar` does, so the one-lane and the portable
/// kernels agree bit for bit.
impl Vector for Portable {
    const LANES: usize = 8;
    const KIND: Lanes = Lanes::Isa(Isa::Portable);
    held_as_results!();
    lane_by_lane!(add, sub, mul, div, max, min, nan_of, scale2);
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Portable(std::ptr::read_unaligned(p as *const [f32; 8]))
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Portable([x; 8])
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        std::ptr::write_unaligned(p as *mut [f32; 8], self.0)
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        Portable(std::array::from_fn(|i| {
            Scalar::fma(Scalar(a.0[i]), Scalar(b.0[i]), Scalar(c.0[i])).0
        }))
    }
    #[inline(always)]
    unsafe fn even(a: Self, b: Self) -> Self {
        Portable(std::array::from_fn(|i| match i < 4 {
            true => a.0[2 * i],
            false => b.0[2 * i - 8],
        }))
    }
    #[inline(always)]
    unsafe fn select_negative(a: Self, neg: Self, pos: Self) -> Self {
        Portable(std::array::from_fn(|i| {
            Scalar::select_negative(Scalar(a.0[i]), Scalar(neg.0[i]), Scalar(pos.0[i])).0
        }))
    }
    #[inline(always)]
    unsafe fn round(a: Self) -> Self {
        Portable(a.0.map(|x| Scalar::round(Scalar(x)).0))
    }
    #[inline(always)]
    unsafe fn floor(a: Self) -> Self {
        Portable(a.0.map(f32::floor))
    }
    #[inline(always)]
    unsafe fn sqrt(a: Self) -> Self {
        Portable(a.0.map(f32::sqrt))
    }
    #[inline(always)]
    unsafe fn any_at_most(a: Self, x: f32) -> bool {
        a.0.iter().any(|&v| v <= x)
    }
    #[inline(always)]
    unsafe fn spread<const G: usize>(a: Self, j: usize) -> Self {
        Portable(std::array::from_fn(|l| a.0[(l - l % G + j) % 8]))
    }
}
