//! Malformed models: each defect must give its own clear error through the library
//! and, through the CLI (`inspect` and `run`), a non-zero exit with that message
//! and no panic (RUST_BACKTRACE=1, stderr must not contain "panicked").
//!
//! Every model is built here in Rust so the defect is explicit; files are written to
//! a scratch folder because the CLI and external data need real paths.

use crate::onnx::*;
use crate::process::scratch_dir;
use crate::tfl_conv;
use crate::tflite::{ModelSpec, OpSpec, TensorSpec, INT8, LSTM, RELU};
use layoutopt::frontend::onnx::{load_onnx, tensor_to_proto, ImportOptions};
use layoutopt::frontend::tflite::load_tflite;
use layoutopt::graph::{Tensor, MEMORY_LIMIT_ENV};
use onnx_protobuf::{ModelProto, NodeProto, StringStringEntryProto, TensorProto};
use std::path::Path;
use std::process::Command;

const F32: i32 = 1;
const STRING: i32 = 8;

/// One malformed model and what its error must say.
struct Case {
    name: &'static str,
    /// File name (the extension picks the importer).
    file: &'static str,
    bytes: Vec<u8>,
    /// Other files to write beside the model (external data).
    extra: Vec<(&'static str, Vec<u8>)>,
    /// Substrings the error message must contain.
    needles: Vec<&'static str>,
    /// A memory limit (bytes) under which the model must be refused; the import
    /// itself succeeds under the machine's limit.
    memory_limit: Option<u64>,
}

fn case(name: &'static str, file: &'static str, bytes: Vec<u8>, needles: &[&'static str]) -> Case {
    Case {
        name,
        file,
        bytes,
        extra: vec![],
        needles: needles.to_vec(),
        memory_limit: None,
    }
}

// ---------------------------------------------------------------- ONNX models

fn onnx(nodes: Vec<NodeProto>, inputs: &[(&str, &[i64])], out: (&str, &[i64])) -> ModelProto {
    model(
        nodes,
        inputs.iter().map(|(n, d)| value_info(n, F32, d)).collect(),
        vec![value_info(out.0, F32, out.1)],
        vec![],
        13,
    )
}

fn with_init(mut m: ModelProto, tp: TensorProto) -> ModelProto {
    m.graph.as_mut().unwrap().initializer.push(tp);
    m
}

fn node_with(mut n: NodeProto, attrs: Vec<onnx_protobuf::AttributeProto>) -> NodeProto {
    n.attribute = attrs;
    n
}

/// x[1,C,H,W] conv w[O,C/g,K,K] -> y, with attributes.
fn conv(
    c: i64,
    hw: i64,
    w_shape: [usize; 4],
    attrs: Vec<onnx_protobuf::AttributeProto>,
) -> Vec<u8> {
    let n: usize = w_shape.iter().product();
    let w = Tensor::from_f32(w_shape.to_vec(), vec![0.5; n]);
    let m = onnx(
        vec![node_with(
            node("Conv", "conv_1", &["x", "w"], &["y"]),
            attrs,
        )],
        &[("x", &[1, c, hw, hw])],
        ("y", &[]),
    );
    let mut m = with_init(m, tensor_to_proto("w", &w));
    // The output's declared shape is left open: only the conv itself is at fault.
    clear_output_shape(&mut m);
    model_bytes(&m)
}

fn clear_output_shape(m: &mut ModelProto) {
    let out = &mut m.graph.as_mut().unwrap().output[0];
    if let Some(onnx_protobuf::type_proto::Value::TensorType(t)) =
        out.type_.as_mut().unwrap().value.as_mut()
    {
        t.shape = protobuf::MessageField::none();
    }
}

/// A single-op model x -> op -> y with the output shape left open.
fn single(op: &str, x: &[i64], attrs: Vec<onnx_protobuf::AttributeProto>) -> Vec<u8> {
    let mut m = onnx(
        vec![node_with(node(op, "the_op", &["x"], &["y"]), attrs)],
        &[("x", x)],
        ("y", &[]),
    );
    clear_output_shape(&mut m);
    model_bytes(&m)
}

fn relu_model() -> ModelProto {
    onnx(
        vec![node("Relu", "relu_1", &["x"], &["y"])],
        &[("x", &[2, 2])],
        ("y", &[2, 2]),
    )
}

fn external_init(location: &str, offset: &str, length: &str) -> Vec<u8> {
    let w = Tensor::from_f32(vec![2, 2], vec![1.0; 4]);
    let mut tp = tensor_to_proto("w", &w);
    tp.raw_data.clear();
    tp.data_location = onnx_protobuf::tensor_proto::DataLocation::EXTERNAL.into();
    for (k, v) in [
        ("location", location),
        ("offset", offset),
        ("length", length),
    ] {
        let mut e = StringStringEntryProto::new();
        e.key = k.into();
        e.value = v.into();
        tp.external_data.push(e);
    }
    let m = onnx(
        vec![node("Add", "add_w", &["x", "w"], &["y"])],
        &[("x", &[2, 2])],
        ("y", &[2, 2]),
    );
    model_bytes(&with_init(m, tp))
}

fn onnx_cases() -> Vec<Case> {
    let good = model_bytes(&relu_model());
    let mut no_graph = ModelProto::new();
    no_graph.ir_version = 8;
    let mut old_opset = relu_model();
    old_opset.opset_import[0].version = 6;
    let mut string_input = relu_model();
    string_input.graph.as_mut().unwrap().input[0] = value_info("x", STRING, &[2, 2]);
    let mut mismatch = tensor_to_proto("w", &Tensor::from_f32(vec![5], vec![1.0; 5]));
    mismatch.dims = vec![2, 3];
    let mut ragged = tensor_to_proto("w", &Tensor::from_f32(vec![2], vec![1.0; 2]));
    ragged.raw_data.truncate(7);
    ragged.dims = vec![2];
    let mut negative = tensor_to_proto("w", &Tensor::from_f32(vec![2], vec![1.0; 2]));
    negative.dims = vec![-2];
    let mut overflow = tensor_to_proto("w", &Tensor::from_f32(vec![2], vec![1.0; 2]));
    overflow.dims = vec![1 << 62, 8];
    let add_w = |tp: TensorProto| {
        let m = onnx(
            vec![node("Add", "add_w", &["x", "w"], &["y"])],
            &[("x", &[2, 3])],
            ("y", &[2, 3]),
        );
        model_bytes(&with_init(m, tp))
    };
    let einsum = |equation: &str, a: &[i64], b: &[i64]| {
        let n = node_with(
            node("Einsum", "the_einsum", &["a", "b"], &["y"]),
            vec![str_attr("equation", equation)],
        );
        let mut m = onnx(vec![n], &[("a", a), ("b", b)], ("y", &[]));
        clear_output_shape(&mut m);
        model_bytes(&m)
    };
    let one_hot = {
        let depth = tensor_to_proto("depth", &Tensor::from_i64(vec![2], vec![3, 4]));
        let values = tensor_to_proto("values", &Tensor::from_f32(vec![2], vec![0.0, 1.0]));
        let n = node("OneHot", "the_one_hot", &["x", "depth", "values"], &["y"]);
        let mut m = with_init(onnx(vec![n], &[("x", &[4])], ("y", &[])), depth);
        m = with_init(m, values);
        clear_output_shape(&mut m);
        model_bytes(&m)
    };
    let shape_const = tensor_to_proto("shape", &Tensor::from_i64(vec![2], vec![1 << 20, 1 << 20]));
    let mut huge = model(
        vec![node("ConstantOfShape", "fill_huge", &["shape"], &["y"])],
        vec![],
        vec![value_info("y", F32, &[])],
        vec![],
        13,
    );
    clear_output_shape(&mut huge);
    let huge = model_bytes(&with_init(huge, shape_const));
    let reshape_to = tensor_to_proto("s", &Tensor::from_i64(vec![2], vec![5, 5]));
    let bad_reshape = model_bytes(&with_init(
        onnx(
            vec![node("Reshape", "reshape_1", &["x", "s"], &["y"])],
            &[("x", &[2, 3, 4])],
            ("y", &[5, 5]),
        ),
        reshape_to,
    ));
    let mut wrong_declared = relu_model();
    wrong_declared.graph.as_mut().unwrap().output[0] = value_info("y", F32, &[3, 3]);

    // A Relu declaring a second output that another node reads.
    let relu_two_outputs = onnx(
        vec![
            node("Relu", "relu", &["x"], &["r", "ghost"]),
            node("Add", "add", &["r", "ghost"], &["y"]),
        ],
        &[("x", &[2, 3])],
        ("y", &[2, 3]),
    );
    let split_with = |k: i64| {
        let mut m = model(
            vec![node_with(
                node("Split", "split", &["x"], &["a", "b"]),
                vec![int_attr("num_outputs", k)],
            )],
            vec![value_info("x", F32, &[4, 3])],
            vec![value_info("a", F32, &[2, 3]), value_info("b", F32, &[2, 3])],
            vec![],
            18,
        );
        clear_output_shape(&mut m);
        model_bytes(&m)
    };
    let mut cases = vec![
        case(
            "onnx output read but not produced",
            "relu2.onnx",
            model_bytes(&relu_two_outputs),
            &["output 'ghost' is not produced", "relu"],
        ),
        case(
            "onnx split num_outputs negative",
            "split_neg.onnx",
            split_with(-1),
            &["num_outputs is -1, but the node has 2 outputs", "split"],
        ),
        case(
            "onnx split num_outputs huge",
            "split_huge.onnx",
            split_with(1 << 40),
            &["num_outputs is 1099511627776", "split"],
        ),
        case(
            "onnx truncated file",
            "truncated.onnx",
            good[..good.len() / 2].to_vec(),
            &["not a valid ONNX model"],
        ),
        case(
            "onnx not protobuf",
            "text.onnx",
            b"plain text, not a model\n".to_vec(),
            &["not a valid ONNX model"],
        ),
        case(
            "onnx model without a graph",
            "nograph.onnx",
            model_bytes(&no_graph),
            &["it has no graph"],
        ),
        case(
            "onnx opset out of range",
            "opset6.onnx",
            model_bytes(&old_opset),
            &["opset 6 is not supported (supported: 7 to 28)"],
        ),
        case(
            "onnx input dims overflow",
            "dims_overflow.onnx",
            model_bytes(&onnx(
                vec![node("Relu", "relu_1", &["x"], &["y"])],
                &[("x", &[1 << 40, 1 << 40])],
                ("y", &[1 << 40, 1 << 40]),
            )),
            &["graph input 'x'", "dimensions overflow"],
        ),
        case(
            "onnx negative input dim",
            "negative_dim.onnx",
            model_bytes(&onnx(
                vec![node("Relu", "relu_1", &["x"], &["y"])],
                &[("x", &[2, -3])],
                ("y", &[2, 3]),
            )),
            &["graph input 'x'", "negative dimension -3"],
        ),
        case(
            "onnx unsupported input element type",
            "string_input.onnx",
            model_bytes(&string_input),
            &["graph input 'x'", "element type STRING"],
        ),
        case(
            "onnx cycle",
            "cycle.onnx",
            model_bytes(&relu_cycle()),
            &["the graph has a cycle"],
        ),
        case(
            "onnx dangling input name",
            "dangling.onnx",
            model_bytes(&dangling_add()),
            &["layer 'add_1'", "input 'nowhere' is not produced"],
        ),
        case(
            "onnx dangling graph output",
            "dangling_output.onnx",
            model_bytes(&vector_model(
                vec![node("Relu", "relu_1", &["x"], &["z"])],
                vec![],
            )),
            &["graph output 'y' is not produced"],
        ),
        case(
            "onnx value produced twice",
            "twice.onnx",
            model_bytes(&vector_model(
                vec![
                    node("Relu", "r1", &["x"], &["y"]),
                    node("Relu", "r2", &["x"], &["y"]),
                ],
                vec![],
            )),
            &["layer 'r2'", "output 'y' is already produced"],
        ),
        case(
            "onnx initializer data does not match its shape",
            "init_mismatch.onnx",
            add_w(mismatch),
            &["initializer 'w'", "holds 5 elements", "needs 6"],
        ),
        case(
            "onnx raw data not a whole number of elements",
            "init_ragged.onnx",
            add_w(ragged),
            &["initializer 'w'", "7 bytes is not a whole number of f32"],
        ),
        case(
            "onnx initializer with a negative dim",
            "init_negative.onnx",
            add_w(negative),
            &["initializer 'w'", "negative dimension -2"],
        ),
        case(
            "onnx initializer dims overflow",
            "init_overflow.onnx",
            add_w(overflow),
            &["initializer 'w'", "overflows"],
        ),
        case(
            "onnx conv kernel larger than the padded input",
            "conv_kernel.onnx",
            conv(1, 4, [1, 1, 7, 7], vec![]),
            &[
                "layer 'conv_1'",
                "kernel extent 7 is larger than the padded input extent 4",
            ],
        ),
        case(
            "onnx conv stride 0",
            "conv_stride0.onnx",
            conv(1, 4, [1, 1, 3, 3], vec![ints_attr("strides", &[0, 0])]),
            &["layer 'conv_1'", "stride"],
        ),
        case(
            "onnx conv group does not divide channels",
            "conv_group.onnx",
            conv(3, 4, [2, 1, 3, 3], vec![int_attr("group", 2)]),
            &["layer 'conv_1'", "group"],
        ),
        case(
            "onnx conv dilation overflows",
            "conv_dilation.onnx",
            conv(
                1,
                4,
                [1, 1, 4, 4],
                vec![ints_attr("dilations", &[i64::MAX, 1])],
            ),
            &[
                "layer 'conv_1'",
                "window extents overflow",
                "dilation 9223372036854775807",
            ],
        ),
        case(
            "onnx conv negative pads",
            "conv_pads.onnx",
            conv(1, 4, [1, 1, 3, 3], vec![ints_attr("pads", &[-1, 0, 0, 0])]),
            &["layer 'conv_1'", "pads"],
        ),
        case(
            "onnx transpose perm not a permutation",
            "perm.onnx",
            single("Transpose", &[2, 3], vec![ints_attr("perm", &[0, 0])]),
            &["layer 'the_op'", "perm"],
        ),
        case(
            "onnx softmax axis out of range",
            "axis.onnx",
            single("Softmax", &[2, 3], vec![int_attr("axis", 5)]),
            &["layer 'the_op'", "axis 5"],
        ),
        case(
            "onnx einsum equation with a character that is no label",
            "einsum_parse.onnx",
            einsum("ij,j;->i", &[2, 3], &[3]),
            &["layer 'the_einsum'", "operand 1 ('j;')"],
        ),
        case(
            "onnx einsum equation that does not match the ranks",
            "einsum_rank.onnx",
            einsum("ij,jk->ik", &[2, 3, 4], &[3, 5]),
            &["layer 'the_einsum'", "does not label the 3 axes"],
        ),
        case(
            "onnx einsum diagonal of axes of different extents",
            "einsum_diagonal.onnx",
            einsum("ii,i->i", &[2, 3], &[2]),
            &[
                "layer 'the_einsum'",
                "label 'i' of operand 0 has extents 2 and 3",
            ],
        ),
        case(
            "onnx one-hot depth that is no scalar",
            "one_hot_depth.onnx",
            one_hot,
            &["layer 'the_one_hot'", "depth"],
        ),
        case(
            "onnx lp normalization of an unsupported order",
            "lp_norm.onnx",
            single("LpNormalization", &[2, 3], vec![int_attr("p", 3)]),
            &["layer 'the_op'", "p must be 1 or 2, got 3"],
        ),
        case(
            "onnx eye-like of a 3-d input",
            "eye_like.onnx",
            single("EyeLike", &[2, 3, 4], vec![]),
            &["layer 'the_op'", "EyeLike input must be 2-D"],
        ),
        case(
            "onnx reshape to an impossible shape",
            "reshape.onnx",
            bad_reshape,
            &["layer 'reshape_1'", "reshape"],
        ),
        case(
            "onnx declared output shape differs",
            "declared.onnx",
            model_bytes(&wrong_declared),
            &["graph output 'y'", "declared shape [3, 3]"],
        ),
        case(
            "onnx unsupported operator",
            "unsupported.onnx",
            single("NoSuchOp", &[4], vec![]),
            &["unsupported operators: 'NoSuchOp' ×1", "layer 'the_op'"],
        ),
        case(
            "onnx tensor larger than any machine",
            "huge.onnx",
            huge,
            &[
                "layer 'fill_huge'",
                "4398046511104 bytes (4.0 TiB)",
                "memory limit",
            ],
        ),
    ];
    let mut ext = |name, file, location, offset, length, needles: &[&'static str]| {
        let mut c = case(name, file, external_init(location, offset, length), needles);
        c.extra = vec![("weights.bin", vec![0u8; 16])];
        cases.push(c);
    };
    ext(
        "onnx external data outside the folder",
        "ext_escape.onnx",
        "../weights.bin",
        "0",
        "16",
        &["initializer 'w'", "leaves the model's folder"],
    );
    ext(
        "onnx external data past the end of its file",
        "ext_past_end.onnx",
        "weights.bin",
        "8",
        "16",
        &[
            "initializer 'w'",
            "range 8..24 is outside file",
            "(16 bytes)",
        ],
    );
    ext(
        "onnx external data file missing",
        "ext_missing.onnx",
        "absent.bin",
        "0",
        "16",
        &["initializer 'w'", "cannot read external data file"],
    );
    ext(
        "onnx external data range overflows",
        "ext_overflow.onnx",
        "weights.bin",
        "18446744073709551615",
        "2",
        &["initializer 'w'", "overflows"],
    );
    let mut big_input = case(
        "onnx inputs over the memory limit",
        "over_limit.onnx",
        model_bytes(&onnx(
            vec![node("Relu", "relu_big", &["x"], &["y"])],
            &[("x", &[1024, 1024])],
            ("y", &[1024, 1024]),
        )),
        &[
            "needs 8388608 bytes (8.0 MiB) at its peak",
            "memory limit of 6291456 bytes",
        ],
    );
    big_input.memory_limit = Some(6 << 20);
    cases.push(big_input);
    cases.extend(attention_cases());
    cases.extend(linear_attention_cases());
    cases.extend(flex_attention_cases());
    cases.extend(tf_idf_cases());
    cases
}

/// A model of one `op` node (layer `layer`) at `opset` over f32 inputs of the
/// given shapes, in order (an empty name leaves an optional input out), with
/// attributes; its one output `y`.
fn one_node(
    (op, layer, opset): (&str, &str, i64),
    inputs: &[(&str, &[i64])],
    y: &[i64],
    attrs: Vec<onnx_protobuf::AttributeProto>,
) -> Vec<u8> {
    let names: Vec<&str> = inputs.iter().map(|(n, _)| *n).collect();
    let n = node_with(node(op, layer, &names, &["y"]), attrs);
    let given = inputs.iter().filter(|(n, _)| !n.is_empty());
    model_bytes(&model(
        vec![n],
        given.map(|(n, d)| value_info(n, F32, d)).collect(),
        vec![value_info("y", F32, y)],
        vec![],
        opset,
    ))
}

/// An opset-23 Attention (layer attn_1) over f32 inputs of the given shapes
/// (Q, K, V, then an optional attn_mask), with attributes.
fn attention(
    shapes: &[(&str, &[i64])],
    y: &[i64],
    attrs: Vec<onnx_protobuf::AttributeProto>,
) -> Vec<u8> {
    one_node(("Attention", "attn_1", 23), shapes, y, attrs)
}

/// Attention whose heads or mask do not fit: each refused naming the layer.
fn attention_cases() -> Vec<Case> {
    let heads = |q, kv| vec![int_attr("q_num_heads", q), int_attr("kv_num_heads", kv)];
    vec![
        case(
            "onnx attention q heads not divisible by kv heads",
            "attention_gqa.onnx",
            attention(
                &[("q", &[1, 4, 40]), ("k", &[1, 4, 24]), ("v", &[1, 4, 24])],
                &[1, 4, 40],
                heads(5, 3),
            ),
            &[
                "attn_1",
                "5 query heads do not divide into groups of the 3 key/value heads",
            ],
        ),
        case(
            "onnx attention mismatched head sizes",
            "attention_head_size.onnx",
            attention(
                &[
                    ("q", &[1, 2, 4, 8]),
                    ("k", &[1, 2, 4, 6]),
                    ("v", &[1, 2, 4, 8]),
                ],
                &[1, 2, 4, 8],
                vec![],
            ),
            &["attn_1", "K's head size 6 differs from Q's 8"],
        ),
        case(
            "onnx attention hidden size not a multiple of the heads",
            "attention_hidden.onnx",
            attention(
                &[("q", &[1, 4, 30]), ("k", &[1, 4, 30]), ("v", &[1, 4, 30])],
                &[1, 4, 30],
                heads(4, 4),
            ),
            &["attn_1", "Q's hidden size 30 does not divide into 4 heads"],
        ),
        case(
            "onnx attention mask of the wrong shape",
            "attention_mask.onnx",
            attention(
                &[
                    ("q", &[1, 2, 4, 8]),
                    ("k", &[1, 2, 6, 8]),
                    ("v", &[1, 2, 6, 8]),
                    ("mask", &[3, 6]),
                ],
                &[1, 2, 4, 8],
                vec![],
            ),
            &[
                "attn_1",
                "attn_mask of shape [3, 6] does not broadcast",
                "[1, 2, 4, 6]",
            ],
        ),
        case(
            "onnx attention mask longer than the keys",
            "attention_mask_long.onnx",
            attention(
                &[
                    ("q", &[1, 2, 4, 8]),
                    ("k", &[1, 2, 6, 8]),
                    ("v", &[1, 2, 6, 8]),
                    ("mask", &[4, 7]),
                ],
                &[1, 2, 4, 8],
                vec![],
            ),
            &["attn_1", "attn_mask of shape [4, 7] does not broadcast"],
        ),
    ]
}

/// An opset-27 LinearAttention (layer linattn_1) over f32 inputs of the given
/// shapes in input order (query, key, value, past_state, decay, beta; an
/// empty name leaves an optional input out), with attributes.
fn linear_attention(
    inputs: &[(&str, &[i64])],
    y: &[i64],
    attrs: Vec<onnx_protobuf::AttributeProto>,
) -> Vec<u8> {
    one_node(("LinearAttention", "linattn_1", 27), inputs, y, attrs)
}

/// LinearAttention whose rule, gates, state or length do not fit: each
/// refused naming the layer, before anything is unrolled.
fn linear_attention_cases() -> Vec<Case> {
    let qkv: [(&str, &[i64]); 3] = [("q", &[1, 3, 16]), ("k", &[1, 3, 16]), ("v", &[1, 3, 16])];
    let with = |extra: &[(&'static str, &'static [i64])]| {
        let mut inputs = qkv.to_vec();
        inputs.extend_from_slice(extra);
        inputs
    };
    let attrs = |rule: &str| {
        vec![
            int_attr("q_num_heads", 2),
            int_attr("kv_num_heads", 2),
            str_attr("update_rule", rule),
        ]
    };
    let long: [(&str, &[i64]); 3] = [
        ("q", &[1, 5000, 2]),
        ("k", &[1, 5000, 2]),
        ("v", &[1, 5000, 2]),
    ];
    vec![
        case(
            "onnx linear attention unknown rule",
            "linear_attention_rule.onnx",
            linear_attention(&qkv, &[1, 3, 16], attrs("mamba")),
            &["linattn_1", "update_rule 'mamba' is not one of"],
        ),
        case(
            "onnx linear attention delta rule without beta",
            "linear_attention_beta.onnx",
            linear_attention(&qkv, &[1, 3, 16], attrs("delta")),
            &["linattn_1", "update_rule 'delta' needs beta"],
        ),
        case(
            "onnx linear attention decay of the wrong width",
            "linear_attention_decay.onnx",
            linear_attention(
                &with(&[("", &[]), ("g", &[1, 3, 5])]),
                &[1, 3, 16],
                attrs("gated"),
            ),
            &["linattn_1", "decay's last extent is 5, expected 2 or 16"],
        ),
        case(
            "onnx linear attention past state of the wrong shape",
            "linear_attention_state.onnx",
            linear_attention(&with(&[("s", &[1, 2, 8, 4])]), &[1, 3, 16], attrs("linear")),
            &[
                "linattn_1",
                "past_state must have shape [1, 2, 8, 8], got [1, 2, 8, 4]",
            ],
        ),
        case(
            "onnx linear attention too long to unroll",
            "linear_attention_long.onnx",
            linear_attention(&long, &[1, 5000, 2], attrs("linear")),
            &["linattn_1", "5000 tokens", "1 to 4096 tokens"],
        ),
    ]
}

/// An ai.onnx.preview FlexAttention (layer flex_1, at opset 26) over f32 Q,
/// K and V of the given shapes, with attributes.
fn flex_attention(
    qkv: [&[i64]; 3],
    y: &[i64],
    attrs: Vec<onnx_protobuf::AttributeProto>,
) -> Vec<u8> {
    let mut n = node_with(
        node("FlexAttention", "flex_1", &["q", "k", "v"], &["y"]),
        attrs,
    );
    n.domain = "ai.onnx.preview".into();
    let inputs = ["q", "k", "v"].iter().zip(qkv);
    let mut m = model(
        vec![n],
        inputs.map(|(n, d)| value_info(n, F32, d)).collect(),
        vec![value_info("y", F32, y)],
        vec![],
        26,
    );
    let mut preview = onnx_protobuf::OperatorSetIdProto::new();
    preview.domain = "ai.onnx.preview".into();
    preview.version = 1;
    m.opset_import.push(preview);
    model_bytes(&m)
}

/// FlexAttention whose inputs or mod graphs do not fit: each refused naming
/// the layer.
fn flex_attention_cases() -> Vec<Case> {
    let qkv: [&[i64]; 3] = [&[1, 2, 4, 8], &[1, 2, 6, 8], &[1, 2, 6, 8]];
    // A score_mod that swaps the query and key axes: its shape is not the scores'.
    let mut swap = onnx_protobuf::GraphProto::new();
    swap.node = vec![node_with(
        node("Transpose", "swap", &["s"], &["t"]),
        vec![ints_attr("perm", &[0, 1, 3, 2])],
    )];
    swap.input = vec![value_info("s", F32, &[1, 2, 4, 6])];
    swap.output = vec![value_info("t", F32, &[1, 2, 6, 4])];
    let mut two_outputs = swap.clone();
    two_outputs.output.push(value_info("s", F32, &[1, 2, 4, 6]));
    vec![
        case(
            "onnx flex attention 3-D inputs",
            "flex_attention_rank.onnx",
            flex_attention([&[1, 4, 16], &[1, 6, 16], &[1, 6, 16]], &[1, 4, 16], vec![]),
            &["flex_1", "must be 4-D", "got ranks [3, 3, 3]"],
        ),
        case(
            "onnx flex attention score_mod changes the shape",
            "flex_attention_score_mod.onnx",
            flex_attention(qkv, &[1, 2, 4, 8], vec![graph_attr("score_mod", swap)]),
            &["flex_1", "score_mod turns", "it must keep the shape"],
        ),
        case(
            "onnx flex attention prob_mod of two outputs",
            "flex_attention_prob_mod.onnx",
            flex_attention(
                qkv,
                &[1, 2, 4, 8],
                vec![graph_attr("prob_mod", two_outputs)],
            ),
            &["flex_1", "prob_mod has 1 inputs and 2 outputs"],
        ),
    ]
}

/// A TfIdfVectorizer (layer tfidf_1, opset 9) of 2-grams over an int64
/// sequence of 6 items into 2 counts, with the pool attributes given.
fn tf_idf(pool: Vec<onnx_protobuf::AttributeProto>) -> Vec<u8> {
    const INT64: i32 = 7;
    let mut attrs = vec![
        int_attr("min_gram_length", 2),
        int_attr("max_gram_length", 2),
        int_attr("max_skip_count", 0),
        str_attr("mode", "TF"),
        ints_attr("ngram_counts", &[0, 0]),
        ints_attr("ngram_indexes", &[0, 1]),
    ];
    attrs.extend(pool);
    let n = node_with(node("TfIdfVectorizer", "tfidf_1", &["x"], &["y"]), attrs);
    model_bytes(&model(
        vec![n],
        vec![value_info("x", INT64, &[6])],
        vec![value_info("y", F32, &[2])],
        vec![],
        9,
    ))
}

/// TfIdfVectorizers whose pool cannot be read: each refused naming the layer.
fn tf_idf_cases() -> Vec<Case> {
    let mut strings = onnx_protobuf::AttributeProto::new();
    strings.name = "pool_strings".into();
    strings.type_ = onnx_protobuf::attribute_proto::AttributeType::STRINGS.into();
    strings.strings = vec![b"a".to_vec(), b"b".to_vec(), b"b".to_vec(), b"c".to_vec()];
    vec![
        case(
            "onnx tfidf pool of strings",
            "tfidf_strings.onnx",
            tf_idf(vec![strings]),
            &["tfidf_1", "pool_strings is not supported", "pool_int64s"],
        ),
        case(
            "onnx tfidf pool of 2-grams with an odd item",
            "tfidf_odd_pool.onnx",
            tf_idf(vec![ints_attr("pool_int64s", &[1, 2, 3, 4, 5])]),
            &["tfidf_1", "2-grams take 5 items, not a multiple of 2"],
        ),
    ]
}

// -------------------------------------------------------------- TFLite models

// BuiltinOperator codes and BuiltinOptions union types from TFLite's schema.fbs.
// TRANSPOSE in TFLite's schema.fbs (no other test builds one).
const TRANSPOSE: i32 = 39;

fn tfl_relu(shape: &[i32]) -> ModelSpec {
    ModelSpec::new(
        vec![TensorSpec::f32("x", shape), TensorSpec::f32("y", shape)],
        vec![OpSpec::new(RELU, &[0], &[1])],
        &[0],
        &[1],
    )
}

fn tflite_cases() -> Vec<Case> {
    let good = tfl_conv(4, 3, 1).build();
    let mut bad_id = tfl_conv(4, 3, 1);
    bad_id.identifier = "ONNX";
    let mut buffer_oob = tfl_conv(4, 3, 1);
    buffer_oob.tensors[1].buffer = Some(99);
    let mut short_buffer = tfl_conv(4, 3, 1);
    short_buffer.tensors[1].data = Some(vec![0; 10]);
    let mut tensor_oob = tfl_conv(4, 3, 1);
    tensor_oob.ops[0].inputs[0] = 7;
    let mut opcode_oob = tfl_conv(4, 3, 1);
    opcode_oob.ops[0].opcode_index = Some(5);
    let mut version = tfl_conv(4, 3, 1);
    version.version = 2;
    // Int8 weights without a scale, read by a float conv.
    let mut unscaled = tfl_conv(4, 3, 1);
    unscaled.tensors[1].ttype = INT8;
    unscaled.tensors[1].data = Some(vec![1u8; 9]);
    let lstm = ModelSpec::new(
        vec![
            TensorSpec::f32("x", &[1, 4]),
            TensorSpec::f32("lstm_out", &[1, 4]),
        ],
        vec![OpSpec::new(LSTM, &[0], &[1])],
        &[0],
        &[1],
    );
    // Relu reads a tensor nothing produces and that has no data.
    let mut unproduced = tfl_relu(&[2, 2]);
    unproduced.tensors.push(TensorSpec::f32("ghost", &[2, 2]));
    unproduced.ops[0].inputs = vec![2];
    let perm = ModelSpec::new(
        vec![
            TensorSpec::f32("x", &[2, 3]),
            TensorSpec::i32_const("perm", &[2], &[1, 1]),
            TensorSpec::f32("y", &[3, 2]),
        ],
        vec![OpSpec::new(TRANSPOSE, &[0, 1], &[2])],
        &[0],
        &[2],
    );
    let mut big = case(
        "tflite inputs over the memory limit",
        "over_limit.tflite",
        tfl_relu(&[1024, 1024]).build(),
        &[
            "needs 8388608 bytes (8.0 MiB) at its peak",
            "memory limit of 6291456 bytes",
        ],
    );
    big.memory_limit = Some(6 << 20);
    vec![
        case(
            "tflite truncated file",
            "truncated.tflite",
            good[..good.len() / 2].to_vec(),
            &["truncated or corrupt"],
        ),
        case(
            "tflite shorter than a header",
            "short.tflite",
            good[..5].to_vec(),
            &["5 bytes"],
        ),
        case(
            "tflite wrong file identifier",
            "ident.tflite",
            bad_id.build(),
            &["expected \"TFL3\""],
        ),
        case(
            "tflite schema version",
            "version.tflite",
            version.build(),
            &["schema version 2 is not supported"],
        ),
        case(
            "tflite buffer index out of range",
            "buffer_oob.tflite",
            buffer_oob.build(),
            &["tensor #1 'w'", "refers to buffer 99"],
        ),
        case(
            "tflite buffer shorter than its tensor",
            "short_buffer.tflite",
            short_buffer.build(),
            &["tensor #1 'w'", "needs 36 bytes, but buffer 1 holds 10"],
        ),
        case(
            "tflite tensor index out of range",
            "tensor_oob.tflite",
            tensor_oob.build(),
            &["refers to tensor 7, but subgraph 0 has 4 tensors"],
        ),
        case(
            "tflite opcode index out of range",
            "opcode_oob.tflite",
            opcode_oob.build(),
            &["opcode index 5"],
        ),
        case(
            "tflite unscaled integer tensor",
            "unscaled.tflite",
            unscaled.build(),
            &["'w'", "INT8", "no quantization scale"],
        ),
        case(
            "tflite unsupported operator",
            "lstm.tflite",
            lstm.build(),
            &["LSTM", "'lstm_out'"],
        ),
        case(
            "tflite negative dim",
            "negative.tflite",
            tfl_relu(&[2, -2]).build(),
            &["tensor #0 'x'", "shapes must be static and non-negative"],
        ),
        case(
            "tflite dims overflow",
            "dims_overflow.tflite",
            tfl_relu(&[i32::MAX, i32::MAX, i32::MAX]).build(),
            &["tensor #0 'x'", "fits in memory"],
        ),
        case(
            "tflite conv kernel larger than the input",
            "conv_kernel.tflite",
            tfl_conv(2, 3, 1).build(),
            &["CONV_2D", "kernel"],
        ),
        case(
            "tflite conv stride 0",
            "conv_stride0.tflite",
            tfl_conv(4, 3, 0).build(),
            &["CONV_2D", "stride"],
        ),
        case(
            "tflite tensor read before it is produced",
            "unproduced.tflite",
            unproduced.build(),
            &["tensor #2 'ghost' is read before any operator produces it"],
        ),
        case(
            "tflite transpose perm not a permutation",
            "perm.tflite",
            perm.build(),
            &["TRANSPOSE", "perm"],
        ),
        case(
            "tflite tensor larger than any machine",
            "huge.tflite",
            tfl_relu(&[1 << 20, 1 << 20]).build(),
            &["4398046511104 bytes (4.0 TiB)", "memory limit"],
        ),
        big,
    ]
}

// ------------------------------------------------------------------- checking

fn load(path: &Path) -> Result<layoutopt::graph::Graph, String> {
    if path.extension().is_some_and(|e| e == "tflite") {
        load_tflite(path).map_err(|e| e.to_string())
    } else {
        load_onnx(path, &ImportOptions::default()).map_err(|e| e.to_string())
    }
}

fn check(c: &Case, dir: &Path) -> Result<(), String> {
    let folder = dir.join(c.name.replace(' ', "_"));
    std::fs::create_dir_all(&folder).unwrap();
    for (name, bytes) in &c.extra {
        std::fs::write(folder.join(name), bytes).unwrap();
    }
    let path = folder.join(c.file);
    std::fs::write(&path, &c.bytes).unwrap();
    let lib_msg = match (load(&path), c.memory_limit) {
        (Err(m), None) => m,
        (Ok(g), Some(limit)) => match g.check_memory(limit) {
            Err(e) => e.to_string(),
            Ok(()) => return Err(format!("{}: accepted under a {limit}-byte limit", c.name)),
        },
        (Ok(_), None) => return Err(format!("{}: imported without error", c.name)),
        (Err(m), Some(_)) => return Err(format!("{}: import failed: {m}", c.name)),
    };
    // Needles must match what the message says, not the file name it starts with.
    let lib_msg = lib_msg.replace(&path.display().to_string(), "<file>");
    for n in &c.needles {
        if !lib_msg.contains(n) {
            return Err(format!("{}: error {lib_msg:?} lacks {n:?}", c.name));
        }
    }
    for cmd in ["inspect", "run"] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_layoutopt"));
        command.arg(cmd).arg(&path).env("RUST_BACKTRACE", "1");
        if let Some(limit) = c.memory_limit {
            command.env(MEMORY_LIMIT_ENV, limit.to_string());
        }
        let out = command.output().expect("the CLI runs");
        let stderr =
            String::from_utf8_lossy(&out.stderr).replace(&path.display().to_string(), "<file>");
        if out.status.success() {
            return Err(format!("{}: `{cmd}` exited 0", c.name));
        }
        if stderr.contains("panicked") {
            return Err(format!("{}: `{cmd}` panicked: {stderr}", c.name));
        }
        if let Some(n) = c.needles.iter().find(|n| !stderr.contains(*n)) {
            return Err(format!("{}: `{cmd}` stderr {stderr:?} lacks {n:?}", c.name));
        }
    }
    Ok(())
}

fn run_all(cases: Vec<Case>, dir_name: &str) -> usize {
    let dir = scratch_dir(dir_name);
    let failures: Vec<String> = cases.iter().filter_map(|c| check(c, &dir).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} malformed models misbehave:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

#[test]
fn malformed_onnx_models_give_their_specific_error_and_never_panic() {
    let n = run_all(onnx_cases(), "malformed_onnx");
    assert!(n >= 30, "{n} ONNX defects");
}

#[test]
fn malformed_tflite_models_give_their_specific_error_and_never_panic() {
    let n = run_all(tflite_cases(), "malformed_tflite");
    assert!(n >= 18, "{n} TFLite defects");
}

#[test]
fn every_case_name_is_distinct() {
    let mut names: Vec<&str> = onnx_cases()
        .iter()
        .chain(&tflite_cases())
        .map(|c| c.name)
        .collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "duplicate case names");
}
