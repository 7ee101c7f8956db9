//! NumPy `.npy` tensors (format versions 1 to 3): read for `--input`, written by
//! `run --output`. Little-endian data in C order, of the dtypes a graph holds.
//! The format is NumPy's "NEP 1 — A simple file format for NumPy arrays".
//! `.npz` archives (`numpy.savez`, `savez_compressed`) are zip files of `.npy`
//! members named after their arrays.

use crate::core::{DType, Tensor, TensorData, TensorError};

/// Why a `.npy` file or `.npz` archive could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    /// The bytes are not a well-formed `.npy` file or `.npz` archive.
    #[error("{0}")]
    Malformed(String),
    /// Well-formed, but of a kind this reader or NumPy does not have (a format
    /// version, a dtype, Fortran order).
    #[error("{0}")]
    Unsupported(String),
    /// An archive member that unpacks past the memory budget.
    #[error("{0}")]
    TooLarge(String),
    /// An archive member that is not a readable `.npy` array.
    #[error("member '{file}': {error}")]
    #[allow(missing_docs)]
    Member { file: String, error: Box<NpyError> },
}

impl From<TensorError> for NpyError {
    fn from(e: TensorError) -> NpyError {
        NpyError::Malformed(e.to_string())
    }
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// The `descr` of a dtype: its byte order, kind and size (`None` for bf16, the
/// float8 formats and 4-bit integers, which NumPy does not have).
fn descr(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::I4
        | DType::U4 => return None,
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::I16 => "<i2",
        DType::I8 => "|i1",
        DType::U64 => "<u8",
        DType::U32 => "<u4",
        DType::U16 => "<u2",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
    })
}

/// The dtype of a `descr`; big-endian and other kinds are refused by name.
fn dtype_of(d: &str) -> Result<DType, NpyError> {
    let native = d.replace('=', "<");
    [
        DType::F32,
        DType::F16,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
        DType::Bool,
    ]
    .into_iter()
    .find(|&t| descr(t).is_some_and(|s| s == native || s.replace('|', "<") == native))
    .ok_or_else(|| {
        NpyError::Unsupported(format!(
            "dtype '{d}' is not supported (little-endian float, int, uint or bool only)"
        ))
    })
}

/// The value of `key` in the header dict (`'key': value,`), as text.
fn header_value<'h>(header: &'h str, key: &str) -> Result<&'h str, NpyError> {
    let at = header
        .find(&format!("'{key}'"))
        .ok_or_else(|| NpyError::Malformed(format!("the header has no '{key}'")))?;
    let rest = header[at + key.len() + 2..].trim_start();
    let rest = rest
        .strip_prefix(':')
        .ok_or_else(|| NpyError::Malformed(format!("the header's '{key}' has no value")))?
        .trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else {
        rest.find([',', '}'])
    };
    end.map(|e| rest[..e].trim())
        .ok_or_else(|| NpyError::Malformed(format!("the header's '{key}' is not terminated")))
}

/// Reads a `.npz` archive's bytes: each member's array name (the member name
/// without `.npy`) and tensor, in archive order. A member whose unpacked size
/// passes the memory budget is refused before it is unpacked.
pub fn read_npz(bytes: &[u8]) -> Result<Vec<(String, Tensor)>, NpyError> {
    use std::io::Read;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| NpyError::Malformed(format!("not a readable .npz (zip) archive: {e}")))?;
    let limit = crate::graph::memory_limit();
    let mut arrays = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let member = zip
            .by_index(i)
            .map_err(|e| NpyError::Malformed(format!("member {i} of the archive: {e}")))?;
        let file = member
            .name()
            .map_err(|e| NpyError::Malformed(format!("member {i} of the archive: {e}")))?
            .to_string();
        let Some(name) = file.strip_suffix(".npy") else {
            return Err(NpyError::Malformed(format!(
                "member '{file}' is not a .npy array"
            )));
        };
        if member.size() > limit {
            return Err(NpyError::TooLarge(format!(
                "member '{file}' unpacks to {} bytes, over the memory budget of {limit}",
                member.size()
            )));
        }
        let mut data = Vec::with_capacity(member.size() as usize);
        // The declared size may lie: read at most one byte past it.
        member
            .take(limit + 1)
            .read_to_end(&mut data)
            .map_err(|e| NpyError::Malformed(format!("member '{file}': {e}")))?;
        if data.len() as u64 > limit {
            return Err(NpyError::TooLarge(format!(
                "member '{file}' unpacks past the memory budget of {limit}"
            )));
        }
        let t = read_npy(&data).map_err(|e| NpyError::Member {
            file: file.clone(),
            error: Box::new(e),
        })?;
        arrays.push((name.to_string(), t));
    }
    if arrays.is_empty() {
        return Err(NpyError::Malformed("the archive holds no arrays".into()));
    }
    Ok(arrays)
}

/// Reads a `.npy` file's bytes.
pub fn read_npy(bytes: &[u8]) -> Result<Tensor, NpyError> {
    if !bytes.starts_with(MAGIC) || bytes.len() < 10 {
        return Err(NpyError::Malformed(
            "not a .npy file (no \\x93NUMPY magic)".into(),
        ));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => {
            return Err(NpyError::Unsupported(format!(
                ".npy format version {v} is not supported"
            )))
        }
    };
    let header = bytes
        .get(start..start.saturating_add(header_len))
        .ok_or_else(|| NpyError::Malformed("the .npy header is truncated".into()))?;
    let header = std::str::from_utf8(header)
        .map_err(|_| NpyError::Malformed("the .npy header is not text".into()))?;
    let dtype = dtype_of(header_value(header, "descr")?.trim_matches(['\'', '"']))?;
    if header_value(header, "fortran_order")? != "False" {
        return Err(NpyError::Unsupported(
            "Fortran-order arrays are not supported (save with C order)".into(),
        ));
    }
    let shape_text = header_value(header, "shape")?;
    let shape = shape_text
        .trim_matches(['(', ')'])
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| NpyError::Malformed(format!("shape {shape_text} is not a shape")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| NpyError::Malformed(format!("shape {shape_text} overflows")))?;
    let data = &bytes[start + header_len..];
    let want = n
        .checked_mul(dtype.size_bytes())
        .ok_or_else(|| NpyError::Malformed(format!("shape {shape_text} overflows")))?;
    if data.len() != want {
        return Err(NpyError::Malformed(format!(
            "{} data bytes for shape {shape:?} of {dtype}, which needs {want}",
            data.len()
        )));
    }
    let data = TensorData::from_le_bytes(dtype, data)?;
    Ok(Tensor::new(shape, data))
}

/// A `.npy` file (format 1.0) holding `t`.
pub fn write_npy(t: &Tensor) -> Result<Vec<u8>, NpyError> {
    let descr = descr(t.dtype())
        .ok_or_else(|| NpyError::Unsupported(format!("NumPy has no {} element type", t.dtype())))?;
    let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // The data starts at a multiple of 64 bytes; the header ends with a newline.
    let total = (MAGIC.len() + 4 + header.len() + 1).div_ceil(64) * 64;
    header.push_str(&" ".repeat(total - (MAGIC.len() + 4 + header.len() + 1)));
    header.push('\n');
    let mut out = Vec::with_capacity(total + t.numel() * t.dtype().size_bytes());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend(t.data.to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn every_dtype_round_trips() {
        let tensors = [
            Tensor::from_f32(vec![2, 3], vec![1.5, -2.0, 0.0, f32::NAN, 7.0, -0.0]),
            Tensor::from_f32(vec![4], vec![1.0, 2.0, 3.0, 4.0]),
            Tensor::from_f32(vec![], vec![3.25]),
            Tensor::from_i64(vec![2], vec![i64::MIN, 5]),
            Tensor::new(vec![3], TensorData::Bool(vec![true, false, true])),
            Tensor::new(
                vec![2],
                TensorData::F16(vec![f16::from_f32(0.5), f16::from_f32(-3.0)]),
            ),
        ];
        for t in tensors {
            let bytes = write_npy(&t).unwrap();
            assert_eq!((bytes.len() - t.numel() * t.dtype().size_bytes()) % 64, 0);
            let back = read_npy(&bytes).unwrap();
            assert_eq!(back.shape, t.shape);
            assert_eq!(back.dtype(), t.dtype());
            assert_eq!(format!("{:?}", back.data), format!("{:?}", t.data));
        }
    }

    /// Bytes numpy 1.26 wrote for `np.arange(6, dtype='<i4').reshape(2, 3)`.
    #[test]
    fn reads_a_file_numpy_wrote() {
        let mut bytes = b"\x93NUMPY\x01\x00v\x00".to_vec();
        let header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend(std::iter::repeat_n(b' ', 118 - header.len() - 1));
        bytes.push(b'\n');
        for v in 0..6i32 {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let t = read_npy(&bytes).unwrap();
        assert_eq!(t.shape, vec![2, 3]);
        assert_eq!(t.data.to_i64(), vec![0, 1, 2, 3, 4, 5]);
    }

    /// An archive numpy wrote with `savez_compressed(a=[10, 4], b=[1, 6])` (f32).
    #[test]
    fn reads_an_archive_numpy_wrote() {
        let bytes = include_bytes!("../../tests/npz/a_b.npz");
        let arrays = read_npz(bytes).unwrap();
        let got: Vec<(&str, Vec<f32>)> = arrays
            .iter()
            .map(|(n, t)| (n.as_str(), t.to_f32()))
            .collect();
        assert_eq!(got, [("a", vec![10.0, 4.0]), ("b", vec![1.0, 6.0])]);
        for cut in [0, 30, bytes.len() / 2, bytes.len() - 1] {
            assert!(read_npz(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let err = read_npz(&write_npy(&Tensor::from_f32(vec![1], vec![1.0])).unwrap()).unwrap_err();
        assert!(err.to_string().contains("not a readable .npz"), "{err}");
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let good = write_npy(&Tensor::from_f32(vec![2, 2], vec![1.0; 4])).unwrap();
        // The same file with `from` replaced by `to` (of the same length).
        let edited = |from: &[u8], to: &[u8]| {
            let mut b = good.clone();
            let at = b.windows(from.len()).position(|w| w == from).unwrap();
            b[at..at + to.len()].copy_from_slice(to);
            b
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"hello".to_vec(), "magic"),
            (good[..good.len() - 3].to_vec(), "data bytes"),
            (good[..20].to_vec(), "truncated"),
            (edited(b"<f4", b">f4"), "'>f4' is not supported"),
            (edited(b"False", b"True "), "Fortran"),
        ];
        for (bytes, needle) in cases {
            let e = read_npy(&bytes).unwrap_err();
            assert!(e.to_string().contains(needle), "{e}");
        }
    }
}
