//! `Pair`: two vectors as one of twice the lanes, each operation issued on
//! both halves side by side.
//!
//! A long function of one vector (tanh, a sigmoid: 40-odd dependent
//! instructions and a divide) is bound by its latency: the out-of-order core
//! holds too few of the next vectors' instructions to fill the wait, and a
//! Tanh ran at 30 cycles per AVX2 vector where a divide takes 4. Written over
//! a `Pair`, the same function has two independent chains interleaved in
//! program order.

use super::{Lanes, LookUpTable, Vector, MAX_LANES};

#[derive(Clone, Copy)]
pub(in crate::runtime) struct Pair<V> {
    pub lo: V,
    pub hi: V,
}

impl<V: Vector> Pair<V> {
    #[inline(always)]
    fn both(lo: V, hi: V) -> Self {
        Pair { lo, hi }
    }

    /// The lanes through a buffer: for the operations rare enough not to
    /// need their own halves' form.
    #[inline(always)]
    unsafe fn lanes(self) -> [f32; 2 * MAX_LANES] {
        let mut all = [0f32; 2 * MAX_LANES];
        self.store(all.as_mut_ptr());
        all
    }
}

/// An operation of one or more vectors, on each half.
macro_rules! halves {
    ($($op:ident($($arg:ident),*)),*) => {
        $(
            #[inline(always)]
            unsafe fn $op($($arg: Self),*) -> Self {
                Pair::both(V::$op($($arg.lo),*), V::$op($($arg.hi),*))
            }
        )*
    };
}

impl<V: Vector> Vector for Pair<V> {
    const LANES: usize = 2 * V::LANES;
    const KIND: Lanes = V::KIND;
    halves!(
        fma(a, b, c),
        fused_mul_add(a, b, c),
        add(a, b),
        sub(a, b),
        mul(a, b),
        div(a, b),
        max(a, b),
        min(a, b),
        select_negative(a, neg, pos),
        nan_of(a, b),
        round(a),
        floor(a),
        sqrt(a),
        scale2(a, n),
        scale2_normal(a, n)
    );
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        Pair::both(V::load(p), V::load(p.add(V::LANES)))
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Pair::both(V::splat(x), V::splat(x))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        self.lo.store(p);
        self.hi.store(p.add(V::LANES));
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, k: usize, fill: f32) -> Self {
        match k < V::LANES {
            true => Pair::both(V::load_first(p, k, fill), V::splat(fill)),
            false => Pair::both(
                V::load(p),
                super::load_part(p.add(V::LANES), k - V::LANES, fill),
            ),
        }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, k: usize) {
        match k < V::LANES {
            true => self.lo.store_first(p, k),
            false => {
                self.lo.store(p);
                super::store_part(self.hi, p.add(V::LANES), k - V::LANES);
            }
        }
    }
    #[inline(always)]
    unsafe fn store_bytes(self, p: *mut u8) {
        self.lo.store_bytes(p);
        self.hi.store_bytes(p.add(V::LANES));
    }
    #[inline(always)]
    unsafe fn load_bytes(p: *const u8) -> Self {
        Pair::both(V::load_bytes(p), V::load_bytes(p.add(V::LANES)))
    }
    /// The even elements of `a` then `b`: those of `a`'s halves, then `b`'s.
    #[inline(always)]
    unsafe fn even(a: Self, b: Self) -> Self {
        Pair::both(V::even(a.lo, a.hi), V::even(b.lo, b.hi))
    }
    type Held = V::Held;
    #[inline(always)]
    unsafe fn hold(table: &LookUpTable) -> V::Held {
        V::hold(table)
    }
    #[inline(always)]
    unsafe fn look_up_held(held: V::Held, index: Self) -> Self {
        Pair::both(
            V::look_up_held(held, index.lo),
            V::look_up_held(held, index.hi),
        )
    }
    #[inline(always)]
    unsafe fn lookup(table: *const f32, index: Self) -> Self {
        Pair::both(V::lookup(table, index.lo), V::lookup(table, index.hi))
    }
    #[inline(always)]
    unsafe fn any_at_most(a: Self, x: f32) -> bool {
        V::any_at_most(a.lo, x) || V::any_at_most(a.hi, x)
    }
    #[inline(always)]
    unsafe fn spread<const G: usize>(a: Self, j: usize) -> Self {
        if G <= V::LANES {
            return Pair::both(V::spread::<G>(a.lo, j), V::spread::<G>(a.hi, j));
        }
        // One group over both halves: lane j of the whole.
        Self::splat(a.lanes()[j])
    }
}

#[cfg(test)]
mod tests {
    use super::super::{load_part, run_vectorized, store_part, Isa, VectorKernel};
    use super::*;

    /// A pair holds and computes what its lanes, one at a time, do.
    #[test]
    fn a_pair_is_one_vector_of_twice_the_lanes() {
        struct Check;
        impl VectorKernel for Check {
            unsafe fn run<V: Vector>(&self) {
                type P<V> = Pair<V>;
                let n = P::<V>::LANES;
                let a: Vec<f32> = (0..n).map(|i| i as f32 - 3.5).collect();
                let b: Vec<f32> = (0..n).map(|i| (i * 7 % 5) as f32 + 0.25).collect();
                let (va, vb) = (P::<V>::load(a.as_ptr()), P::<V>::load(b.as_ptr()));
                let lanes = |v: P<V>| v.lanes()[..n].to_vec();
                let each = |f: fn(f32, f32) -> f32| -> Vec<f32> {
                    a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect()
                };
                assert_eq!(lanes(P::add(va, vb)), each(|x, y| x + y));
                assert_eq!(lanes(P::div(va, vb)), each(|x, y| x / y));
                assert_eq!(lanes(P::max(va, vb)), each(|x, y| x.max(y)));
                let neg = P::select_negative(va, vb, va);
                assert_eq!(lanes(neg), each(|x, y| if x < 0.0 { y } else { x }));
                let even: Vec<f32> = a.iter().chain(&b).step_by(2).copied().collect();
                assert_eq!(lanes(P::even(va, vb)), even);
                assert!(P::any_at_most(va, -3.5) && !P::any_at_most(va, -4.0));
                for j in [0, 1] {
                    let pairs: Vec<f32> = (0..n).map(|i| a[i - i % 2 + j]).collect();
                    assert_eq!(lanes(P::spread::<2>(va, j)), pairs);
                }
                assert_eq!(lanes(P::spread::<1>(va, 0)), a);
                for k in 1..n {
                    let v: P<V> = load_part(a.as_ptr(), k, 9.0);
                    let want: Vec<f32> = (0..n).map(|i| if i < k { a[i] } else { 9.0 }).collect();
                    assert_eq!(lanes(v), want, "load of {k}");
                    let mut out = vec![-1f32; n];
                    store_part(va, out.as_mut_ptr(), k);
                    let want: Vec<f32> = (0..n).map(|i| if i < k { a[i] } else { -1.0 }).collect();
                    assert_eq!(out, want, "store of {k}");
                }
            }
        }
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            // SAFETY: the instruction set is available.
            unsafe { run_vectorized(Lanes::Isa(isa), &Check) };
        }
        unsafe { run_vectorized(Lanes::One, &Check) };
    }
}
