//! The ONNX importer: a `.onnx` file (opsets 7 to 28) into a `Graph`. Older
//! versions of an operator are read into today's meaning where they are converted;
//! what a newer version added (an attribute, a meaning) is imported or refused by
//! name in the op's import function.
//!
//! Every node gets a span (file, layer name, op type, node index); a node without a
//! name is named `<OpType>_<index>`. Nodes whose inputs are all constants are folded
//! as they are imported, which resolves the shape subgraphs exporters emit into the
//! static attributes of the typed ops. Symbolic input dimensions take the value the
//! caller gives in [`ImportOptions`], or 1.

mod declared;
mod lift;
mod ops;
mod scan;
mod stages;
mod tensor;

pub use stages::{Cut, Rest, Stages};
use tensor::tensor_with_raw_data;
pub use tensor::{dtype_from_onnx, tensor_from_proto, tensor_to_proto, TensorProtoError};

use crate::frontend::{DeclaredValue, Dim, Interface};
use crate::graph::{
    check_value_size, fold_node, format_spans, memory_limit, Graph, GraphError, Span, Tensor,
    ValueRef, ValueType,
};
use declared::{check_declared_type, declared, input_type};
use onnx_protobuf::{GraphProto, ModelProto, NodeProto, TensorProto};
use protobuf::{CodedInputStream, Message};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The opsets of the default domain we import.
pub const MIN_OPSET: i64 = 7;
/// The newest opset of the default domain we import: the newest onnx 1.23.2
/// defines. Most operators re-versioned from opset 22 on only admit new element
/// types (bfloat16, float4, float8e8m0, 2-bit integers), refused by type as any
/// unsupported type is; the import functions check what else changed.
pub const MAX_OPSET: i64 = 28;

/// An import error: which file, which layer, what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file could not be read.
    #[error("{path}: cannot read file: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The model as a whole is malformed or unsupported.
    #[error("{path}: {message}")]
    Model {
        /// The model file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A layer is malformed or unsupported.
    #[error("{}: {message}", format_spans(spans))]
    Layer {
        /// The layer, as spans into the source.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
    /// A parameter input (a shape, axes, bounds) is computed at run time.
    #[error("{}: {message}", format_spans(spans))]
    NotConstant {
        /// The layer, as spans into the source.
        spans: Vec<Span>,
        /// The value that would have to be known at import time.
        value: String,
        /// What is wrong.
        message: String,
    },
    /// An op whose output shape depends on values computed at run time
    /// (NonZero, NonMaxSuppression, Unique): the graph cannot be imported
    /// whole, but a session runs it in stages cut before the op
    /// ([`DecodedModel::stages`]).
    #[error("{}: {message}", format_spans(spans))]
    DataDependent {
        /// The layer, as spans into the source.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
    /// Operators the importer does not know: each with the layers that use it.
    #[error("{path}: unsupported operators: {}", list_unsupported(ops))]
    Unsupported {
        /// The model file.
        path: String,
        /// Each unsupported operator type (`domain::type` outside the default
        /// domain) with the layers that use it, in order of first use.
        ops: Vec<(String, Vec<Span>)>,
    },
    /// The imported graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

impl ImportError {
    /// The layers at fault (every layer of every unsupported operator), none
    /// for the file as a whole.
    pub fn spans(&self) -> Vec<Span> {
        match self {
            ImportError::Layer { spans, .. }
            | ImportError::NotConstant { spans, .. }
            | ImportError::DataDependent { spans, .. } => spans.clone(),
            ImportError::Unsupported { ops, .. } => {
                ops.iter().flat_map(|(_, s)| s.iter().cloned()).collect()
            }
            ImportError::Graph(e) => e.spans(),
            ImportError::Io { .. } | ImportError::Model { .. } => vec![],
        }
    }
}

/// `'Einsum' ×2 (layers 'a', 'b'); 'Foo' ×1 (layer 'c')`, at most five layers named each.
fn list_unsupported(ops: &[(String, Vec<Span>)]) -> String {
    let one = |(op, spans): &(String, Vec<Span>)| {
        let mut names: Vec<String> = spans
            .iter()
            .take(5)
            .map(|s| format!("'{}'", s.layer))
            .collect();
        if spans.len() > 5 {
            names.push(format!("and {} more", spans.len() - 5));
        }
        let layers = if spans.len() == 1 { "layer" } else { "layers" };
        format!("'{op}' ×{} ({layers} {})", spans.len(), names.join(", "))
    };
    ops.iter().map(one).collect::<Vec<_>>().join("; ")
}

impl ImportError {
    fn layer(span: &Span, message: impl Into<String>) -> ImportError {
        ImportError::Layer {
            spans: vec![span.clone()],
            message: message.into(),
        }
    }
}

/// Choices the model file leaves open.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Concrete values for symbolic dimensions, by dimension name (e.g. "batch").
    pub dim_values: HashMap<String, usize>,
    /// Whole shapes of graph inputs, by input name (`--input-shape x=1,3,224,224`).
    /// They must agree with the model's static dimensions and bind its symbolic ones.
    pub input_shapes: HashMap<String, Vec<usize>>,
    /// Graph inputs frozen to a value: they become constants, so ops that need a
    /// parameter known at import time (a shape, pads, clip bounds) can take them.
    pub constant_inputs: HashMap<String, Tensor>,
}

/// Reads and imports an ONNX model file. The file is mapped and its weights'
/// bytes lifted out before the rest is decoded, so each weight is copied once,
/// from the file into its tensor: a 500 MB model peaks near 500 MB of tensors
/// plus the file in the page cache.
pub fn load_onnx(path: &Path, opts: &ImportOptions) -> Result<Graph, ImportError> {
    DecodedModel::read(path)?.import(opts)
}

/// An ONNX model decoded once, to be imported at any number of input shapes:
/// its nodes, and its initializers already converted to tensors that every
/// import shares. Reading and converting a file is most of an import (ResNet50:
/// the weights' copies and the page faults of their fresh memory), and a
/// session imports its model again at every new input shape.
pub struct DecodedModel {
    /// The model without its main graph's initializers.
    model: ModelProto,
    initializers: Vec<(String, Tensor)>,
    /// The file, as spans and errors name it.
    file: String,
    /// Where external data files lie.
    base_dir: Option<PathBuf>,
}

impl DecodedModel {
    /// Reads and decodes the ONNX model file at `path`.
    pub fn read(path: &Path) -> Result<DecodedModel, ImportError> {
        let file = path.display().to_string();
        let bytes = crate::frontend::map_file(path).map_err(|source| ImportError::Io {
            path: file.clone(),
            source,
        })?;
        // External data lies beside the model: "model.onnx" has the parent "".
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        DecodedModel::decode(&bytes, &file, Some(dir.unwrap_or(Path::new("."))))
    }

    /// Decodes the model `bytes` hold and converts its initializers.
    fn decode(
        bytes: &[u8],
        file: &str,
        base_dir: Option<&Path>,
    ) -> Result<DecodedModel, ImportError> {
        let (mut model, raw_data) = decode_model(bytes, file)?;
        opset_of(&model, file)?;
        let graph = model.graph.as_mut().expect("`opset_of` requires a graph");
        let inits = std::mem::take(&mut graph.initializer);
        let lifted = raw_data.into_iter().map(|r| r.map(|r| &bytes[r]));
        // Without lifted data (`decode_model` read the file as it is), each
        // initializer holds its own.
        let lifted = lifted.chain(std::iter::repeat(None));
        let initializers = convert_initializers(file, base_dir, inits.iter().zip(lifted))?;
        Ok(DecodedModel {
            model,
            initializers,
            file: file.to_string(),
            base_dir: base_dir.map(Path::to_path_buf),
        })
    }

    /// Imports the model with `opts` (its input shapes bound, inputs frozen).
    pub fn import(&self, opts: &ImportOptions) -> Result<Graph, ImportError> {
        let base_dir = self.base_dir.as_deref();
        import_model(&self.model, &self.file, base_dir, &self.initializers, opts)
    }

    /// The inputs and outputs the model declares, free dimensions unbound.
    pub fn interface(&self) -> Result<Interface, ImportError> {
        let graph = self.model.graph.as_ref().expect("`new` checked the graph");
        let weights: HashSet<&str> = self.initializers.iter().map(|(n, _)| n.as_str()).collect();
        let file = &self.file;
        let value = |vi: &onnx_protobuf::ValueInfoProto, kind: &str| match declared(vi) {
            Ok((dtype, dims)) => Ok(DeclaredValue {
                name: vi.name.clone(),
                dtype: Some(dtype),
                dims,
            }),
            // An output may leave its type to shape inference.
            Err(_) if kind == "output" => Ok(DeclaredValue {
                name: vi.name.clone(),
                dtype: None,
                dims: None,
            }),
            Err(e) => Err(ImportError::Model {
                path: file.clone(),
                message: format!("graph {kind} '{}': {e}", vi.name),
            }),
        };
        Ok(Interface {
            inputs: (graph.input.iter())
                .filter(|vi| !weights.contains(vi.name.as_str()))
                .map(|vi| value(vi, "input"))
                .collect::<Result<_, _>>()?,
            outputs: (graph.output.iter())
                .map(|vi| value(vi, "output"))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// Decodes the model `bytes` hold, once a first pass over them has found that
/// its nodes have op types and fit the memory budget. The main graph's
/// initializers come back without their raw data, whose places in `bytes` are
/// returned beside them, one per initializer (none when the file could not be
/// taken apart and was decoded as it is).
fn decode_model(
    bytes: &[u8],
    file: &str,
) -> Result<(ModelProto, lift::RawDataPlaces), ImportError> {
    let refuse = |message: String| ImportError::Model {
        path: file.to_string(),
        message,
    };
    let len = bytes.len() as u64;
    let mut is = CodedInputStream::from_bytes(bytes);
    is.push_limit(len).map_err(|e| decode_error(file, e))?;
    let nodes = scan::count_nodes(&mut is).map_err(|why| refuse(why.to_string()))?;
    crate::core::budget::check(
        &format!("importing its {nodes} nodes"),
        nodes.saturating_mul(scan::BYTES_PER_NODE),
    )
    .map_err(|e| refuse(e.to_string()))?;
    let decode = |wire: &[u8]| {
        parse_whole::<ModelProto>(CodedInputStream::from_bytes(wire), wire.len() as u64)
            .map_err(|e| decode_error(file, e))
    };
    if let Some(lifted) = lift::lift_initializer_data(bytes) {
        let model = decode(&lifted.model)?;
        let count = model.graph.as_ref().map_or(0, |g| g.initializer.len());
        if count == lifted.raw_data.len() {
            return Ok((model, lifted.raw_data));
        }
    }
    Ok((decode(bytes)?, Vec::new()))
}

/// Decodes a message of `len` bytes. The decoder alone takes the end of the
/// input for the end of a message, so a file cut inside a nested message would
/// decode as a shorter model; with the length as the outer limit, every length
/// prefix that runs past the end is an error.
fn parse_whole<M: Message>(mut is: CodedInputStream, len: u64) -> protobuf::Result<M> {
    is.push_limit(len)?;
    M::parse_from(&mut is)
}

fn decode_error(file: &str, e: protobuf::Error) -> ImportError {
    ImportError::Model {
        path: file.to_string(),
        message: format!(
            "not a valid ONNX model (protobuf decoding failed: {})",
            describe_decode_error(&e)
        ),
    }
}

/// The decoder's error in words: the one `parse_whole`'s outer limit raises
/// (the crate keeps its error kinds private, and is pinned to one release).
fn describe_decode_error(e: &protobuf::Error) -> String {
    match e.to_string().as_str() {
        "New limit must not be greater than current limit" => {
            "a length prefix runs past the end of the file: is it truncated?".into()
        }
        other => other.to_string(),
    }
}

/// Reads one serialized `TensorProto` (the `.pb` files of ONNX test data sets).
pub fn load_tensor_pb(path: &Path) -> Result<(String, Tensor), ImportError> {
    let label = path.display().to_string();
    let bytes = crate::frontend::read_file(path).map_err(|source| ImportError::Io {
        path: label.clone(),
        source,
    })?;
    let tp = parse_whole::<TensorProto>(CodedInputStream::from_bytes(&bytes), bytes.len() as u64)
        .map_err(|e| ImportError::Model {
        path: label.clone(),
        message: format!("not a valid TensorProto: {}", describe_decode_error(&e)),
    })?;
    let t = tensor_from_proto(&tp, path.parent()).map_err(|message| ImportError::Model {
        path: label,
        message: format!("tensor '{}' {message}", tp.name),
    })?;
    Ok((tp.name.clone(), t))
}

/// Writes a tensor as a serialized `TensorProto`.
pub fn save_tensor_pb(path: &Path, name: &str, t: &Tensor) -> Result<(), ImportError> {
    let bytes = tensor_to_proto(name, t)
        .write_to_bytes()
        .map_err(|e| ImportError::Model {
            path: path.display().to_string(),
            message: format!("cannot encode tensor: {e}"),
        })?;
    std::fs::write(path, bytes).map_err(|source| ImportError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Imports a serialized model. `file` names it in spans and errors; `base_dir`
/// is where external data files are looked up.
pub fn import_onnx(
    bytes: &[u8],
    file: &str,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<Graph, ImportError> {
    DecodedModel::decode(bytes, file, base_dir)?.import(opts)
}

/// Checks what every ONNX model must have (a graph, an IR version, an opset
/// of the default domain this importer supports); returns that opset.
fn opset_of(model: &ModelProto, file: &str) -> Result<i64, ImportError> {
    let model_err = |message: String| ImportError::Model {
        path: file.to_string(),
        message,
    };
    if model.graph.is_none() {
        return Err(model_err(
            "not a valid ONNX model: it has no graph (is this an ONNX file?)".into(),
        ));
    }
    if model.ir_version <= 0 {
        return Err(model_err(format!(
            "not a valid ONNX model: ir_version is {} (is this an ONNX file?)",
            model.ir_version
        )));
    }
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .ok_or_else(|| model_err("the model imports no opset of the default ONNX domain".into()))?;
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(model_err(format!(
            "opset {opset} is not supported (supported: {MIN_OPSET} to {MAX_OPSET})"
        )));
    }
    Ok(opset)
}

/// Imports a decoded model whose main graph's initializers are
/// `initializers`.
fn import_model(
    model: &ModelProto,
    file: &str,
    base_dir: Option<&Path>,
    initializers: &[(String, Tensor)],
    opts: &ImportOptions,
) -> Result<Graph, ImportError> {
    let model_err = |message: String| ImportError::Model {
        path: file.to_string(),
        message,
    };
    let opset = opset_of(model, file)?;
    let graph = model.graph.as_ref().expect("`opset_of` checked the graph");

    let mut imp = Importer {
        env: Env {
            file: file.to_string(),
            base_dir: base_dir.map(PathBuf::from),
            opset,
            depth: 0,
        },
        g: Graph::new(if graph.name.is_empty() {
            file
        } else {
            &graph.name
        }),
        values: HashMap::new(),
    };
    add_constants(&imp.env, &mut imp.g, &mut imp.values, initializers);
    for vi in &graph.input {
        if !imp.values.contains_key(&vi.name) {
            let ty = input_type(vi, opts)
                .and_then(|ty| Ok(check_value_size(&ty, "type", memory_limit()).map(|_| ty)?))
                .map_err(|e| model_err(format!("graph input '{}': {e}", vi.name)))?;
            let span = Span::new(file, &vi.name, "Input", 0);
            let v = match opts.constant_inputs.get(&vi.name) {
                Some(t) if t.dtype() == ty.dtype && t.shape == ty.shape => {
                    imp.g.add_constant(&vi.name, t.clone(), vec![span])
                }
                Some(t) => {
                    return Err(model_err(format!(
                        "graph input '{}' is {ty}, but the value given to freeze it is {}{:?}",
                        vi.name,
                        t.dtype(),
                        t.shape
                    )))
                }
                None => imp.g.add_input(&vi.name, ty, vec![span]),
            };
            imp.values.insert(vi.name.clone(), v);
        }
    }
    // A batch: the same named dimension leads every graph input.
    let leading: Vec<Option<String>> = graph
        .input
        .iter()
        .filter(|vi| {
            imp.g
                .inputs()
                .iter()
                .any(|&id| imp.g.node(id).name == vi.name)
        })
        .map(|vi| match declared(vi) {
            Ok((_, Some(dims))) => match dims.first() {
                Some(Dim::Symbolic(p)) => Some(p.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    if let Some(Some(first)) = leading.first() {
        if leading.iter().all(|p| p.as_ref() == Some(first)) {
            imp.g.symbolic_batch = Some(first.clone());
        }
    }
    // Every operator the registry lacks is reported at once, before any is converted.
    let mut unsupported: Vec<(String, Vec<Span>)> = Vec::new();
    collect_unsupported(file, &graph.node, "", &mut unsupported);
    if !unsupported.is_empty() {
        return Err(ImportError::Unsupported {
            path: file.to_string(),
            ops: unsupported,
        });
    }
    import_nodes(&imp.env, &mut imp.g, &mut imp.values, &graph.node, "")?;
    // A file cut short loses its outputs last (they follow the nodes).
    if graph.output.is_empty() {
        return Err(model_err(
            "the graph declares no outputs (is the file complete?)".into(),
        ));
    }
    let mut outputs = Vec::with_capacity(graph.output.len());
    for vi in &graph.output {
        let v = *imp.values.get(&vi.name).ok_or_else(|| {
            model_err(format!(
                "graph output '{}' is not produced by any node, initializer or graph input",
                vi.name
            ))
        })?;
        check_declared_type(vi, imp.g.value_type(v))
            .map_err(|e| model_err(format!("graph output '{}': {e}", vi.name)))?;
        outputs.push(v);
    }
    imp.g.set_outputs(outputs);
    imp.g.remove_dead_nodes();
    // Refused here, before a caller allocates inputs or runs it.
    imp.g.check_memory(memory_limit())?;
    Ok(imp.g)
}

/// Orders nodes so each comes after the producers of its inputs (most files are
/// already sorted; some exporters are not). Errors name the layer at fault.
fn node_order<V>(
    nodes: &[NodeProto],
    known: &HashMap<String, V>,
    file: &str,
    prefix: &str,
) -> Result<Vec<usize>, ImportError> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            if known.contains_key(o) || producer.insert(o, i).is_some() {
                return Err(ImportError::layer(
                    &node_span(file, n, i, prefix),
                    format!("output '{o}' is already produced elsewhere in the graph"),
                ));
            }
        }
    }
    // Depth-first post-order with an explicit stack (deep graphs must not overflow).
    let mut state = vec![0u8; nodes.len()]; // 0 new, 1 in progress, 2 done
    let mut order = Vec::with_capacity(nodes.len());
    for root in 0..nodes.len() {
        if state[root] != 0 {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        state[root] = 1;
        while let Some((n, next_input)) = stack.pop() {
            let inputs = &nodes[n].input;
            if next_input < inputs.len() {
                stack.push((n, next_input + 1));
                let name = &inputs[next_input];
                if name.is_empty() || known.contains_key(name) {
                    continue;
                }
                let Some(&p) = producer.get(name.as_str()) else {
                    return Err(ImportError::layer(
                        &node_span(file, &nodes[n], n, prefix),
                        format!(
                            "input '{name}' is not produced by any node, initializer or graph input"
                        ),
                    ));
                };
                match state[p] {
                    0 => {
                        state[p] = 1;
                        stack.push((p, 0));
                    }
                    1 => {
                        return Err(ImportError::layer(
                            &node_span(file, &nodes[n], n, prefix),
                            format!("input '{name}' depends on this node's own output: the graph has a cycle"),
                        ))
                    }
                    _ => {}
                }
            } else {
                state[n] = 2;
                order.push(n);
            }
        }
    }
    Ok(order)
}

/// A node's operator as errors name it: its type, prefixed by its domain
/// outside the default one (`com.microsoft::FusedConv`).
fn operator_name(n: &NodeProto) -> String {
    if n.domain.is_empty() || n.domain == "ai.onnx" {
        n.op_type.clone()
    } else {
        format!("{}::{}", n.domain, n.op_type)
    }
}

/// The span of node `index` of a graph; a subgraph's layers are named under
/// `prefix`, the path of control-flow layers and attributes that holds them
/// (`loop_1/body/add`).
fn node_span(file: &str, n: &NodeProto, index: usize, prefix: &str) -> Span {
    let layer = if n.name.is_empty() {
        Span::default_layer_name(&n.op_type, index)
    } else {
        n.name.clone()
    };
    let layer = match prefix {
        "" => layer,
        _ => format!("{prefix}/{layer}"),
    };
    Span::new(file, &layer, &n.op_type, index)
}

/// Adds every operator of `nodes` and of their subgraphs that the registry
/// lacks to `unsupported`, with the layers that use it.
fn collect_unsupported(
    file: &str,
    nodes: &[NodeProto],
    prefix: &str,
    unsupported: &mut Vec<(String, Vec<Span>)>,
) {
    for (i, n) in nodes.iter().enumerate() {
        let span = node_span(file, n, i, prefix);
        for a in &n.attribute {
            for sub in a.g.as_ref().into_iter().chain(&a.graphs) {
                let inner = format!("{}/{}", span.layer, a.name);
                collect_unsupported(file, &sub.node, &inner, unsupported);
            }
        }
        if ops::registry().get(&n.domain, &n.op_type).is_some() {
            continue;
        }
        let op = operator_name(n);
        match unsupported.iter_mut().find(|(o, _)| *o == op) {
            Some((_, spans)) => spans.push(span),
            None => unsupported.push((op, vec![span])),
        }
    }
}

/// The names a graph reads from the scopes around it: those its nodes (and
/// their subgraphs) read that it does not define itself, in order of first use.
fn free_names(g: &GraphProto) -> Vec<String> {
    let defined: HashSet<&str> = (g.input.iter().map(|v| v.name.as_str()))
        .chain(g.initializer.iter().map(|t| t.name.as_str()))
        .chain(
            g.node
                .iter()
                .flat_map(|n| n.output.iter().map(String::as_str)),
        )
        .collect();
    let mut seen = HashSet::new();
    let mut free = vec![];
    for n in &g.node {
        let nested = (n.attribute.iter())
            .flat_map(|a| a.g.as_ref().into_iter().chain(&a.graphs))
            .flat_map(free_names);
        for name in n.input.iter().cloned().chain(nested) {
            if !name.is_empty() && !defined.contains(name.as_str()) && seen.insert(name.clone()) {
                free.push(name);
            }
        }
    }
    free.extend(
        (g.output.iter())
            .map(|o| &o.name)
            .filter(|o| !defined.contains(o.as_str()) && seen.insert(o.to_string()))
            .cloned(),
    );
    free
}

/// What every graph of a model is imported with.
#[derive(Clone)]
pub(in crate::frontend::onnx) struct Env {
    file: String,
    base_dir: Option<PathBuf>,
    opset: i64,
    /// How many subgraphs deep the graph being imported lies.
    depth: usize,
}

/// Subgraphs nested deeper than this are refused: each level is a recursion
/// of the importer and of every run.
pub const MAX_SUBGRAPH_DEPTH: usize = 16;

struct Importer {
    env: Env,
    g: Graph,
    /// Every named value seen so far.
    values: HashMap<String, ValueRef>,
}

/// Adds initializers as constants of `g`, named in `values`. Given by value,
/// each proto (and its bytes) is dropped once it is a tensor.
/// `inits` as tensors, by name; a name defined twice is an error.
fn convert_initializers<'a>(
    file: &str,
    base_dir: Option<&Path>,
    inits: impl IntoIterator<Item = (&'a TensorProto, Option<&'a [u8]>)>,
) -> Result<Vec<(String, Tensor)>, ImportError> {
    let mut seen = HashSet::new();
    let mut tensors = Vec::new();
    for (tp, lifted) in inits {
        if !seen.insert(tp.name.clone()) {
            return Err(ImportError::Model {
                path: file.to_string(),
                message: format!("initializer '{}' is defined twice", tp.name),
            });
        }
        let raw_data = lifted.unwrap_or(&tp.raw_data);
        let t = tensor_with_raw_data(tp, raw_data, base_dir).map_err(|m| ImportError::Model {
            path: file.to_string(),
            message: format!("initializer '{}' {m}", tp.name),
        })?;
        tensors.push((tp.name.clone(), t));
    }
    Ok(tensors)
}

/// Adds a subgraph's initializers `inits` to `g` as constants, named in `values`.
fn add_initializers(
    env: &Env,
    g: &mut Graph,
    values: &mut HashMap<String, ValueRef>,
    inits: &[TensorProto],
) -> Result<(), ImportError> {
    let inits = inits.iter().map(|tp| (tp, None));
    let tensors = convert_initializers(&env.file, env.base_dir.as_deref(), inits)?;
    add_constants(env, g, values, &tensors);
    Ok(())
}

/// Adds `tensors` to `g` as constants (sharing their data), named in `values`.
fn add_constants(
    env: &Env,
    g: &mut Graph,
    values: &mut HashMap<String, ValueRef>,
    tensors: &[(String, Tensor)],
) {
    for (name, t) in tensors {
        let span = Span::new(&env.file, name, "Initializer", 0);
        let v = g.add_constant(name, t.clone(), vec![span]);
        values.insert(name.clone(), v);
    }
}

/// Imports `nodes` into `g`, in dependency order, reading and naming values in
/// `values`; their layers are named under `prefix` (empty for the main graph).
fn import_nodes(
    env: &Env,
    g: &mut Graph,
    values: &mut HashMap<String, ValueRef>,
    nodes: &[NodeProto],
    prefix: &str,
) -> Result<(), ImportError> {
    for i in node_order(nodes, values, &env.file, prefix)? {
        import_node(env, g, values, &nodes[i], i, prefix)?;
    }
    Ok(())
}

fn import_node(
    env: &Env,
    g: &mut Graph,
    values: &mut HashMap<String, ValueRef>,
    n: &NodeProto,
    index: usize,
    prefix: &str,
) -> Result<(), ImportError> {
    let span = node_span(&env.file, n, index, prefix);
    // `import_model` has refused every operator the registry lacks.
    let Some(import) = ops::registry().get(&n.domain, &n.op_type) else {
        return Err(ImportError::layer(
            &span,
            format!("unsupported operator '{}'", operator_name(n)),
        ));
    };
    let mut inputs: Vec<Option<ValueRef>> = Vec::with_capacity(n.input.len());
    for name in &n.input {
        if name.is_empty() {
            inputs.push(None);
            continue;
        }
        let v = values.get(name).copied().ok_or_else(|| {
            ImportError::layer(
                &span,
                format!(
                    "input '{name}' is produced by no earlier node, initializer or graph input"
                ),
            )
        })?;
        inputs.push(Some(v));
    }
    let mut ctx = ops::NodeCtx {
        node: n,
        span: &span,
        opset: env.opset,
        inputs: &inputs,
        g,
        env,
        scope: values,
    };
    let outputs = import(&mut ctx)?;
    if let Some(extra) = n.output.iter().skip(outputs.len()).find(|o| !o.is_empty()) {
        return Err(ImportError::layer(
            &span,
            format!(
                "output '{extra}' is not produced: {} gives {} output(s) here",
                n.op_type,
                outputs.len()
            ),
        ));
    }
    let mut named = Vec::with_capacity(n.output.len());
    for (name, v) in n.output.iter().zip(outputs) {
        if !name.is_empty() {
            let v = match v {
                Some(v) => v,
                None => {
                    return Err(ImportError::layer(
                        &span,
                        format!("output '{name}' is not supported for inference"),
                    ))
                }
            };
            // An output the import computed in several ops is the last op's
            // value, named after it: it takes the output's name, by which the
            // model's readers (and a caller picking graph outputs) know it.
            // Values of other layers (an input passed through) keep theirs.
            let made_here = g.node(v.node).spans.first() == Some(&span);
            if made_here && !named.contains(&v) && g.value(v).name != *name {
                g.node_mut(v.node).outputs[v.output].name = name.clone();
            }
            named.push(v);
            values.insert(name.clone(), v);
        }
    }
    Ok(())
}

/// A value a subgraph reads from an enclosing graph.
pub(in crate::frontend::onnx) enum Captured {
    /// A constant there: a constant of the subgraph too.
    Constant(Tensor),
    /// Computed there: an input of the subgraph, fed by the control-flow node.
    Value(ValueType),
}

/// The enclosing graph's side of the subgraphs of a control-flow node at
/// `span`: the values they read from it, each with what it is there.
pub(in crate::frontend::onnx) fn captures(
    span: &Span,
    g: &Graph,
    scope: &HashMap<String, ValueRef>,
    subgraphs: &[&GraphProto],
) -> Result<Vec<(String, ValueRef, Captured)>, ImportError> {
    let mut names: Vec<String> = vec![];
    for name in subgraphs.iter().flat_map(|s| free_names(s)) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let v = *scope.get(&name).ok_or_else(|| {
                ImportError::layer(
                    span,
                    format!("a subgraph reads '{name}', which no enclosing graph defines"),
                )
            })?;
            let captured = match g.constant(v) {
                Some(t) => Captured::Constant(t.clone()),
                None => Captured::Value(g.value_type(v).clone()),
            };
            Ok((name, v, captured))
        })
        .collect()
}

impl Env {
    /// The environment of a main graph of `file`, for tests of import functions.
    #[cfg(test)]
    pub(in crate::frontend::onnx) fn for_tests(file: &str, opset: i64) -> Env {
        Env {
            file: file.to_string(),
            base_dir: None,
            opset,
            depth: 0,
        }
    }

    /// The environment of a subgraph of the node at `span`, one level deeper,
    /// refused past [`MAX_SUBGRAPH_DEPTH`].
    pub(in crate::frontend::onnx) fn nested(&self, span: &Span) -> Result<Env, ImportError> {
        if self.depth >= MAX_SUBGRAPH_DEPTH {
            return Err(ImportError::layer(
                span,
                format!("subgraphs nest deeper than {MAX_SUBGRAPH_DEPTH} levels here"),
            ));
        }
        Ok(Env {
            depth: self.depth + 1,
            ..self.clone()
        })
    }

    /// Imports subgraph `proto` as a graph of its own, named `prefix` (which
    /// names its layers): its inputs are `formal` (one type per declared
    /// input), then the captured values that are not constants.
    pub(in crate::frontend::onnx) fn import_subgraph(
        &self,
        proto: &GraphProto,
        prefix: &str,
        formal: &[ValueType],
        captured: &[(String, ValueRef, Captured)],
    ) -> Result<Graph, ImportError> {
        let mut g = Graph::new(prefix);
        let mut values = HashMap::new();
        for (vi, ty) in proto.input.iter().zip(formal) {
            let span = Span::new(&self.file, &format!("{prefix}/{}", vi.name), "Input", 0);
            values.insert(
                vi.name.clone(),
                g.add_input(&vi.name, ty.clone(), vec![span]),
            );
        }
        for (name, _, c) in captured {
            let span = Span::new(&self.file, name, "Input", 0);
            let v = match c {
                Captured::Constant(t) => g.add_constant(name, t.clone(), vec![span]),
                Captured::Value(ty) => g.add_input(name, ty.clone(), vec![span]),
            };
            values.insert(name.clone(), v);
        }
        add_initializers(self, &mut g, &mut values, &proto.initializer)?;
        import_nodes(self, &mut g, &mut values, &proto.node, prefix)?;
        let outputs = (proto.output.iter())
            .map(|vi| {
                values.get(&vi.name).copied().ok_or_else(|| ImportError::Model {
                    path: self.file.clone(),
                    message: format!(
                        "{prefix}: subgraph output '{}' is not produced by any node, initializer or input",
                        vi.name
                    ),
                })
            })
            .collect::<Result<_, _>>()?;
        g.set_outputs(outputs);
        g.remove_dead_nodes();
        Ok(g)
    }

    /// Imports the nodes and initializers of subgraph `proto` into `g` itself
    /// (an If's branch taken at import), their layers named under `prefix`,
    /// reading the enclosing values of `scope`; returns its outputs.
    pub(in crate::frontend::onnx) fn inline_subgraph(
        &self,
        proto: &GraphProto,
        prefix: &str,
        g: &mut Graph,
        scope: &HashMap<String, ValueRef>,
    ) -> Result<Vec<ValueRef>, ImportError> {
        let mut values = scope.clone();
        add_initializers(self, g, &mut values, &proto.initializer)?;
        import_nodes(self, g, &mut values, &proto.node, prefix)?;
        (proto.output.iter())
            .map(|vi| {
                values.get(&vi.name).copied().ok_or_else(|| ImportError::Model {
                    path: self.file.clone(),
                    message: format!(
                        "{prefix}: subgraph output '{}' is not produced by any node, initializer or input",
                        vi.name
                    ),
                })
            })
            .collect()
    }
}

/// Adds a node and folds it right away when all its inputs are constants.
pub(crate) fn add_and_fold(
    g: &mut Graph,
    op: crate::graph::Op,
    name: &str,
    inputs: &[ValueRef],
    output_names: &[String],
    span: &Span,
) -> Result<Vec<ValueRef>, ImportError> {
    let id = g.add_node(op, name, inputs, output_names, vec![span.clone()])?;
    if let Some(consts) = fold_node(g, id)? {
        return Ok(consts);
    }
    Ok((0..g.node(id).outputs.len())
        .map(|i| ValueRef::new(id, i))
        .collect())
}
