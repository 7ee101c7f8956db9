//! The walk micro-kernel `contract` that generated code calls for a tensorized
//! contraction (a convolution, a matrix product, any `sum(a * b)` whose indices
//! move by constant steps): `out[p] += a[p] * b[p]` at every point `p` of the
//! walk, each argument a strided view over the walk's loops (`tir::CONTRACT`).
//!
//! The walk's loops are sorted by what they do to the output: the lane loop
//! (the output moves by one element), the row loop (register rows of
//! accumulators), the other output loops, and the reduction loops (the output
//! does not move), whose operand offsets are listed once per call so that the
//! inner loop is one pass over that list however many loops it came from.

use std::cell::Cell;
use std::sync::Arc;

use crate::codegen::{KernelRegion, KernelTable, MAX_RANK};
use crate::tir::{KernelError, CONTRACT, CONTRACT_INTO};

use super::simd::{load_part, run_vectorized, store_part, Isa, Lanes, Vector, VectorKernel};

/// How an operand moves along the lanes: one value for all (a broadcast), the
/// next element (a vector load), or a fixed stride (a gather).
trait LaneLoad {
    /// Whether the loads gather lane by lane.
    const STRIDED: bool = false;
    unsafe fn load<V: Vector>(p: *const f32, stride: i64, lanes: usize) -> V;
}

struct Broadcast;
struct Contiguous;
struct Strided;

impl LaneLoad for Broadcast {
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const f32, _: i64, _: usize) -> V {
        V::splat(*p)
    }
}

impl LaneLoad for Contiguous {
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const f32, _: i64, lanes: usize) -> V {
        load_part(p, lanes, 0.0)
    }
}

impl LaneLoad for Strided {
    const STRIDED: bool = true;
    #[inline(always)]
    unsafe fn load<V: Vector>(p: *const f32, stride: i64, lanes: usize) -> V {
        let mut staged = [0f32; super::simd::MAX_LANES];
        for (l, s) in staged[..lanes].iter_mut().enumerate() {
            *s = *p.offset(l as isize * stride as isize);
        }
        V::load(staged.as_ptr())
    }
}

/// One loop of the walk as the three views step along it.
#[derive(Clone, Copy, Debug, Default)]
struct Axis {
    extent: i64,
    out: i64,
    a: i64,
    b: i64,
}

/// A call's views, sorted (see the module comment).
struct Walk {
    out: *mut f32,
    a: *const f32,
    b: *const f32,
    lane: Axis,
    row: Axis,
    /// The other loops the output moves along, outermost first: the first
    /// `outer_len`.
    outer: [Axis; MAX_RANK],
    outer_len: usize,
    /// Offsets of `a` and `b` at every point of the reduction loops.
    reduction: Vec<(isize, isize)>,
    /// Whether the sums start at zero rather than at the output's values.
    into: bool,
}

/// The micro-kernels a model's generated code may call: codegen's own,
/// [`CONTRACT`] and [`CONTRACT_INTO`].
pub fn kernel_table() -> KernelTable {
    KernelTable::standard()
        .with(CONTRACT, Arc::new(|r| contract(r, false)))
        .with(CONTRACT_INTO, Arc::new(|r| contract(r, true)))
}

/// `out[p] += a[p] * b[p]` over the walk of three views of equal extents, the
/// sums started at zero when `into` (the output's values are not read).
pub fn contract(r: &mut [KernelRegion], into: bool) -> Result<(), KernelError> {
    let [out, a, b] = r else {
        return Err(KernelError(format!(
            "contract takes 3 views, got {}",
            r.len()
        )));
    };
    if a.extents() != out.extents() || b.extents() != out.extents() {
        return Err(KernelError(format!(
            "contract's views walk different loops: out {:?}, a {:?}, b {:?}",
            out.extents(),
            a.extents(),
            b.extents()
        )));
    }
    if out.extents().iter().any(|&e| e <= 0) {
        return Ok(());
    }
    if out.rank() > MAX_RANK {
        return Err(KernelError(format!(
            "contract walks at most {MAX_RANK} loops, got {}",
            out.rank()
        )));
    }
    let mut axes = [Axis::default(); MAX_RANK];
    for (d, ax) in axes[..out.rank()].iter_mut().enumerate() {
        *ax = Axis {
            extent: out.extents()[d],
            out: out.strides()[d],
            a: a.strides()[d],
            b: b.strides()[d],
        };
    }
    // The offset table's storage is kept from call to call (a call is short:
    // one allocation took a tenth of a grouped convolution's time).
    let mut walk = Walk::new(
        &axes[..out.rank()],
        out.origin_ptr(),
        a.origin_ptr(),
        b.origin_ptr(),
        STEPS.take(),
    );
    walk.into = into;
    let lanes = match walk.lane.out {
        1 => Lanes::for_block(Isa::detect(), 16),
        _ => Lanes::One,
    };
    // SAFETY: generated code proved (or checked) every view inside its buffer, and
    // `lanes` comes from `Lanes::for_block`.
    unsafe { run_vectorized(lanes, &walk) };
    STEPS.set(walk.reduction);
    Ok(())
}

thread_local! {
    /// [`Walk::reduction`]'s storage between calls on this thread.
    static STEPS: Cell<Vec<(isize, isize)>> = const { Cell::new(Vec::new()) };
}

impl Walk {
    /// The walk over `axes`, its offset table written into `steps`.
    fn new(
        axes: &[Axis],
        out: *mut f32,
        a: *const f32,
        b: *const f32,
        mut steps: Vec<(isize, isize)>,
    ) -> Walk {
        let unit = Axis {
            extent: 1,
            ..Axis::default()
        };
        // Loops of one step change nothing.
        let moving = |d: &usize| axes[*d].extent > 1;
        let data = || (0..axes.len()).filter(moving).filter(|&d| axes[d].out != 0);
        // The lanes: the innermost loop along which the output is contiguous.
        let lane = data().rev().find(|&d| axes[d].out == 1);
        // The rows: the loop one operand does not move along (its loads serve every
        // row), the longest such; else the longest other one.
        let row = data()
            .filter(|&d| Some(d) != lane)
            .max_by_key(|&d| ((axes[d].a == 0 || axes[d].b == 0), axes[d].extent));
        let mut outer = [unit; MAX_RANK];
        let mut outer_len = 0;
        for d in data().filter(|&d| Some(d) != lane && Some(d) != row) {
            outer[outer_len] = axes[d];
            outer_len += 1;
        }
        // Every point of the reduction loops, the innermost moving fastest.
        let reduction_axes = || (0..axes.len()).filter(moving).filter(|&d| axes[d].out == 0);
        let points: i64 = reduction_axes().map(|d| axes[d].extent).product();
        steps.clear();
        for p in 0..points {
            let (mut oa, mut ob, mut rest) = (0isize, 0isize, p);
            for d in reduction_axes().rev() {
                let k = rest % axes[d].extent;
                rest /= axes[d].extent;
                oa += (k * axes[d].a) as isize;
                ob += (k * axes[d].b) as isize;
            }
            steps.push((oa, ob));
        }
        let mut walk = Walk {
            out,
            a,
            b,
            lane: lane.map_or(unit, |d| axes[d]),
            row: row.map_or(unit, |d| axes[d]),
            outer,
            outer_len,
            reduction: steps,
            into: false,
        };
        // The operand that stays put along the rows is `b` (loaded once per step).
        if walk.row.a == 0 && walk.row.b != 0 {
            std::mem::swap(&mut walk.a, &mut walk.b);
            for ax in [&mut walk.lane, &mut walk.row]
                .into_iter()
                .chain(walk.outer[..outer_len].iter_mut())
            {
                std::mem::swap(&mut ax.a, &mut ax.b);
            }
            for (oa, ob) in &mut walk.reduction {
                std::mem::swap(oa, ob);
            }
        }
        walk
    }

    /// Every point of the outer loops, its lanes in vectors, its rows in blocks
    /// of `MR`. A strided operand that stays put along the rows is packed once
    /// per vector of lanes, contiguous for every block of rows (an input read at
    /// stride 2 by every output channel). Everything below `run` is inlined into
    /// the code `run_vectorized` compiles for the instruction set (a function
    /// left out of line is compiled without it, and moves its vectors through
    /// memory).
    #[inline(always)]
    unsafe fn outer<V: Vector, A: LaneLoad, B: LaneLoad, const MR: usize>(&self) {
        let pack = B::STRIDED && self.row.b == 0;
        let (mut packed, mut packed_steps) = (vec![], vec![]);
        if pack {
            packed = vec![0f32; self.reduction.len() * V::LANES];
            packed_steps = (self.reduction.iter().enumerate())
                .map(|(p, &(oa, _))| (oa, (p * V::LANES) as isize))
                .collect();
        }
        let outer = &self.outer[..self.outer_len];
        let points: i64 = outer.iter().map(|a| a.extent).product();
        for p in 0..points {
            let (mut o, mut a, mut b) = (0isize, 0isize, 0isize);
            let mut rest = p;
            for ax in outer.iter().rev() {
                let k = rest % ax.extent;
                rest /= ax.extent;
                o += (k * ax.out) as isize;
                a += (k * ax.a) as isize;
                b += (k * ax.b) as isize;
            }
            let mut l0 = 0;
            while l0 < self.lane.extent {
                let lanes = ((self.lane.extent - l0) as usize).min(V::LANES);
                let lo = l0 as isize;
                let b_lanes = self.b.offset(b + lo * self.lane.b as isize);
                if pack {
                    for (to, &(_, ob)) in packed.chunks_exact_mut(V::LANES).zip(&self.reduction) {
                        for (l, v) in to[..lanes].iter_mut().enumerate() {
                            *v = *b_lanes.offset(ob + l as isize * self.lane.b as isize);
                        }
                    }
                }
                let mut r0 = 0;
                while r0 < self.row.extent {
                    let rows = (self.row.extent - r0).min(MR as i64) as usize;
                    let ro = r0 as isize;
                    let out = self
                        .out
                        .offset(o + ro * self.row.out as isize + lo * self.lane.out as isize);
                    let a = self
                        .a
                        .offset(a + ro * self.row.a as isize + lo * self.lane.a as isize);
                    if pack {
                        let b = packed.as_ptr();
                        self.tile::<V, A, Contiguous, MR>(out, a, b, &packed_steps, rows, lanes);
                    } else {
                        let b = b_lanes.offset(ro * self.row.b as isize);
                        self.tile::<V, A, B, MR>(out, a, b, &self.reduction, rows, lanes);
                    }
                    r0 += MR as i64;
                }
                l0 += V::LANES as i64;
            }
        }
    }

    /// [`Self::sums`] of a whole vector or of a tail: the tail's masks stay out
    /// of the whole vectors' loop.
    #[inline(always)]
    unsafe fn tile<V: Vector, A: LaneLoad, B: LaneLoad, const MR: usize>(
        &self,
        out: *mut f32,
        a: *const f32,
        b: *const f32,
        steps: &[(isize, isize)],
        rows: usize,
        lanes: usize,
    ) {
        match lanes == V::LANES {
            true => self.sums::<V, A, B, MR, true>(out, a, b, steps, rows, lanes),
            false => self.sums::<V, A, B, MR, false>(out, a, b, steps, rows, lanes),
        }
    }

    /// `MR` rows of one vector, summed over the reduction's `steps` (offsets of
    /// `a` and `b`): the rows past `rows` repeat the last one (their stores write
    /// the same values again), so every block runs the same code. `FULL` when
    /// `lanes` is a whole vector.
    #[inline(always)]
    unsafe fn sums<V: Vector, A: LaneLoad, B: LaneLoad, const MR: usize, const FULL: bool>(
        &self,
        out: *mut f32,
        a: *const f32,
        b: *const f32,
        steps: &[(isize, isize)],
        rows: usize,
        lanes: usize,
    ) {
        let lanes = if FULL { V::LANES } else { lanes };
        let row_of = |r: usize| r.min(rows - 1) as isize;
        let mut acc = [V::splat(0.0); MR];
        if !self.into {
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = load_part(out.offset(row_of(r) * self.row.out as isize), lanes, 0.0);
            }
        }
        let (ra, rb) = (self.row.a as isize, self.row.b as isize);
        let (la, lb) = (self.lane.a, self.lane.b);
        if rb == 0 {
            for &(oa, ob) in steps {
                let vb: V = B::load(b.offset(ob), lb, lanes);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let va: V = A::load(a.offset(oa + row_of(r) * ra), la, lanes);
                    *acc = V::fma(va, vb, *acc);
                }
            }
        } else {
            for &(oa, ob) in steps {
                for (r, acc) in acc.iter_mut().enumerate() {
                    let va: V = A::load(a.offset(oa + row_of(r) * ra), la, lanes);
                    let vb: V = B::load(b.offset(ob + row_of(r) * rb), lb, lanes);
                    *acc = V::fma(va, vb, *acc);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            store_part(*acc, out.offset(row_of(r) * self.row.out as isize), lanes);
        }
    }

    #[inline(always)]
    unsafe fn with_b<V: Vector, A: LaneLoad>(&self) {
        match self.lane.b {
            0 => self.rows::<V, A, Broadcast>(),
            1 => self.rows::<V, A, Contiguous>(),
            _ => self.rows::<V, A, Strided>(),
        }
    }

    #[inline(always)]
    /// Blocks of up to 8 rows (4 with 16 vector registers), fewer when there
    /// are fewer rows (a block's extra rows repeat work).
    unsafe fn rows<V: Vector, A: LaneLoad, B: LaneLoad>(&self) {
        match self.row.extent {
            1 => self.outer::<V, A, B, 1>(),
            2 => self.outer::<V, A, B, 2>(),
            3 | 4 => self.outer::<V, A, B, 4>(),
            _ if V::LANES < 16 => self.outer::<V, A, B, 4>(),
            _ => self.outer::<V, A, B, 8>(),
        }
    }
}

impl VectorKernel for Walk {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        match self.lane.a {
            0 => self.with_b::<V, Broadcast>(),
            1 => self.with_b::<V, Contiguous>(),
            _ => self.with_b::<V, Strided>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::KernelRegion;

    /// A 3x3 convolution of 2 input channels into 11 output channels (NCHW, at
    /// stride 1 and 2, 19 output columns: a vector and a masked tail, a block
    /// of 8 rows and one of 3), as the walk [oc, ic, kh, kw, ow] of output row
    /// `oh` views it, adding to the output and into it, against the loops
    /// written out.
    #[test]
    fn walks_a_convolution_row_like_its_loops() {
        let (oc, ic, h, ow) = (11i64, 2i64, 5i64, 19i64);
        for s in [1, 2] {
            let w = s * (ow - 1) + 3;
            let x: Vec<f32> = (0..ic * h * w)
                .map(|i| ((i * 7) % 13) as f32 - 6.0)
                .collect();
            let wt: Vec<f32> = (0..oc * ic * 9)
                .map(|i| ((i * 5) % 11) as f32 * 0.5)
                .collect();
            for (oh, into) in (0..h - 2).flat_map(|oh| [(oh, false), (oh, true)]) {
                let mut y = vec![1.0f32; (oc * ow) as usize];
                let extents = [oc, ic, 3, 3, ow];
                let mut views = [
                    KernelRegion::view(y.as_mut_ptr(), &extents, &[ow, 0, 0, 0, 1]),
                    KernelRegion::view(wt.as_ptr() as *mut f32, &extents, &[ic * 9, 9, 3, 1, 0]),
                    KernelRegion::view(
                        x[(oh * w) as usize..].as_ptr() as *mut f32,
                        &extents,
                        &[0, h * w, w, 1, s],
                    ),
                ];
                contract(&mut views, into).unwrap();
                for o in 0..oc {
                    for j in 0..ow {
                        let mut want = if into { 0.0f32 } else { 1.0 };
                        for c in 0..ic {
                            for kh in 0..3 {
                                for kw in 0..3 {
                                    want += wt[(((o * ic + c) * 3 + kh) * 3 + kw) as usize]
                                        * x[((c * h + oh + kh) * w + j * s + kw) as usize];
                                }
                            }
                        }
                        let got = y[(o * ow + j) as usize];
                        assert!(
                            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                            "stride {s}, row {oh}, into {into}, channel {o}, column {j}: {got}, want {want}"
                        );
                    }
                }
            }
        }
    }
}
