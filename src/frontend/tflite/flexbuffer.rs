//! Reading the scalars of a FlexBuffers map: the format TFLite custom
//! operators such as `TFLite_Detection_PostProcess` keep their options in
//! (the schemaless sibling of FlatBuffers, as its documentation "FlexBuffers"
//! describes it). Only what option maps hold is read: a root map whose values
//! are numbers or booleans, found by key. Every offset and width is checked
//! against the buffer, so a malformed buffer is an error, never a panic.

/// A value of the map, as far as options use them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum FlexValue {
    Null,
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    /// A string, vector, map or blob: not read.
    Other,
}

impl FlexValue {
    /// The value as an integer, where it is a number or a boolean (a float
    /// truncated, as FlexBuffers' `AsInt64` does).
    pub(super) fn as_int(self) -> Option<i64> {
        match self {
            FlexValue::Int(v) => Some(v),
            FlexValue::UInt(v) => i64::try_from(v).ok(),
            FlexValue::Float(v) if v.is_finite() => Some(v as i64),
            FlexValue::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    /// The value as a float, where it is a number.
    pub(super) fn as_float(self) -> Option<f64> {
        match self {
            FlexValue::Int(v) => Some(v as f64),
            FlexValue::UInt(v) => Some(v as f64),
            FlexValue::Float(v) => Some(v),
            _ => None,
        }
    }
}

/// The root map of a FlexBuffers buffer.
pub(super) struct FlexMap<'a> {
    buf: &'a [u8],
    /// Where the values start, their count and byte width.
    values: usize,
    len: usize,
    width: usize,
    /// Where the key offsets start, and their byte width.
    keys: usize,
    key_width: usize,
}

// Value types (the packed type byte's upper six bits).
const NULL: u8 = 0;
const INT: u8 = 1;
const UINT: u8 = 2;
const FLOAT: u8 = 3;
const INDIRECT_INT: u8 = 6;
const INDIRECT_UINT: u8 = 7;
const INDIRECT_FLOAT: u8 = 8;
const MAP: u8 = 9;
const BOOL: u8 = 26;

/// What is wrong with a buffer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Malformed(String);

impl From<String> for Malformed {
    fn from(why: String) -> Malformed {
        Malformed(why)
    }
}

impl From<&str> for Malformed {
    fn from(why: &str) -> Malformed {
        Malformed(why.to_string())
    }
}

type Res<T> = Result<T, Malformed>;

/// Bytes `[at, at + n)` of `buf`.
fn bytes(buf: &[u8], at: usize, n: usize) -> Res<&[u8]> {
    at.checked_add(n)
        .and_then(|end| buf.get(at..end))
        .ok_or_else(|| {
            Malformed(format!(
                "reads {n} bytes at {at}, past the end of its {} bytes",
                buf.len()
            ))
        })
}

/// The little-endian unsigned integer of `width` bytes at `at`.
fn uint(buf: &[u8], at: usize, width: usize) -> Res<u64> {
    let b = bytes(buf, at, width)?;
    Ok(b.iter().rev().fold(0u64, |v, &x| (v << 8) | x as u64))
}

/// The signed integer of `width` bytes at `at`.
fn int(buf: &[u8], at: usize, width: usize) -> Res<i64> {
    let v = uint(buf, at, width)?;
    let shift = 64 - 8 * width as u32;
    Ok(((v << shift) as i64) >> shift)
}

/// The float of `width` bytes (4 or 8) at `at`.
fn float(buf: &[u8], at: usize, width: usize) -> Res<f64> {
    match width {
        4 => Ok(f32::from_bits(uint(buf, at, 4)? as u32) as f64),
        8 => Ok(f64::from_bits(uint(buf, at, 8)?)),
        w => Err(format!("a float of {w} bytes").into()),
    }
}

/// A byte width as stored: 1, 2, 4 or 8.
fn width(w: u64) -> Res<usize> {
    match w {
        1 | 2 | 4 | 8 => Ok(w as usize),
        w => Err(format!("a byte width of {w}").into()),
    }
}

/// The position an offset field of `width` bytes at `at` points back to.
fn target(buf: &[u8], at: usize, width: usize) -> Res<usize> {
    let offset = uint(buf, at, width)?;
    usize::try_from(offset)
        .ok()
        .and_then(|o| at.checked_sub(o))
        .ok_or_else(|| format!("an offset of {offset} at {at} points before the buffer").into())
}

/// The value of packed type `packed` stored at `at` in a field of
/// `parent_width` bytes.
fn value(buf: &[u8], at: usize, parent_width: usize, packed: u8) -> Res<FlexValue> {
    let (kind, own_width) = (packed >> 2, 1usize << (packed & 3));
    Ok(match kind {
        NULL => FlexValue::Null,
        INT => FlexValue::Int(int(buf, at, parent_width)?),
        UINT => FlexValue::UInt(uint(buf, at, parent_width)?),
        FLOAT => FlexValue::Float(float(buf, at, parent_width)?),
        BOOL => FlexValue::Bool(uint(buf, at, parent_width)? != 0),
        INDIRECT_INT => FlexValue::Int(int(buf, target(buf, at, parent_width)?, own_width)?),
        INDIRECT_UINT => FlexValue::UInt(uint(buf, target(buf, at, parent_width)?, own_width)?),
        INDIRECT_FLOAT => FlexValue::Float(float(buf, target(buf, at, parent_width)?, own_width)?),
        _ => FlexValue::Other,
    })
}

impl<'a> FlexMap<'a> {
    /// The map at the root of `buf`.
    pub(super) fn root(buf: &'a [u8]) -> Res<FlexMap<'a>> {
        let n = buf.len();
        if n < 3 {
            return Err(format!("{n} bytes are too short for a FlexBuffers root").into());
        }
        let root_width = width(buf[n - 1] as u64)?;
        let packed = buf[n - 2];
        if packed >> 2 != MAP {
            return Err(format!("the root is of type {}, not a map", packed >> 2).into());
        }
        let at = (n - 2)
            .checked_sub(root_width)
            .ok_or("the root value lies before the buffer")?;
        let values = target(buf, at, root_width)?;
        let w = 1usize << (packed & 3);
        let field = |k: usize| {
            values
                .checked_sub(k * w)
                .ok_or("the map's header lies before the buffer")
        };
        let len = uint(buf, field(1)?, w)?;
        let key_width = width(uint(buf, field(2)?, w)?)?;
        let keys = target(buf, field(3)?, w)?;
        let len = usize::try_from(len).map_err(|_| Malformed(format!("a map of {len} entries")))?;
        // The values, their type bytes and the keys must all lie in the buffer.
        bytes(buf, values, len.checked_mul(w + 1).ok_or("a map too long")?)?;
        bytes(
            buf,
            keys,
            len.checked_mul(key_width).ok_or("a map too long")?,
        )?;
        Ok(FlexMap {
            buf,
            values,
            len,
            width: w,
            keys,
            key_width,
        })
    }

    /// The key of entry `i`.
    fn key(&self, i: usize) -> Res<&'a [u8]> {
        let at = target(self.buf, self.keys + i * self.key_width, self.key_width)?;
        let rest = self.buf.get(at..).unwrap_or_default();
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| Malformed(format!("key {i} has no terminating zero")))?;
        Ok(&rest[..end])
    }

    /// The value of `key`, `None` where the map has no such key.
    pub(super) fn get(&self, key: &str) -> Res<Option<FlexValue>> {
        for i in 0..self.len {
            if self.key(i)? == key.as_bytes() {
                let packed = self.buf[self.values + self.len * self.width + i];
                return value(self.buf, self.values + i * self.width, self.width, packed).map(Some);
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map of one-byte values {"a": 5 (int), "b": true, "c": 0.5 (a 4-byte
    /// float, indirect)}, laid out by hand as the builder writes it.
    fn sample() -> Vec<u8> {
        let mut b = Vec::new();
        // Keys, each zero-terminated.
        let key_at: Vec<usize> = ["a", "b", "c"]
            .iter()
            .map(|k| {
                let at = b.len();
                b.extend(k.as_bytes());
                b.push(0);
                at
            })
            .collect();
        // The indirect float.
        let float_at = b.len();
        b.extend(0.5f32.to_le_bytes());
        // Keys vector: length, then offsets back to each key.
        b.push(3);
        let keys = b.len();
        for (i, &k) in key_at.iter().enumerate() {
            b.push((keys + i - k) as u8);
        }
        // Map header: offset to the keys vector, its width, the length.
        let header = b.len();
        b.push((header - keys) as u8);
        b.push(1);
        b.push(3);
        let values = b.len();
        b.push(5);
        b.push(1);
        b.push((values + 2 - float_at) as u8);
        b.extend([INT << 2, BOOL << 2, (INDIRECT_FLOAT << 2) | 2]);
        // Root: offset to the values, the map's packed type, root width 1.
        let root = b.len();
        b.push((root - values) as u8);
        b.push(MAP << 2);
        b.push(1);
        b
    }

    #[test]
    fn reads_the_scalars_of_a_map_by_key() {
        let buf = sample();
        let m = FlexMap::root(&buf).unwrap();
        assert_eq!(m.get("a").unwrap(), Some(FlexValue::Int(5)));
        assert_eq!(m.get("b").unwrap(), Some(FlexValue::Bool(true)));
        assert_eq!(m.get("c").unwrap(), Some(FlexValue::Float(0.5)));
        assert_eq!(m.get("d").unwrap(), None);
    }

    /// The options the TFLite converter wrote for a TFLite_Detection_PostProcess
    /// (models/detection/tflite_ssd_fast): 4-byte values, the boolean stored as an int.
    const CONVERTED: &[u8] = b"max_detections\x00max_classes_per_detection\x00num_classes\x00\
        nms_score_threshold\x00nms_iou_threshold\x00y_scale\x00x_scale\x00h_scale\x00w_scale\x00\
        use_regular_nms\x00\x0a\x21\x7e\x8eF\x5bh\x17\x201\x3a\x00\x00\x0c\x00\x00\x00\x01\x00\
        \x00\x00\x0a\x00\x00\x00\x00\x00\xa0\x40\x02\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x3f\
        \x9a\x99\x99\x3e\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\xa0\x40\x00\x00\x20A\x00\x00\
        \x20A\x0e\x06\x06\x0e\x0e\x06\x06\x0e\x0e\x0e2\x26\x01";

    #[test]
    fn reads_the_options_the_tflite_converter_writes() {
        let m = FlexMap::root(CONVERTED).unwrap();
        let get = |k: &str| m.get(k).unwrap().unwrap();
        assert_eq!(get("max_detections"), FlexValue::Int(10));
        assert_eq!(get("max_classes_per_detection"), FlexValue::Int(2));
        assert_eq!(get("num_classes"), FlexValue::Int(4));
        assert_eq!(get("use_regular_nms").as_int(), Some(0));
        assert_eq!(get("nms_score_threshold"), FlexValue::Float(0.3f32 as f64));
        assert_eq!(get("nms_iou_threshold"), FlexValue::Float(0.5));
        for (k, v) in [
            ("y_scale", 10.0),
            ("x_scale", 10.0),
            ("h_scale", 5.0),
            ("w_scale", 5.0),
        ] {
            assert_eq!(get(k), FlexValue::Float(v), "{k}");
        }
        assert_eq!(m.get("detections_per_class").unwrap(), None);
    }

    #[test]
    fn every_cut_or_corrupted_buffer_is_an_error_or_a_value_never_a_panic() {
        for buf in [sample(), CONVERTED.to_vec()] {
            let read_all = |b: &[u8]| {
                let m = FlexMap::root(b)?;
                ["a", "c", "num_classes", "y_scale"]
                    .map(|k| m.get(k))
                    .into_iter()
                    .collect::<Res<Vec<_>>>()
            };
            // Reading any cut or altered buffer returns (a panic fails the test).
            for n in 0..buf.len() {
                let _ = read_all(&buf[..n]);
            }
            for i in 0..buf.len() {
                for v in [0u8, 1, 3, 0x7f, 0xff] {
                    let mut b = buf.clone();
                    b[i] = v;
                    let _ = read_all(&b);
                }
            }
        }
        assert!(FlexMap::root(&[1, 2]).is_err());
        assert!(FlexMap::root(&[0, INT << 2, 1]).is_err());
    }
}
