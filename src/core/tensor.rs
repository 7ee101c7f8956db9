//! Element types and dense tensors (row-major, logical layout).

use half::f16;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit float (IEEE half).
    F16,
    /// 64-bit float.
    F64,
    /// 64-bit signed integer.
    I64,
    /// 32-bit signed integer.
    I32,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// Boolean (one byte per element).
    Bool,
}

impl DType {
    /// The ONNX `TensorProto.DataType` code of this type.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
        }
    }

    /// Whether the type is a float type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::F64)
    }

    /// Bytes per element as stored in memory.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// The short name used in reports (`f32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The elements of a tensor, one vector per element type.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 16-bit floats.
    F16(Vec<f16>),
    /// 64-bit floats.
    F64(Vec<f64>),
    /// 64-bit integers.
    I64(Vec<i64>),
    /// 32-bit integers.
    I32(Vec<i32>),
    /// 8-bit integers.
    I8(Vec<i8>),
    /// 8-bit unsigned integers.
    U8(Vec<u8>),
    /// Booleans.
    Bool(Vec<bool>),
}

/// A dense tensor in logical (row-major) order.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Extent of every axis.
    pub shape: Vec<usize>,
    /// The elements, row-major. Shared, so that copies of a graph (a plan, a
    /// compiled model) hold one copy of the weights, not one each.
    pub data: Arc<TensorData>,
}

/// Number of elements of a shape; `None` when the product overflows.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Number of elements of a shape already known not to overflow.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

impl TensorData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F16(_) => DType::F16,
            TensorData::F64(_) => DType::F64,
            TensorData::I64(_) => DType::I64,
            TensorData::I32(_) => DType::I32,
            TensorData::I8(_) => DType::I8,
            TensorData::U8(_) => DType::U8,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::F16(v) => v.len(),
            TensorData::F64(v) => v.len(),
            TensorData::I64(v) => v.len(),
            TensorData::I32(v) => v.len(),
            TensorData::I8(v) => v.len(),
            TensorData::U8(v) => v.len(),
            TensorData::Bool(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every element converted to f64 (booleans as 0/1).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            TensorData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::F64(v) => v.clone(),
            TensorData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I8(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U8(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }

    /// Every element converted to i64 (floats truncated toward zero, saturating).
    pub fn to_i64(&self) -> Vec<i64> {
        match self {
            TensorData::I64(v) => v.clone(),
            TensorData::I32(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::I8(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::U8(v) => v.iter().map(|&x| x as i64).collect(),
            TensorData::Bool(v) => v.iter().map(|&x| x as i64).collect(),
            other => other.to_f64().into_iter().map(|x| x as i64).collect(),
        }
    }

    /// The elements as booleans (non-zero is true).
    pub fn to_bool(&self) -> Vec<bool> {
        match self {
            TensorData::Bool(v) => v.clone(),
            other => other.to_f64().into_iter().map(|x| x != 0.0).collect(),
        }
    }

    /// Builds data of `dtype` from f64 values (rounding / wrapping like a C cast).
    pub fn from_f64(dtype: DType, v: Vec<f64>) -> TensorData {
        match dtype {
            DType::F32 => TensorData::F32(v.into_iter().map(|x| x as f32).collect()),
            DType::F16 => TensorData::F16(v.into_iter().map(f16::from_f64).collect()),
            DType::F64 => TensorData::F64(v),
            DType::I64 => TensorData::I64(v.into_iter().map(|x| x as i64).collect()),
            DType::I32 => TensorData::I32(v.into_iter().map(|x| x as i64 as i32).collect()),
            DType::I8 => TensorData::I8(v.into_iter().map(|x| x as i64 as i8).collect()),
            DType::U8 => TensorData::U8(v.into_iter().map(|x| x as i64 as u8).collect()),
            DType::Bool => TensorData::Bool(v.into_iter().map(|x| x != 0.0).collect()),
        }
    }

    /// Builds data of `dtype` from i64 values (wrapping like a C cast).
    pub fn from_i64(dtype: DType, v: Vec<i64>) -> TensorData {
        match dtype {
            DType::I64 => TensorData::I64(v),
            DType::I32 => TensorData::I32(v.into_iter().map(|x| x as i32).collect()),
            DType::I8 => TensorData::I8(v.into_iter().map(|x| x as i8).collect()),
            DType::U8 => TensorData::U8(v.into_iter().map(|x| x as u8).collect()),
            DType::Bool => TensorData::Bool(v.into_iter().map(|x| x != 0).collect()),
            float => TensorData::from_f64(float, v.into_iter().map(|x| x as f64).collect()),
        }
    }

    /// Picks the elements at `indices` (in order), keeping the element type.
    pub fn gather(&self, indices: impl Iterator<Item = usize>) -> TensorData {
        fn pick<T: Copy>(v: &[T], idx: impl Iterator<Item = usize>) -> Vec<T> {
            idx.map(|i| v[i]).collect()
        }
        match self {
            TensorData::F32(v) => TensorData::F32(pick(v, indices)),
            TensorData::F16(v) => TensorData::F16(pick(v, indices)),
            TensorData::F64(v) => TensorData::F64(pick(v, indices)),
            TensorData::I64(v) => TensorData::I64(pick(v, indices)),
            TensorData::I32(v) => TensorData::I32(pick(v, indices)),
            TensorData::I8(v) => TensorData::I8(pick(v, indices)),
            TensorData::U8(v) => TensorData::U8(pick(v, indices)),
            TensorData::Bool(v) => TensorData::Bool(pick(v, indices)),
        }
    }

    /// A zero-filled vector of `dtype` (false for bool).
    pub fn zeros(dtype: DType, len: usize) -> TensorData {
        TensorData::from_i64(dtype, vec![0; len])
    }
}

impl Tensor {
    /// A tensor of `shape` holding `data` (the caller keeps them consistent).
    pub fn new(shape: Vec<usize>, data: TensorData) -> Tensor {
        debug_assert_eq!(numel(&shape), data.len());
        Tensor {
            shape,
            data: Arc::new(data),
        }
    }

    /// An f32 tensor.
    pub fn from_f32(shape: Vec<usize>, v: Vec<f32>) -> Tensor {
        Tensor::new(shape, TensorData::F32(v))
    }

    /// An i64 tensor.
    pub fn from_i64(shape: Vec<usize>, v: Vec<i64>) -> Tensor {
        Tensor::new(shape, TensorData::I64(v))
    }

    /// A rank-0 f32 tensor.
    pub fn scalar_f32(x: f32) -> Tensor {
        Tensor::from_f32(vec![], vec![x])
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The elements as f32 (converting when stored otherwise).
    pub fn to_f32(&self) -> Vec<f32> {
        self.f32s().into_owned()
    }

    /// The elements as f32, borrowed when they are stored as f32 (weights are
    /// read without a copy), converted otherwise.
    pub fn f32s(&self) -> Cow<'_, [f32]> {
        match &*self.data {
            TensorData::F32(v) => Cow::Borrowed(v),
            other => Cow::Owned(other.to_f64().into_iter().map(|x| x as f32).collect()),
        }
    }

    /// Converts to another element type with ONNX Cast semantics.
    pub fn cast(&self, to: DType) -> Tensor {
        let data = if to.is_float() || self.dtype().is_float() {
            if to.is_float() || to == DType::Bool {
                TensorData::from_f64(to, self.data.to_f64())
            } else {
                // Float to integer: truncate toward zero, as C and ONNX do.
                TensorData::from_f64(to, self.data.to_f64().into_iter().map(f64::trunc).collect())
            }
        } else {
            TensorData::from_i64(to, self.data.to_i64())
        };
        Tensor::new(self.shape.clone(), data)
    }

    /// The same elements under another shape of equal element count.
    pub fn reshaped(&self, shape: Vec<usize>) -> Tensor {
        debug_assert_eq!(numel(&shape), self.data.len());
        Tensor {
            shape,
            data: self.data.clone(),
        }
    }
}

/// Element type and static shape of a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueType {
    /// Element type.
    pub dtype: DType,
    /// Extent of every axis.
    pub shape: Vec<usize>,
}

impl ValueType {
    /// The type of `dtype` elements in `shape`.
    pub fn new(dtype: DType, shape: Vec<usize>) -> ValueType {
        ValueType { dtype, shape }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Bytes of the elements as stored.
    pub fn size_bytes(&self) -> usize {
        self.numel() * self.dtype.size_bytes()
    }
}

impl std::fmt::Display for ValueType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}
