//! Decoding ONNX `TensorProto`s: typed fields, little-endian `raw_data`, and
//! external data files beside the model.

use crate::core::TensorError;
use crate::graph::{checked_numel, format_bytes, memory_limit, DType, Tensor, TensorData};
use onnx_protobuf::TensorProto;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};

/// Why a `TensorProto` could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum TensorProtoError {
    /// An element type this library does not have.
    #[error("element type {name} (code {code}) is not supported")]
    #[allow(missing_docs)]
    ElementType { name: &'static str, code: i32 },
    /// A form of tensor this library does not read.
    #[error("{0}")]
    Unsupported(String),
    /// Shape and data that do not agree, or do not fit their types.
    #[error("{0}")]
    Malformed(String),
    /// External data that cannot be read, or may not be (outside the model's folder).
    #[error("{0}")]
    ExternalData(String),
    /// Data over the memory limit.
    #[error("{0}")]
    TooLarge(String),
}

impl From<TensorError> for TensorProtoError {
    fn from(e: TensorError) -> TensorProtoError {
        TensorProtoError::Malformed(e.to_string())
    }
}

/// ONNX `TensorProto.DataType` codes we read, and the names of those we refuse.
pub fn dtype_from_onnx(code: i32) -> Result<DType, TensorProtoError> {
    Ok(match code {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        17 => DType::F8E4M3FN,
        18 => DType::F8E4M3FNUZ,
        19 => DType::F8E5M2,
        20 => DType::F8E5M2FNUZ,
        21 => DType::U4,
        22 => DType::I4,
        other => {
            let name = match other {
                0 => "UNDEFINED",
                8 => "STRING",
                14 => "COMPLEX64",
                15 => "COMPLEX128",
                23 => "FLOAT4E2M1",
                24 => "FLOAT8E8M0",
                25 => "UINT2",
                26 => "INT2",
                _ => "unknown",
            };
            return Err(TensorProtoError::ElementType { name, code: other });
        }
    })
}

/// Reads the bytes of an externally stored tensor, relative to the model's folder.
fn read_external(tp: &TensorProto, base_dir: Option<&Path>) -> Result<Vec<u8>, TensorProtoError> {
    use TensorProtoError::ExternalData;
    let mut location = None;
    let (mut offset, mut length) = (0u64, None);
    for e in &tp.external_data {
        match e.key.as_str() {
            "location" => location = Some(e.value.clone()),
            "offset" => {
                offset = e.value.parse().map_err(|_| {
                    ExternalData(format!(
                        "external data offset '{}' is not a number",
                        e.value
                    ))
                })?
            }
            "length" => {
                length = Some(e.value.parse::<u64>().map_err(|_| {
                    ExternalData(format!(
                        "external data length '{}' is not a number",
                        e.value
                    ))
                })?)
            }
            _ => {}
        }
    }
    let location = location.ok_or_else(|| ExternalData("external data has no location".into()))?;
    let rel = Path::new(&location);
    // A model may only point at files in its own folder tree.
    if rel.is_absolute() || rel.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(ExternalData(format!(
            "external data location '{location}' leaves the model's folder"
        )));
    }
    let base = base_dir.ok_or_else(|| {
        ExternalData(
            "external data needs the model's folder, but the model was read from memory".into(),
        )
    })?;
    let path = base.join(rel);
    let cannot = |e: std::io::Error| {
        ExternalData(format!(
            "cannot read external data file {}: {e}",
            path.display()
        ))
    };
    // A symbolic link inside the folder must not lead out of it either.
    let real = path.canonicalize().map_err(cannot)?;
    if !base.canonicalize().is_ok_and(|root| real.starts_with(root)) {
        return Err(ExternalData(format!(
            "external data location '{location}' resolves to {}, outside the model's folder",
            real.display()
        )));
    }
    // Never open a FIFO or device: opening one may block, reading it never ends.
    if !std::fs::metadata(&real).map_err(cannot)?.is_file() {
        return Err(ExternalData(format!(
            "external data file {} is not a regular file",
            path.display()
        )));
    }
    let mut file = std::fs::File::open(&real).map_err(cannot)?;
    let file_len = file.metadata().map_err(cannot)?.len();
    let end = match length {
        Some(l) => offset
            .checked_add(l)
            .ok_or_else(|| ExternalData("external data range overflows".into()))?,
        None => file_len,
    };
    if offset > end || end > file_len {
        return Err(ExternalData(format!(
            "external data range {offset}..{end} is outside file {} ({file_len} bytes)",
            path.display()
        )));
    }
    // Only the tensor's own range is read: the file may hold many tensors.
    let len = end - offset;
    if len > memory_limit() {
        return Err(TensorProtoError::TooLarge(format!(
            "external data of {} is more than the memory limit of {}",
            format_bytes(len),
            format_bytes(memory_limit())
        )));
    }
    let mut bytes = vec![
        0u8;
        usize::try_from(len).map_err(|_| TensorProtoError::TooLarge(
            "external data too large".into()
        ))?
    ];
    file.seek(SeekFrom::Start(offset)).map_err(cannot)?;
    file.read_exact(&mut bytes).map_err(cannot)?;
    Ok(bytes)
}

/// Data held in the typed repeated fields (int32_data carries every narrow type,
/// uint64_data both uint32 and uint64).
fn decode_typed(dtype: DType, tp: &TensorProto) -> TensorData {
    let narrow = || tp.int32_data.iter().map(|&x| x as i128).collect::<Vec<_>>();
    match dtype {
        DType::F32 => TensorData::F32(tp.float_data.clone()),
        DType::F64 => TensorData::F64(tp.double_data.clone()),
        DType::I64 => TensorData::I64(tp.int64_data.clone()),
        DType::U64 | DType::U32 => {
            TensorData::from_i128(dtype, tp.uint64_data.iter().map(|&x| x as i128).collect())
        }
        // 16- and 8-bit floats travel as their bit patterns in int32_data.
        DType::F16
        | DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ => {
            let bits: Vec<u8> = tp
                .int32_data
                .iter()
                .flat_map(|&x| x.to_le_bytes().into_iter().take(dtype.size_bytes()))
                .collect();
            TensorData::from_le_bytes(dtype, &bits).expect("whole elements")
        }
        other => TensorData::from_i128(other, narrow()),
    }
}

/// Decodes a tensor proto. `base_dir` is the model's folder, for external data.
pub fn tensor_from_proto(
    tp: &TensorProto,
    base_dir: Option<&Path>,
) -> Result<Tensor, TensorProtoError> {
    tensor_with_raw_data(tp, &tp.raw_data, base_dir)
}

/// Decodes a tensor proto whose `raw_data` is `raw_data` (lifted out of the
/// file before decoding, or the proto's own).
pub(crate) fn tensor_with_raw_data(
    tp: &TensorProto,
    raw_data: &[u8],
    base_dir: Option<&Path>,
) -> Result<Tensor, TensorProtoError> {
    use TensorProtoError::Malformed;
    let dtype = dtype_from_onnx(tp.data_type)?;
    let mut shape = Vec::with_capacity(tp.dims.len());
    for &d in &tp.dims {
        shape
            .push(usize::try_from(d).map_err(|_| {
                Malformed(format!("negative dimension {d} in shape {:?}", tp.dims))
            })?);
    }
    let n = checked_numel(&shape)
        .filter(|n| n.checked_mul(dtype.size_bytes()).is_some())
        .ok_or_else(|| Malformed(format!("shape {:?} overflows", tp.dims)))?;
    if tp.segment.is_some() {
        return Err(TensorProtoError::Unsupported(
            "segmented tensors are not supported".into(),
        ));
    }
    let external = tp.data_location.value() == 1;
    let raw = |bytes: &[u8]| -> Result<TensorData, TensorProtoError> {
        Ok(match packed(dtype) {
            true => TensorData::from_le_bytes(dtype, &unpack_nibbles(bytes, n)?)?,
            false => TensorData::from_le_bytes(dtype, bytes)?,
        })
    };
    let data = if external {
        raw(&read_external(tp, base_dir)?)?
    } else if !raw_data.is_empty() {
        raw(raw_data)?
    } else if packed(dtype) {
        // Typed 4-bit data is packed the same way, a byte per int32_data entry.
        raw(&tp.int32_data.iter().map(|&x| x as u8).collect::<Vec<_>>())?
    } else {
        decode_typed(dtype, tp)
    };
    if data.len() != n {
        return Err(Malformed(format!(
            "holds {} elements of data, but its shape {:?} needs {n}",
            data.len(),
            shape
        )));
    }
    Ok(Tensor::new(shape, data))
}

/// Encodes a tensor as a proto with little-endian raw data.
pub fn tensor_to_proto(name: &str, t: &Tensor) -> TensorProto {
    let mut tp = TensorProto::new();
    tp.name = name.to_string();
    tp.dims = t.shape.iter().map(|&d| d as i64).collect();
    tp.data_type = t.dtype().onnx_code();
    let bytes = t.data.to_le_bytes();
    tp.raw_data = match packed(t.dtype()) {
        true => bytes
            .chunks(2)
            .map(|p| p[0] | p.get(1).map_or(0, |hi| hi << 4))
            .collect(),
        false => bytes,
    };
    tp
}

/// Whether ONNX packs the type's elements two a byte (the first in the low
/// nibble), as it does 4-bit integers.
fn packed(dtype: DType) -> bool {
    matches!(dtype, DType::I4 | DType::U4)
}

/// Packed 4-bit elements, one a byte.
fn unpack_nibbles(bytes: &[u8], n: usize) -> Result<Vec<u8>, TensorProtoError> {
    if bytes.len() != n.div_ceil(2) {
        return Err(TensorProtoError::Malformed(format!(
            "{} bytes of packed 4-bit data, but {n} elements need {}",
            bytes.len(),
            n.div_ceil(2)
        )));
    }
    Ok(bytes
        .iter()
        .flat_map(|&b| [b & 0xF, b >> 4])
        .take(n)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4-bit integers pack two a byte, the first low; an odd count leaves the
    /// last high nibble 0, and a wrong byte count is refused.
    #[test]
    fn four_bit_data_packs_two_a_byte() {
        let t = Tensor::new(vec![3], TensorData::from_i128(DType::I4, vec![-1, 2, -8]));
        let tp = tensor_to_proto("x", &t);
        assert_eq!(tp.raw_data, vec![0x2F, 0x08]);
        assert_eq!(tensor_from_proto(&tp, None).unwrap(), t);
        let mut short = tp.clone();
        short.raw_data.pop();
        let err = tensor_from_proto(&short, None).unwrap_err();
        assert!(
            err.to_string()
                .contains("1 bytes of packed 4-bit data, but 3 elements need 2"),
            "{err}"
        );
    }
}
