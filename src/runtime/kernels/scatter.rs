//! ScatterND and ScatterElements by run-time indices: the output is the data
//! with each update combined into the element its index names, in the order
//! of the updates, so a repeated index sees the updates before it as the
//! reference's does. Where each update lands comes from the op's own rule
//! (`destinations`), which also makes an index out of range the same error.

use super::KernelError;
use crate::core::{numel, Tensor, TensorData};
use crate::graph::DType;
use crate::ops::{ScatterElements, ScatterNd, ScatterReduction};

/// Which scatter, with its attributes.
#[derive(Clone, Debug)]
pub enum Placing {
    /// ScatterND: index tuples name slices.
    Nd(ScatterNd),
    /// ScatterElements: each index names one element along an axis.
    Elements(ScatterElements),
}

/// A scatter of fixed shapes.
#[derive(Clone, Debug)]
pub struct Scatter {
    placing: Placing,
    /// The data's (and the output's) shape.
    data: Vec<usize>,
    /// The indices' shape.
    indices: Vec<usize>,
}

/// The element operations a reduction needs.
trait Combine: Copy {
    fn add(self, u: Self) -> Self;
    fn mul(self, u: Self) -> Self;
    fn max(self, u: Self) -> Self;
    fn min(self, u: Self) -> Self;
}

macro_rules! combine_ints {
    ($($t:ty),*) => {$(
        impl Combine for $t {
            fn add(self, u: $t) -> $t { self.wrapping_add(u) }
            fn mul(self, u: $t) -> $t { self.wrapping_mul(u) }
            fn max(self, u: $t) -> $t { Ord::max(self, u) }
            fn min(self, u: $t) -> $t { Ord::min(self, u) }
        }
    )*};
}
combine_ints!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! combine_floats {
    ($($t:ty),*) => {$(
        impl Combine for $t {
            fn add(self, u: $t) -> $t { self + u }
            fn mul(self, u: $t) -> $t { self * u }
            fn max(self, u: $t) -> $t { <$t>::max(self, u) }
            fn min(self, u: $t) -> $t { <$t>::min(self, u) }
        }
    )*};
}
combine_floats!(f32, f64);

/// How an element and an update landing on it combine.
fn combiner<T: Combine>(r: ScatterReduction) -> fn(T, T) -> T {
    match r {
        ScatterReduction::None => |_, u| u,
        ScatterReduction::Add => T::add,
        ScatterReduction::Mul => T::mul,
        ScatterReduction::Max => T::max,
        ScatterReduction::Min => T::min,
    }
}

impl Scatter {
    /// The scatter into data of shape `data` by indices of shape `indices`.
    pub fn new(placing: Placing, data: Vec<usize>, indices: Vec<usize>) -> Scatter {
        Scatter {
            placing,
            data,
            indices,
        }
    }

    fn reduction(&self) -> ScatterReduction {
        match &self.placing {
            Placing::Nd(s) => s.reduction,
            Placing::Elements(s) => s.reduction,
        }
    }

    /// Whether `run_tensors` takes values of `dtype`: a reduction needs
    /// arithmetic, a plain scatter only moves elements (packed float8 and
    /// 4-bit values are neither).
    pub fn takes(&self, dtype: DType) -> bool {
        let packed =
            crate::core::float8::is_float8(dtype) || matches!(dtype, DType::I4 | DType::U4);
        match self.reduction() {
            ScatterReduction::None => !packed,
            _ => !packed && !matches!(dtype, DType::Bool | DType::F16 | DType::BF16),
        }
    }

    /// `data` with `updates` scattered into it at `indices`, into `out`.
    pub fn run_f32(
        &self,
        data: &[f32],
        indices: &[i64],
        updates: &[f32],
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        self.place(data, indices, updates, out, combiner(self.reduction()))
    }

    /// The same on tensors of any type `takes`.
    pub fn run_tensors(
        &self,
        data: &Tensor,
        indices: &Tensor,
        updates: &Tensor,
    ) -> Result<Tensor, KernelError> {
        let indices = indices.data.to_i64();
        let r = self.reduction();
        macro_rules! scattered {
            ($x:expr, $u:expr, $variant:path, $combine:expr) => {{
                let mut y = $x.clone();
                self.place($x, &indices, $u, &mut y, $combine)?;
                $variant(y)
            }};
        }
        let out = match (&*data.data, &*updates.data) {
            (TensorData::I8(x), TensorData::I8(u)) => scattered!(x, u, TensorData::I8, combiner(r)),
            (TensorData::I16(x), TensorData::I16(u)) => {
                scattered!(x, u, TensorData::I16, combiner(r))
            }
            (TensorData::I32(x), TensorData::I32(u)) => {
                scattered!(x, u, TensorData::I32, combiner(r))
            }
            (TensorData::I64(x), TensorData::I64(u)) => {
                scattered!(x, u, TensorData::I64, combiner(r))
            }
            (TensorData::U8(x), TensorData::U8(u)) => scattered!(x, u, TensorData::U8, combiner(r)),
            (TensorData::U16(x), TensorData::U16(u)) => {
                scattered!(x, u, TensorData::U16, combiner(r))
            }
            (TensorData::U32(x), TensorData::U32(u)) => {
                scattered!(x, u, TensorData::U32, combiner(r))
            }
            (TensorData::U64(x), TensorData::U64(u)) => {
                scattered!(x, u, TensorData::U64, combiner(r))
            }
            (TensorData::F32(x), TensorData::F32(u)) => {
                scattered!(x, u, TensorData::F32, combiner(r))
            }
            (TensorData::F64(x), TensorData::F64(u)) => {
                scattered!(x, u, TensorData::F64, combiner(r))
            }
            // Elements moved, not combined (`takes` refuses reductions here).
            (TensorData::Bool(x), TensorData::Bool(u)) if r == ScatterReduction::None => {
                scattered!(x, u, TensorData::Bool, |_, u| u)
            }
            (TensorData::F16(x), TensorData::F16(u)) if r == ScatterReduction::None => {
                scattered!(x, u, TensorData::F16, |_, u| u)
            }
            (TensorData::BF16(x), TensorData::BF16(u)) if r == ScatterReduction::None => {
                scattered!(x, u, TensorData::BF16, |_, u| u)
            }
            (x, _) => {
                return Err(KernelError::Value(format!(
                    "no {} scatter of {} values",
                    r.onnx_name(),
                    x.dtype()
                )))
            }
        };
        Ok(Tensor::new(self.data.clone(), out))
    }

    fn place<T: Copy>(
        &self,
        data: &[T],
        indices: &[i64],
        updates: &[T],
        out: &mut [T],
        combine: fn(T, T) -> T,
    ) -> Result<(), KernelError> {
        let n = numel(&self.data);
        if data.len() != n || out.len() != n || indices.len() != numel(&self.indices) {
            return Err(KernelError::Buffers {
                kernel: "scatter",
                given: vec![data.len(), indices.len(), out.len()],
                expected: vec![n, numel(&self.indices), n],
            });
        }
        let dests = match &self.placing {
            Placing::Nd(s) => s.destinations(&self.data, &self.indices, indices),
            Placing::Elements(s) => s.destinations(&self.data, &self.indices, indices),
        }
        .map_err(|e| KernelError::Value(e.to_string()))?;
        if dests.len() != updates.len() {
            return Err(KernelError::Buffers {
                kernel: "scatter updates",
                given: vec![updates.len()],
                expected: vec![dests.len()],
            });
        }
        out.copy_from_slice(data);
        for (&d, &u) in dests.iter().zip(updates) {
            out[d] = combine(out[d], u);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::*;
    use crate::ops::Op;
    use crate::runtime::test_support::Rng;

    /// Every reduction of both scatters, repeated and negative indices, on
    /// f32 slots and on i64 and bool tensors, as the reference computes; an
    /// index out of range is an error.
    #[test]
    fn scatters_as_the_reference_does() {
        let mut rng = Rng(3);
        let data_shape = vec![4, 3, 2];
        let data = f32s(&data_shape, &rng.f32s(24));
        let reductions = [
            ScatterReduction::None,
            ScatterReduction::Add,
            ScatterReduction::Mul,
            ScatterReduction::Max,
            ScatterReduction::Min,
        ];
        for reduction in reductions {
            // Rows 1, -1 (3) and 1 again: the repeated row combines twice.
            let nd = (
                Placing::Nd(ScatterNd { reduction }),
                i64s(&[3, 1], &[1, -1, 1]),
                vec![3, 3, 2],
            );
            let elements = (
                Placing::Elements(ScatterElements { axis: 1, reduction }),
                i64s(&[2, 2, 2], &[0, 2, -1, 0, 1, 1, 2, 0]),
                vec![2, 2, 2],
            );
            for (placing, indices, updates_shape) in [nd, elements] {
                let n = updates_shape.iter().product();
                let updates = f32s(&updates_shape, &rng.f32s(n));
                let op = match &placing {
                    Placing::Nd(s) => Op::ScatterNd(s.clone()),
                    Placing::Elements(s) => Op::ScatterElements(s.clone()),
                };
                let want = eval1(op.clone(), &[&data, &indices, &updates]);
                let k = Scatter::new(placing.clone(), data_shape.clone(), indices.shape.clone());
                let mut got = vec![0.0; 24];
                let ids = indices.data.to_i64();
                k.run_f32(&data.f32s(), &ids, &updates.f32s(), &mut got)
                    .unwrap();
                let got: Vec<f64> = got.iter().map(|&v| v as f64).collect();
                assert_close(&want, &data_shape, &got, 1e-6);
                // The same on integers, and on booleans where nothing combines.
                let ints = |t: &crate::core::Tensor| t.cast_saturating(DType::I64, true);
                let (di, ui) = (ints(&data), ints(&updates));
                let want = eval1(op.clone(), &[&di, &indices, &ui]);
                assert_eq!(*k.run_tensors(&di, &indices, &ui).unwrap().data, *want.data);
                let bools = |t: &crate::core::Tensor| t.cast_saturating(DType::Bool, true);
                let (db, ub) = (bools(&data), bools(&updates));
                assert_eq!(k.takes(DType::Bool), reduction == ScatterReduction::None);
                if k.takes(DType::Bool) {
                    let want = eval1(op.clone(), &[&db, &indices, &ub]);
                    assert_eq!(*k.run_tensors(&db, &indices, &ub).unwrap().data, *want.data);
                }
            }
        }
        let k = Scatter::new(
            Placing::Nd(ScatterNd {
                reduction: ScatterReduction::None,
            }),
            vec![4],
            vec![1, 1],
        );
        let err = k
            .run_f32(&[0.0; 4], &[4], &[1.0], &mut [0.0; 4])
            .unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
    }
}
