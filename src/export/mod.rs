//! ONNX export of a (planned) graph: layoutopt's plans as standard ONNX models
//! that any runtime can run.
//!
//! Every op of the IR maps to standard ONNX ops at one opset: the oldest that
//! has them all (17, or 19/20 for a dilated AveragePool or a Gelu). The layout
//! machinery has no ONNX counterpart, so it is spelled out with data-movement
//! ops (see `crate::ops::onnx`):
//! - a physical tensor in layout L of a logical shape S is produced from the
//!   logical tensor by Pad (blocked axes up to a multiple of their block, with the
//!   plan's padding value), Reshape (each axis into its digits) and Transpose
//!   (digits into physical order); the way back is the inverse Transpose,
//!   Reshape to the padded shape and Slice;
//! - `LayoutTransform` is the way back from its source layout, then the way in
//!   to its target layout (one Transpose between two permutations);
//! - `PadWith` and `Crop` are Pad and Slice;
//! - `InLayout` (an op the planner placed in storage layouts) is its inner op on
//!   the logical tensors, wrapped in the ways back and in.
//!
//! Constants stay as they were planned (packed constants are exported packed,
//! as initializers) and are unpacked by the same ops; runtimes fold those.

use crate::frontend::onnx::tensor_to_proto;
use crate::graph::{
    format_spans, format_spans_portable, Graph, Op, Span, Tensor, ValueRef, ValueType,
};
use crate::ops::onnx::{Attr, OnnxCx, OnnxWriter};
use crate::ops::OpError;
use onnx_protobuf::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use protobuf::Message;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// An export error, naming the layer (or file) at fault.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// An op that has no ONNX form (or not for these operands).
    #[error("{}: cannot export {op}: {message}", format_spans(spans))]
    Op {
        /// The source layers of the node.
        spans: Vec<Span>,
        /// The op's kind.
        op: String,
        /// Why it cannot be exported.
        message: OpError,
    },
    /// The model file could not be written.
    #[error("{path}: cannot write the model: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The graph is malformed.
    #[error("export: {0}")]
    Graph(String),
}

impl ExportError {
    /// The layers at fault, none for the file or graph as a whole.
    pub fn spans(&self) -> Vec<Span> {
        match self {
            ExportError::Op { spans, .. } => spans.clone(),
            ExportError::Io { .. } | ExportError::Graph(_) => vec![],
        }
    }
}

/// Choices of the exported model.
#[derive(Clone, Debug, Default)]
pub struct ExportOptions {
    /// Names of the graph outputs (by position). A planned graph ends each
    /// output in a transform named after its layout; giving the source graph's
    /// output names here keeps the exported model's interface the source's.
    pub output_names: Option<Vec<String>>,
    /// The name of the source model's symbolic batch ([`Graph::symbolic_batch`]
    /// of the imported graph): axis 0 of the interface stays that symbolic
    /// dimension where the plan allows it (see [`export_model`]).
    pub symbolic_batch: Option<String>,
}

/// The one opset the exporter writes for a graph: the oldest that has every
/// op of it (17 in most cases).
pub fn opset_for(g: &Graph) -> i64 {
    g.node_ids()
        .iter()
        .map(|&id| g.node(id).op.def().min_onnx_opset())
        .max()
        .unwrap_or(17)
}

/// Exports `g` as an ONNX model.
///
/// With `opts.symbolic_batch`, axis 0 of every input (and of every output of
/// the same extent) is written as that symbolic dimension and shape constants
/// copy axis 0 where it passes through. The plan allows it when the model then
/// imports with another batch and every output follows it; otherwise the batch
/// stays the planned one.
pub fn export_model(g: &Graph, opts: &ExportOptions) -> Result<ModelProto, ExportError> {
    let batch = g
        .inputs()
        .first()
        .and_then(|&id| g.node(id).outputs[0].ty.shape.first().copied());
    let same_batch = g
        .inputs()
        .iter()
        .all(|&id| g.node(id).outputs[0].ty.shape.first().copied() == batch);
    if let (Some(name), Some(n), true) = (&opts.symbolic_batch, batch, same_batch) {
        let m = export_with(g, opts, Some((name, n)))?;
        if follows_batch(&m, name, n + 1) {
            return Ok(m);
        }
    }
    export_with(g, opts, None)
}

/// The largest message protobuf decoders read (2 GiB - 1): a larger model must
/// keep its tensors in an external data file.
pub const PROTOBUF_LIMIT: u64 = (1 << 31) - 1;

/// Initializers at least this large move to the external data file (the
/// threshold of the onnx package's own writer).
const EXTERNAL_MIN_BYTES: usize = 1024;

/// Writes `m` to `path`. A model whose encoding would pass `max_inline` bytes
/// (the CLI gives [`PROTOBUF_LIMIT`]) keeps its initializers of 1 KiB and more
/// in `<file name>.data` beside it, as ONNX external data, each taken out of
/// the proto as it is written (no second copy of the weights).
/// Returns the data file when one was written.
pub fn write_model(
    mut m: ModelProto,
    path: &Path,
    max_inline: u64,
) -> Result<Option<std::path::PathBuf>, ExportError> {
    use std::io::Write;
    let io = |p: &Path| {
        let path = p.display().to_string();
        move |source| ExportError::Io { path, source }
    };
    let mut data_path = None;
    if m.compute_size() > max_inline {
        let file_name = path
            .file_name()
            .ok_or_else(|| ExportError::Graph(format!("{} names no file", path.display())))?;
        let location = format!("{}.data", file_name.to_string_lossy());
        let dp = path.with_file_name(&location);
        let mut out = std::io::BufWriter::new(std::fs::File::create(&dp).map_err(io(&dp))?);
        let mut offset = 0usize;
        for tp in m.graph.mut_or_insert_default().initializer.iter_mut() {
            if tp.raw_data.len() < EXTERNAL_MIN_BYTES {
                continue;
            }
            let bytes = std::mem::take(&mut tp.raw_data);
            out.write_all(&bytes).map_err(io(&dp))?;
            tp.data_location = onnx_protobuf::tensor_proto::DataLocation::EXTERNAL.into();
            for (key, value) in [
                ("location", location.clone()),
                ("offset", offset.to_string()),
                ("length", bytes.len().to_string()),
            ] {
                let mut e = onnx_protobuf::StringStringEntryProto::new();
                e.key = key.into();
                e.value = value;
                tp.external_data.push(e);
            }
            offset += bytes.len();
        }
        out.flush().map_err(io(&dp))?;
        data_path = Some(dp);
    }
    if m.compute_size() > PROTOBUF_LIMIT {
        return Err(ExportError::Graph(format!(
            "the model is {} bytes without its tensors, more than protobuf's 2 GiB",
            m.compute_size()
        )));
    }
    let bytes = m
        .write_to_bytes()
        .map_err(|e| ExportError::Graph(format!("protobuf encoding failed: {e}")))?;
    std::fs::write(path, bytes).map_err(io(path))?;
    Ok(data_path)
}

/// Whether `m` imports with its symbolic batch `name` set to `n`, and every
/// output declared with that batch computes it.
fn follows_batch(m: &ModelProto, name: &str, n: usize) -> bool {
    let Ok(bytes) = m.write_to_bytes() else {
        return false;
    };
    let mut opts = crate::frontend::onnx::ImportOptions::default();
    opts.dim_values.insert(name.to_string(), n);
    let Ok(back) = crate::frontend::onnx::import_onnx(&bytes, "exported.onnx", None, &opts) else {
        return false;
    };
    let graph = m.graph.as_ref();
    let declared = graph.map_or(&[][..], |gp| &gp.output[..]);
    back.outputs()
        .iter()
        .zip(declared)
        .all(|(&v, vi)| !leads_with(vi, name) || back.value_type(v).shape.first() == Some(&n))
}

/// Whether every input of `m` declares the symbolic batch `name` as axis 0
/// (the export kept the batch symbolic).
pub fn keeps_symbolic_batch(m: &ModelProto, name: &str) -> bool {
    m.graph
        .as_ref()
        .is_some_and(|gp| !gp.input.is_empty() && gp.input.iter().all(|vi| leads_with(vi, name)))
}

/// Whether a value is declared with the symbolic dimension `name` as axis 0.
fn leads_with(vi: &ValueInfoProto, name: &str) -> bool {
    use tensor_shape_proto::dimension::Value;
    let Some(type_proto::Value::TensorType(tt)) = vi.type_.as_ref().and_then(|t| t.value.as_ref())
    else {
        return false;
    };
    let first = tt.shape.as_ref().and_then(|s| s.dim.first());
    matches!(first.and_then(|d| d.value.as_ref()), Some(Value::DimParam(p)) if p == name)
}

fn export_with(
    g: &Graph,
    opts: &ExportOptions,
    batch: Option<(&String, usize)>,
) -> Result<ModelProto, ExportError> {
    let opset = opset_for(g);
    let mut b = Builder::new(opset);
    b.batch = batch.map(|(_, n)| n);
    let interface = |name: &str, ty: &ValueType| {
        let mut vi = value_info(name, ty);
        if let Some((param, n)) = batch {
            if ty.shape.first() == Some(&n) {
                set_leading_param(&mut vi, param);
            }
        }
        vi
    };
    let mut names: HashMap<ValueRef, String> = HashMap::new();
    let mut gp = GraphProto::new();
    gp.name = g.name.clone();
    let order = g
        .topo_order()
        .map_err(|e| ExportError::Graph(e.to_string()))?;
    // Interface names first, so that no inner value takes them.
    for &id in g.inputs() {
        b.reserve(&g.node(id).name);
    }
    let out_names: Vec<String> = match &opts.output_names {
        Some(n) if n.len() == g.outputs().len() => n.clone(),
        Some(n) => {
            return Err(ExportError::Graph(format!(
                "{} output names given for {} graph outputs",
                n.len(),
                g.outputs().len()
            )))
        }
        None => g
            .outputs()
            .iter()
            .map(|&v| g.value(v).name.clone())
            .collect(),
    };
    for n in &out_names {
        if !b.reserve(n) && !g.inputs().iter().any(|&id| &g.node(id).name == n) {
            return Err(ExportError::Graph(format!(
                "graph output name '{n}' is used twice"
            )));
        }
    }
    for id in order {
        let node = g.node(id);
        match &node.op {
            Op::Input => {
                gp.input.push(interface(&node.name, &node.outputs[0].ty));
                names.insert(ValueRef::new(id, 0), node.name.clone());
            }
            Op::Constant(t) => {
                // Planning leaves the source form of re-packed constants behind.
                let v = ValueRef::new(id, 0);
                if g.consumers(v).is_empty() && !g.is_graph_output(v) {
                    continue;
                }
                let name = b.fresh(&node.name);
                b.initializers.push(tensor_to_proto(&name, t));
                names.insert(ValueRef::new(id, 0), name);
            }
            op => {
                let inputs: Vec<String> =
                    g.node_inputs(id).iter().map(|v| names[v].clone()).collect();
                let in_types: Vec<ValueType> = g
                    .node_inputs(id)
                    .iter()
                    .map(|&v| g.value_type(v).clone())
                    .collect();
                b.at(&node.name, &node.spans);
                let out_names: Vec<String> = node.outputs.iter().map(|v| v.name.clone()).collect();
                let outs = op
                    .def()
                    .to_onnx(OnnxCx {
                        b: &mut b,
                        inputs: &inputs,
                        in_types: &in_types,
                        outputs: &out_names,
                    })
                    .map_err(|message| ExportError::Op {
                        spans: node.spans.clone(),
                        op: op.kind_name().to_string(),
                        message,
                    })?;
                for (i, name) in outs.into_iter().enumerate() {
                    names.insert(ValueRef::new(id, i), name);
                }
            }
        }
    }
    // Each graph output gets its interface name through an Identity when the
    // value inside has another name (or is itself a graph input).
    for (k, &v) in g.outputs().iter().enumerate() {
        let want = &out_names[k];
        let have = &names[&v];
        if have != want {
            b.at(want, &g.node(v.node).spans);
            b.node(
                "Identity",
                std::slice::from_ref(have),
                vec![],
                Some(want.clone()),
            );
        }
        gp.output.push(interface(want, g.value_type(v)));
    }
    gp.node = std::mem::take(&mut b.nodes);
    gp.initializer = std::mem::take(&mut b.initializers);

    let mut m = ModelProto::new();
    m.ir_version = if opset >= 19 { 9 } else { 8 };
    m.producer_name = "layoutopt".into();
    m.producer_version = env!("CARGO_PKG_VERSION").into();
    let mut os = OperatorSetIdProto::new();
    os.domain = String::new();
    os.version = opset;
    m.opset_import.push(os);
    m.graph = Some(gp).into();
    Ok(m)
}

/// Exports `g` to an `.onnx` file.
pub fn save_model(g: &Graph, path: &Path, opts: &ExportOptions) -> Result<(), ExportError> {
    let bytes = export_bytes(g, opts)?;
    std::fs::write(path, bytes).map_err(|source| ExportError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Exports `g` as the bytes of an `.onnx` file.
pub fn export_bytes(g: &Graph, opts: &ExportOptions) -> Result<Vec<u8>, ExportError> {
    export_model(g, opts)?
        .write_to_bytes()
        .map_err(|e| ExportError::Graph(format!("protobuf encoding failed: {e}")))
}

fn value_info(name: &str, ty: &ValueType) -> ValueInfoProto {
    let dims: Vec<i64> = ty.shape.iter().map(|&d| d as i64).collect();
    tensor_value_info(name, ty.dtype.onnx_code(), &dims)
}

/// The ONNX value info of a tensor named `name` of element type code
/// `elem_type` and static dimensions `dims` (as written, even where they make
/// no tensor: builders of malformed test models use it too).
pub fn tensor_value_info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    shape.dim = dims
        .iter()
        .map(|&d| {
            let mut dim = tensor_shape_proto::Dimension::new();
            dim.value = Some(tensor_shape_proto::dimension::Value::DimValue(d));
            dim
        })
        .collect();
    let mut tt = type_proto::Tensor::new();
    tt.elem_type = elem_type;
    tt.shape = Some(shape).into();
    let mut tp = TypeProto::new();
    tp.value = Some(type_proto::Value::TensorType(tt));
    let mut vi = ValueInfoProto::new();
    vi.name = name.to_string();
    vi.type_ = Some(tp).into();
    vi
}

/// Makes axis 0 of a value's declared shape the symbolic dimension `param`.
fn set_leading_param(vi: &mut ValueInfoProto, param: &str) {
    let tt = vi.type_.as_mut().and_then(|t| match t.value.as_mut() {
        Some(type_proto::Value::TensorType(tt)) => Some(tt),
        _ => None,
    });
    if let Some(dim) = tt
        .and_then(|tt| tt.shape.as_mut())
        .and_then(|s| s.dim.first_mut())
    {
        dim.value = Some(tensor_shape_proto::dimension::Value::DimParam(
            param.to_string(),
        ));
    }
}

fn attribute(name: &str, a: Attr) -> AttributeProto {
    let mut p = AttributeProto::new();
    p.name = name.to_string();
    let ty = match a {
        Attr::Int(i) => {
            p.i = i;
            AttributeType::INT
        }
        Attr::Ints(v) => {
            p.ints = v;
            AttributeType::INTS
        }
        Attr::Float(f) => {
            p.f = f;
            AttributeType::FLOAT
        }
        Attr::Floats(v) => {
            p.floats = v;
            AttributeType::FLOATS
        }
        Attr::Str(s) => {
            p.s = s.as_bytes().to_vec();
            AttributeType::STRING
        }
    };
    p.type_ = ty.into();
    p
}

/// Emits ONNX nodes and initializers with unique names.
pub(crate) struct Builder {
    pub(crate) opset: i64,
    /// The planned batch, when axis 0 of the interface is symbolic.
    batch: Option<usize>,
    used: HashSet<String>,
    nodes: Vec<NodeProto>,
    initializers: Vec<onnx_protobuf::TensorProto>,
    /// Name and source spans of the IR node being exported.
    layer: String,
    doc: String,
}

impl Builder {
    fn new(opset: i64) -> Builder {
        Builder {
            opset,
            batch: None,
            used: HashSet::new(),
            nodes: Vec::new(),
            initializers: Vec::new(),
            layer: String::new(),
            doc: String::new(),
        }
    }

    /// Claims a name; false when it was already taken.
    fn reserve(&mut self, name: &str) -> bool {
        self.used.insert(name.to_string())
    }

    fn at(&mut self, layer: &str, spans: &[Span]) {
        self.layer = layer.to_string();
        self.doc = format_spans_portable(spans);
    }
}

impl OnnxWriter for Builder {
    fn opset(&self) -> i64 {
        self.opset
    }

    fn batch(&self) -> Option<usize> {
        self.batch
    }

    fn layer(&self) -> &str {
        &self.layer
    }

    /// A unique name starting with `base`.
    fn fresh(&mut self, base: &str) -> String {
        if self.reserve(base) {
            return base.to_string();
        }
        (1..)
            .map(|k| format!("{base}_{k}"))
            .find(|n| self.reserve(n))
            .expect("some suffix is free")
    }

    /// A constant input (an initializer), named after the current layer.
    fn constant(&mut self, what: &str, t: &Tensor) -> String {
        let name = self.fresh(&format!("{}/{what}", self.layer));
        self.initializers.push(tensor_to_proto(&name, t));
        name
    }

    fn node_multi(
        &mut self,
        op_type: &str,
        inputs: &[String],
        attrs: Vec<(&str, Attr)>,
        outputs: &[String],
    ) {
        let mut n = NodeProto::new();
        n.op_type = op_type.to_string();
        n.name = self.fresh(&format!("{}#{op_type}", self.layer));
        n.input = inputs.to_vec();
        n.output = outputs.to_vec();
        n.attribute = attrs.into_iter().map(|(k, a)| attribute(k, a)).collect();
        n.doc_string = self.doc.clone();
        self.nodes.push(n);
    }
}
