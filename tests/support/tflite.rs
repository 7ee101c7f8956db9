//! Writes small TFLite flatbuffers for tests, with the flatbuffers builder and the
//! field slots of TFLite's schema.fbs (slot = 4 + 2 * field id). It is independent of
//! the importer's reader, and lets a test state exactly what a file contains.

use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

pub const FLOAT32: i8 = 0;
pub const INT32: i8 = 2;
pub const INT8: i8 = 9;

/// A field value of an options table.
#[derive(Clone, Debug)]
pub enum Field {
    I8(i8),
    I32(i32),
    Bool(bool),
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
    /// The sparse layout of `data`, if it holds only the stored values.
    pub sparsity: Option<SparsitySpec>,
}

/// A Tensor's `sparsity` table.
#[derive(Clone, Debug)]
pub struct SparsitySpec {
    pub traversal_order: Vec<i32>,
    pub block_map: Vec<i32>,
    /// One per level, in traversal order.
    pub levels: Vec<LevelSpec>,
}

/// A `DimensionMetadata`: DENSE of a size, or SPARSE_CSR with int32 arrays.
#[derive(Clone, Debug)]
pub enum LevelSpec {
    Dense(i32),
    Csr {
        segments: Vec<i32>,
        indices: Vec<i32>,
    },
}

impl SparsitySpec {
    /// Row-major traversal without blocks.
    pub fn new(levels: Vec<LevelSpec>) -> SparsitySpec {
        SparsitySpec {
            traversal_order: (0..levels.len() as i32).collect(),
            block_map: vec![],
            levels,
        }
    }
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
            sparsity: None,
        }
    }

    /// A constant stored sparse: `values` are the stored values only.
    pub fn f32_sparse(
        name: &str,
        shape: &[i32],
        values: &[f32],
        sparsity: SparsitySpec,
    ) -> TensorSpec {
        TensorSpec {
            sparsity: Some(sparsity),
            ..TensorSpec::f32_const(name, shape, values)
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
    /// For a CUSTOM operator: its custom_code and custom_options bytes.
    pub custom: Option<(String, Vec<u8>)>,
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
            custom: None,
        }
    }

    /// A CUSTOM operator named `code` with raw `options`.
    pub fn custom(code: &str, options: &[u8], inputs: &[i32], outputs: &[i32]) -> OpSpec {
        OpSpec {
            custom: Some((code.into(), options.to_vec())),
            ..OpSpec::new(CUSTOM, inputs, outputs)
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
            let sparsity = t.sparsity.as_ref().map(|sp| sparsity_table(&mut b, sp));
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
            if let Some(sp) = sparsity {
                b.push_slot_always(16, sp);
            }
            tensors.push(b.end_table(s));
        }
        let mut codes = Vec::new();
        let mut ops = Vec::new();
        for (i, op) in self.ops.iter().enumerate() {
            let custom = op
                .custom
                .as_ref()
                .map(|(code, options)| (b.create_string(code), b.create_vector(options)));
            let s = b.start_table();
            b.push_slot_always::<i8>(4, op.deprecated_code);
            b.push_slot_always::<i32>(8, 1);
            if let Some(code) = op.code {
                b.push_slot_always::<i32>(10, code);
            }
            if let Some((code, _)) = custom {
                b.push_slot_always(6, code);
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
            if let Some((_, options)) = custom {
                b.push_slot_always(14, options);
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

/// A `SparsityParameters` table; index arrays are written as `Int32Vector`s.
fn sparsity_table(
    b: &mut FlatBufferBuilder,
    sp: &SparsitySpec,
) -> WIPOffset<flatbuffers::TableFinishedWIPOffset> {
    let int32_vector = |b: &mut FlatBufferBuilder, values: &[i32]| {
        let v = b.create_vector(values);
        let s = b.start_table();
        b.push_slot_always(4, v);
        b.end_table(s)
    };
    let levels: Vec<_> = sp
        .levels
        .iter()
        .map(|level| {
            let arrays = match level {
                LevelSpec::Dense(_) => None,
                LevelSpec::Csr { segments, indices } => {
                    Some((int32_vector(b, segments), int32_vector(b, indices)))
                }
            };
            let s = b.start_table();
            match (level, arrays) {
                (LevelSpec::Dense(size), _) => b.push_slot_always::<i32>(6, *size),
                (LevelSpec::Csr { .. }, Some((segments, indices))) => {
                    b.push_slot_always::<i8>(4, 1);
                    b.push_slot_always::<u8>(8, 1);
                    b.push_slot_always(10, segments);
                    b.push_slot_always::<u8>(12, 1);
                    b.push_slot_always(14, indices);
                }
                (LevelSpec::Csr { .. }, None) => unreachable!("made above"),
            }
            b.end_table(s)
        })
        .collect();
    let order = b.create_vector(&sp.traversal_order);
    let block_map = b.create_vector(&sp.block_map);
    let levels = b.create_vector(&levels);
    let s = b.start_table();
    b.push_slot_always(4, order);
    b.push_slot_always(6, block_map);
    b.push_slot_always(8, levels);
    b.end_table(s)
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
            Field::VecI32(_) => b.push_slot_always(slot, vector.expect("made above")),
        }
    }
    b.end_table(s).as_union_value()
}

// BuiltinOperator codes and BuiltinOptions union types from TFLite's schema.fbs.
pub const CEIL: i32 = 104;
pub const CONV_2D: i32 = 3;
pub const CUSTOM: i32 = 32;
pub const DENSIFY: i32 = 124;
pub const DEPTHWISE_CONV_2D: i32 = 4;
pub const FLOOR: i32 = 8;
pub const FULLY_CONNECTED: i32 = 9;
pub const LSTM: i32 = 16;
pub const MAX_POOL_2D: i32 = 17;
pub const RELU: i32 = 19;
pub const RELU6: i32 = 21;
pub const RESIZE_BILINEAR: i32 = 23;
pub const SQUEEZE: i32 = 43;
pub const STRIDED_SLICE: i32 = 45;
pub const PADV2: i32 = 60;
pub const RESIZE_NEAREST_NEIGHBOR: i32 = 97;
pub const ROUND: i32 = 116;
pub const GELU: i32 = 150;
pub const SPACE_TO_BATCH_ND: i32 = 38;
pub const BATCH_TO_SPACE_ND: i32 = 37;
pub const MIRROR_PAD: i32 = 100;
pub const BITCAST: i32 = 159;
pub const SPACE_TO_DEPTH: i32 = 26;
pub const EMBEDDING_LOOKUP: i32 = 7;
pub const FILL: i32 = 94;
pub const ZEROS_LIKE: i32 = 93;
pub const ONES_LIKE: i32 = 146;
pub const REDUCE_ALL: i32 = 140;
pub const ONE_HOT: i32 = 85;
pub const RANGE: i32 = 96;
pub const ATAN2: i32 = 156;
pub const ONE_HOT_OPTIONS: u8 = 61;
pub const REDUCER_OPTIONS: u8 = 27;
pub const BOOL: i8 = 6;
pub const GREATER: i32 = 61;
pub const MIRROR_PAD_OPTIONS: u8 = 77;
pub const SPACE_TO_DEPTH_OPTIONS: u8 = 19;
pub const CONV_OPTIONS: u8 = 1;
pub const DEPTHWISE_OPTIONS: u8 = 2;
pub const POOL_OPTIONS: u8 = 5;
pub const FC_OPTIONS: u8 = 8;
pub const RESIZE_BILINEAR_OPTIONS: u8 = 15;
pub const SQUEEZE_OPTIONS: u8 = 30;
pub const STRIDED_SLICE_OPTIONS: u8 = 32;
pub const RESIZE_NEAREST_OPTIONS: u8 = 74;
pub const GELU_OPTIONS: u8 = 116;
// Padding and ActivationFunctionType.
pub const SAME: i8 = 0;
pub const VALID: i8 = 1;
pub const ACT_RELU: i8 = 1;
pub const ACT_RELU6: i8 = 3;

/// x [1, K] → FULLY_CONNECTED with weights [N, K] that DENSIFY makes dense from
/// `stored` values laid out by `sparsity`.
pub fn densify_fc(shape: [i32; 2], stored: &[f32], sparsity: SparsitySpec) -> ModelSpec {
    let [n, k] = shape;
    let tensors = vec![
        TensorSpec::f32("x", &[1, k]),
        TensorSpec::f32_sparse("w_sparse", &[n, k], stored, sparsity),
        TensorSpec::f32("w_dense", &[n, k]),
        TensorSpec::f32("y", &[1, n]),
    ];
    let ops = vec![
        OpSpec::new(DENSIFY, &[1], &[2]),
        OpSpec::new(FULLY_CONNECTED, &[0, 2], &[3]),
    ];
    ModelSpec::new(tensors, ops, &[0], &[3])
}
