//! Activations in the epilogues of the convolution kernels, on whole vectors.
//!
//! A vector of lanes implements the crate's `Scalar` trait, so an activation is
//! evaluated from its op's one scalar definition (`UnaryOp::apply`), the same
//! that the reference executor and the TIR compute use. Its exp, tanh and erf
//! are `core::vecmath`'s, whose lane operations it implements (`LaneOps`), the
//! same that the scalar f32 path and the JIT run. Logarithms, square roots and
//! powers go lane by lane, so ops that need them stay out of epilogues
//! (`vectorizes`).

use super::simd::{Vector, MAX_LANES};
use crate::core::scalar::{BinaryOp, MathFn, Scalar, UnaryOp};
use crate::core::vecmath::{self, LaneOps};
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
        // `Epilogue::of` splits it (two more inlined `UnaryOp::apply` in
        // every kernel's epilogue tripled the build time).
        Activation::Clamped { .. } => {
            unreachable!("an epilogue splits a clamp from the op after it")
        }
        // Its slopes are per channel: `Epilogue` applies it with `prelu`.
        Activation::PRelu => unreachable!("a PRelu needs its channels' slopes"),
    }
}

/// `v` through a PRelu of per-lane slopes `slope`, by `BinaryOp::PRelu`'s one
/// definition.
///
/// # Safety
/// `V`'s instruction set must be available (the caller holds a `V`).
#[inline(always)]
pub(super) unsafe fn prelu<V: Vector>(v: V, slope: V) -> V {
    match BinaryOp::PRelu.apply(Lanewise(v), Lanewise(slope)) {
        Some(y) => y.0,
        None => unreachable!("PRelu is arithmetic"),
    }
}

/// Whether a convolution's epilogue evaluates `act` with vector arithmetic
/// only (`activate`, or `prelu` for a PRelu).
pub fn vectorizes(act: Activation) -> bool {
    match act {
        Activation::Swish | Activation::PRelu => true,
        Activation::Clamped { clamp, then } => {
            vectorizes(Activation::Unary(clamp)) && vectorizes(Activation::Unary(then))
        }
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
                | UnaryOp::Round
                | UnaryOp::QuantizeDequantize { .. }
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
        let mut lanes = [0f32; 2 * MAX_LANES];
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

macro_rules! lane_op {
    ($method:ident($($arg:ident),*) => $vector:ident) => {
        #[inline(always)]
        fn $method(_: &mut (), $($arg: Self),*) -> Self {
            unsafe { Lanewise(V::$vector($($arg.0),*)) }
        }
    };
}

/// The vector math of `core::vecmath` on whole vectors.
impl<V: Vector> LaneOps for Lanewise<V> {
    type Ctx = ();
    #[inline(always)]
    fn splat(_: &mut (), c: f32) -> Self {
        Lanewise::splat(c)
    }
    lane_op!(add(a, b) => add);
    lane_op!(sub(a, b) => sub);
    lane_op!(mul(a, b) => mul);
    lane_op!(div(a, b) => div);
    lane_op!(mul_add(a, b, c) => fma);
    lane_op!(max(a, b) => max);
    lane_op!(min(a, b) => min);
    lane_op!(round(a) => round);
    lane_op!(mul_pow2(a, n) => scale2);
    lane_op!(mul_pow2_normal(a, n) => scale2_normal);
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
        vecmath::exp(&mut (), self)
    }
    fn ln(self) -> Self {
        self.per_lane(f32::ln)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        unsafe { Lanewise(V::sqrt(self.0)) }
    }
    #[inline(always)]
    fn tanh(self) -> Self {
        vecmath::tanh(&mut (), self)
    }
    #[inline(always)]
    fn erf(self) -> Self {
        vecmath::erf(&mut (), self)
    }
    #[inline(always)]
    fn sigmoid(self) -> Self {
        vecmath::sigmoid(&mut (), self)
    }
    #[inline(always)]
    fn round_even(self) -> Self {
        unsafe { Lanewise(V::round(self.0)) }
    }
    // Floor and ceil are rare (index arithmetic of exporters): lane by lane.
    fn floor(self) -> Self {
        self.per_lane(f32::floor)
    }
    fn ceil(self) -> Self {
        self.per_lane(f32::ceil)
    }
    fn math(self, f: MathFn) -> Self {
        self.per_lane(|x| f.f32(x))
    }
    fn pow(self, e: Self) -> Self {
        let mut lanes = [0f32; 2 * MAX_LANES];
        unsafe { e.0.store(lanes.as_mut_ptr()) };
        let mut i = 0;
        self.per_lane(|x| {
            i += 1;
            x.powf(lanes[i - 1])
        })
    }
}

/// `core::vecmath` on every path that runs it: the scalar definition, each
/// instruction set's vectors and the JIT, bit for bit where they fuse their
/// multiply-adds.
#[cfg(test)]
mod tests {
    use super::super::simd::{
        load_part, run_vectorized, store_part, Isa, Lanes, Vector, VectorKernel,
    };
    use super::activate;
    use crate::codegen::JitFunction;
    use crate::core::scalar::UnaryOp;
    use crate::core::vecmath::tests::{samples, ulps, FUNCTIONS};
    use crate::core::{DType, ValueType};
    use crate::fusion::Activation;
    use crate::lowering::lower_op;
    use crate::ops::Op;
    use std::cell::RefCell;

    /// `op` on every value of `x`, a vector at a time (an epilogue's `activate`).
    struct Apply<'a> {
        op: UnaryOp,
        x: &'a [f32],
        y: RefCell<Vec<f32>>,
    }

    impl VectorKernel for Apply<'_> {
        #[inline(always)]
        unsafe fn run<V: Vector>(&self) {
            let mut y = self.y.borrow_mut();
            y.resize(self.x.len(), 0.0);
            for (at, chunk) in (0..).step_by(V::LANES).zip(self.x.chunks(V::LANES)) {
                let v = load_part::<V>(chunk.as_ptr(), chunk.len(), 0.0);
                let r = activate(Activation::Unary(self.op), v);
                store_part(r, y.as_mut_ptr().add(at), chunk.len());
            }
        }
    }

    fn on_vectors(lanes: Lanes, op: UnaryOp, x: &[f32]) -> Vec<f32> {
        let k = Apply {
            op,
            x,
            y: RefCell::new(Vec::new()),
        };
        // SAFETY: the lanes are those of an available instruction set.
        unsafe { run_vectorized(lanes, &k) };
        k.y.into_inner()
    }

    /// `op` on `x` by code compiled for `n` elements, called on each `n` of
    /// them; whether that code has a vector loop.
    fn compiled(op: UnaryOp, x: &[f32], n: usize) -> (Vec<f32>, bool) {
        let types = [ValueType::new(DType::F32, vec![n])];
        let lowered = lower_op(&Op::Unary(op), &types, None).unwrap();
        let jit = JitFunction::compile(
            &lowered.func,
            &crate::runtime::kernels::contract::kernel_table(),
        )
        .unwrap();
        let input = lowered.inputs[0].expect("the op reads its operand");
        let mut y = Vec::with_capacity(x.len() + n);
        for chunk in x.chunks(n) {
            let mut buffers: Vec<Vec<f32>> = jit
                .param_sizes()
                .iter()
                .map(|&s| vec![f32::NAN; s])
                .collect();
            buffers[input][..chunk.len()].copy_from_slice(chunk);
            let mut views: Vec<&mut [f32]> = buffers.iter_mut().map(|b| &mut b[..]).collect();
            jit.call(&mut views).unwrap();
            y.extend_from_slice(&buffers[lowered.output][..chunk.len()]);
        }
        (y, jit.stats().vector_loops > 0)
    }

    fn assert_same(what: &str, x: &[f32], want: &[f32], got: &[f32], ulp_bound: f64) {
        assert_eq!(want.len(), got.len(), "{what}");
        for ((&v, &w), &g) in x.iter().zip(want).zip(got) {
            let same = w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan());
            assert!(
                same || ulps(g, w as f64) <= ulp_bound,
                "{what}({v:e}): {g:e}, the scalar definition {w:e}"
            );
        }
    }

    #[test]
    fn every_path_computes_what_the_scalar_definition_does() {
        let x = samples();
        for (op, _, unfused) in FUNCTIONS {
            let want: Vec<f32> = x.iter().map(|&v| op.apply(v)).collect();
            for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                let got = on_vectors(Lanes::Isa(isa), op, &x);
                let bound = if isa == Isa::Portable { unfused } else { 0.0 };
                assert_same(&format!("{op:?} {isa}"), &x, &want, &got, bound);
            }
            let got = on_vectors(Lanes::One, op, &x);
            assert_same(&format!("{op:?} one lane"), &x, &want, &got, unfused);
            // Three elements are too few for a vector loop.
            let (got, vector) = compiled(op, &x, 3);
            assert!(!vector);
            assert_same(&format!("{op:?} JIT scalar"), &x, &want, &got, 0.0);
            let (got, _) = compiled(op, &x, 4096);
            assert_same(&format!("{op:?} JIT"), &x, &want, &got, 0.0);
        }
    }

    /// A rounding onto a grid on vectors gives the scalar definition's
    /// integer bit for bit: at every half step and the floats beside it,
    /// on steps that are no power of two, and on NaN, infinities, zeros,
    /// subnormals and values far off the grid.
    #[test]
    fn grid_rounding_by_the_reciprocal_matches_the_quotient() {
        for (scale, zero_point) in [
            (0.0235f32, 3.0),
            (1.0 / 3.0, -128.0),
            (7.3e-5, 0.0),
            (3.1, 17.0),
        ] {
            let op = UnaryOp::QuantizeDequantize {
                scale,
                zero_point,
                min: -128.0,
                max: 255.0,
            };
            let mut x = vec![
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                0.0,
                -0.0,
                1e-40,
                -3e38,
            ];
            for k in -400..400 {
                let half = (k as f32 + 0.5) * scale;
                x.extend([half, half.next_up(), half.next_down(), k as f32 * scale]);
                x.push(half.next_up().next_up());
            }
            let want: Vec<f32> = x.iter().map(|&v| op.apply(v)).collect();
            for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                let got = on_vectors(Lanes::Isa(isa), op, &x);
                assert_same(&format!("{op:?} {isa}"), &x, &want, &got, 0.0);
            }
        }
    }
}
