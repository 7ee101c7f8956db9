//! ONNX import: spans, folding of shape subgraphs, initializer encodings, and the
//! errors every bad file must give (never a panic, always a non-zero exit).

use crate::support::onnx::*;
use crate::support::process::{layoutopt, scratch_dir};
use crate::support::text::assert_mentions;
use layoutopt::frontend::onnx::{
    import_onnx, load_onnx, tensor_to_proto, ImportError, ImportOptions,
};
use layoutopt::graph::{Op, Tensor};
use layoutopt::ops::Reshape;
use onnx_protobuf::StringStringEntryProto;

const F32: i32 = 1;

/// x[1,2,3,4] -> Relu (unnamed) -> Shape/Gather/Unsqueeze/Concat -> Reshape to [1, 24].
fn shape_chain_model() -> onnx_protobuf::ModelProto {
    let mut gather = node("Gather", "g", &["shape", "idx0"], &["batch"]);
    gather.attribute.push(int_attr("axis", 0));
    let mut concat = node("Concat", "cat", &["batch_1d", "minus1"], &["target"]);
    concat.attribute.push(int_attr("axis", 0));
    model(
        vec![
            node("Relu", "", &["x"], &["r"]),
            node("Shape", "shape_of_r", &["r"], &["shape"]),
            gather,
            node("Unsqueeze", "unsq", &["batch", "zero_axes"], &["batch_1d"]),
            concat,
            node("Reshape", "flatten_r", &["r", "target"], &["y"]),
        ],
        vec![value_info("x", F32, &[1, 2, 3, 4])],
        vec![value_info("y", F32, &[1, 24])],
        vec![
            ("idx0", Tensor::from_i64(vec![], vec![0])),
            ("zero_axes", Tensor::from_i64(vec![1], vec![0])),
            ("minus1", Tensor::from_i64(vec![1], vec![-1])),
        ],
        13,
    )
}

fn import(m: &onnx_protobuf::ModelProto) -> Result<layoutopt::graph::Graph, ImportError> {
    import_model(m, "test.onnx")
}

#[test]
fn shape_subgraph_folds_into_a_static_reshape() {
    let g = import(&shape_chain_model()).expect("imports");
    let ops: Vec<&str> = g
        .topo_order()
        .unwrap()
        .into_iter()
        .map(|id| g.node(id).op.kind_name())
        .collect();
    assert_eq!(ops, ["Input", "Relu", "Reshape"]);
    let y = g.outputs()[0];
    assert_eq!(g.value_type(y).shape, [1, 24]);
    assert!(matches!(&g.node(y.node).op, Op::Reshape(Reshape { shape }) if shape == &[1, 24]));
}

#[test]
fn unnamed_nodes_get_stable_names_and_every_node_a_span() {
    let g = import(&shape_chain_model()).expect("imports");
    let relu = g
        .node_ids()
        .into_iter()
        .find(|&id| g.node(id).op.kind_name() == "Relu")
        .unwrap();
    let span = &g.node(relu).spans[0];
    assert_eq!(&*span.layer, "Relu_0");
    assert_eq!(&*span.op_type, "Relu");
    assert_eq!(span.index, 0);
    assert_eq!(&*span.file, "test.onnx");
    let reshape = g.outputs()[0].node;
    assert_eq!(&*g.node(reshape).spans[0].layer, "flatten_r");
    assert_eq!(g.node(reshape).spans[0].index, 5);
}

#[test]
fn initializers_decode_from_typed_fields_raw_data_and_external_files() {
    let dir = scratch_dir("external_data");
    let w = Tensor::from_f32(vec![2, 2], vec![1.0, -2.0, 3.5, 4.25]);
    let mut m = model(
        vec![
            node("Add", "add_typed", &["x", "typed"], &["a"]),
            node("Add", "add_ext", &["a", "ext"], &["y"]),
        ],
        vec![value_info("x", F32, &[2, 2])],
        vec![value_info("y", F32, &[2, 2])],
        vec![],
        13,
    );
    let graph = m.graph.as_mut().unwrap();
    // Typed field encoding.
    let mut typed = tensor_to_proto("typed", &w);
    typed.raw_data.clear();
    typed.float_data = vec![1.0, -2.0, 3.5, 4.25];
    graph.initializer.push(typed);
    // External data: bytes at an offset inside a file beside the model.
    let mut raw = vec![0u8; 8];
    raw.extend(tensor_to_proto("ext", &w).raw_data);
    std::fs::write(dir.join("weights.bin"), &raw).unwrap();
    let mut ext = tensor_to_proto("ext", &w);
    ext.raw_data.clear();
    ext.data_location = onnx_protobuf::tensor_proto::DataLocation::EXTERNAL.into();
    for (k, v) in [
        ("location", "weights.bin"),
        ("offset", "8"),
        ("length", "16"),
    ] {
        let mut e = StringStringEntryProto::new();
        e.key = k.into();
        e.value = v.into();
        ext.external_data.push(e);
    }
    graph.initializer.push(ext);
    let path = dir.join("model.onnx");
    std::fs::write(&path, model_bytes(&m)).unwrap();
    let g = load_onnx(&path, &ImportOptions::default()).expect("imports");
    let constants: Vec<Vec<f32>> = g
        .node_ids()
        .into_iter()
        .filter_map(|id| match &g.node(id).op {
            Op::Constant(t) => Some(t.to_f32()),
            _ => None,
        })
        .collect();
    assert_eq!(constants, vec![w.to_f32(), w.to_f32()]);
}

/// NoSuchOp (layer custom_7), an operator no opset defines.
fn unsupported_op() -> onnx_protobuf::ModelProto {
    vector_model(vec![node("NoSuchOp", "custom_7", &["x"], &["y"])], vec![])
}

fn expect_err(m: &onnx_protobuf::ModelProto, needles: &[&str]) {
    assert_mentions(
        &import(m).expect_err("must be refused").to_string(),
        needles,
    );
}

#[test]
fn unsupported_operator_names_op_node_and_file() {
    expect_err(&unsupported_op(), &["NoSuchOp", "custom_7", "test.onnx"]);
}

#[test]
fn dangling_input_names_the_missing_value_and_layer() {
    expect_err(&dangling_add(), &["'nowhere'", "add_1", "not produced"]);
}

#[test]
fn cycle_is_refused_with_the_layer() {
    expect_err(&relu_cycle(), &["cycle"]);
}

#[test]
fn shape_mismatch_names_the_layer() {
    let m = vector_model(
        vec![node("Add", "bad_add", &["x", "w"], &["y"])],
        vec![("w", Tensor::from_f32(vec![3], vec![0.0; 3]))],
    );
    expect_err(&m, &["bad_add", "do not broadcast"]);
}

#[test]
fn opset_out_of_range_is_refused() {
    let mut m = shape_chain_model();
    m.opset_import[0].version = 6;
    expect_err(&m, &["opset 6", "7 to 28"]);
}

#[test]
fn truncated_and_non_protobuf_files_are_refused() {
    let bytes = model_bytes(&shape_chain_model());
    for cut in [bytes.len() / 2, bytes.len() - 3, 1] {
        let e = import_onnx(&bytes[..cut], "cut.onnx", None, &ImportOptions::default());
        assert!(
            e.is_err(),
            "a file cut at {cut} of {} bytes must be refused",
            bytes.len()
        );
    }
    let text = b"this is a text file, not an ONNX model\n";
    let msg = import_onnx(text, "t.onnx", None, &ImportOptions::default())
        .expect_err("text is refused")
        .to_string();
    assert!(
        msg.contains("t.onnx") && msg.contains("not a valid ONNX model"),
        "{msg}"
    );
}

/// Files are decoded as they are read (`load_onnx`): a whole file imports as
/// its bytes do, a cut one is refused with the file named.
#[test]
fn model_files_stream_like_their_bytes() {
    let bytes = model_bytes(&shape_chain_model());
    let dir = std::env::temp_dir().join(format!("layoutopt-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let whole = dir.join("whole.onnx");
    std::fs::write(&whole, &bytes).unwrap();
    let from_file = load_onnx(&whole, &ImportOptions::default()).unwrap();
    let from_bytes = import(&shape_chain_model()).unwrap();
    assert_eq!(from_file.node_count(), from_bytes.node_count());
    for (a, b) in from_file.node_ids().into_iter().zip(from_bytes.node_ids()) {
        assert_eq!(from_file.node(a).op, from_bytes.node(b).op);
    }
    let cut = dir.join("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let msg = load_onnx(&cut, &ImportOptions::default())
        .expect_err("a cut file is refused")
        .to_string();
    assert_mentions(&msg, &["cut.onnx", "not a valid ONNX model"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The CLI exits non-zero with a clear message, and never panics, on bad files.
#[test]
fn cli_reports_bad_models_without_panicking() {
    let dir = scratch_dir("cli_bad_models");
    let good = model_bytes(&shape_chain_model());
    let unsupported = model_bytes(&unsupported_op());
    let dangling = model_bytes(&dangling_add());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated.onnx",
            good[..good.len() / 2].to_vec(),
            "not a valid ONNX model",
        ),
        (
            "text.onnx",
            b"hello, not protobuf".to_vec(),
            "not a valid ONNX model",
        ),
        (
            "unsupported.onnx",
            unsupported,
            "unsupported operators: 'NoSuchOp' ×1",
        ),
        ("dangling.onnx", dangling, "input 'nowhere'"),
    ];
    for (file, bytes, needle) in cases {
        let path = dir.join(file);
        std::fs::write(&path, bytes).unwrap();
        for cmd in ["inspect", "run"] {
            let out = layoutopt(&[cmd, path.to_str().unwrap()]);
            assert_ne!(out.code, 0, "{cmd} {file} must fail");
            assert!(
                out.stderr.contains(needle),
                "{cmd} {file}: stderr {:?} lacks {needle:?}",
                out.stderr
            );
        }
    }
    let missing = layoutopt(&["run", "/nonexistent/model.onnx"]);
    assert_ne!(missing.code, 0);
    assert!(missing.stderr.contains("cannot read"));
}

/// Every unsupported operator is reported at once: each type with its count and
/// the layers using it (outside the default domain with its domain), the file once.
#[test]
fn every_unsupported_operator_is_listed_at_once() {
    let mut custom = node("Frobnicate", "custom_1", &["x"], &["c"]);
    custom.domain = "com.example".into();
    let nodes = vec![
        node("FlexAttention", "attn_a", &["x"], &["a"]),
        node("Relu", "relu", &["a"], &["r"]),
        node("StringNormalizer", "normalize", &["r"], &["h"]),
        node("FlexAttention", "attn_b", &["h"], &["b"]),
        custom,
        node("Add", "add", &["b", "c"], &["y"]),
    ];
    let m = model(
        nodes,
        vec![value_info("x", 1, &[2, 3])],
        vec![value_info("y", 1, &[2, 3])],
        vec![],
        13,
    );
    let dir = scratch_dir("every_unsupported");
    let path = dir.join("many.onnx");
    std::fs::write(&path, model_bytes(&m)).unwrap();
    let err = load_onnx(&path, &ImportOptions::default()).unwrap_err();
    let ImportError::Unsupported { ops, .. } = &err else {
        panic!("{err}")
    };
    let listed: Vec<(&str, Vec<&str>)> = ops
        .iter()
        .map(|(op, spans)| (op.as_str(), spans.iter().map(|s| &*s.layer).collect()))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("FlexAttention", vec!["attn_a", "attn_b"]),
            ("StringNormalizer", vec!["normalize"]),
            ("com.example::Frobnicate", vec!["custom_1"]),
        ]
    );
    let text = err.to_string();
    assert!(
        text.contains("'FlexAttention' ×2 (layers 'attn_a', 'attn_b')"),
        "{text}"
    );
    assert!(
        text.contains("'StringNormalizer' ×1 (layer 'normalize')"),
        "{text}"
    );
    assert_eq!(text.matches("many.onnx").count(), 1, "{text}");
}

/// OneHot of indices -1, 0, 5, -4 at depth 3: a negative index counts from
/// the end, one outside [-3, 3) gives a row of `off`. Expected values from
/// onnxruntime 1.32 on the same model.
#[test]
fn one_hot_wraps_negative_indices_and_leaves_out_of_range_rows_off() {
    const I64: i32 = 7;
    let m = model(
        vec![node("OneHot", "hot", &["i", "depth", "values"], &["y"])],
        vec![value_info("i", I64, &[4])],
        vec![value_info("y", F32, &[4, 3])],
        vec![
            ("depth", Tensor::from_i64(vec![], vec![3])),
            ("values", Tensor::from_f32(vec![2], vec![-1.0, 2.0])),
        ],
        13,
    );
    let g = import(&m).expect("imports");
    let i = Tensor::from_i64(vec![4], vec![-1, 0, 5, -4]);
    let y = layoutopt::reference::run(&g, &[i]).expect("runs");
    assert_eq!(y[0].shape, [4, 3]);
    let want = [
        -1.0, -1.0, 2.0, 2.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0,
    ];
    assert_eq!(y[0].to_f32(), want);
}

/// Integer Mod by zero, folded at import, is an error naming the node.
#[test]
fn integer_mod_by_zero_names_the_node() {
    const I64: i32 = 7;
    let m = model(
        vec![
            node("Mod", "wrap_index", &["a", "zero"], &["r"]),
            node("Add", "add", &["x", "r"], &["y"]),
        ],
        vec![value_info("x", I64, &[2])],
        vec![value_info("y", I64, &[2])],
        vec![
            ("a", Tensor::from_i64(vec![2], vec![5, -5])),
            ("zero", Tensor::from_i64(vec![2], vec![2, 0])),
        ],
        13,
    );
    expect_err(&m, &["wrap_index", "modulo by zero"]);
}

/// Einsum with labels repeated within an operand (diagonals, a trace),
/// imported and run by the reference executor, against onnxruntime 1.31's
/// outputs (recorded here; operand k holds 0.5·i − 1 + k at flat index i).
#[test]
fn einsum_diagonals_match_onnxruntime() {
    // Equation, input shapes, output shape, output.
    type Case = (
        &'static str,
        &'static [&'static [usize]],
        &'static [i64],
        &'static [f32],
    );
    let cases: [Case; 6] = [
        (
            "iij,jk->ik",
            &[&[3, 3, 2], &[2, 4]],
            &[3, 4],
            &[
                -1.0, -1.75, -2.5, -3.25, 7.0, 10.25, 13.5, 16.75, 15.0, 22.25, 29.5, 36.75,
            ],
        ),
        ("iii->i", &[&[2, 2, 2]], &[2], &[-1.0, 2.5]),
        ("ii", &[&[3, 3]], &[], &[3.0]),
        ("iji->j", &[&[3, 2, 3]], &[2], &[7.5, 12.0]),
        ("ii,i->i", &[&[3, 3], &[3]], &[3], &[0.0, 0.5, 3.0]),
        (
            "bii,bjj->bij",
            &[&[2, 2, 2], &[2, 3, 3]],
            &[2, 2, 3],
            &[
                0.0, -2.0, -4.0, 0.0, 1.0, 2.0, 4.5, 6.5, 8.5, 11.25, 16.25, 21.25,
            ],
        ),
    ];
    for (equation, shapes, out_shape, want) in cases {
        let names: Vec<String> = (0..shapes.len()).map(|k| format!("x{k}")).collect();
        let inputs: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let n: usize = s.iter().product();
                let v = (0..n).map(|i| 0.5 * i as f32 - 1.0 + k as f32).collect();
                Tensor::from_f32(s.to_vec(), v)
            })
            .collect();
        let ins: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut einsum = node("Einsum", "einsum", &ins, &["y"]);
        einsum.attribute.push(str_attr("equation", equation));
        let infos = names
            .iter()
            .zip(shapes)
            .map(|(n, s)| value_info(n, F32, &s.iter().map(|&d| d as i64).collect::<Vec<_>>()))
            .collect();
        let m = model(
            vec![einsum],
            infos,
            vec![value_info("y", F32, out_shape)],
            vec![],
            13,
        );
        let g = import(&m).unwrap_or_else(|e| panic!("{equation}: {e}"));
        let y = layoutopt::reference::run(&g, &inputs).expect("runs")[0].to_f32();
        assert_eq!(y.len(), want.len(), "{equation}");
        for (got, want) in y.iter().zip(want) {
            assert!(
                (got - want).abs() <= 1e-5,
                "{equation}: {y:?}, expected {want:?}"
            );
        }
    }
}

/// Transforms whose constant matrix or filters could not be held, or whose
/// window does not fit their frames, are refused at import naming the layer,
/// before anything of their size is allocated.
#[test]
fn fourier_transforms_that_do_not_fit_are_refused_naming_their_layer() {
    let huge = Tensor::from_i64(vec![], vec![1 << 40]);
    let dft = node("DFT", "spectrum", &["x", "length", "axis"], &["y"]);
    let m = model(
        vec![dft],
        vec![value_info("x", F32, &[1, 8, 1])],
        vec![value_info("y", F32, &[1, 8, 2])],
        vec![
            ("length", huge),
            ("axis", Tensor::from_i64(vec![], vec![-2])),
        ],
        20,
    );
    let e = import_model(&m, "dft.onnx").expect_err("a 2^40-point matrix is refused");
    assert_mentions(&e.to_string(), &["spectrum", "memory limit"]);

    let stft = node("STFT", "frames", &["x", "step", "window", "frame"], &["y"]);
    let m = model(
        vec![stft],
        vec![value_info("x", F32, &[1, 64, 1])],
        vec![value_info("y", F32, &[1, 16, 3, 2])],
        vec![
            ("step", Tensor::from_i64(vec![], vec![4])),
            ("window", Tensor::from_f32(vec![5], vec![1.0; 5])),
            ("frame", Tensor::from_i64(vec![], vec![4])),
        ],
        17,
    );
    let e = import_model(&m, "stft.onnx").expect_err("a window longer than its frames is refused");
    assert_mentions(
        &e.to_string(),
        &["frames", "window holds 5 values for frames of 4"],
    );
}

/// Operators imported as several ops (Attention with its cache,
/// LayerNormalization with its statistics, LinearAttention with its state,
/// FlexAttention) hand their graph outputs over under the names the model
/// declares, as onnxruntime's callers ask for them.
#[test]
fn outputs_of_composite_operators_keep_their_declared_names() {
    let cases: [(&str, &[&str]); 4] = [
        (
            "test_attention_4d_with_past_and_present",
            &["Y", "present_key", "present_value"],
        ),
        (
            "test_layer_normalization_4d_axis0",
            &["Y", "Mean", "InvStdDev"],
        ),
        ("test_linear_attention_linear", &["output", "present_state"]),
        ("test_flexattention_fp16", &["Y"]),
    ];
    for (case, declared) in cases {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/onnx_node")
            .join(case)
            .join("model.onnx");
        let g = load_onnx(&path, &ImportOptions::default()).expect("imports");
        let names: Vec<&str> = (g.outputs().iter())
            .map(|&v| g.value(v).name.as_str())
            .collect();
        assert_eq!(names, declared, "{case}");
    }
}
