//! Where: each output element taken from one of two f32 operands by a boolean
//! mask, the three broadcast to the output as the operands of an elementwise
//! chain are (`broadcast_strides`, axes merged the same way). A selection only
//! copies, so NaN and the infinities pass through untouched.

use super::elementwise::{merge_axes, run_offsets};
use super::simd::{run_vectorized, Isa, Lanes, Vector, VectorKernel, ELEMENTS_PER_TASK};
use super::KernelError;
use crate::core::par;

/// A compiled Where: how the mask and both branches line up with the output.
#[derive(Clone, Debug)]
pub struct Select {
    /// Extents of the merged output axes, outermost first; the last is the run.
    extents: Vec<usize>,
    /// Per operand (the mask, then the branch taken where it is true, then
    /// the other), its element stride along each merged axis: 0 or 1 along
    /// the run.
    strides: Vec<Vec<usize>>,
    /// Per operand, the length of its buffer.
    lens: Vec<usize>,
    lanes: Lanes,
}

impl Select {
    /// The Where writing an output of physical shape `out` from three
    /// operands with `strides` (from `broadcast_strides`) over buffers of
    /// `lens` elements. `None` when an operand is not contiguous or repeated
    /// along the innermost merged axis.
    pub fn new(
        out: &[usize],
        strides: Vec<Vec<usize>>,
        lens: Vec<usize>,
        isa: Isa,
    ) -> Option<Select> {
        let ok =
            strides.len() == 3 && lens.len() == 3 && strides.iter().all(|s| s.len() == out.len());
        ok.then_some(())?;
        let (extents, strides) = merge_axes(out, strides);
        strides
            .iter()
            .all(|s| s.last().is_some_and(|&inner| inner <= 1))
            .then_some(())?;
        Some(Select {
            extents,
            strides,
            lens,
            lanes: Lanes::for_block(isa, isa.lanes()),
        })
    }

    /// `y[i] = if mask[i] { a[i] } else { b[i] }`, operands broadcast.
    pub fn run(
        &self,
        mask: &[bool],
        a: &[f32],
        b: &[f32],
        y: &mut [f32],
    ) -> Result<(), KernelError> {
        let given = [mask.len(), a.len(), b.len()];
        let out_len: usize = self.extents.iter().product();
        if given[..] != self.lens[..] || y.len() != out_len {
            return Err(KernelError::Buffers {
                kernel: "Where",
                given: given.iter().copied().chain([y.len()]).collect(),
                expected: self.lens.iter().copied().chain([out_len]).collect(),
            });
        }
        let run = *self.extents.last().expect("at least one axis");
        if run == 0 {
            return Ok(());
        }
        // Pieces of at most a task's elements, so that one long run is split too.
        let pieces_per_run = run.div_ceil(ELEMENTS_PER_TASK);
        let pieces = out_len / run * pieces_per_run;
        let y_at = y.as_mut_ptr() as usize;
        par::for_each(pieces, |piece| {
            let (r, part) = (piece / pieces_per_run, piece % pieces_per_run);
            let start = part * ELEMENTS_PER_TASK;
            let mut at = [0usize; 3];
            let outer = &self.extents[..self.extents.len() - 1];
            run_offsets(outer, &self.strides, r, &mut at);
            let inner = |k: usize| self.strides[k][outer.len()];
            for (k, a) in at.iter_mut().enumerate() {
                *a += start * inner(k);
            }
            let piece = Piece {
                len: ELEMENTS_PER_TASK.min(run - start),
                mask: mask[at[0]..].as_ptr().cast(),
                a: a[at[1]..].as_ptr(),
                b: b[at[2]..].as_ptr(),
                steps: [inner(0), inner(1), inner(2)],
                y: (y_at as *mut f32).wrapping_add(r * run + start),
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; the operands'
            // lengths were checked against the strides, and the pieces write
            // disjoint parts of `y`.
            unsafe { run_vectorized(self.lanes, &piece) }
        });
        Ok(())
    }
}

/// `len` consecutive output elements; each operand read from its pointer on,
/// a step of 1 (consecutive) or 0 (one repeated value) per element.
struct Piece {
    len: usize,
    /// Bytes of Rust `bool`s: 0 or 1.
    mask: *const u8,
    a: *const f32,
    b: *const f32,
    steps: [usize; 3],
    y: *mut f32,
}

impl VectorKernel for Piece {
    /// A plain loop, compiled for each instruction set by `run_vectorized`,
    /// whose compiler turns it into vector blends; the steps are constants in
    /// each arm so that it can.
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        #[inline(always)]
        unsafe fn pick<const M: usize, const A: usize, const B: usize>(p: &Piece) {
            for i in 0..p.len {
                let (x, z) = (*p.a.add(i * A), *p.b.add(i * B));
                *p.y.add(i) = if *p.mask.add(i * M) != 0 { x } else { z };
            }
        }
        match self.steps {
            [1, 1, 1] => pick::<1, 1, 1>(self),
            [1, 1, 0] => pick::<1, 1, 0>(self),
            [1, 0, 1] => pick::<1, 0, 1>(self),
            [1, 0, 0] => pick::<1, 0, 0>(self),
            [0, 1, 1] => pick::<0, 1, 1>(self),
            [0, 1, 0] => pick::<0, 1, 0>(self),
            [0, 0, 1] => pick::<0, 0, 1>(self),
            _ => pick::<0, 0, 0>(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::{Graph, Op, Tensor, TensorData, ValueType};
    use crate::runtime::test_support::{compiled_per_isa, Rng};

    /// Where in one native step on every instruction set, equal to the
    /// reference executor bit for bit (NaN for NaN): the mask and each branch
    /// the whole shape or broadcast (a scalar, a per-channel column, a row),
    /// the branches holding NaN and both infinities, runs long enough to be
    /// cut into pieces.
    #[test]
    fn where_on_every_isa_matches_the_reference_executor() {
        let out = [2, 3, 5, 17];
        let shapes: [&[usize]; 5] = [&out, &[], &[3, 1, 1], &[17], &[1, 3, 5, 1]];
        let mut rng = Rng(7);
        let mut cases: Vec<[&[usize]; 3]> = vec![];
        for m in shapes {
            for a in shapes {
                cases.push([m, a, shapes[(cases.len() + 1) % shapes.len()]]);
            }
        }
        cases.push([&[3, 40000], &[3, 40000], &[]]);
        let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
        for (case, [ms, a_shape, b_shape]) in cases.into_iter().enumerate() {
            let mut g = Graph::new("where");
            let numel = |s: &[usize]| s.iter().product::<usize>();
            let mask: Vec<bool> = (0..numel(ms)).map(|_| rng.below(2) == 1).collect();
            let mut branch = |s: &[usize]| {
                let mut v = rng.f32s(numel(s));
                for (k, x) in special.iter().enumerate() {
                    if let Some(e) = v.get_mut(k * 3) {
                        *e = *x;
                    }
                }
                Tensor::from_f32(s.to_vec(), v)
            };
            let inputs = vec![
                Tensor::new(ms.to_vec(), TensorData::Bool(mask)),
                branch(a_shape),
                branch(b_shape),
            ];
            let ins: Vec<_> = inputs
                .iter()
                .enumerate()
                .map(|(k, t)| {
                    let ty = ValueType::new(t.dtype(), t.shape.clone());
                    g.add_input(&format!("x{k}"), ty, vec![])
                })
                .collect();
            let y = g.add_node(Op::Where, "where", &ins, &[], vec![]).unwrap();
            g.set_outputs(vec![crate::graph::ValueRef::new(y, 0)]);
            let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
            for (isa, m) in compiled_per_isa(&g) {
                let what = format!("case {case} {ms:?} {a_shape:?} {b_shape:?} {isa}");
                assert_eq!(m.describe(), ["where [Where] native"], "{what}");
                let got = m.run(&inputs).unwrap()[0].to_f32();
                assert_eq!(got.len(), expected.len(), "{what}");
                for (i, (a, e)) in got.iter().zip(&expected).enumerate() {
                    let same = a.to_bits() == e.to_bits() || (a.is_nan() && e.is_nan());
                    assert!(same, "{what}: element {i} is {a}, expected {e}");
                }
            }
        }
    }
}
