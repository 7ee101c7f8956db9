//! Quantization grids, and the integer arithmetic on them that the peers'
//! quantized kernels define: a result rounds onto its grid from the integers
//! of its operands exactly as onnxruntime computes it, so that a quantized
//! model's values match it step for step rather than within a step.

use super::matmul::BatchedMatMul;
use super::normalize::row_max;
use super::simd::{
    load_part, run_vectorized, store_part, Isa, Lanes, Vector, VectorKernel, ELEMENTS_PER_TASK,
    MAX_LANES,
};
use super::KernelError;
use crate::core::par;
use crate::core::scalar::{QuantizedArithmetic, UnaryOp};
use crate::ops::{DynamicQuantize, FittedGrid};

/// A quantization grid: every value is `(q - zero_point) * scale` for an
/// integer `q` in `min..=max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Grid {
    /// The grid's step.
    pub scale: f32,
    /// The integer that stands for 0.
    pub zero_point: f32,
    /// The least integer of the quantized type.
    pub min: f32,
    /// The greatest integer of the quantized type.
    pub max: f32,
}

impl Grid {
    /// The grid a QuantizeDequantize rounds onto; `None` for any other op.
    pub fn of(op: UnaryOp) -> Option<Grid> {
        match op {
            UnaryOp::QuantizeDequantize {
                scale,
                zero_point,
                min,
                max,
            } => Some(Grid {
                scale,
                zero_point,
                min,
                max,
            }),
            _ => None,
        }
    }

    /// Whether the grid's integers, shifted by `min`, are bytes: a positive
    /// finite step, integral bounds at most 255 apart and the zero point
    /// between them (8-bit types, signed or not).
    pub(in crate::runtime) fn fits_a_byte(&self) -> bool {
        self.is_integral() && self.max - self.min <= 255.0
    }

    /// A positive finite step, integral bounds and the zero point between them.
    fn is_integral(&self) -> bool {
        let integral = |v: f32| v.is_finite() && v.fract() == 0.0;
        self.scale.is_finite()
            && self.scale > 0.0
            && [self.zero_point, self.min, self.max]
                .into_iter()
                .all(integral)
            && (self.min..=self.max).contains(&self.zero_point)
    }

    /// The integers of the grid that a clamp to `[lo, hi]` before rounding
    /// leaves: rounding is monotonic, so the clamp is the rounded bounds'
    /// after it, within the grid's own.
    pub(in crate::runtime) fn rounded_clamp(&self, lo: f32, hi: f32) -> (f32, f32) {
        let on_grid = |bound: f32| (bound / self.scale).round_ties_even() + self.zero_point;
        (on_grid(lo).max(self.min), on_grid(hi).min(self.max))
    }

    /// Whether `results` hold one value per integer of the grid (of bytes)
    /// and one for NaN: a table a lookup by the grid's values reads.
    pub(in crate::runtime) fn tabulates(&self, results: &[f32]) -> bool {
        self.fits_a_byte() && results.len() == (self.max - self.min) as usize + 2
    }

    /// The entry of table `results` (`tabulates`) a lookup of value `v`
    /// reads: its integer's, clamped to the grid, or NaN's.
    pub(in crate::runtime) fn looked_up(&self, results: &[f32], v: f32) -> f32 {
        let q = (v * (1.0 / self.scale)).round_ties_even() + self.zero_point;
        match v.is_nan() {
            true => results[results.len() - 1],
            false => results[(q.clamp(self.min, self.max) - self.min) as usize],
        }
    }

    /// The byte that stands for 0 (the zero point shifted by `-min`).
    pub(in crate::runtime) fn zero_byte(&self) -> u8 {
        (self.zero_point - self.min) as u8
    }

    /// The integer `q` of each value `v` of the grid (`v / scale` is within
    /// rounding of an integer: the product `(q - zero_point) * scale` was
    /// rounded once).
    #[inline(always)]
    unsafe fn integers<V: Vector>(&self, v: V, inverse: f32) -> V {
        V::add(
            V::round(V::mul(v, V::splat(inverse))),
            V::splat(self.zero_point),
        )
    }
}

/// The sum of values on grids `a` and `b` rounded onto grid `c` (through a
/// clamp, where a Relu or Clip comes between), from the operands' integers
/// `qa` and `qb` as the peer whose arithmetic the model follows computes it
/// (`AddSum`), clamped to `c`'s integers. Computed from the dequantized
/// values instead (`(a + b) / sc`), about one element in 10^5 rounds the
/// other way, and a ResNet's residual adds pass that difference on to every
/// later layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantizedAdd {
    a: Grid,
    b: Grid,
    c: Grid,
    a_inverse: f32,
    b_inverse: f32,
    sum: AddSum,
    /// The least and greatest integer of `c` the sum takes: `c`'s bounds,
    /// or a clamp's rounded onto `c`.
    lo: f32,
    hi: f32,
}

/// How a quantized add rounds the sum of its operands' integers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum AddSum {
    /// onnxruntime's QLinearAdd (and so its QDQ form, which it fuses into
    /// that kernel): `round(qa * ra + (qb * rb + fixed))` with both
    /// multiply-adds fused, the ratios `ra = sa / sc`, `rb = sb / sc` and
    /// `fixed = zc - (ra * za + rb * zb)` in f32, halves to even.
    Ratios { ra: f32, rb: f32, fixed: f32 },
    /// XNNPACK's (the TFLite interpreter's) on bytes: each ratio as an
    /// integer multiplier `m = round(r * 2^shift)`, the shift putting the
    /// larger under 2^21, and
    /// `floor((ma (qa - za) + mb (qb - zb)) / 2^shift + 1/2) + zc`.
    /// The int32 sum has up to 30 bits, so it is taken apart:
    /// each multiplier as `high * 2^11 + low`, both partial sums exact in
    /// f32, the low one's whole multiples of 2^11 carried into the high one
    /// and its remainder dropped, which leaves the floor unchanged.
    FixedPoint(FixedPointAdd),
}

/// The parts of XNNPACK's add multipliers (see `AddSum::FixedPoint`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct FixedPointAdd {
    a_high: f32,
    a_low: f32,
    b_high: f32,
    b_low: f32,
    /// The rounding half of 2^shift, in units of 2^11: 2^(shift - 12).
    half: f32,
    /// 2^(11 - shift).
    down: f32,
}

/// The split of the fixed-point multipliers: `m = high * LOW_STEP + low`.
const LOW_BITS: i32 = 11;
const LOW_STEP: f32 = (1u32 << LOW_BITS) as f32;

impl FixedPointAdd {
    /// XNNPACK's multipliers of ratios `ra` and `rb`; `None` where it
    /// refuses the ratios (the larger outside [2^-10, 2^8)).
    fn new(ra: f32, rb: f32) -> Option<FixedPointAdd> {
        let larger = ra.max(rb);
        if !(2f32.powi(-10)..2f32.powi(8)).contains(&larger) {
            return None;
        }
        // The exponent of the larger ratio, from its bits as XNNPACK takes it.
        let exponent = (larger.to_bits() >> 23) as i32 - 127;
        let shift = 20 - exponent;
        let parts = |r: f32| {
            // Exact: a power of two times an f32, then rounded once.
            let m = (r * 2f32.powi(shift)).round_ties_even();
            let high = (m / LOW_STEP).floor();
            (high, m - high * LOW_STEP)
        };
        let ((a_high, a_low), (b_high, b_low)) = (parts(ra), parts(rb));
        Some(FixedPointAdd {
            a_high,
            a_low,
            b_high,
            b_low,
            half: 2f32.powi(shift - 1 - LOW_BITS),
            down: 2f32.powi(LOW_BITS - shift),
        })
    }
}

impl QuantizedAdd {
    /// `None` unless every grid has a positive finite step and integral
    /// bounds. Under `QuantizedArithmetic::Tflite`, operands on grids wider
    /// than a byte, or ratios XNNPACK refuses, round by the ratios.
    pub fn new(a: Grid, b: Grid, c: Grid, arithmetic: QuantizedArithmetic) -> Option<QuantizedAdd> {
        if ![a, b, c].iter().all(Grid::is_integral) {
            return None;
        }
        let (ra, rb) = (a.scale / c.scale, b.scale / c.scale);
        let (a_inverse, b_inverse) = (1.0 / a.scale, 1.0 / b.scale);
        let ratios = [ra, rb, a_inverse, b_inverse];
        ratios.iter().all(|r| r.is_finite()).then_some(())?;
        let fixed_point =
            (arithmetic == QuantizedArithmetic::Tflite && a.fits_a_byte() && b.fits_a_byte())
                .then(|| FixedPointAdd::new(ra, rb))
                .flatten();
        let sum = match fixed_point {
            Some(f) => AddSum::FixedPoint(f),
            None => AddSum::Ratios {
                ra,
                rb,
                fixed: c.zero_point - (ra * a.zero_point + rb * b.zero_point),
            },
        };
        Some(QuantizedAdd {
            a,
            b,
            c,
            a_inverse,
            b_inverse,
            sum,
            lo: c.min,
            hi: c.max,
        })
    }

    /// The add with its sum clamped to `[lo, hi]` before the rounding (a
    /// Relu or Clip between them): rounding is monotonic, so that is the
    /// rounded sum clamped to the bounds rounded onto `c`, as XNNPACK
    /// applies a TFLite op's fused activation.
    pub fn clamped(self, lo: f32, hi: f32) -> QuantizedAdd {
        let (lo, hi) = self.c.rounded_clamp(lo, hi);
        QuantizedAdd {
            lo: self.lo.max(lo),
            hi: self.hi.min(hi),
            ..self
        }
    }

    /// `x + y` for `x` on grid `a` and `y` on grid `b`, on grid `c`.
    ///
    /// # Safety
    /// `V`'s instruction set must be available.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn apply<V: Vector>(&self, x: V, y: V) -> V {
        let qa = self.a.integers(x, self.a_inverse);
        let qb = self.b.integers(y, self.b_inverse);
        self.sum(qa, qb)
    }

    /// The grid of operand `a` where `first`, else of `b`.
    pub(in crate::runtime) fn operand_grid(&self, first: bool) -> Grid {
        match first {
            true => self.a,
            false => self.b,
        }
    }

    /// The grid of the sum.
    pub(in crate::runtime) fn output_grid(&self) -> Grid {
        self.c
    }

    /// The integers of `y`, a value of operand `a` where `first`, else of `b`.
    ///
    /// # Safety
    /// `V`'s instruction set must be available.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn operand_integers<V: Vector>(&self, y: V, first: bool) -> V {
        match first {
            true => self.a.integers(y, self.a_inverse),
            false => self.b.integers(y, self.b_inverse),
        }
    }

    /// The integers on grid `c` of the sum of operands given by their
    /// integers: `qx` of operand `a` where `x_first` (else `b`), `qy` of
    /// the other.
    ///
    /// # Safety
    /// `V`'s instruction set must be available.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn add_integers<V: Vector>(
        &self,
        qx: V,
        qy: V,
        x_first: bool,
    ) -> V {
        match x_first {
            true => self.sum_integers(qx, qy),
            false => self.sum_integers(qy, qx),
        }
    }

    /// The dequantized value of `q`, an integer of grid `c`.
    ///
    /// # Safety
    /// `V`'s instruction set must be available.
    #[inline(always)]
    unsafe fn dequantize<V: Vector>(&self, q: V) -> V {
        V::mul(
            V::sub(q, V::splat(self.c.zero_point)),
            V::splat(self.c.scale),
        )
    }

    /// The sum of the integers `qa` and `qb` on grid `c`, dequantized.
    #[inline(always)]
    unsafe fn sum<V: Vector>(&self, qa: V, qb: V) -> V {
        self.dequantize(self.sum_integers(qa, qb))
    }

    /// The sum of the integers `qa` and `qb` as an integer of grid `c`.
    #[inline(always)]
    unsafe fn sum_integers<V: Vector>(&self, qa: V, qb: V) -> V {
        let q = match self.sum {
            AddSum::Ratios { ra, rb, fixed } => {
                let rest = V::fused_mul_add(qb, V::splat(rb), V::splat(fixed));
                V::round(V::fused_mul_add(qa, V::splat(ra), rest))
            }
            AddSum::FixedPoint(f) => {
                let da = V::sub(qa, V::splat(self.a.zero_point));
                let db = V::sub(qb, V::splat(self.b.zero_point));
                // Every product and sum below is an integer under 2^21.
                let times = |d: V, m: f32| V::mul(d, V::splat(m));
                let high = V::add(times(da, f.a_high), times(db, f.b_high));
                let low = V::add(times(da, f.a_low), times(db, f.b_low));
                let carried = V::floor(V::mul(low, V::splat(1.0 / LOW_STEP)));
                let units = V::add(V::add(high, carried), V::splat(f.half));
                V::add(
                    V::floor(V::mul(units, V::splat(f.down))),
                    V::splat(self.c.zero_point),
                )
            }
        };
        V::min(V::max(q, V::splat(self.lo)), V::splat(self.hi))
    }
}

/// The product of values on grids `a` and `b` rounded onto grid `c`, as
/// onnxruntime's QLinearMul computes it on x86 (and so its QDQ form, which it
/// fuses into that kernel): the integer product `p = (qa - za) * (qb - zb)`,
/// then `round(p * ratio + zc)` with `ratio = sa * sb / sc` in f32, the
/// multiply and the add rounded apart, halves to even, clamped to `c`'s
/// integers. Computed from the dequantized values instead, a product at half
/// a step can round the other way (2 of 2.6 million products over 40 random
/// s8 grids).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantizedMul {
    a_inverse: f32,
    b_inverse: f32,
    ratio: f32,
    c: Grid,
}

impl QuantizedMul {
    /// `None` unless every grid has a positive finite step and integral
    /// bounds.
    pub fn new(a: Grid, b: Grid, c: Grid) -> Option<QuantizedMul> {
        if ![a, b, c].iter().all(Grid::is_integral) {
            return None;
        }
        let ratio = a.scale * b.scale / c.scale;
        let (a_inverse, b_inverse) = (1.0 / a.scale, 1.0 / b.scale);
        [ratio, a_inverse, b_inverse]
            .iter()
            .all(|r| r.is_finite())
            .then_some(QuantizedMul {
                a_inverse,
                b_inverse,
                ratio,
                c,
            })
    }

    /// The grid of the product.
    pub(in crate::runtime) fn output_grid(&self) -> Grid {
        self.c
    }

    /// `x * y` for `x` on grid `a` and `y` on grid `b`, on grid `c`.
    ///
    /// # Safety
    /// `V`'s instruction set must be available.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn apply<V: Vector>(&self, x: V, y: V) -> V {
        // Each value is (q - zero point) * scale, rounded once: the quotient
        // is within rounding of its integer.
        let pa = V::round(V::mul(x, V::splat(self.a_inverse)));
        let pb = V::round(V::mul(y, V::splat(self.b_inverse)));
        let scaled = V::mul(V::mul(pa, pb), V::splat(self.ratio));
        let q = V::round(V::add(scaled, V::splat(self.c.zero_point)));
        let q = V::min(V::max(q, V::splat(self.c.min)), V::splat(self.c.max));
        V::mul(
            V::sub(q, V::splat(self.c.zero_point)),
            V::splat(self.c.scale),
        )
    }
}

/// A hard-swish of values on grid `input` rounded onto grid `output`, both
/// of bytes, as TFLite's integer kernel computes it (the interpreter's
/// XNNPACK delegate gives the same bytes): the input integer, less its zero
/// point, is scaled up by 2^7, then multiplied in 16-bit fixed point by the
/// output's scale ratio and, apart, by the slope of `relu6(x + 3) / 6`, the
/// two products multiplied and shifted down onto the output grid. Computed
/// in float, a product near half a step lands on the other side of it (2 of
/// the 77 integers a full-integer MobileNetV3Small's first hard-swish meets),
/// and every later layer carries that step on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantizedHardSwish {
    input: Grid,
    output: Grid,
    input_inverse: f32,
    /// The output's multiplier of the input's integers times 2^7, and its
    /// (non-positive) exponent.
    output_multiplier: i32,
    output_exponent: i32,
    /// The multiplier taking them to the slope's scale of 3 / 2^15, and its
    /// exponent.
    slope_multiplier: i32,
    slope_exponent: i32,
}

impl QuantizedHardSwish {
    /// `None` unless both grids fit a byte and the output's ratio of scales
    /// is below 1 in TFLite's fixed point, which TFLite requires.
    pub fn new(input: Grid, output: Grid) -> Option<QuantizedHardSwish> {
        if !input.fits_a_byte() || !output.fits_a_byte() {
            return None;
        }
        // TFLite's f32 ratios: the input's scale over 2^7, divided by each
        // scale the products land on.
        let fine = input.scale / 128.0;
        let (output_multiplier, output_exponent) = q15_multiplier(fine / output.scale)?;
        let (slope_multiplier, slope_exponent) = q15_multiplier(fine / (3.0 / 32768.0))?;
        (output_exponent <= 0).then_some(QuantizedHardSwish {
            input,
            output,
            input_inverse: 1.0 / input.scale,
            output_multiplier,
            output_exponent,
            slope_multiplier,
            slope_exponent,
        })
    }

    /// The grid of the results.
    pub(in crate::runtime) fn output_grid(&self) -> Grid {
        self.output
    }

    /// The output integer of input integer `q`.
    fn integer(&self, q: i32) -> i32 {
        let fine = (q - self.input.zero_point as i32) * 128;
        let on_output_scale = rounding_doubling_high_mul(fine, self.output_multiplier);
        // The slope of relu6(x + 3) / 6 on a scale of 2^-15, shifted up in
        // two parts around the product where its exponent is positive.
        let mut slope = fine;
        if self.slope_exponent > 0 {
            slope = saturating_shift_left(slope, self.slope_exponent - 1);
        }
        slope = rounding_doubling_high_mul(slope, self.slope_multiplier);
        if self.slope_exponent > 0 {
            slope = saturating_shift_left(slope, 1);
        } else {
            slope = rounding_shift_right(slope, -self.slope_exponent);
        }
        let slope = (slope + (1 << 15)) >> 1;
        let product = doubling_high_mul(slope, on_output_scale);
        let q =
            rounding_shift_right(product, -self.output_exponent) + self.output.zero_point as i32;
        q.clamp(self.output.min as i32, self.output.max as i32)
    }

    /// The result for `x`, a value of the input grid (NaN for NaN).
    fn value(&self, x: f32) -> f32 {
        if x.is_nan() {
            return x;
        }
        let q = (x * self.input_inverse).round_ties_even() + self.input.zero_point;
        let q = q.clamp(self.input.min, self.input.max) as i32;
        (self.integer(q) as f32 - self.output.zero_point) * self.output.scale
    }

    /// The result in each lane, lane by lane: a chain of one operand on a
    /// grid of bytes runs as a table of these (`Elementwise::tabulate`).
    ///
    /// # Safety
    /// `V`'s instruction set must be available.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn apply<V: Vector>(&self, x: V) -> V {
        // Pairs of vectors hold twice the lanes of the widest.
        let mut lanes = [0f32; 2 * MAX_LANES];
        x.store(lanes.as_mut_ptr());
        for v in &mut lanes[..V::LANES] {
            *v = self.value(*v);
        }
        V::load(lanes.as_ptr())
    }
}

/// `ratio` as TFLite's 16-bit fixed-point multiplier and exponent: its
/// Q31 mantissa (rounded, halves away from 0) rounded to its top 16 bits.
/// `None` for a ratio that is not positive and finite.
fn q15_multiplier(ratio: f32) -> Option<(i32, i32)> {
    let ratio = f64::from(ratio);
    if !(ratio.is_finite() && ratio > 0.0) {
        return None;
    }
    // ratio = mantissa * 2^exponent with mantissa in [0.5, 1) (an f32's
    // ratio is a normal f64).
    let mut exponent = ((ratio.to_bits() >> 52) & 0x7ff) as i32 - 1022;
    let mut q31 = (ratio * 2f64.powi(31 - exponent)).round() as i64;
    if q31 == 1 << 31 {
        q31 /= 2;
        exponent += 1;
    }
    if exponent < -31 {
        return None;
    }
    let q15 = if q31 >= i64::from(i32::MAX) - (1 << 15) {
        i64::from(i16::MAX)
    } else {
        (q31 + (1 << 15)) >> 16
    };
    Some((q15 as i32, exponent))
}

/// `a * b * 2 / 2^16` of 16-bit `a` and `b`, rounded to nearest (halves
/// away from 0), saturated where both are -2^15.
fn rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == b && a == i32::from(i16::MIN) {
        return i32::from(i16::MAX);
    }
    let product = a * b;
    let nudge = if product >= 0 { 1 << 14 } else { 1 - (1 << 14) };
    // Division truncates toward 0.
    (product + nudge) / (1 << 15)
}

/// `a * b * 2 / 2^16`, truncated toward 0, saturated where both are -2^15.
fn doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == b && a == i32::from(i16::MIN) {
        return i32::from(i16::MAX);
    }
    a * b / (1 << 15)
}

/// `x / 2^shift` of 16-bit `x` rounded to nearest, halves away from 0, as
/// TFLite computes it in 16 bits: a shift of 16 bits or more keeps a mask
/// of 16 ones, and gives -1 for a negative `x` and 1 for any other (the
/// hard-swishes of tiny scales deep in a full-integer MobileNetV3Small
/// meet it: 10% of one's outputs were a step off without it).
fn rounding_shift_right(x: i32, shift: i32) -> i32 {
    let mask = i32::from(((1i64 << shift) - 1) as u16 as i16);
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> shift.min(31)) + i32::from((x & mask) > threshold)
}

/// `x * 2^shift` of 16-bit `x` saturated to 16 bits.
fn saturating_shift_left(x: i32, shift: i32) -> i32 {
    let shifted = i64::from(x) << shift.min(32);
    shifted.clamp(i16::MIN.into(), i16::MAX.into()) as i32
}

/// Rows whose sums a quantized softmax takes side by side.
const INTERLEAVED_ROWS: usize = 8;

/// Softmax over rows of values on byte grid `input`, rounded onto byte grid
/// `output`, as onnxruntime's QLinearSoftmax computes it (and so its QDQ
/// form, which it fuses into that kernel). Each element's exponential comes
/// from a table of the 256 integer distances to its row's largest element,
/// scaled up so that a row's f32 sum keeps its small terms without
/// overflowing; the sum is taken in row order in f32; each element rounds
/// `e * floor(1 / output step) / sum`, halves to even, plus the zero point.
/// The whole number of output steps in 1, `floor(1 / step)`, is the peer's
/// choice. Computed as a float softmax rounded onto the grid instead, about
/// one element in 200 lands a step away from it (measured on attention
/// rows of 197).
#[derive(Clone, Debug)]
pub struct QuantizedSoftmax {
    input_inverse: f32,
    output: Grid,
    /// `floor(1 / output step)`.
    steps: f32,
    len: usize,
    /// `exponential[d]`: the scaled exponential of an element `d` input
    /// steps below its row's largest.
    exponential: Box<[f32; 256]>,
    lanes: Lanes,
}

impl QuantizedSoftmax {
    /// The kernel for rows of `len` elements; `None` unless both grids fit a
    /// byte and the row is not empty.
    pub fn new(input: Grid, output: Grid, len: usize, isa: Isa) -> Option<QuantizedSoftmax> {
        if !input.fits_a_byte() || !output.fits_a_byte() || len == 0 {
            return None;
        }
        // The peer's scaling: the largest term e^shift with
        // shift = ln(f32::MAX / len) - 5, so that `len` terms sum below
        // f32::MAX with room to spare (the f32 quotient, then ln in f64).
        let step = f64::from(input.scale);
        let room = f64::from(f32::MAX / len as f32).ln();
        let shift = (room - 5.0).max(0.0) / step;
        let exponential = Box::new(std::array::from_fn(|d| {
            ((shift - d as f64) * step).exp() as f32
        }));
        Some(QuantizedSoftmax {
            input_inverse: 1.0 / input.scale,
            output,
            steps: (1.0 / output.scale).floor(),
            len,
            exponential,
            lanes: Lanes::for_block(isa, isa.lanes()),
        })
    }

    /// Runs over all rows of `x` into `y`, both `len`-element rows.
    pub fn run(&self, x: &[f32], y: &mut [f32]) -> Result<(), KernelError> {
        let len = self.len;
        if !x.len().is_multiple_of(len) || y.len() != x.len() {
            return Err(KernelError::Buffers {
                kernel: "quantized softmax",
                given: vec![x.len(), y.len()],
                expected: vec![x.len() / len * len, x.len() / len * len],
            });
        }
        let rows_per_task = (ELEMENTS_PER_TASK / len).max(1);
        par::for_each_chunk_mut(y, rows_per_task * len, |i, y| {
            let task = SoftmaxRows {
                k: self,
                x: &x[i * rows_per_task * len..][..y.len()],
                y: y.as_mut_ptr(),
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; the task writes
            // as many elements of `y` as it reads of `x`, whole rows.
            unsafe { run_vectorized(self.lanes, &task) }
        });
        Ok(())
    }

    /// `R` rows at `x`, into `y`: each row's exponentials go to `y`, then
    /// the rows' sums are taken side by side (each in row order, a chain of
    /// dependent adds that alone would hold the kernel back), then the
    /// exponentials become the outputs.
    #[inline(always)]
    unsafe fn rows<V: Vector, const R: usize>(&self, x: *const f32, y: *mut f32) {
        let len = self.len;
        for r in 0..R {
            self.exponentials::<V>(x.add(r * len), y.add(r * len));
        }
        let mut sums = [0f32; R];
        for j in 0..len {
            for (r, sum) in sums.iter_mut().enumerate() {
                *sum += *y.add(r * len + j);
            }
        }
        for (r, sum) in sums.into_iter().enumerate() {
            self.outputs::<V>(y.add(r * len), sum);
        }
    }

    /// The exponentials of the row at `x`, by their distance in input steps
    /// to the row's largest element, into `y`. The inputs lie on the input
    /// grid, so each distance is a whole number; it is clamped into the
    /// table all the same, a NaN's to 0 (as the largest is taken past NaN).
    #[inline(always)]
    unsafe fn exponentials<V: Vector>(&self, x: *const f32, y: *mut f32) {
        let len = self.len;
        let top = V::splat(row_max::<V>(x, len));
        let (inverse, last) = (V::splat(self.input_inverse), V::splat(255.0));
        let table = self.exponential.as_ptr();
        for at in (0..len).step_by(V::LANES) {
            let k = (len - at).min(V::LANES);
            let steps = V::round(V::mul(V::sub(top, load_part(x.add(at), k, 0.0)), inverse));
            let index = V::min(V::max(steps, V::splat(0.0)), last);
            store_part(V::lookup(table, index), y.add(at), k);
        }
    }

    /// The exponentials at `y`, of sum `sum`, rounded onto the output grid.
    #[inline(always)]
    unsafe fn outputs<V: Vector>(&self, y: *mut f32, sum: f32) {
        let out = self.output;
        let (steps, sum) = (V::splat(self.steps), V::splat(sum));
        let zero_point = V::splat(out.zero_point);
        let (min, max, scale) = (V::splat(out.min), V::splat(out.max), V::splat(out.scale));
        for at in (0..self.len).step_by(V::LANES) {
            let k = (self.len - at).min(V::LANES);
            let e = load_part::<V>(y.add(at), k, 0.0);
            let q = V::add(V::round(V::div(V::mul(e, steps), sum)), zero_point);
            let q = V::min(V::max(q, min), max);
            store_part(V::mul(V::sub(q, zero_point), scale), y.add(at), k);
        }
    }
}

/// The rows of one task of a quantized softmax, written through `y` (the
/// task's exclusive chunk, as long as `x`).
struct SoftmaxRows<'a> {
    k: &'a QuantizedSoftmax,
    x: &'a [f32],
    y: *mut f32,
}

impl VectorKernel for SoftmaxRows<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let (k, len) = (self.k, self.k.len);
        let (x, y) = (self.x.as_ptr(), self.y);
        let rows = self.x.len() / len;
        let grouped = rows - rows % INTERLEAVED_ROWS;
        for r in (0..grouped).step_by(INTERLEAVED_ROWS) {
            k.rows::<V, INTERLEAVED_ROWS>(x.add(r * len), y.add(r * len));
        }
        for r in grouped..rows {
            k.rows::<V, 1>(x.add(r * len), y.add(r * len));
        }
    }
}

/// A matrix product of two operands on grids, rounded onto grid `y`, as
/// onnxruntime's QLinearMatMul computes it (and so its QDQ form with two
/// quantized activations, which it fuses into that kernel): each product's
/// exact integer sum `s = Σ (qa - za)(qb - zb)`, then `round(s * ratio)`
/// with `ratio = sa * sb / sy` in f32, halves to even, clamped to `y`'s
/// integers. The integers go through the float product: where every sum
/// stays below 2^24 (checked at build), f32 adds them exactly. Computed on
/// the dequantized values instead, a sum at half a step rounds the other
/// way: a u8 BERT's attention had whole columns a step off.
pub struct QuantizedMatMul {
    product: BatchedMatMul,
    a_inverse: f32,
    b_inverse: f32,
    ratio: f32,
    y: Grid,
    lanes: Lanes,
}

impl QuantizedMatMul {
    /// `product` on operands on grids `a` and `b`, rounded onto `y`; `None`
    /// unless the grids are integral and the sums exact in f32.
    pub(in crate::runtime) fn new(
        product: BatchedMatMul,
        [a, b, y]: [Grid; 3],
        isa: Isa,
    ) -> Option<QuantizedMatMul> {
        if ![a, b, y].iter().all(Grid::is_integral) {
            return None;
        }
        let reach = |g: Grid| f64::from((g.zero_point - g.min).max(g.max - g.zero_point));
        if product.inner() as f64 * reach(a) * reach(b) >= f64::from(1u32 << 24) {
            return None;
        }
        let ratio = a.scale * b.scale / y.scale;
        let (a_inverse, b_inverse) = (1.0 / a.scale, 1.0 / b.scale);
        [ratio, a_inverse, b_inverse]
            .iter()
            .all(|r| r.is_finite())
            .then_some(QuantizedMatMul {
                a_inverse,
                b_inverse,
                ratio,
                y,
                product,
                lanes: Lanes::for_block(isa, isa.lanes()),
            })
    }

    /// Elements of working memory `run` needs: the operands' integers, then
    /// the product's own.
    pub fn scratch_len(&self) -> usize {
        let (a_len, b_len) = self.product.operand_lens();
        a_len + b_len + self.product.scratch_len()
    }

    /// `y = a · b` rounded onto the output grid; `scratch` holds at least
    /// `scratch_len()` elements.
    pub fn run(
        &self,
        a: &[f32],
        b: &[f32],
        y: &mut [f32],
        scratch: &mut [f32],
    ) -> Result<(), KernelError> {
        let (a_len, b_len) = self.product.operand_lens();
        if a.len() < a_len || b.len() < b_len || scratch.len() < self.scratch_len() {
            return Err(KernelError::Buffers {
                kernel: "quantized matrix product",
                given: vec![a.len(), b.len(), scratch.len()],
                expected: vec![a_len, b_len, self.scratch_len()],
            });
        }
        let (qa, rest) = scratch.split_at_mut(a_len);
        let (qb, rest) = rest.split_at_mut(b_len);
        self.pass(Some(&a[..a_len]), qa, Pass::Integers(self.a_inverse));
        self.pass(Some(&b[..b_len]), qb, Pass::Integers(self.b_inverse));
        self.product.run(qa, qb, y, rest);
        self.pass(None, y, Pass::Requantize);
        Ok(())
    }

    /// `pass` from `x` into `y`, or over `y` in place.
    fn pass(&self, x: Option<&[f32]>, y: &mut [f32], pass: Pass) {
        par::for_each_chunk_mut(y, ELEMENTS_PER_TASK, |i, y| {
            let task = PassTask {
                k: self,
                pass,
                x: x.map_or(y.as_ptr(), |x| x[i * ELEMENTS_PER_TASK..].as_ptr()),
                y: y.as_mut_ptr(),
                n: y.len(),
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; the task reads
            // `n` elements of `x` (at least as long as `y`, or `y` itself)
            // and writes them to `y`.
            unsafe { run_vectorized(self.lanes, &task) }
        });
    }
}

/// An elementwise pass of a quantized matrix product.
#[derive(Clone, Copy, Debug)]
enum Pass {
    /// Values of a grid of this inverse step to their integers less the
    /// grid's zero point (within rounding of `value * inverse`).
    Integers(f32),
    /// Integer sums to the output grid's values.
    Requantize,
}

/// One task of a pass: `n` elements from `x` to `y` (which may be `x`).
struct PassTask<'a> {
    k: &'a QuantizedMatMul,
    pass: Pass,
    x: *const f32,
    y: *mut f32,
    n: usize,
}

impl VectorKernel for PassTask<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let y = self.k.y;
        // The peer clamps before rounding; the bounds are integers, so the
        // order does not matter.
        let (lo, hi) = (
            V::splat(y.min - y.zero_point),
            V::splat(y.max - y.zero_point),
        );
        let (ratio, scale) = (V::splat(self.k.ratio), V::splat(y.scale));
        for at in (0..self.n).step_by(V::LANES) {
            let k = (self.n - at).min(V::LANES);
            let v = load_part::<V>(self.x.add(at), k, 0.0);
            let v = match self.pass {
                Pass::Integers(inverse) => V::round(V::mul(v, V::splat(inverse))),
                Pass::Requantize => V::mul(V::round(V::clamp(V::mul(v, ratio), lo, hi)), scale),
            };
            store_part(v, self.y.add(at), k);
        }
    }
}

impl Grid {
    /// The grid `ops::DynamicQuantize` fitted to a group's values.
    pub(in crate::runtime) fn fitted(f: FittedGrid) -> Grid {
        Grid {
            scale: f.scale,
            zero_point: f.zero_point,
            min: f.min,
            max: f.max,
        }
    }

    /// A grid of bytes `op` may fit: what a kernel quantizing its input per
    /// run is built with, each run fitting its own.
    pub(in crate::runtime) fn any_fitted(op: &DynamicQuantize) -> Grid {
        Grid::fitted(op.grid(-1.0, 1.0))
    }
}

/// `ops::DynamicQuantize` of a stored tensor: each group's range, then each
/// value rounded onto the grid fitted to it, bit for bit as the op's
/// reference computes them. One group may be stored in any layout (its
/// padding holds 0, which widens no range and stays 0); several lie one
/// after the other (the planner keeps such tensors row-major).
pub(in crate::runtime) struct DynamicQuantizer {
    pub op: DynamicQuantize,
    /// Elements per group.
    pub group_len: usize,
    pub lanes: Lanes,
}

impl DynamicQuantizer {
    /// Each group of `x` onto its grid, into `y`; a group's range and its
    /// values are split over the threads.
    pub(in crate::runtime) fn run(&self, x: &[f32], y: &mut [f32]) {
        let len = self.group_len.max(1);
        for (x, y) in x.chunks(len).zip(y.chunks_mut(len)) {
            let grid = fitted_grid(&self.op, x, self.lanes);
            par::for_each_chunk_mut(y, ELEMENTS_PER_TASK, |i, y| {
                let k = OntoGrid {
                    x: &x[i * ELEMENTS_PER_TASK..][..y.len()],
                    y: y.as_mut_ptr(),
                    grid,
                };
                // SAFETY: `y` holds as many elements as the part of `x`.
                unsafe { run_vectorized(self.lanes, &k) }
            });
        }
    }
}

/// The grid `op` fits to the values `x` (one group), their range found with
/// vectors of `lanes`, in parts over the threads.
pub(in crate::runtime) fn fitted_grid(op: &DynamicQuantize, x: &[f32], lanes: Lanes) -> Grid {
    let none = (f32::INFINITY, f32::NEG_INFINITY);
    let mut parts = vec![none; x.len().div_ceil(ELEMENTS_PER_TASK)];
    par::for_each_chunk_mut(&mut parts, 1, |i, found| {
        let k = RangeOf {
            x: &x[i * ELEMENTS_PER_TASK..((i + 1) * ELEMENTS_PER_TASK).min(x.len())],
            found: std::cell::Cell::new(none),
        };
        // SAFETY: the kernel reads its part of `x` alone.
        unsafe { run_vectorized(lanes, &k) };
        found[0] = k.found.get();
    });
    let (lo, hi) = (parts.iter()).fold(none, |(lo, hi), &(l, h)| (lo.min(l), hi.max(h)));
    let (lo, hi) = match lo.is_finite() && hi.is_finite() {
        true => (lo, hi),
        // Infinities (or no value but NaN): the op's own rule.
        false => DynamicQuantize::range(x),
    };
    Grid::fitted(op.grid(lo, hi))
}

/// The least and greatest non-NaN value of `x`.
struct RangeOf<'a> {
    x: &'a [f32],
    found: std::cell::Cell<(f32, f32)>,
}

impl VectorKernel for RangeOf<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let x = self.x;
        // `min(v, acc)` keeps `acc` where `v` is NaN, so NaN fills the tail.
        let (mut lo, mut hi) = (V::splat(f32::INFINITY), V::splat(f32::NEG_INFINITY));
        let whole = x.len() / V::LANES * V::LANES;
        for at in (0..whole).step_by(V::LANES) {
            let v = V::load(x.as_ptr().add(at));
            (lo, hi) = (V::min(v, lo), V::max(v, hi));
        }
        if whole < x.len() {
            let v = V::load_first(x.as_ptr().add(whole), x.len() - whole, f32::NAN);
            (lo, hi) = (V::min(v, lo), V::max(v, hi));
        }
        let (mut los, mut his) = ([0f32; MAX_LANES], [0f32; MAX_LANES]);
        lo.store(los.as_mut_ptr());
        hi.store(his.as_mut_ptr());
        let found = (los[..V::LANES].iter().zip(&his[..V::LANES]))
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), (&l, &h)| {
                (if l < lo { l } else { lo }, if h > hi { h } else { hi })
            });
        self.found.set(found);
    }
}

/// `x` rounded onto `grid` as `FittedGrid::dequantized` rounds it, into `y`.
struct OntoGrid<'a> {
    x: &'a [f32],
    y: *mut f32,
    grid: Grid,
}

impl VectorKernel for OntoGrid<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let to_bytes = ToBytes::<V>::of(&self.grid);
        let step = V::splat(self.grid.scale);
        for at in (0..self.x.len()).step_by(V::LANES) {
            let k = (self.x.len() - at).min(V::LANES);
            let b = to_bytes.byte(load_part::<V>(self.x.as_ptr().add(at), k, 0.0));
            let v = V::mul(V::sub(b, to_bytes.shift), step);
            store_part(v, self.y.add(at), k);
        }
    }
}

/// Rounds values onto a grid's bytes (its integers less its least): `v *
/// (1 / scale) + (zero_point - min)`, each operation rounded to f32, then
/// rounded half to even and clamped to the bytes, NaN to 0 (as
/// `FittedGrid::byte`). For values on the grid, their bytes.
#[derive(Clone, Copy)]
pub(in crate::runtime) struct ToBytes<V> {
    inverse: V,
    shift: V,
    top: V,
}

impl<V: Vector> ToBytes<V> {
    #[inline(always)]
    pub(in crate::runtime) unsafe fn of(grid: &Grid) -> Self {
        ToBytes {
            inverse: V::splat(1.0 / grid.scale),
            shift: V::splat(grid.zero_point - grid.min),
            top: V::splat(grid.max - grid.min),
        }
    }

    /// The bytes of the values `v`, as floats.
    #[inline(always)]
    pub(in crate::runtime) unsafe fn byte(self, v: V) -> V {
        let q = V::round(V::add(V::mul(v, self.inverse), self.shift));
        // `max` returns its second operand for NaN.
        V::min(V::max(q, V::splat(0.0)), self.top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::kernels::simd::Scalar;

    /// TFLite's integer hard-swish gives the interpreter's bytes at every
    /// input byte, on the grids of 11 full-integer models, 3 of them of
    /// steps so small that TFLite's 16-bit shifts pass 15 bits (recorded by
    /// `scripts/record_tflite_hard_swish.py`; the float formula rounded
    /// onto the output grid misses 267 of those 2816 bytes, 256 of them on
    /// one grid).
    #[test]
    fn hard_swish_gives_the_tflite_interpreters_bytes() {
        let recorded = include_str!("../../../tests/quantized/tflite_hard_swish.txt");
        let mut models = 0;
        for line in recorded.lines() {
            let (head, outputs) = line.split_once(':').expect("grids: outputs");
            let head: Vec<f32> = head
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect();
            let [input_scale, input_zero, output_scale, output_zero] = head[..] else {
                panic!("four numbers before the outputs: {line}");
            };
            let input = grid_of_bytes(input_scale, input_zero);
            let output = grid_of_bytes(output_scale, output_zero);
            let hard_swish = QuantizedHardSwish::new(input, output).expect("TFLite's grids");
            let outputs: Vec<f32> = outputs
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect();
            assert_eq!(outputs.len(), 256);
            for (q, want) in (-128..128).zip(outputs) {
                let x = (q as f32 - input_zero) * input_scale;
                let got = unsafe { hard_swish.apply(Scalar(x)) }.0;
                let want = (want - output_zero) * output_scale;
                assert_eq!(got.to_bits(), want.to_bits(), "{line:.60}: byte {q}");
            }
            models += 1;
        }
        assert_eq!(models, 11);
        let (input, output) = (grid_of_bytes(0.05, 3.0), grid_of_bytes(0.02, -100.0));
        let nan = unsafe {
            QuantizedHardSwish::new(input, output)
                .unwrap()
                .apply(Scalar(f32::NAN))
        };
        assert!(nan.0.is_nan());
    }

    fn grid_of_bytes(scale: f32, zero_point: f32) -> Grid {
        Grid {
            scale,
            zero_point,
            min: -128.0,
            max: 127.0,
        }
    }

    /// XNNPACK's qs8/qu8 add in integers, as its scalar kernel writes it:
    /// multipliers `round(r * 2^shift)` with the larger ratio's exponent
    /// putting it under 2^21, `(bias + ma qa + mb qb) >> shift` with the
    /// rounding half in the bias, plus the output zero point, clamped.
    fn xnnpack_add(qa: i64, qb: i64, [a, b, c]: [Grid; 3], (lo, hi): (i64, i64)) -> i64 {
        let (ra, rb) = (a.scale / c.scale, b.scale / c.scale);
        let shift = 20 - ((ra.max(rb).to_bits() >> 23) as i64 - 127);
        let m = |r: f32| (f64::from(r) * 2f64.powi(shift as i32)).round_ties_even() as i64;
        let (ma, mb) = (m(ra), m(rb));
        let bias = (1 << (shift - 1)) - ma * a.zero_point as i64 - mb * b.zero_point as i64;
        (((bias + ma * qa + mb * qb) >> shift) + c.zero_point as i64).clamp(lo, hi)
    }

    #[test]
    fn tflite_adds_round_every_pair_of_bytes_as_xnnpack() {
        let grid = |scale: f32, zero_point: f32, signed: bool| Grid {
            scale,
            zero_point,
            min: if signed { -128.0 } else { 0.0 },
            max: if signed { 127.0 } else { 255.0 },
        };
        // Grids of ResNet50's adds as the TFLite converter quantized them,
        // unsigned ones, and ratios far apart.
        let cases = [
            [
                grid(0.003459586, -13.0, true),
                grid(0.001652409, -12.0, true),
                grid(0.00189911, -128.0, true),
            ],
            [
                grid(0.003815526, -15.0, true),
                grid(0.001592887, -13.0, true),
                grid(0.001941683, -128.0, true),
            ],
            [
                grid(0.02, 128.0, false),
                grid(0.0031, 3.0, false),
                grid(0.017, 100.0, false),
            ],
            [
                grid(0.5, 0.0, true),
                grid(0.0007, 5.0, true),
                grid(0.004, -20.0, true),
            ],
        ];
        for grids in cases {
            let [a, b, c] = grids;
            for (clamp, bounds) in [
                (None, (c.min, c.max)),
                (Some((0.0, f32::INFINITY)), (c.zero_point, c.max)),
            ] {
                let mut add = QuantizedAdd::new(a, b, c, QuantizedArithmetic::Tflite).unwrap();
                assert!(matches!(add.sum, AddSum::FixedPoint(_)), "{grids:?}");
                if let Some((lo, hi)) = clamp {
                    add = add.clamped(lo, hi);
                }
                let bounds = (bounds.0 as i64, bounds.1 as i64);
                for qa in a.min as i64..=a.max as i64 {
                    for qb in b.min as i64..=b.max as i64 {
                        let x = (qa as f32 - a.zero_point) * a.scale;
                        let y = (qb as f32 - b.zero_point) * b.scale;
                        // SAFETY: the scalar type needs no instruction set.
                        let sum = unsafe { add.apply(Scalar(x), Scalar(y)).0 };
                        let q = (sum / c.scale).round_ties_even() as i64 + c.zero_point as i64;
                        let want = xnnpack_add(qa, qb, grids, bounds);
                        assert_eq!(q, want, "{qa} + {qb} on {grids:?}, clamp {clamp:?}");
                    }
                }
            }
        }
    }

    /// The per-run quantization of a stored tensor gives the op's reference
    /// bit for bit on every instruction set: groups of any length (vector
    /// tails), one and several groups, asymmetric and symmetric grids, NaN,
    /// infinities and a group of zeros.
    #[test]
    fn per_run_quantization_matches_the_ops_reference() {
        let mut rng = crate::runtime::test_support::Rng(5);
        for case in 0..24 {
            let op = DynamicQuantize {
                axis: usize::from(case % 3 == 0),
                symmetric: case % 2 == 1,
            };
            let group_len = 1 + rng.range(0, 70);
            let groups = if op.axis == 0 { 1 } else { rng.range(1, 4) };
            let shift = rng.f32s(1)[0] * 3.0;
            let mut x: Vec<f32> = (rng.f32s(groups * group_len).iter())
                .map(|v| v * 5.0 + shift)
                .collect();
            match case % 8 {
                2 => x[group_len / 2] = f32::NAN,
                4 => x[0] = f32::INFINITY,
                6 => x[..group_len].fill(0.0),
                _ => {}
            }
            let mut expect = vec![0f32; x.len()];
            op.apply(&x, group_len, &mut expect);
            for isa in crate::runtime::test_support::available_isas() {
                let k = DynamicQuantizer {
                    op,
                    group_len,
                    lanes: Lanes::for_block(isa, MAX_LANES),
                };
                let mut y = vec![f32::NAN; x.len()];
                k.run(&x, &mut y);
                let same = y
                    .iter()
                    .zip(&expect)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "case {case} {isa:?} {op:?}: {y:?} != {expect:?}");
            }
        }
    }
}
