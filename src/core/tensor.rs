//! Element types and dense tensors (row-major, logical layout).

use super::float8;
use half::{bf16, f16};
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
    /// 16-bit brain float (the upper half of an f32).
    BF16,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, no infinities.
    F8E4M3FN,
    /// 8-bit float like `F8E4M3FN`, with no -0 (its pattern is the NaN).
    F8E4M3FNUZ,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits (IEEE-like).
    F8E5M2,
    /// 8-bit float like `F8E5M2`, with no infinities and no -0.
    F8E5M2FNUZ,
    /// 64-bit float.
    F64,
    /// 64-bit signed integer.
    I64,
    /// 32-bit signed integer.
    I32,
    /// 16-bit signed integer.
    I16,
    /// 8-bit signed integer.
    I8,
    /// 64-bit unsigned integer.
    U64,
    /// 32-bit unsigned integer.
    U32,
    /// 16-bit unsigned integer.
    U16,
    /// 8-bit unsigned integer.
    U8,
    /// 4-bit signed integer.
    I4,
    /// 4-bit unsigned integer.
    U4,
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
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::BF16 => 16,
            DType::F8E4M3FN => 17,
            DType::F8E4M3FNUZ => 18,
            DType::F8E5M2 => 19,
            DType::F8E5M2FNUZ => 20,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::U4 => 21,
            DType::I4 => 22,
        }
    }

    /// Whether the type is a float type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
            || float8::is_float8(self)
    }

    /// The least and greatest value of an integer type (`None` for the others).
    pub fn integer_range(self) -> Option<(f64, f64)> {
        let bits = |signed: bool, b: i32| match signed {
            true => (-(2f64.powi(b - 1)), 2f64.powi(b - 1) - 1.0),
            false => (0.0, 2f64.powi(b) - 1.0),
        };
        Some(match self {
            DType::I64 => bits(true, 64),
            DType::I32 => bits(true, 32),
            DType::I16 => bits(true, 16),
            DType::I8 => bits(true, 8),
            DType::I4 => bits(true, 4),
            DType::U64 => bits(false, 64),
            DType::U32 => bits(false, 32),
            DType::U16 => bits(false, 16),
            DType::U8 => bits(false, 8),
            DType::U4 => bits(false, 4),
            _ => return None,
        })
    }

    /// The quantized integer type (8, 16 or 32 bits) whose range is `[lo, hi]`.
    pub fn quantized_with_range(lo: f64, hi: f64) -> Option<DType> {
        [DType::I8, DType::U8, DType::I16, DType::U16, DType::I32]
            .into_iter()
            .find(|t| t.integer_range() == Some((lo, hi)))
    }

    /// Bytes per element as stored in memory.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::I4 | DType::U4 | DType::Bool => 1,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => 1,
        }
    }

    /// The short name used in reports (`f32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U64 => "u64",
            DType::U32 => "u32",
            DType::U16 => "u16",
            DType::U8 => "u8",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why tensor data could not be built from its parts or bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    /// Parts of two element types (the first named as its data variant).
    #[error("cannot join {0} data with {1} data")]
    Mismatch(String, DType),
    /// No parts to join.
    #[error("nothing to join")]
    Empty,
    /// Bytes that end inside an element.
    #[error("data of {bytes} bytes is not a whole number of {dtype} elements")]
    #[allow(missing_docs)]
    PartialElement { bytes: usize, dtype: DType },
}

/// The elements of a tensor, one vector per element type.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 16-bit floats.
    F16(Vec<f16>),
    /// 16-bit brain floats.
    BF16(Vec<bf16>),
    /// Elements of a narrow type, one a byte as their bit pattern: the float8
    /// formats (core::float8) and 4-bit integers (in the low nibble).
    Bits(DType, Vec<u8>),
    /// 64-bit floats.
    F64(Vec<f64>),
    /// 64-bit integers.
    I64(Vec<i64>),
    /// 32-bit integers.
    I32(Vec<i32>),
    /// 16-bit integers.
    I16(Vec<i16>),
    /// 8-bit integers.
    I8(Vec<i8>),
    /// 64-bit unsigned integers.
    U64(Vec<u64>),
    /// 32-bit unsigned integers.
    U32(Vec<u32>),
    /// 16-bit unsigned integers.
    U16(Vec<u16>),
    /// 8-bit unsigned integers.
    U8(Vec<u8>),
    /// Booleans.
    Bool(Vec<bool>),
}

/// `x` rounded to the nearest bf16, ties to even (as ONNX Cast rounds). Through
/// f32 rounded to odd: a second rounding to nearest then gives what one would
/// (half's own f64 conversion drops the low mantissa bits before rounding).
fn bf16_from_f64(x: f64) -> bf16 {
    let f = x as f32;
    let b = f.to_bits();
    let odd = if f.is_finite() && f as f64 != x && b & 1 == 0 {
        // The other f32 neighbour of x, whose last bit is 1.
        f32::from_bits(if x.abs() > f.abs() as f64 {
            b + 1
        } else {
            b - 1
        })
    } else {
        f
    };
    bf16::from_f32(odd)
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

/// Steps a row-major multi-index of `shape` to the next element (the last
/// axis fastest; past the last element, back to the first).
pub fn next_index(idx: &mut [usize], shape: &[usize]) {
    for a in (0..idx.len()).rev() {
        idx[a] += 1;
        if idx[a] < shape[a] {
            return;
        }
        idx[a] = 0;
    }
}

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Types every bit pattern of whose size is a value (numbers, not `bool`):
/// their vectors may be filled by copying bytes.
///
/// # Safety
/// Only for types with no invalid bit pattern and no padding.
unsafe trait AnyBits: Copy {}
// SAFETY: plain numbers of their size, every bit pattern a value.
unsafe impl AnyBits for f32 {}
unsafe impl AnyBits for f64 {}
unsafe impl AnyBits for f16 {}
unsafe impl AnyBits for bf16 {}
unsafe impl AnyBits for i64 {}
unsafe impl AnyBits for i32 {}
unsafe impl AnyBits for i16 {}
unsafe impl AnyBits for i8 {}
unsafe impl AnyBits for u64 {}
unsafe impl AnyBits for u32 {}
unsafe impl AnyBits for u16 {}

impl TensorData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::Bits(d, _) => *d,
            TensorData::F64(_) => DType::F64,
            TensorData::I64(_) => DType::I64,
            TensorData::I32(_) => DType::I32,
            TensorData::I16(_) => DType::I16,
            TensorData::I8(_) => DType::I8,
            TensorData::U64(_) => DType::U64,
            TensorData::U32(_) => DType::U32,
            TensorData::U16(_) => DType::U16,
            TensorData::U8(_) => DType::U8,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::F16(v) => v.len(),
            TensorData::BF16(v) => v.len(),
            TensorData::Bits(_, v) => v.len(),
            TensorData::F64(v) => v.len(),
            TensorData::I64(v) => v.len(),
            TensorData::I32(v) => v.len(),
            TensorData::I16(v) => v.len(),
            TensorData::I8(v) => v.len(),
            TensorData::U64(v) => v.len(),
            TensorData::U32(v) => v.len(),
            TensorData::U16(v) => v.len(),
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
            TensorData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::Bits(d, v) if d.is_float() => float8::decode(*d, v),
            TensorData::Bits(..) => self.to_i128().into_iter().map(|x| x as f64).collect(),
            TensorData::F64(v) => v.clone(),
            TensorData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I16(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I8(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U64(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U16(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::U8(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }

    /// Every element converted to f32 into `out`, of the same length: the
    /// f64 of `to_f64` rounded to f32. Types that f64 holds exactly convert
    /// straight to f32, which rounds the same, with no f64 copy between (a
    /// quantized model's integer input is cast on every run).
    pub fn write_f32s(&self, out: &mut [f32]) {
        assert_eq!(out.len(), self.len(), "one f32 per element");
        fn each<T: Copy>(v: &[T], out: &mut [f32], f: impl Fn(T) -> f32) {
            for (o, &x) in out.iter_mut().zip(v) {
                *o = f(x);
            }
        }
        match self {
            TensorData::F32(v) => out.copy_from_slice(v),
            TensorData::F64(v) => each(v, out, |x| x as f32),
            TensorData::I32(v) => each(v, out, |x| x as f32),
            TensorData::I16(v) => each(v, out, f32::from),
            TensorData::I8(v) => each(v, out, f32::from),
            TensorData::U32(v) => each(v, out, |x| x as f32),
            TensorData::U16(v) => each(v, out, f32::from),
            TensorData::U8(v) => each(v, out, f32::from),
            TensorData::Bool(v) => each(v, out, |x| f32::from(u8::from(x))),
            // Through f64, which may round a 64-bit integer before f32 does.
            _ => each(&self.to_f64(), out, |x| x as f32),
        }
    }

    /// The elements `range` converted to f64, as [`TensorData::to_f64`] does,
    /// without converting the others (a large tensor read piece by piece).
    pub fn slice_f64(&self, range: std::ops::Range<usize>) -> Vec<f64> {
        match self {
            TensorData::F32(v) => v[range].iter().map(|&x| x as f64).collect(),
            TensorData::F16(v) => v[range].iter().map(|x| x.to_f64()).collect(),
            TensorData::F64(v) => v[range].to_vec(),
            TensorData::I64(v) => v[range].iter().map(|&x| x as f64).collect(),
            TensorData::I32(v) => v[range].iter().map(|&x| x as f64).collect(),
            TensorData::U8(v) => v[range].iter().map(|&x| x as f64).collect(),
            TensorData::Bool(v) => v[range].iter().map(|&x| x as u8 as f64).collect(),
            _ => self.to_f64()[range].to_vec(),
        }
    }

    /// Every element converted to i64 (floats truncated toward zero, saturating;
    /// u64 above i64::MAX saturates too, so an index or extent that large is out
    /// of range rather than negative).
    pub fn to_i64(&self) -> Vec<i64> {
        match self {
            TensorData::I64(v) => v.clone(),
            TensorData::U64(v) => v
                .iter()
                .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
                .collect(),
            other => other.to_i128().into_iter().map(|x| x as i64).collect(),
        }
    }

    /// Every element as i128, exact for every integer type (u64 included), so
    /// integer arithmetic computes in it and wraps to the element type at the
    /// end; floats are truncated toward zero, saturating.
    pub fn to_i128(&self) -> Vec<i128> {
        fn widen<T: Copy + Into<i128>>(v: &[T]) -> Vec<i128> {
            v.iter().map(|&x| x.into()).collect()
        }
        match self {
            TensorData::I64(v) => widen(v),
            TensorData::I32(v) => widen(v),
            TensorData::I16(v) => widen(v),
            TensorData::I8(v) => widen(v),
            TensorData::U64(v) => widen(v),
            TensorData::U32(v) => widen(v),
            TensorData::U16(v) => widen(v),
            TensorData::U8(v) => widen(v),
            TensorData::Bool(v) => widen(v),
            // The nibble, sign-extended for i4.
            TensorData::Bits(DType::I4, v) => {
                v.iter().map(|&c| ((c << 4) as i8 >> 4).into()).collect()
            }
            TensorData::Bits(DType::U4, v) => widen(v),
            other => other.to_f64().into_iter().map(|x| x as i128).collect(),
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
            DType::BF16 => TensorData::BF16(v.into_iter().map(bf16_from_f64).collect()),
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => {
                TensorData::Bits(dtype, float8::encode(dtype, &v, true))
            }
            DType::F64 => TensorData::F64(v),
            DType::I64 => TensorData::I64(v.into_iter().map(|x| x as i64).collect()),
            DType::Bool => TensorData::Bool(v.into_iter().map(|x| x != 0.0).collect()),
            // Through i128, which holds every value of every integer type: it
            // saturates only far outside them, then wraps like a C cast.
            int => TensorData::from_i128(int, v.into_iter().map(|x| x as i128).collect()),
        }
    }

    /// Builds data of `dtype` from i128 values (wrapping like a C cast).
    pub fn from_i128(dtype: DType, v: Vec<i128>) -> TensorData {
        let it = v.into_iter();
        match dtype {
            DType::I64 => TensorData::I64(it.map(|x| x as i64).collect()),
            DType::I32 => TensorData::I32(it.map(|x| x as i32).collect()),
            DType::I16 => TensorData::I16(it.map(|x| x as i16).collect()),
            DType::I8 => TensorData::I8(it.map(|x| x as i8).collect()),
            DType::U64 => TensorData::U64(it.map(|x| x as u64).collect()),
            DType::U32 => TensorData::U32(it.map(|x| x as u32).collect()),
            DType::U16 => TensorData::U16(it.map(|x| x as u16).collect()),
            DType::U8 => TensorData::U8(it.map(|x| x as u8).collect()),
            DType::I4 | DType::U4 => TensorData::Bits(dtype, it.map(|x| x as u8 & 0xF).collect()),
            DType::Bool => TensorData::Bool(it.map(|x| x != 0).collect()),
            float => TensorData::from_f64(float, it.map(|x| x as f64).collect()),
        }
    }

    /// Picks the elements at `indices` (in order), keeping the element type.
    pub fn gather(&self, indices: impl Iterator<Item = usize>) -> TensorData {
        struct Pick<I>(I);
        impl<I: Iterator<Item = usize>> Rearrange for Pick<I> {
            fn apply<T: Copy>(self, v: &[T]) -> Vec<T> {
                self.0.map(|i| v[i]).collect()
            }
        }
        self.rearrange(Pick(indices))
    }

    /// The elements `r` makes of these, keeping the element type.
    pub fn rearrange(&self, r: impl Rearrange) -> TensorData {
        match self {
            TensorData::F32(v) => TensorData::F32(r.apply(v)),
            TensorData::F16(v) => TensorData::F16(r.apply(v)),
            TensorData::BF16(v) => TensorData::BF16(r.apply(v)),
            TensorData::Bits(d, v) => TensorData::Bits(*d, r.apply(v)),
            TensorData::F64(v) => TensorData::F64(r.apply(v)),
            TensorData::I64(v) => TensorData::I64(r.apply(v)),
            TensorData::I32(v) => TensorData::I32(r.apply(v)),
            TensorData::I16(v) => TensorData::I16(r.apply(v)),
            TensorData::I8(v) => TensorData::I8(r.apply(v)),
            TensorData::U64(v) => TensorData::U64(r.apply(v)),
            TensorData::U32(v) => TensorData::U32(r.apply(v)),
            TensorData::U16(v) => TensorData::U16(r.apply(v)),
            TensorData::U8(v) => TensorData::U8(r.apply(v)),
            TensorData::Bool(v) => TensorData::Bool(r.apply(v)),
        }
    }

    /// The elements of `parts` one after another. All parts must share a dtype.
    pub fn concat(parts: &[&TensorData]) -> Result<TensorData, TensorError> {
        macro_rules! join {
            ($variant:ident) => {{
                let mut all = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
                for p in parts {
                    match p {
                        TensorData::$variant(v) => all.extend_from_slice(v),
                        other => {
                            return Err(TensorError::Mismatch(
                                stringify!($variant).to_string(),
                                other.dtype(),
                            ))
                        }
                    }
                }
                TensorData::$variant(all)
            }};
        }
        Ok(match parts.first().ok_or(TensorError::Empty)? {
            TensorData::F32(_) => join!(F32),
            TensorData::F16(_) => join!(F16),
            TensorData::BF16(_) => join!(BF16),
            TensorData::Bits(d, _) => {
                let mut all = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
                for p in parts {
                    match p {
                        TensorData::Bits(e, v) if e == d => all.extend_from_slice(v),
                        other => return Err(TensorError::Mismatch(d.to_string(), other.dtype())),
                    }
                }
                TensorData::Bits(*d, all)
            }
            TensorData::F64(_) => join!(F64),
            TensorData::I64(_) => join!(I64),
            TensorData::I32(_) => join!(I32),
            TensorData::I16(_) => join!(I16),
            TensorData::I8(_) => join!(I8),
            TensorData::U64(_) => join!(U64),
            TensorData::U32(_) => join!(U32),
            TensorData::U16(_) => join!(U16),
            TensorData::U8(_) => join!(U8),
            TensorData::Bool(_) => join!(Bool),
        })
    }

    /// The elements as little-endian bytes, each at its stored size (booleans
    /// one byte, 0 or 1; 4-bit integers one byte, which ONNX packs two a byte):
    /// the raw data of ONNX, NumPy and TFLite tensors.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        fn le<const N: usize, T: Copy>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
            v.iter().flat_map(|&x| f(x)).collect()
        }
        match self {
            TensorData::F32(v) => le(v, f32::to_le_bytes),
            TensorData::F16(v) => le(v, f16::to_le_bytes),
            TensorData::BF16(v) => le(v, bf16::to_le_bytes),
            TensorData::Bits(_, v) => v.clone(),
            TensorData::F64(v) => le(v, f64::to_le_bytes),
            TensorData::I64(v) => le(v, i64::to_le_bytes),
            TensorData::I32(v) => le(v, i32::to_le_bytes),
            TensorData::I16(v) => le(v, i16::to_le_bytes),
            TensorData::I8(v) => le(v, i8::to_le_bytes),
            TensorData::U64(v) => le(v, u64::to_le_bytes),
            TensorData::U32(v) => le(v, u32::to_le_bytes),
            TensorData::U16(v) => le(v, u16::to_le_bytes),
            TensorData::U8(v) => v.clone(),
            TensorData::Bool(v) => le(v, |b| [b as u8]),
        }
    }

    /// Elements of `dtype` from little-endian bytes (the inverse of
    /// `to_le_bytes`; any non-zero byte is true).
    pub fn from_le_bytes(dtype: DType, raw: &[u8]) -> Result<TensorData, TensorError> {
        fn le<const N: usize, T: AnyBits>(raw: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
            // On a little-endian machine the bytes are the values: one copy,
            // where converting element by element ran at a fifth of that
            // (most of the import of a 100 MB model).
            if cfg!(target_endian = "little") && size_of::<T>() == N {
                let n = raw.len() / N;
                let mut v = Vec::<T>::with_capacity(n);
                // SAFETY: `v` has room for `n` values of N bytes, and any N
                // bytes are a valid `T` (`AnyBits`), the one `f` would make.
                unsafe {
                    std::ptr::copy_nonoverlapping(raw.as_ptr(), v.as_mut_ptr().cast(), n * N);
                    v.set_len(n);
                }
                return v;
            }
            raw.chunks_exact(N)
                .map(|c| f(c.try_into().expect("chunks_exact yields N bytes")))
                .collect()
        }
        if !raw.len().is_multiple_of(dtype.size_bytes()) {
            return Err(TensorError::PartialElement {
                bytes: raw.len(),
                dtype,
            });
        }
        Ok(match dtype {
            DType::F32 => TensorData::F32(le(raw, f32::from_le_bytes)),
            DType::F16 => TensorData::F16(le(raw, f16::from_le_bytes)),
            DType::BF16 => TensorData::BF16(le(raw, bf16::from_le_bytes)),
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => {
                TensorData::Bits(dtype, raw.to_vec())
            }
            DType::F64 => TensorData::F64(le(raw, f64::from_le_bytes)),
            DType::I64 => TensorData::I64(le(raw, i64::from_le_bytes)),
            DType::I32 => TensorData::I32(le(raw, i32::from_le_bytes)),
            DType::I16 => TensorData::I16(le(raw, i16::from_le_bytes)),
            DType::I8 => TensorData::I8(le(raw, i8::from_le_bytes)),
            DType::U64 => TensorData::U64(le(raw, u64::from_le_bytes)),
            DType::U32 => TensorData::U32(le(raw, u32::from_le_bytes)),
            DType::U16 => TensorData::U16(le(raw, u16::from_le_bytes)),
            DType::U8 => TensorData::U8(raw.to_vec()),
            DType::I4 | DType::U4 => TensorData::Bits(dtype, raw.iter().map(|b| b & 0xF).collect()),
            DType::Bool => TensorData::Bool(raw.iter().map(|&b| b != 0).collect()),
        })
    }

    /// A zero-filled vector of `dtype` (false for bool).
    pub fn zeros(dtype: DType, len: usize) -> TensorData {
        TensorData::from_i128(dtype, vec![0; len])
    }
}

/// A way of making a vector from the elements of another, whatever their
/// type: [`TensorData::rearrange`] applies it to the data of every type.
pub trait Rearrange {
    /// The new elements, made from `v`.
    fn apply<T: Copy>(self, v: &[T]) -> Vec<T>;
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

    /// The same bytes read as elements of `to`, little-endian (ONNX BitCast):
    /// `to` must be as wide as the tensor's type.
    pub fn bitcast(&self, to: DType) -> Result<Tensor, TensorError> {
        let data = TensorData::from_le_bytes(to, &self.data.to_le_bytes())?;
        if data.len() != self.numel() {
            return Err(TensorError::PartialElement {
                bytes: self.data.len() * self.dtype().size_bytes(),
                dtype: to,
            });
        }
        Ok(Tensor::new(self.shape.clone(), data))
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
            other => {
                let mut out = vec![0.0; other.len()];
                other.write_f32s(&mut out);
                Cow::Owned(out)
            }
        }
    }

    /// Converts to another element type with ONNX Cast semantics.
    pub fn cast(&self, to: DType) -> Tensor {
        self.cast_saturating(to, true)
    }

    /// `cast`, where `saturate` says whether a float8 result beyond the
    /// format's largest finite value saturates to it (the ONNX default) or
    /// becomes infinity or NaN (see core::float8).
    pub fn cast_saturating(&self, to: DType, saturate: bool) -> Tensor {
        let data = if let Some(data) = f32_to_integer(&self.data, to) {
            data
        } else if to.is_float() || self.dtype().is_float() {
            if float8::is_float8(to) {
                TensorData::Bits(to, float8::encode(to, &self.data.to_f64(), saturate))
            } else if to.is_float() || to == DType::Bool {
                TensorData::from_f64(to, self.data.to_f64())
            } else {
                // Float to integer: truncate toward zero, as C and ONNX do.
                TensorData::from_f64(to, self.data.to_f64().into_iter().map(f64::trunc).collect())
            }
        } else {
            TensorData::from_i128(to, self.data.to_i128())
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

/// f32 elements cast to an integer type or bool as `Tensor::cast` defines it
/// (truncated toward zero, wrapped from i128, i64 saturated; bool: nonzero), without the f64
/// and i128 copies of the general path (a Cast of 200k elements took 1.2 ms).
/// A value of magnitude under 2^63 truncates in i64, whose low bits are the
/// i128's; under 2^31 (every quantized output) in i32, a loop the compiler
/// vectorizes (a model's int8 output of 400k elements: 0.44 -> 0.40 ms a
/// step, most of the rest the step's copies). `None` for other element types.
fn f32_to_integer(data: &TensorData, to: DType) -> Option<TensorData> {
    let TensorData::F32(v) = data else {
        return None;
    };
    // NaN is within: `as` makes it 0 in both widths, as `as i128` does. A
    // fold, not `all`, so the test vectorizes too.
    let within_i32 = v
        .iter()
        .fold(true, |ok, x| ok & (x.abs() < 2_147_483_648.0 || x.is_nan()));
    let wide = |x: f32| match x.abs() < 9.2e18 {
        true => x as i64,
        false => x as i128 as i64,
    };
    macro_rules! each {
        ($($t:ident $ty:ty),*) => {
            match to {
                $(DType::$t if within_i32 => TensorData::$t(v.iter().map(|&x| x as i32 as $ty).collect()),)*
                $(DType::$t => TensorData::$t(v.iter().map(|&x| wide(x) as $ty).collect()),)*
                // As `TensorData::from_f64` makes i64: saturated, not wrapped.
                DType::I64 => TensorData::I64(v.iter().map(|&x| x as i64).collect()),
                DType::Bool => TensorData::Bool(v.iter().map(|&x| x != 0.0).collect()),
                _ => return None,
            }
        };
    }
    Some(each!(I32 i32, I16 i16, I8 i8, U64 u64, U32 u32, U16 u16, U8 u8))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Little-endian bytes read as the numbers they encode, for every type
    /// copied as bytes: the values written with `to_le_bytes`, NaN payloads
    /// and negative zero kept; a partial element is an error.
    #[test]
    fn little_endian_bytes_read_as_their_values() {
        let f = [
            1.5f32,
            -0.0,
            f32::from_bits(0x7FC0_1234),
            f32::MIN_POSITIVE / 2.0,
        ];
        let raw: Vec<u8> = f.iter().flat_map(|x| x.to_le_bytes()).collect();
        let got = TensorData::from_le_bytes(DType::F32, &raw).unwrap();
        let TensorData::F32(got) = got else {
            panic!("F32 data")
        };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&f));
        let i = [i64::MIN, -2, 0, 7, i64::MAX];
        let raw: Vec<u8> = i.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(
            TensorData::from_le_bytes(DType::I64, &raw)
                .unwrap()
                .to_i64(),
            i
        );
        let h = [0x3C00u16, 0x8000, 0x7E01];
        let raw: Vec<u8> = h.iter().flat_map(|x| x.to_le_bytes()).collect();
        let TensorData::F16(got) = TensorData::from_le_bytes(DType::F16, &raw).unwrap() else {
            panic!("F16 data")
        };
        assert_eq!(got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), h);
        assert!(TensorData::from_le_bytes(DType::I32, &raw[..5]).is_err());
    }

    /// bf16 rounds to nearest, ties to even, from f64 in one rounding.
    #[test]
    fn bf16_rounds_to_nearest_even() {
        let bits = |x: f64| bf16_from_f64(x).to_bits();
        let tie = 1.0 + 2f64.powi(-8); // halfway between 1 and 1 + 2^-7
        assert_eq!(bits(tie), 0x3F80);
        assert_eq!(bits(1.0 + 3.0 * 2f64.powi(-8)), 0x3F82);
        // Above the tie by less than an f32 ulp: rounding to f32 first would
        // make it a tie (and 1), half's f64 conversion too.
        assert_eq!(bits(tie + 2f64.powi(-40)), 0x3F81);
        assert_eq!(bits(-tie - 2f64.powi(-40)), 0xBF81);
        assert_eq!(bits(tie - 2f64.powi(-40)), 0x3F80);
        assert_eq!(bits(f64::INFINITY), 0x7F80);
        assert_eq!(bits(f32::MAX as f64), 0x7F80);
        assert!(bf16_from_f64(f64::NAN).is_nan());
        let t = Tensor::from_f32(vec![2], vec![1.0 + 2f32.powi(-7), -2.5]);
        assert_eq!(t.cast(DType::BF16).cast(DType::F32), t);
    }

    /// The f32-to-integer fast path gives what the general path through f64
    /// and i128 gives, at the edges of every type and past them.
    #[test]
    fn floats_cast_to_integers_as_through_i128() {
        let v = vec![
            0.0,
            -0.0,
            0.9,
            -0.9,
            1.5,
            -1.5,
            127.9,
            128.0,
            -129.0,
            255.0,
            256.7,
            65535.0,
            -32769.5,
            2147483647.0,
            2147483648.0,
            -2147483649.0,
            4294967296.0,
            9.2e18,
            9.3e18,
            -9.3e18,
            1.8e19,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        const TYPES: [DType; 9] = [
            DType::I64,
            DType::I32,
            DType::I16,
            DType::I8,
            DType::U64,
            DType::U32,
            DType::U16,
            DType::U8,
            DType::Bool,
        ];
        // Every value, and those under 2^31 alone (the i32 path).
        let small: Vec<f32> = v
            .iter()
            .copied()
            .filter(|x| x.abs() < 2147483648.0 || x.is_nan())
            .collect();
        for (t, to) in [v, small]
            .into_iter()
            .map(|v| Tensor::from_f32(vec![v.len()], v))
            .flat_map(|t| TYPES.map(|to| (t.clone(), to)))
        {
            let general = match to {
                DType::Bool => TensorData::from_f64(to, t.data.to_f64()),
                _ => {
                    TensorData::from_f64(to, t.data.to_f64().into_iter().map(f64::trunc).collect())
                }
            };
            assert_eq!(*t.cast(to).data, general, "to {to}");
        }
    }

    /// 4-bit integers wrap like any other integer cast, and i4 is signed.
    #[test]
    fn four_bit_integers_wrap_and_sign_extend() {
        let v = vec![-9, -8, 7, 8, 15, 16];
        let i4 = TensorData::from_i128(DType::I4, v.clone());
        assert_eq!(i4.to_i128(), vec![7, -8, 7, -8, -1, 0]);
        let u4 = TensorData::from_i128(DType::U4, v);
        assert_eq!(u4.to_i128(), vec![7, 8, 7, 8, 15, 0]);
        let t = Tensor::from_f32(vec![3], vec![-8.7, 7.9, 9.0]).cast(DType::I4);
        assert_eq!(t.data.to_f64(), vec![-8.0, 7.0, -7.0]);
    }
}
