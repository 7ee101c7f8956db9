//! Writes small TFLite flatbuffers for tests, with the flatbuffers builder and the
//! field slots of TFLite's schema.fbs (slot = 4 + 2 * field id). It is independent of
//! the importer's reader, and lets a test state exactly what a file contains.
#![allow(dead_code)] // each test file uses part of it

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

pub const FLOAT32: i8 = 0;
pub const FLOAT16: i8 = 1;
pub const INT32: i8 = 2;
pub const INT8: i8 = 9;

/// A field value of an options table.
#[derive(Clone, Debug)]
pub enum Field {
    I8(i8),
    I32(i32),
    Bool(bool),
    F32(f32),
    VecI32(Vec<i32>),
}

#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<i32>,
    pub ttype: i8,
    /// Constant contents (little-endian bytes); `None` for activations.
    pub data: Option<Vec<u8>>,
    /// Quantization scales, if any.
    pub scale: Option<Vec<f32>>,
    /// Overrides the buffer index the tensor refers to.
    pub buffer: Option<u32>,
}

impl TensorSpec {
    pub fn f32(name: &str, shape: &[i32]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            shape: shape.to_vec(),
            ttype: FLOAT32,
            data: None,
            scale: None,
            buffer: None,
        }
    }

    pub fn f32_const(name: &str, shape: &[i32], values: &[f32]) -> TensorSpec {
        let mut t = TensorSpec::f32(name, shape);
        t.data = Some(values.iter().flat_map(|v| v.to_le_bytes()).collect());
        t
    }

    pub fn i32_const(name: &str, shape: &[i32], values: &[i32]) -> TensorSpec {
        let mut t = TensorSpec::f32(name, shape);
        t.ttype = INT32;
        t.data = Some(values.iter().flat_map(|v| v.to_le_bytes()).collect());
        t
    }
}

#[derive(Clone, Debug)]
pub struct OpSpec {
    /// `builtin_code`; when `None`, only `deprecated_code` is written (an old file).
    pub code: Option<i32>,
    pub deprecated_code: i8,
    pub inputs: Vec<i32>,
    pub outputs: Vec<i32>,
    /// BuiltinOptions union type and the options table's fields as (field id, value).
    pub options: Option<(u8, Vec<(u16, Field)>)>,
    /// Overrides the opcode index.
    pub opcode_index: Option<u32>,
}

impl OpSpec {
    /// An operator with a current-style code (deprecated field clamped to 127).
    pub fn new(code: i32, inputs: &[i32], outputs: &[i32]) -> OpSpec {
        OpSpec {
            code: Some(code),
            deprecated_code: code.min(127) as i8,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
            options: None,
            opcode_index: None,
        }
    }

    pub fn options(mut self, union_type: u8, fields: &[(u16, Field)]) -> OpSpec {
        self.options = Some((union_type, fields.to_vec()));
        self
    }
}

#[derive(Clone, Debug)]
pub struct ModelSpec {
    pub tensors: Vec<TensorSpec>,
    pub ops: Vec<OpSpec>,
    pub inputs: Vec<i32>,
    pub outputs: Vec<i32>,
    pub identifier: &'static str,
    pub version: u32,
}

impl ModelSpec {
    pub fn new(
        tensors: Vec<TensorSpec>,
        ops: Vec<OpSpec>,
        inputs: &[i32],
        outputs: &[i32],
    ) -> ModelSpec {
        ModelSpec {
            tensors,
            ops,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
            identifier: "TFL3",
            version: 3,
        }
    }

    /// Serializes the model: buffer 0 is the empty buffer, constants get one each, and
    /// every operator gets its own operator code entry.
    pub fn build(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::new();
        let empty = {
            let s = b.start_table();
            b.end_table(s)
        };
        let mut buffers = vec![empty];
        let mut tensors = Vec::new();
        for t in &self.tensors {
            let buffer_index = match &t.data {
                Some(bytes) => {
                    let data = b.create_vector(bytes);
                    let s = b.start_table();
                    b.push_slot_always(4, data);
                    buffers.push(b.end_table(s));
                    buffers.len() as u32 - 1
                }
                None => 0,
            };
            let shape = b.create_vector(&t.shape);
            let name = b.create_string(&t.name);
            let quant = t.scale.as_ref().map(|scale| {
                let scale = b.create_vector(scale);
                let zero = b.create_vector(&vec![0i64; t.scale.as_ref().unwrap().len()]);
                let s = b.start_table();
                b.push_slot_always(8, scale);
                b.push_slot_always(10, zero);
                b.end_table(s)
            });
            let s = b.start_table();
            b.push_slot_always(4, shape);
            b.push_slot_always::<i8>(6, t.ttype);
            b.push_slot_always::<u32>(8, t.buffer.unwrap_or(buffer_index));
            b.push_slot_always(10, name);
            if let Some(q) = quant {
                b.push_slot_always(12, q);
            }
            tensors.push(b.end_table(s));
        }
        let mut codes = Vec::new();
        let mut ops = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            let s = b.start_table();
            b.push_slot_always::<i8>(4, op.deprecated_code);
            b.push_slot_always::<i32>(8, 1);
            if let Some(code) = op.code {
                b.push_slot_always::<i32>(10, code);
            }
            codes.push(b.end_table(s));
            let inputs = b.create_vector(&op.inputs);
            let outputs = b.create_vector(&op.outputs);
            let options = op
                .options
                .as_ref()
                .map(|(ty, fields)| (*ty, options_table(&mut b, fields)));
            let s = b.start_table();
            b.push_slot_always::<u32>(4, op.opcode_index.unwrap_or(i as u32));
            b.push_slot_always(6, inputs);
            b.push_slot_always(8, outputs);
            if let Some((ty, table)) = options {
                b.push_slot_always::<u8>(10, ty);
                b.push_slot_always(12, table);
            }
            ops.push(b.end_table(s));
        }
        let tensors = b.create_vector(&tensors);
        let inputs = b.create_vector(&self.inputs);
        let outputs = b.create_vector(&self.outputs);
        let ops = b.create_vector(&ops);
        let name = b.create_string("main");
        let s = b.start_table();
        b.push_slot_always(4, tensors);
        b.push_slot_always(6, inputs);
        b.push_slot_always(8, outputs);
        b.push_slot_always(10, ops);
        b.push_slot_always(12, name);
        let subgraph = b.end_table(s);
        let subgraphs = b.create_vector(&[subgraph]);
        let codes = b.create_vector(&codes);
        let buffers = b.create_vector(&buffers);
        let s = b.start_table();
        b.push_slot_always::<u32>(4, self.version);
        b.push_slot_always(6, codes);
        b.push_slot_always(8, subgraphs);
        b.push_slot_always(12, buffers);
        let model = b.end_table(s);
        b.finish(model, Some(self.identifier));
        b.finished_data().to_vec()
    }
}

fn options_table(b: &mut FlatBufferBuilder, fields: &[(u16, Field)]) -> WIPOffset<UnionWIPOffset> {
    let vectors: Vec<_> = fields
        .iter()
        .map(|(_, f)| match f {
            Field::VecI32(v) => Some(b.create_vector(v)),
            _ => None,
        })
        .collect();
    let s = b.start_table();
    for ((id, f), vector) in fields.iter().zip(vectors) {
        let slot = 4 + 2 * id;
        match f {
            Field::I8(v) => b.push_slot_always::<i8>(slot, *v),
            Field::I32(v) => b.push_slot_always::<i32>(slot, *v),
            Field::Bool(v) => b.push_slot_always::<bool>(slot, *v),
            Field::F32(v) => b.push_slot_always::<f32>(slot, *v),
            Field::VecI32(_) => b.push_slot_always(slot, vector.expect("made above")),
        }
    }
    b.end_table(s).as_union_value()
}

// BuiltinOperator code and options of CONV_2D in TFLite's schema.fbs.
const CONV_2D: i32 = 3;
const CONV_OPTIONS: u8 = 1;
const VALID: i8 = 1;

/// x [1,H,W,C] conv w [O,K,K,C] -> y (VALID padding, given strides).
pub fn tfl_conv(hw: i32, k: i32, stride: i32) -> ModelSpec {
    let w = vec![0.5; (k * k) as usize];
    let tensors = vec![
        TensorSpec::f32("x", &[1, hw, hw, 1]),
        TensorSpec::f32_const("w", &[1, k, k, 1], &w),
        TensorSpec::f32_const("b", &[1], &[0.0]),
        TensorSpec::f32("y", &[1, 1, 1, 1]),
    ];
    let conv = OpSpec::new(CONV_2D, &[0, 1, 2], &[3]).options(
        CONV_OPTIONS,
        &[
            (0, Field::I8(VALID)),
            (1, Field::I32(stride)),
            (2, Field::I32(stride)),
        ],
    );
    ModelSpec::new(tensors, vec![conv], &[0], &[3])
}
