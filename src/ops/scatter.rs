//! Reads and writes at indices given as data: GatherND, ScatterND and
//! ScatterElements. Indices are checked when the op runs (one out of range is
//! an error); negative ones count from the end of their axis.

use super::onnx::*;
use super::shape::*;
use super::*;
use crate::core::{numel, strides, Tensor, TensorData, ValueType};

/// How a scatter combines an update with the element it lands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ScatterReduction {
    /// The update replaces the element.
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl ScatterReduction {
    const ALL: [ScatterReduction; 5] = [
        ScatterReduction::None,
        ScatterReduction::Add,
        ScatterReduction::Mul,
        ScatterReduction::Max,
        ScatterReduction::Min,
    ];

    /// The ONNX `reduction` attribute value.
    pub fn onnx_name(self) -> &'static str {
        match self {
            ScatterReduction::None => "none",
            ScatterReduction::Add => "add",
            ScatterReduction::Mul => "mul",
            ScatterReduction::Max => "max",
            ScatterReduction::Min => "min",
        }
    }

    /// The reduction an ONNX `reduction` attribute names.
    pub fn from_onnx(name: &str) -> Option<ScatterReduction> {
        Self::ALL.into_iter().find(|r| r.onnx_name() == name)
    }

    /// max and min came in opset 18, add and mul in 16.
    fn min_opset(self) -> i64 {
        match self {
            ScatterReduction::Max | ScatterReduction::Min => 18,
            _ => 17,
        }
    }
}

/// GatherND: data, indices -> the slices of data at the index tuples along
/// indices' last axis; the first `batch_dims` axes are shared.
#[derive(Clone, Debug, PartialEq)]
pub struct GatherNd {
    /// Leading axes data and indices share.
    pub batch_dims: usize,
}

/// ScatterND: data, indices, updates -> data with the slices at the index
/// tuples along indices' last axis combined with updates.
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterNd {
    /// How updates combine with data.
    pub reduction: ScatterReduction,
}

/// ScatterElements: data, indices, updates (indices' shape) -> data with the
/// element of each index position, its `axis` coordinate replaced by the
/// index, combined with the update.
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterElements {
    /// The axis indices index.
    pub axis: usize,
    /// How updates combine with data.
    pub reduction: ScatterReduction,
}

fn expect_indices(t: &ValueType) -> Result<(), OpError> {
    if matches!(t.dtype, DType::I64 | DType::I32) {
        Ok(())
    } else {
        Err(OpError::DType(format!(
            "indices must be i64 or i32, got {}",
            t.dtype
        )))
    }
}

fn expect_same_dtype(data: &ValueType, updates: &ValueType) -> Result<(), OpError> {
    if data.dtype == updates.dtype {
        Ok(())
    } else {
        Err(OpError::DType(format!(
            "updates are {}, data {}",
            updates.dtype, data.dtype
        )))
    }
}

/// `i` as a position on an axis of `extent` (negative counts from the end).
fn position(i: i64, extent: usize) -> Result<usize, OpError> {
    let wrapped = if i < 0 { i + extent as i64 } else { i };
    usize::try_from(wrapped)
        .ok()
        .filter(|&p| p < extent)
        .ok_or_else(|| OpError::Value(format!("index {i} is out of range for extent {extent}")))
}

/// The last axis of indices (the tuple length) and the shape before it.
fn tuples(indices: &ValueType) -> Result<(&[usize], usize), OpError> {
    match indices.shape.split_last() {
        Some((&k, outer)) => Ok((outer, k)),
        None => Err(OpError::Shape("indices must have rank 1 or more".into())),
    }
}

/// The flat offsets into `data_shape` of the index tuples (length `k`, each
/// `k` consecutive values of `indices`).
fn tuple_offsets(indices: &[i64], k: usize, data_shape: &[usize]) -> Result<Vec<usize>, OpError> {
    let st = strides(data_shape);
    if k == 0 {
        return Ok(vec![0; indices.len()]);
    }
    indices
        .chunks(k)
        .map(|t| {
            t.iter().enumerate().try_fold(0, |acc, (a, &i)| {
                Ok(acc + position(i, data_shape[a])? * st[a])
            })
        })
        .collect()
}

impl GatherNd {
    /// Where each slice the index tuples pick starts in data of shape `data`
    /// (flat offsets, in output order), and the slices' length, for indices
    /// of shape `indices` holding `values`; an index out of range is an error.
    pub fn slices(
        &self,
        data: &[usize],
        indices: &[usize],
        values: &[i64],
    ) -> Result<(Vec<usize>, usize), OpError> {
        let b = self.batch_dims;
        let k = indices.last().copied().unwrap_or(0);
        let per_batch = numel(&data[b..]);
        let slice = numel(&data[(b + k).min(data.len())..]);
        let batches = numel(&data[..b]).max(1);
        let per_batch_values = values.len() / batches;
        let mut starts = Vec::with_capacity(values.len() / k.max(1));
        for (batch, values) in values.chunks(per_batch_values.max(1)).enumerate() {
            let offsets = tuple_offsets(values, k, &data[b..])?;
            starts.extend(offsets.into_iter().map(|o| batch * per_batch + o));
        }
        Ok((starts, slice))
    }
}

impl ScatterNd {
    /// The flat data offset each update element lands on, in the order of
    /// the updates, for data of shape `data` and indices of shape `indices`
    /// holding `values`; an index out of range is an error.
    pub fn destinations(
        &self,
        data: &[usize],
        indices: &[usize],
        values: &[i64],
    ) -> Result<Vec<usize>, OpError> {
        let k = indices.last().copied().unwrap_or(0);
        let slice = numel(&data[k.min(data.len())..]);
        let offsets = tuple_offsets(values, k, data)?;
        Ok(offsets.into_iter().flat_map(|d| d..d + slice).collect())
    }
}

impl ScatterElements {
    /// The flat data offset each update element lands on, in the order of
    /// the updates (as [`ScatterNd::destinations`]).
    pub fn destinations(
        &self,
        data: &[usize],
        indices: &[usize],
        values: &[i64],
    ) -> Result<Vec<usize>, OpError> {
        let (data_st, index_st) = (strides(data), strides(indices));
        let extent = data[self.axis];
        (values.iter().enumerate())
            .map(|(u, &i)| {
                let mut dest = 0;
                for (a, (&ds, &is)) in data_st.iter().zip(&index_st).enumerate() {
                    let coordinate = (u / is) % indices[a];
                    let coordinate = if a == self.axis {
                        position(i, extent)?
                    } else if coordinate < data[a] {
                        coordinate
                    } else {
                        return Err(OpError::Shape(format!(
                            "indices {indices:?} exceed data {data:?} on axis {a}"
                        )));
                    };
                    dest += coordinate * ds;
                }
                Ok(dest)
            })
            .collect()
    }
}

impl OpDef for GatherNd {
    fn name(&self) -> &'static str {
        "GatherND"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 2, 2)?;
        let (data, indices) = (inputs[0], inputs[1]);
        expect_indices(indices)?;
        let (outer, k) = tuples(indices)?;
        let b = self.batch_dims;
        if b > outer.len() || b + k > data.shape.len() || data.shape[..b] != indices.shape[..b] {
            return Err(OpError::Shape(format!(
                "indices {:?} (batch_dims {b}) do not index data {:?}",
                indices.shape, data.shape
            )));
        }
        let mut shape = outer.to_vec();
        shape.extend(&data.shape[b + k..]);
        Ok(vec![ValueType::new(data.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let (data, indices) = (x[0], x[1]);
        let (starts, slice) = self.slices(&data.shape, &indices.shape, &indices.data.to_i64())?;
        let src = starts.into_iter().flat_map(|s| s..s + slice);
        let out = &outputs[0];
        Ok(vec![Tensor::new(
            out.shape.clone(),
            data.data.gather(src.into_iter()),
        )])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let attrs = vec![("batch_dims", Attr::Int(self.batch_dims as i64))];
        cx.single("GatherND", cx.inputs, attrs)
    }
}

impl OpDef for ScatterNd {
    fn name(&self) -> &'static str {
        "ScatterND"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 3, 3)?;
        let (data, indices, updates) = (inputs[0], inputs[1], inputs[2]);
        expect_indices(indices)?;
        expect_same_dtype(data, updates)?;
        let (outer, k) = tuples(indices)?;
        let fits = k <= data.shape.len() && {
            let mut want = outer.to_vec();
            want.extend(&data.shape[k..]);
            want == updates.shape
        };
        if !fits {
            return Err(OpError::Shape(format!(
                "updates {:?} and indices {:?} do not fit data {:?}",
                updates.shape, indices.shape, data.shape
            )));
        }
        Ok(vec![data.clone()])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let (data, indices, updates) = (x[0], x[1], x[2]);
        let dests = self.destinations(&data.shape, &indices.shape, &indices.data.to_i64())?;
        Ok(vec![scatter(
            data,
            updates,
            &dests,
            self.reduction,
            &outputs[0],
        )?])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let attrs = vec![("reduction", Attr::Str(self.reduction.onnx_name()))];
        cx.single("ScatterND", cx.inputs, attrs)
    }

    fn min_onnx_opset(&self) -> i64 {
        self.reduction.min_opset()
    }
}

impl OpDef for ScatterElements {
    fn name(&self) -> &'static str {
        "ScatterElements"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 3, 3)?;
        let (data, indices, updates) = (inputs[0], inputs[1], inputs[2]);
        expect_indices(indices)?;
        expect_same_dtype(data, updates)?;
        let r = data.shape.len();
        if self.axis >= r || indices.shape.len() != r || indices.shape != updates.shape {
            return Err(OpError::Shape(format!(
                "indices {:?} and updates {:?} (axis {}) do not fit data {:?}",
                indices.shape, updates.shape, self.axis, data.shape
            )));
        }
        Ok(vec![data.clone()])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let (data, indices, updates) = (x[0], x[1], x[2]);
        let dests = self.destinations(&data.shape, &indices.shape, &indices.data.to_i64())?;
        Ok(vec![scatter(
            data,
            updates,
            &dests,
            self.reduction,
            &outputs[0],
        )?])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let attrs = vec![
            ("axis", Attr::Int(self.axis as i64)),
            ("reduction", Attr::Str(self.reduction.onnx_name())),
        ];
        cx.single("ScatterElements", cx.inputs, attrs)
    }

    fn min_onnx_opset(&self) -> i64 {
        self.reduction.min_opset()
    }
}

/// `data` with the element at `dests[u]` combined with update `u`, in order
/// (a later update to the same element sees the earlier ones).
fn scatter(
    data: &Tensor,
    updates: &Tensor,
    dests: &[usize],
    reduction: ScatterReduction,
    out: &ValueType,
) -> Result<Tensor, OpError> {
    let pairs = dests.iter().copied().enumerate().map(|(u, d)| (d, u));
    let n = data.numel();
    let result = match reduction {
        ScatterReduction::None => {
            // Pick from data and updates joined end to end.
            let mut src: Vec<usize> = (0..n).collect();
            for (d, u) in pairs {
                src[d] = n + u;
            }
            TensorData::concat(&[&data.data, &updates.data])?.gather(src.into_iter())
        }
        r if out.dtype.is_float() => {
            let (mut v, w) = (data.data.to_f64(), updates.data.to_f64());
            for (d, u) in pairs {
                v[d] = match r {
                    ScatterReduction::Add => v[d] + w[u],
                    ScatterReduction::Mul => v[d] * w[u],
                    ScatterReduction::Max => v[d].max(w[u]),
                    _ => v[d].min(w[u]),
                };
            }
            TensorData::from_f64(out.dtype, v)
        }
        r => {
            let (mut v, w) = (data.data.to_i128(), updates.data.to_i128());
            for (d, u) in pairs {
                v[d] = match r {
                    ScatterReduction::Add => v[d].wrapping_add(w[u]),
                    ScatterReduction::Mul => v[d].wrapping_mul(w[u]),
                    ScatterReduction::Max => v[d].max(w[u]),
                    _ => v[d].min(w[u]),
                };
            }
            TensorData::from_i128(out.dtype, v)
        }
    };
    Ok(Tensor::new(out.shape.clone(), result))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::{GatherNd, ScatterElements, ScatterNd, ScatterReduction};
    use crate::ops::Op;

    #[test]
    fn negative_indices_count_from_the_end_and_out_of_range_ones_are_errors() {
        // numpy: d = [1, 2, 3]; d[[-1]] = 9 gives [1, 2, 9].
        let data = f32s(&[3], &[1.0, 2.0, 3.0]);
        let scatter = Op::ScatterElements(ScatterElements {
            axis: 0,
            reduction: ScatterReduction::None,
        });
        let got = eval1(
            scatter.clone(),
            &[&data, &i64s(&[1], &[-1]), &f32s(&[1], &[9.0])],
        );
        assert_close(&got, &[3], &[1.0, 2.0, 9.0], 0.0);
        let err = try_eval(scatter, &[&data, &i64s(&[1], &[3]), &f32s(&[1], &[9.0])]);
        assert!(err.unwrap_err().to_string().contains("out of range"));
        // numpy: np.array([[1, 2], [3, 4]])[-1] is [3, 4].
        let rows = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let gather = Op::GatherNd(GatherNd { batch_dims: 0 });
        let got = eval1(gather.clone(), &[&rows, &i64s(&[1, 1], &[-1])]);
        assert_close(&got, &[1, 2], &[3.0, 4.0], 0.0);
        assert!(try_eval(gather, &[&rows, &i64s(&[1, 1], &[-3])]).is_err());
    }

    #[test]
    fn scatter_nd_reductions_combine_repeated_indices_in_order() {
        // Both updates land on element 1: 2 + 10 + 20, and max(2, 10, 20).
        let data = i64s(&[3], &[1, 2, 3]);
        let (indices, updates) = (i64s(&[2, 1], &[1, 1]), i64s(&[2], &[10, 20]));
        let add = Op::ScatterNd(ScatterNd {
            reduction: ScatterReduction::Add,
        });
        assert_i64(&eval1(add, &[&data, &indices, &updates]), &[3], &[1, 32, 3]);
        let max = Op::ScatterNd(ScatterNd {
            reduction: ScatterReduction::Max,
        });
        assert_i64(&eval1(max, &[&data, &indices, &updates]), &[3], &[1, 20, 3]);
    }
}
