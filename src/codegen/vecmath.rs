//! `core::vecmath` emitted as Cranelift IR: the lane operations of `LaneOps` on
//! the values of the function being built, one f32 or four lanes of F32X4, so
//! generated code computes exp, tanh, erf and sigmoid with the very operations of the
//! scalar definition and the SIMD kernels.

use std::marker::PhantomData;

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Type, Value};
use cranelift_frontend::FunctionBuilder;

use crate::core::vecmath::LaneOps;

/// Where the operations go, and the float type (F32 or F32X4) they are on.
pub(crate) struct Emitter<'b, 'f> {
    b: &'b mut FunctionBuilder<'f>,
    ty: Type,
}

/// One value of the emitter's float type.
#[derive(Clone, Copy)]
pub(crate) struct Lane<'b, 'f>(Value, PhantomData<&'b mut FunctionBuilder<'f>>);

/// `f` applied to `x`, an F32 or F32X4 value, emitted into `b`.
pub(crate) fn emit<'b, 'f>(
    b: &'b mut FunctionBuilder<'f>,
    x: Value,
    f: fn(&mut Emitter<'b, 'f>, Lane<'b, 'f>) -> Lane<'b, 'f>,
) -> Value {
    let ty = b.func.dfg.value_type(x);
    f(&mut Emitter { b, ty }, Lane(x, PhantomData)).0
}

impl Emitter<'_, '_> {
    /// `then` where `cond` (the result of an `fcmp` on the float type), else `other`.
    fn select(&mut self, cond: Value, then: Value, other: Value) -> Value {
        if self.ty.is_vector() {
            // An `fcmp` of vectors gives a lane mask; `bitselect` wants it as floats.
            let mask = self.b.ins().bitcast(self.ty, MemFlagsData::new(), cond);
            self.b.ins().bitselect(mask, then, other)
        } else {
            self.b.ins().select(cond, then, other)
        }
    }

    /// `k` in every lane of the integer type as wide as the float type.
    fn int_splat(&mut self, k: i64) -> Value {
        let k = self.b.ins().iconst(types::I32, k);
        if self.ty.is_vector() {
            let int = self.ty.as_int();
            self.b.ins().splat(int, k)
        } else {
            k
        }
    }

    /// 2^(k + bias − 127) for the integers `k`: the biased exponent shifted
    /// into place (a normal power of two for k + bias in [1, 254]).
    fn power_of_two(&mut self, k: Value, bias: i64) -> Value {
        let bias = self.int_splat(bias);
        let e = self.b.ins().iadd(k, bias);
        let bits = self.b.ins().ishl_imm_u(e, 23);
        self.b.ins().bitcast(self.ty, MemFlagsData::new(), bits)
    }
}

macro_rules! binary {
    ($method:ident => $ins:ident) => {
        #[inline(always)]
        fn $method(cx: &mut Self::Ctx, a: Self, b: Self) -> Self {
            Lane(cx.b.ins().$ins(a.0, b.0), PhantomData)
        }
    };
}

impl<'b, 'f> LaneOps for Lane<'b, 'f> {
    type Ctx = Emitter<'b, 'f>;
    #[inline(always)]
    fn splat(cx: &mut Emitter<'b, 'f>, c: f32) -> Self {
        let c = cx.b.ins().f32const(c);
        let v = match cx.ty.is_vector() {
            true => cx.b.ins().splat(cx.ty, c),
            false => c,
        };
        Lane(v, PhantomData)
    }
    binary!(add => fadd);
    binary!(sub => fsub);
    binary!(mul => fmul);
    binary!(div => fdiv);
    #[inline(always)]
    fn mul_add(cx: &mut Emitter<'b, 'f>, a: Self, b: Self, c: Self) -> Self {
        // Fused: an instruction with FMA, else the library's `fmaf`.
        Lane(cx.b.ins().fma(a.0, b.0, c.0), PhantomData)
    }
    #[inline(always)]
    fn max(cx: &mut Emitter<'b, 'f>, a: Self, b: Self) -> Self {
        // `b < a ? a : b`, which x64 lowers to one `maxss`/`maxps`.
        let c = cx.b.ins().fcmp(FloatCC::LessThan, b.0, a.0);
        Lane(cx.select(c, a.0, b.0), PhantomData)
    }
    #[inline(always)]
    fn min(cx: &mut Emitter<'b, 'f>, a: Self, b: Self) -> Self {
        // `a < b ? a : b`, one `minss`/`minps`.
        let c = cx.b.ins().fcmp(FloatCC::LessThan, a.0, b.0);
        Lane(cx.select(c, a.0, b.0), PhantomData)
    }
    #[inline(always)]
    fn round(cx: &mut Emitter<'b, 'f>, a: Self) -> Self {
        Lane(cx.b.ins().nearest(a.0), PhantomData)
    }
    #[inline(always)]
    fn mul_pow2(cx: &mut Emitter<'b, 'f>, a: Self, n: Self) -> Self {
        // 2^n = 2^(n >> 1) · 2^(n − (n >> 1)), each half a normal power of two
        // built in the exponent bits; the first product is exact.
        let int = cx.ty.as_int();
        let n = cx.b.ins().fcvt_to_sint_sat(int, n.0);
        let n1 = cx.b.ins().sshr_imm_u(n, 1);
        let n2 = cx.b.ins().isub(n, n1);
        let mut y = a.0;
        for half in [n1, n2] {
            let power = cx.power_of_two(half, 127);
            y = cx.b.ins().fmul(y, power);
        }
        Lane(y, PhantomData)
    }
    #[inline(always)]
    fn mul_pow2_normal(cx: &mut Emitter<'b, 'f>, a: Self, n: Self) -> Self {
        // (2a) · 2^(n − 1), one normal power of two in the exponent bits.
        let int = cx.ty.as_int();
        let n = cx.b.ins().fcvt_to_sint_sat(int, n.0);
        let power = cx.power_of_two(n, 126);
        let twice = cx.b.ins().fadd(a.0, a.0);
        Lane(cx.b.ins().fmul(twice, power), PhantomData)
    }
}
