//! TFLite importer: reads a `.tflite` flatbuffer (schema v3) into a `Graph`.
//!
//! TFLite tensors keep their source layouts in the IR: activations stay NHWC, and the
//! layout changes that NCHW-defined IR ops need are explicit `Transpose` nodes around
//! them (NHWC → NCHW → op → NHWC), so the layout planner sees them and can cancel them.
//! Weights are constants and are re-laid (OHWI → OIHW) at import. Every node made for
//! a TFLite operator, fused activations included, carries that operator's span:
//! (file, output tensor name, TFLite op name, operator index).
//!
//! Only subgraph 0 is imported; quantized models are refused. Sparse constants (a
//! tensor's `sparsity` table) are made dense when read (see `sparse`).

mod flexbuffer;
mod ops;
pub mod schema;
mod sparse;

use crate::graph::{
    check_value_size, checked_numel, memory_limit, DType, Graph, GraphError, QuantizedArithmetic,
    Span, Tensor, TensorData, ValueRef, ValueType,
};
use flatbuffers::{ForwardsUOffset, Vector};
use std::path::Path;
use std::sync::Arc;

/// Why a TFLite file could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum TfliteError {
    /// The file could not be read.
    #[error("{file}: cannot read the file: {source}")]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error(
        "{file}: not a TFLite model: the file is {len} bytes, too short for a flatbuffer header"
    )]
    /// Too short to hold a flatbuffer header.
    TooShort {
        /// The file.
        file: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The file identifier is not "TFL3".
    #[error("{file}: not a TFLite model: file identifier is {found:?}, expected \"TFL3\"")]
    BadIdentifier {
        /// The file.
        file: String,
        /// The identifier found.
        found: String,
    },
    /// The flatbuffer is truncated or corrupt.
    #[error("{file}: not a valid TFLite flatbuffer (truncated or corrupt): {detail}")]
    Corrupt {
        /// The file.
        file: String,
        /// What the flatbuffer reader found wrong.
        detail: String,
    },
    /// The flatbuffer is well formed but its contents are inconsistent.
    #[error("{file}: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// What is inconsistent.
        message: String,
    },
    /// A narrow integer tensor without a quantization scale is read by an
    /// operator computing float: what its values mean is unknown.
    #[error("{file}: tensor #{index} '{tensor}' ({dtype}) is read by an operator computing float but has no quantization scale")]
    Unscaled {
        /// The file.
        file: String,
        /// The tensor's index in its subgraph.
        index: usize,
        /// The tensor's name.
        tensor: String,
        /// Its stored type.
        dtype: String,
    },
    /// An operator (or option of one) that is not supported.
    #[error("{span}: {message}")]
    Unsupported {
        /// The operator in the source.
        span: Span,
        /// What is not supported.
        message: String,
    },
    /// An operator whose inputs or options do not make sense.
    #[error("{span}: {message}")]
    Layer {
        /// The operator in the source.
        span: Span,
        /// What is wrong.
        message: String,
    },
    /// The imported graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

impl TfliteError {
    /// The operator at fault, none for the file as a whole.
    pub fn spans(&self) -> Vec<Span> {
        match self {
            TfliteError::Unsupported { span, .. } | TfliteError::Layer { span, .. } => {
                vec![span.clone()]
            }
            TfliteError::Graph(e) => e.spans(),
            _ => vec![],
        }
    }
}

/// Imports the TFLite model at `path`.
pub fn load_tflite(path: &Path) -> Result<Graph, TfliteError> {
    let file = path.display().to_string();
    let bytes = crate::frontend::map_file(path).map_err(|source| TfliteError::Io {
        file: file.clone(),
        source,
    })?;
    import_tflite(&bytes, &file)
}

/// Imports a TFLite model held in memory; `file` names it in spans and errors.
pub fn import_tflite(bytes: &[u8], file: &str) -> Result<Graph, TfliteError> {
    // A flatbuffer starts with the root offset, then the 4-byte file identifier.
    if bytes.len() < 8 {
        return Err(TfliteError::TooShort {
            file: file.to_string(),
            len: bytes.len(),
        });
    }
    if &bytes[4..8] != b"TFL3" {
        return Err(TfliteError::BadIdentifier {
            file: file.to_string(),
            found: String::from_utf8_lossy(&bytes[4..8]).into_owned(),
        });
    }
    let model = schema::root(bytes).map_err(|e| TfliteError::Corrupt {
        file: file.to_string(),
        detail: e.to_string().trim_end().replace('\n', "; "),
    })?;
    Importer::new(bytes, file, model)?.run()
}

/// Maps a TFLite `TensorType` to an IR dtype (`None`: a type we do not import).
fn dtype_of(tensor_type: i8) -> Option<DType> {
    Some(match tensor_type {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::I32,
        3 => DType::U8,
        4 => DType::I64,
        6 => DType::Bool,
        7 => DType::I16,
        9 => DType::I8,
        10 => DType::F64,
        12 => DType::U64,
        15 => DType::U32,
        16 => DType::U16,
        _ => return None,
    })
}

fn tensor_type_name(tensor_type: i8) -> String {
    const NAMES: [&str; 21] = [
        "FLOAT32",
        "FLOAT16",
        "INT32",
        "UINT8",
        "INT64",
        "STRING",
        "BOOL",
        "INT16",
        "COMPLEX64",
        "INT8",
        "FLOAT64",
        "COMPLEX128",
        "UINT64",
        "RESOURCE",
        "VARIANT",
        "UINT32",
        "UINT16",
        "INT4",
        "BFLOAT16",
        "INT2",
        "UINT4",
    ];
    usize::try_from(tensor_type)
        .ok()
        .and_then(|t| NAMES.get(t))
        .map_or_else(|| format!("type {tensor_type}"), |n| n.to_string())
}

/// Import state for subgraph 0.
struct Importer<'a> {
    bytes: &'a [u8],
    file: Arc<str>,
    tensors: Vector<'a, ForwardsUOffset<schema::Tensor<'a>>>,
    buffers: Option<Vector<'a, ForwardsUOffset<schema::Buffer<'a>>>>,
    codes: Option<Vector<'a, ForwardsUOffset<schema::OperatorCode<'a>>>>,
    subgraph: schema::SubGraph<'a>,
    graph: Graph,
    /// The IR value holding each TFLite tensor, once produced or loaded.
    values: Vec<Option<ValueRef>>,
}

impl<'a> Importer<'a> {
    fn new(bytes: &'a [u8], file: &str, model: schema::Model<'a>) -> Result<Self, TfliteError> {
        let invalid = |message: String| TfliteError::Invalid {
            file: file.to_string(),
            message,
        };
        if model.version() != 3 {
            return Err(invalid(format!(
                "schema version {} is not supported (expected 3)",
                model.version()
            )));
        }
        let subgraph = model
            .subgraphs()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| invalid("the model has no subgraph".into()))?
            .get(0);
        let tensors = subgraph.tensors().unwrap_or_default();
        // Converters name subgraph 0 "main", so the file names the graph.
        let mut graph = Graph::new(graph_name(file));
        graph.quantized_arithmetic = QuantizedArithmetic::Tflite;
        Ok(Importer {
            bytes,
            file: file.into(),
            tensors,
            buffers: model.buffers(),
            codes: model.operator_codes(),
            subgraph,
            graph,
            values: vec![None; tensors.len()],
        })
    }

    fn invalid(&self, message: String) -> TfliteError {
        TfliteError::Invalid {
            file: self.file.to_string(),
            message,
        }
    }

    fn run(mut self) -> Result<Graph, TfliteError> {
        self.refuse_unscaled()?;
        for idx in self.subgraph.inputs().unwrap_or_default() {
            let t = self.tensor_index(idx, "subgraph input")?;
            let ty = self.value_type(t)?;
            let name = self.tensor_name(t);
            check_value_size(&ty, "has type", memory_limit())
                .map_err(|m| self.invalid(format!("subgraph input #{t} '{name}' {m}")))?;
            let span = Span::new(&self.file, &name, "Input", 0);
            let mut v = self.graph.add_input(&name, ty, vec![span.clone()]);
            if let Some(q) = self.quantization(t)? {
                v = self.dequantized_input(v, &q, &span)?;
            }
            self.values[t] = Some(v);
        }
        let operators = self.subgraph.operators().unwrap_or_default();
        for (i, op) in operators.iter().enumerate() {
            ops::import_operator(&mut self, i, op)?;
        }
        let mut outputs = Vec::new();
        for idx in self.subgraph.outputs().unwrap_or_default() {
            let t = self.tensor_index(idx, "subgraph output")?;
            let mut v = self.value(t, None)?;
            if let Some(q) = self.quantization(t)? {
                let name = self.tensor_name(t);
                let span = Span::new(&self.file, &name, "Output", 0);
                v = self.onto_grid(v, &q, true, &span)?;
                self.graph.node_mut(v.node).outputs[v.output].name = name;
            }
            outputs.push(v);
        }
        self.graph.set_outputs(outputs);
        // Refused here, before a caller allocates inputs or runs it.
        self.graph.check_memory(memory_limit())?;
        Ok(self.graph)
    }

    /// Refuses, at the first operator that reads an 8- or 4-bit integer tensor
    /// without a quantization scale and writes a float one, a model whose
    /// integer data has no float meaning (a CAST of uint8 pixels excepted).
    fn refuse_unscaled(&self) -> Result<(), TfliteError> {
        // UINT8, INT8, INT4 in TFLite's TensorType.
        let narrow_int = |t: &schema::Tensor| matches!(t.tensor_type(), 3 | 9 | 17);
        let scaled = |t: &schema::Tensor| {
            t.quantization()
                .and_then(|q| q.scale())
                .is_some_and(|s| !s.is_empty())
        };
        let is_float = |t: &schema::Tensor| dtype_of(t.tensor_type()).is_some_and(DType::is_float);
        let tensor = |i: i32| usize::try_from(i).ok().filter(|&i| i < self.tensors.len());
        let code = |op: &schema::Operator| {
            let codes = self.codes?;
            let i = op.opcode_index() as usize;
            (i < codes.len()).then(|| codes.get(i).code())
        };
        for op in self.subgraph.operators().unwrap_or_default() {
            // CAST (53) of uint8 pixels to float is no quantization.
            if code(&op) == Some(53) {
                continue;
            }
            let ins = op.inputs().unwrap_or_default();
            let outs = op.outputs().unwrap_or_default();
            let unscaled = ins.iter().filter_map(tensor).find(|&i| {
                let t = self.tensor(i);
                narrow_int(&t) && !scaled(&t)
            });
            let float_out = outs
                .iter()
                .filter_map(tensor)
                .any(|i| is_float(&self.tensor(i)));
            if let (Some(index), true) = (unscaled, float_out) {
                return Err(TfliteError::Unscaled {
                    file: self.file.to_string(),
                    index,
                    tensor: self.tensor_name(index),
                    dtype: tensor_type_name(self.tensor(index).tensor_type()).to_string(),
                });
            }
        }
        Ok(())
    }

    /// Checks a tensor index read from the file.
    fn tensor_index(&self, idx: i32, what: &str) -> Result<usize, TfliteError> {
        usize::try_from(idx)
            .ok()
            .filter(|&t| t < self.tensors.len())
            .ok_or_else(|| {
                self.invalid(format!(
                    "{what} refers to tensor {idx}, but subgraph 0 has {} tensors",
                    self.tensors.len()
                ))
            })
    }

    fn tensor(&self, t: usize) -> schema::Tensor<'a> {
        self.tensors.get(t)
    }

    /// The tensor's name, or `tensor_<index>` when the file gives none.
    fn tensor_name(&self, t: usize) -> String {
        match self.tensor(t).name() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!("tensor_{t}"),
        }
    }

    /// The declared dtype and static shape of a tensor.
    fn value_type(&self, t: usize) -> Result<ValueType, TfliteError> {
        let tensor = self.tensor(t);
        let dtype = dtype_of(tensor.tensor_type()).ok_or_else(|| {
            self.invalid(format!(
                "tensor #{t} '{}' has element type {}, which is not supported",
                self.tensor_name(t),
                tensor_type_name(tensor.tensor_type())
            ))
        })?;
        let shape = self.declared_shape(t)?.unwrap_or_default();
        Ok(ValueType::new(dtype, shape))
    }

    /// The tensor's static shape, or `None` when the file does not record one.
    fn is_graph_input(&self, t: usize) -> bool {
        let inputs = self.subgraph.inputs().unwrap_or_default();
        inputs.iter().any(|i| usize::try_from(i) == Ok(t))
    }

    fn declared_shape(&self, t: usize) -> Result<Option<Vec<usize>>, TfliteError> {
        let Some(dims) = self.tensor(t).shape() else {
            return Ok(None);
        };
        // A tensor computed at run time from run-time shapes declares a
        // placeholder shape; its signature says which dimensions are unknown.
        let signature = self.tensor(t).shape_signature();
        if signature.is_some_and(|s| s.iter().any(|d| d < 0)) && !self.is_graph_input(t) {
            return Ok(None);
        }
        let shape = dims
            .iter()
            .map(|d| usize::try_from(d).ok())
            .collect::<Option<Vec<usize>>>()
            .filter(|s| checked_numel(s).is_some())
            .ok_or_else(|| {
                self.invalid(format!(
                    "tensor #{t} '{}' has shape {:?}; shapes must be static and non-negative, with an element count that fits in memory",
                    self.tensor_name(t),
                    dims.iter().collect::<Vec<_>>()
                ))
            })?;
        Ok(Some(shape))
    }

    /// The constant data of a tensor, or `None` when it has no buffer contents. A
    /// sparse tensor is made dense, a quantized one its float values; `reader`
    /// names the operator reading it, if any.
    fn constant_data(
        &self,
        t: usize,
        reader: Option<&Span>,
    ) -> Result<Option<Tensor>, TfliteError> {
        self.constant_permuted(t, reader, None)
    }

    /// [`Importer::constant_data`] with its axes permuted by `perm`, if
    /// given (of the tensor's rank). Float values stored in the file as
    /// floats are permuted straight from it: decoding them first and then
    /// transposing made two fresh copies of every convolution's weights,
    /// whose page faults were most of a large model's import.
    fn constant_permuted(
        &self,
        t: usize,
        reader: Option<&Span>,
        perm: Option<&[usize]>,
    ) -> Result<Option<Tensor>, TfliteError> {
        let name = self.tensor_name(t);
        let index = self.tensor(t).buffer() as usize;
        let count = self.buffers.map_or(0, |b| b.len());
        if index >= count {
            return Err(self.invalid(format!(
                "tensor #{t} '{name}' refers to buffer {index}, but the model has {count} buffers"
            )));
        }
        let buffer = self
            .buffers
            .expect("index < count implies buffers")
            .get(index);
        let bytes = match buffer.data() {
            Some(d) if !d.is_empty() => d.bytes(),
            // Models over 2 GB keep buffers after the flatbuffer; offset 1 marks "none".
            _ if buffer.offset() > 1 => {
                let range = usize::try_from(buffer.offset())
                    .ok()
                    .zip(usize::try_from(buffer.size()).ok())
                    .and_then(|(o, s)| self.bytes.get(o..o.checked_add(s)?));
                range.ok_or_else(|| {
                    self.invalid(format!(
                        "buffer {index} of tensor #{t} '{name}' lies outside the file (offset {}, size {})",
                        buffer.offset(),
                        buffer.size()
                    ))
                })?
            }
            _ => return Ok(None),
        };
        let ty = self.value_type(t)?;
        let dense;
        let bytes = match self.tensor(t).sparsity() {
            Some(sparsity) => {
                dense = self.densify(t, sparsity, &ty, bytes, reader)?;
                &dense[..]
            }
            None => bytes,
        };
        let expected = ty.numel().checked_mul(ty.dtype.size_bytes());
        if expected != Some(bytes.len()) {
            let needs = expected.map_or_else(|| "more than usize::MAX".into(), |n| n.to_string());
            return Err(self.invalid(format!(
                "tensor #{t} '{name}' of type {ty} needs {needs} bytes, but buffer {index} holds {}",
                bytes.len()
            )));
        }
        let quantization = self.quantization(t)?;
        if let (Some(perm), None, DType::F32) = (perm, &quantization, ty.dtype) {
            // SAFETY: any 4 bytes are an f32; `align_to` gives whole aligned
            // values only, and the schema aligns buffers to 16 bytes.
            if let (&[], values, &[]) = unsafe { bytes.align_to::<f32>() } {
                if cfg!(target_endian = "little") {
                    let shape = perm.iter().map(|&a| ty.shape[a]).collect();
                    let values = crate::ops::transposed_values(perm, &ty.shape, values);
                    return Ok(Some(Tensor::new(shape, TensorData::F32(values))));
                }
            }
        }
        let data =
            TensorData::from_le_bytes(ty.dtype, bytes).map_err(|e| self.invalid(e.to_string()))?;
        let data = Tensor::new(ty.shape, data);
        // A quantized constant is read as its float meaning.
        let data = match quantization {
            Some(q) => Importer::dequantized(&data, &q),
            None => data,
        };
        Ok(Some(match perm {
            Some(perm) => crate::ops::transpose(perm, &data),
            None => data,
        }))
    }

    /// The dense bytes of sparse tensor `t` of type `ty`, whose buffer holds `stored`.
    fn densify(
        &self,
        t: usize,
        sparsity: schema::SparsityParameters<'a>,
        ty: &ValueType,
        stored: &[u8],
        reader: Option<&Span>,
    ) -> Result<Vec<u8>, TfliteError> {
        let error = |message: String| {
            let message = format!("sparse tensor #{t} '{}': {message}", self.tensor_name(t));
            match reader {
                Some(span) => TfliteError::Layer {
                    span: span.clone(),
                    message,
                },
                None => self.invalid(message),
            }
        };
        // The dense size is not bounded by the file's: check it before allocating.
        check_value_size(ty, "its dense form", memory_limit()).map_err(|e| error(e.to_string()))?;
        sparse::densify(sparsity, &ty.shape, ty.dtype.size_bytes(), stored)
            .map_err(|e| error(e.to_string()))
    }

    /// The IR value of tensor `t`: produced by an earlier operator, a graph input, or
    /// its constant data (loaded on first use). `span` names the reading operator.
    fn value(&mut self, t: usize, span: Option<&Span>) -> Result<ValueRef, TfliteError> {
        if let Some(v) = self.values[t] {
            return Ok(v);
        }
        let Some(data) = self.constant_data(t, span)? else {
            let message = format!(
                "tensor #{t} '{}' is read before any operator produces it and has no data",
                self.tensor_name(t)
            );
            return Err(match span {
                Some(span) => TfliteError::Layer {
                    span: span.clone(),
                    message,
                },
                None => self.invalid(message),
            });
        };
        let name = self.tensor_name(t);
        let span = Span::new(&self.file, &name, "Constant", 0);
        let v = self.graph.add_constant(&name, data, vec![span]);
        self.values[t] = Some(v);
        Ok(v)
    }
}

/// Decodes little-endian elements of `dtype` (the length is already checked).
/// A graph name from the file name: `dir/model.tflite` → `model`.
fn graph_name(file: &str) -> String {
    Path::new(file)
        .file_stem()
        .map_or_else(|| file.to_string(), |s| s.to_string_lossy().into_owned())
}
