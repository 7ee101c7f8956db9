//! ONNX models built in Rust: value infos, nodes, attributes, whole models
//! and their encoded bytes.

pub use layoutopt::export::tensor_value_info as value_info;
use layoutopt::frontend::onnx::{import_onnx, tensor_to_proto, ImportError, ImportOptions};
use layoutopt::graph::{Graph, Tensor};
use onnx_protobuf::{
    tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, ValueInfoProto,
};
use protobuf::Message;

pub fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.to_string();
    n.name = name.to_string();
    n.input = inputs.iter().map(|s| s.to_string()).collect();
    n.output = outputs.iter().map(|s| s.to_string()).collect();
    n
}

pub fn int_attr(name: &str, v: i64) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::INT.into();
    a.i = v;
    a
}

pub fn float_attr(name: &str, v: f32) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::FLOAT.into();
    a.f = v;
    a
}

pub fn str_attr(name: &str, v: &str) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::STRING.into();
    a.s = v.as_bytes().to_vec();
    a
}

pub fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::INTS.into();
    a.ints = v.to_vec();
    a
}

pub fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::GRAPH.into();
    a.g = protobuf::MessageField::some(g);
    a
}

pub fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializers: Vec<(&str, Tensor)>,
    opset: i64,
) -> ModelProto {
    let mut g = GraphProto::new();
    g.name = "test".into();
    g.node = nodes;
    g.input = inputs;
    g.output = outputs;
    g.initializer = initializers
        .into_iter()
        .map(|(n, t)| tensor_to_proto(n, &t))
        .collect();
    let mut m = ModelProto::new();
    m.ir_version = 8;
    let mut op = OperatorSetIdProto::new();
    op.version = opset;
    m.opset_import.push(op);
    m.graph = Some(g).into();
    m
}

/// A model from `nodes` (and `initializers`) between the f32 input x[4] and
/// output y[4], at opset 13.
pub fn vector_model(nodes: Vec<NodeProto>, initializers: Vec<(&str, Tensor)>) -> ModelProto {
    const F32: i32 = 1;
    model(
        nodes,
        vec![value_info("x", F32, &[4])],
        vec![value_info("y", F32, &[4])],
        initializers,
        13,
    )
}

/// An Add (layer add_1) whose second input, 'nowhere', no layer produces.
pub fn dangling_add() -> ModelProto {
    let add = node("Add", "add_1", &["x", "nowhere"], &["y"]);
    vector_model(vec![add], vec![])
}

/// Two Relus feeding each other: a reads y and writes z, b reads z and writes y.
pub fn relu_cycle() -> ModelProto {
    let a = node("Relu", "a", &["y"], &["z"]);
    vector_model(vec![a, node("Relu", "b", &["z"], &["y"])], vec![])
}

pub fn model_bytes(m: &ModelProto) -> Vec<u8> {
    m.write_to_bytes().expect("a built model encodes")
}

/// `m` imported with the default options, as if read from file `file`.
pub fn import_model(m: &ModelProto, file: &str) -> Result<Graph, ImportError> {
    import_onnx(&model_bytes(m), file, None, &ImportOptions::default())
}

/// `vi` with dimension `axis` made symbolic, named `param`.
pub fn symbolic(mut vi: ValueInfoProto, axis: usize, param: &str) -> ValueInfoProto {
    if let Some(type_proto::Value::TensorType(tt)) =
        vi.type_.as_mut().and_then(|t| t.value.as_mut())
    {
        tt.shape.as_mut().unwrap().dim[axis].value = Some(
            tensor_shape_proto::dimension::Value::DimParam(param.to_string()),
        );
    }
    vi
}

/// The f32 graph x → `nodes` → y, x and y of shape `dims`, with the
/// initializers `init`, at `opset`, imported as the file `file`.
pub fn elementwise_graph(
    nodes: Vec<NodeProto>,
    dims: &[i64],
    init: Vec<(&str, Tensor)>,
    opset: i64,
    file: &str,
) -> Graph {
    const F32: i32 = 1;
    let m = model(
        nodes,
        vec![value_info("x", F32, dims)],
        vec![value_info("y", F32, dims)],
        init,
        opset,
    );
    import_model(&m, file).expect("the model imports")
}
