//! Compositions both importers build from IR ops: an operator that ONNX and
//! TFLite both have (OneHot, Range) is converted by one piece of code, each
//! importer lending it the way it adds nodes and constants to the layer it
//! converts.

use crate::graph::{check_value_size, memory_limit};
use crate::graph::{BinaryOp, DType, Op, Tensor, TensorData, ValueRef, ValueType};
use crate::ops::{Cast, Reshape};

/// What a composition needs of the importer converting a layer.
pub(crate) trait LayerBuilder {
    type Error;
    /// Adds a node of the layer, named within it after `what`.
    fn step(&mut self, op: Op, inputs: &[ValueRef], what: &str) -> Result<ValueRef, Self::Error>;
    /// A constant of the layer, named within it after `what`.
    fn layer_constant(&mut self, what: &str, t: Tensor) -> ValueRef;
    fn value_type(&self, v: ValueRef) -> ValueType;
    /// An error naming the layer.
    fn layer_error(&self, message: String) -> Self::Error;
}

/// Which indices of a one-hot encoding count from the end.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NegativeIndices {
    /// ONNX: −1 is the last position (`depth − 1`).
    FromEnd,
    /// TensorFlow: an index outside `[0, depth)` is hot nowhere.
    Nowhere,
}

/// The mask of a one-hot encoding: true where an index of `indices` equals the
/// position along a new axis `axis` of extent `depth`. The encoding is a
/// Where of it between the on and off values.
pub(crate) fn one_hot_mask<B: LayerBuilder>(
    b: &mut B,
    indices: ValueRef,
    depth: usize,
    axis: usize,
    negative: NegativeIndices,
) -> Result<ValueRef, B::Error> {
    let ty = b.value_type(indices);
    let mut out_shape = ty.shape.clone();
    if axis > out_shape.len() {
        return Err(b.layer_error(format!(
            "one-hot axis {axis} is outside the {} axes of the result",
            out_shape.len() + 1
        )));
    }
    out_shape.insert(axis, depth);
    fits(b, DType::Bool, &out_shape, "the encoding")?;
    // Indices of any numeric type compare as i64, as onnxruntime casts them.
    let mut index = indices;
    if ty.dtype != DType::I64 {
        let to_i64 = Op::Cast(Cast {
            to: DType::I64,
            saturate: true,
        });
        index = b.step(to_i64, &[index], "as_i64")?;
    }
    if negative == NegativeIndices::FromEnd {
        let zero = b.layer_constant("zero", Tensor::from_i64(vec![], vec![0]));
        let depth_value = b.layer_constant("depth", Tensor::from_i64(vec![], vec![depth as i64]));
        let is_negative = b.step(Op::Binary(BinaryOp::Less), &[index, zero], "negative")?;
        let wrapped = b.step(Op::Binary(BinaryOp::Add), &[index, depth_value], "wrapped")?;
        index = b.step(Op::Where, &[is_negative, wrapped, index], "index")?;
    }
    let mut index_shape = out_shape.clone();
    index_shape[axis] = 1;
    let reshape = Op::Reshape(Reshape { shape: index_shape });
    let index = b.step(reshape, &[index], "on_axis")?;
    let mut positions_shape = vec![1; out_shape.len()];
    positions_shape[axis] = depth;
    let positions = Tensor::new(
        positions_shape,
        TensorData::I64((0..depth as i64).collect()),
    );
    let positions = b.layer_constant("positions", positions);
    b.step(Op::Binary(BinaryOp::Equal), &[index, positions], "hot")
}

/// The values start, start + delta, … short of limit, in the scalars' type
/// (`start`'s), as ONNX Range and TFLite RANGE compute them.
pub(crate) fn range_values<B: LayerBuilder>(
    b: &B,
    start: &Tensor,
    limit: &Tensor,
    delta: &Tensor,
) -> Result<Tensor, B::Error> {
    if [start, limit, delta].iter().any(|t| t.numel() != 1) {
        return Err(
            b.layer_error("the range's start, limit and delta must each hold one value".into())
        );
    }
    let dtype = start.dtype();
    if dtype.is_float() {
        let (s, l, d) = (
            start.data.to_f64()[0],
            limit.data.to_f64()[0],
            delta.data.to_f64()[0],
        );
        let n = range_len(b, (l - s) / d, d == 0.0, dtype)?;
        // Rounded to the element type once, from f64 positions, as the
        // specifications' loop accumulates them in float.
        let vals: Vec<f64> = (0..n).map(|i| s + i as f64 * d).collect();
        Ok(Tensor::new(vec![n], TensorData::from_f64(dtype, vals)))
    } else {
        let (s, l, d) = (
            start.data.to_i64()[0],
            limit.data.to_i64()[0],
            delta.data.to_i64()[0],
        );
        let n = range_len(b, (l as f64 - s as f64) / d as f64, d == 0, dtype)?;
        let vals = (0..n as i128).map(|i| s as i128 + i * d as i128).collect();
        Ok(Tensor::new(vec![n], TensorData::from_i128(dtype, vals)))
    }
}

/// The number of values of a range of `steps` (fractional) steps.
fn range_len<B: LayerBuilder>(
    b: &B,
    steps: f64,
    zero_delta: bool,
    dtype: DType,
) -> Result<usize, B::Error> {
    if zero_delta {
        return Err(b.layer_error("the range's delta must not be zero".into()));
    }
    let n = steps.ceil().max(0.0);
    if n > 1e9 {
        return Err(b.layer_error(format!("the range would hold {n} values")));
    }
    fits(b, dtype, &[n as usize], "the range")?;
    Ok(n as usize)
}

/// Refuses a tensor the composition is about to build when it could not fit
/// the memory budget.
fn fits<B: LayerBuilder>(b: &B, dtype: DType, shape: &[usize], what: &str) -> Result<(), B::Error> {
    let ty = ValueType::new(dtype, shape.to_vec());
    check_value_size(&ty, what, memory_limit()).map_err(|e| b.layer_error(e.to_string()))
}
