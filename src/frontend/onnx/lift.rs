//! Lifts the data of the main graph's initializers out of an ONNX file's wire
//! format before it is decoded. The decoder copies every `raw_data` field into
//! a buffer of its own, which the import then converts into a tensor: two
//! fresh copies of the weights, where writing fresh pages is the cost (see
//! `frontend::FileBytes`). With the data lifted out, the decoder reads a small
//! message of names, nodes and shapes, and each weight is converted once,
//! straight from the file's bytes.

use std::ops::Range;

// Field numbers of onnx.proto.
const MODEL_GRAPH: u32 = 7;
const GRAPH_INITIALIZER: u32 = 5;
const TENSOR_RAW_DATA: u32 = 9;

const WIRE_VARINT: u64 = 0;
const WIRE_FIXED64: u64 = 1;
const WIRE_LENGTH_DELIMITED: u64 = 2;
const WIRE_FIXED32: u64 = 5;

/// Where each initializer's `raw_data` lies in the file, in order (`None`:
/// it has none, its data is typed or external).
pub type RawDataPlaces = Vec<Option<Range<usize>>>;

/// A model's wire format with the main graph's initializer data lifted out.
pub struct Lifted {
    /// The model, encoded as if every main-graph initializer's `raw_data`
    /// were empty.
    pub model: Vec<u8>,
    /// For each initializer of the main graph, where its `raw_data` lies.
    pub raw_data: RawDataPlaces,
}

/// Lifts the initializer data out of `file`; `None` when `file` is not
/// well-formed protobuf to its end, which the decoder, reading the file as it
/// is, then reports.
pub fn lift_initializer_data(file: &[u8]) -> Option<Lifted> {
    let mut lifted = Lifted {
        model: Vec::new(),
        raw_data: Vec::new(),
    };
    let mut graph = Vec::new();
    each_field(file, 0..file.len(), &mut |field| {
        match field.payload {
            Some(payload) if field.number == MODEL_GRAPH => {
                graph.clear();
                lift_graph(file, payload, &mut graph, &mut lifted.raw_data)?;
                put_length_delimited(&mut lifted.model, MODEL_GRAPH, &graph);
            }
            _ => lifted.model.extend_from_slice(&file[field.whole]),
        }
        Some(())
    })?;
    Some(lifted)
}

/// Copies the graph message at `range` into `out` without its initializers'
/// raw data, whose places it pushes onto `raw_data`.
fn lift_graph(
    file: &[u8],
    range: Range<usize>,
    out: &mut Vec<u8>,
    raw_data: &mut RawDataPlaces,
) -> Option<()> {
    let mut tensor = Vec::new();
    each_field(file, range, &mut |field| {
        match field.payload {
            Some(payload) if field.number == GRAPH_INITIALIZER => {
                tensor.clear();
                let mut raw = None;
                each_field(file, payload, &mut |f| {
                    match f.payload {
                        // The last occurrence wins, as in decoding.
                        Some(data) if f.number == TENSOR_RAW_DATA => raw = Some(data),
                        _ => tensor.extend_from_slice(&file[f.whole]),
                    }
                    Some(())
                })?;
                raw_data.push(raw.filter(|r| !r.is_empty()));
                put_length_delimited(out, GRAPH_INITIALIZER, &tensor);
            }
            _ => out.extend_from_slice(&file[field.whole]),
        }
        Some(())
    })
}

/// One field of a message: its number, all its bytes (tag included) and, when
/// it is length-delimited, where its payload lies.
struct Field {
    number: u32,
    whole: Range<usize>,
    payload: Option<Range<usize>>,
}

/// Offers every field of the message at `range` to `visit`; `None` when a
/// field is malformed or runs past the range.
fn each_field(
    bytes: &[u8],
    range: Range<usize>,
    visit: &mut dyn FnMut(Field) -> Option<()>,
) -> Option<()> {
    let mut at = range.start;
    while at < range.end {
        let start = at;
        let tag = varint(bytes, &mut at, range.end)?;
        let number = u32::try_from(tag >> 3).ok().filter(|&n| n > 0)?;
        let mut payload = None;
        at = match tag & 7 {
            WIRE_VARINT => {
                varint(bytes, &mut at, range.end)?;
                at
            }
            WIRE_FIXED64 => at.checked_add(8)?,
            WIRE_FIXED32 => at.checked_add(4)?,
            WIRE_LENGTH_DELIMITED => {
                let len = usize::try_from(varint(bytes, &mut at, range.end)?).ok()?;
                let end = at.checked_add(len)?;
                payload = Some(at..end);
                end
            }
            // Groups are not in onnx.proto: the decoder reads them.
            _ => return None,
        };
        if at > range.end {
            return None;
        }
        visit(Field {
            number,
            whole: start..at,
            payload,
        })?;
    }
    Some(())
}

/// Reads a base-128 varint at `*at`, before `end`.
fn varint(bytes: &[u8], at: &mut usize, end: usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at).filter(|_| *at < end)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_length_delimited(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    put_varint(out, u64::from(number) << 3 | WIRE_LENGTH_DELIMITED);
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_protobuf::{GraphProto, ModelProto, TensorProto};
    use protobuf::Message;

    fn tensor(name: &str, raw: &[u8], floats: &[f32]) -> TensorProto {
        let mut t = TensorProto::new();
        t.name = name.into();
        t.dims = vec![raw.len().max(floats.len()) as i64];
        t.data_type = 1;
        t.raw_data = raw.to_vec();
        t.float_data = floats.to_vec();
        t
    }

    #[test]
    fn lifted_data_decodes_to_the_same_model() {
        let mut graph = GraphProto::new();
        graph.name = "g".into();
        let big: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        graph.initializer = vec![
            tensor("w", &big, &[]),
            tensor("typed", &[], &[1.0, 2.0]),
            tensor("b", &[1, 2, 3, 4], &[]),
        ];
        let mut model = ModelProto::new();
        model.ir_version = 9;
        model.producer_name = "test".into();
        model.graph = Some(graph).into();
        let file = model.write_to_bytes().unwrap();

        let lifted = lift_initializer_data(&file).expect("well-formed");
        assert!(lifted.model.len() + big.len() <= file.len());
        let mut decoded = ModelProto::parse_from_bytes(&lifted.model).unwrap();
        let raw: Vec<&[u8]> = (lifted.raw_data.iter())
            .map(|r| r.clone().map_or(&[][..], |r| &file[r]))
            .collect();
        assert_eq!(raw, [&big[..], &[][..], &[1, 2, 3, 4][..]]);
        // Putting the data back gives the model that was written.
        let inits = &mut decoded.graph.as_mut().unwrap().initializer;
        for (t, data) in inits.iter_mut().zip(raw) {
            assert!(t.raw_data.is_empty());
            t.raw_data = data.to_vec();
        }
        assert_eq!(decoded, model);
    }

    #[test]
    fn malformed_or_cut_files_are_left_to_the_decoder() {
        let mut model = ModelProto::new();
        let mut graph = GraphProto::new();
        graph.initializer = vec![tensor("w", &[7; 40], &[])];
        model.graph = Some(graph).into();
        let file = model.write_to_bytes().unwrap();
        for cut in 1..file.len() {
            // Each cut either ends between top-level fields or is refused.
            if let Some(l) = lift_initializer_data(&file[..cut]) {
                assert!(l.raw_data.is_empty());
            }
        }
        assert!(lift_initializer_data(&[0x3b, 0x01]).is_none()); // a group
        assert!(lift_initializer_data(&[0x80]).is_none()); // a cut varint
    }
}
