//! TFLite import: structure, layouts, spans and attributes of imported graphs, and
//! clear errors on bad files. Numerical checks are in tflite_reference.rs.

use crate::support::text::assert_mentions;
use crate::support::tflite::*;
use layoutopt::frontend::tflite::{import_tflite, load_tflite, TfliteError};
use layoutopt::graph::{
    CoordTransform, DType, Graph, NearestMode, NodeId, Op, PadMode, PoolKind, ResizeMode, UnaryOp,
    ValueRef,
};
use layoutopt::ops::{Gemm, Pad, Reshape, Slice, Transpose};
use std::path::Path;

fn model_path(name: &str) -> String {
    format!("{}/models/{name}/model.tflite", env!("CARGO_MANIFEST_DIR"))
}

fn import(spec: &ModelSpec) -> Graph {
    import_tflite(&spec.build(), "test.tflite").unwrap_or_else(|e| panic!("import failed: {e}"))
}

/// The error importing `bytes` gives, which must mention each of `needles`.
fn import_err(bytes: &[u8], needles: &[&str]) -> TfliteError {
    let e = match import_tflite(bytes, "bad.tflite") {
        Ok(_) => panic!("import of a bad file succeeded"),
        Err(e) => e,
    };
    assert_mentions(&e.to_string(), needles);
    e
}

/// Non-constant, non-input nodes in topological order.
fn op_nodes(g: &Graph) -> Vec<NodeId> {
    g.topo_order()
        .unwrap()
        .into_iter()
        .filter(|&n| !matches!(g.node(n).op, Op::Constant(_) | Op::Input))
        .collect()
}

fn kinds(g: &Graph) -> Vec<&'static str> {
    op_nodes(g)
        .iter()
        .map(|&n| g.node(n).op.kind_name())
        .collect()
}

fn only(g: &Graph, kind: &str) -> NodeId {
    let found: Vec<NodeId> = op_nodes(g)
        .into_iter()
        .filter(|&n| g.node(n).op.kind_name() == kind)
        .collect();
    assert_eq!(found.len(), 1, "expected one {kind} node");
    found[0]
}

fn constant_input(g: &Graph, n: NodeId, i: usize) -> (Vec<usize>, Vec<f32>) {
    let v = g.node_inputs(n)[i];
    let t = g.constant(v).expect("a constant input");
    (t.shape.clone(), t.to_f32())
}

fn out_shape(g: &Graph, n: NodeId) -> Vec<usize> {
    g.value_type(ValueRef::new(n, 0)).shape.clone()
}

/// A single CONV_2D: x [1,H,W,C] * w [O,KH,KW,C] → y.
fn conv_model(
    hw: [i32; 2],
    c: i32,
    o: i32,
    k: [i32; 2],
    stride: [i32; 2],
    padding: i8,
    out_hw: [i32; 2],
) -> ModelSpec {
    let n = (o * k[0] * k[1] * c) as usize;
    let w: Vec<f32> = (0..n).map(|v| v as f32).collect();
    let tensors = vec![
        TensorSpec::f32("x", &[1, hw[0], hw[1], c]),
        TensorSpec::f32_const("w", &[o, k[0], k[1], c], &w),
        TensorSpec::f32_const("b", &[o], &vec![0.5; o as usize]),
        TensorSpec::f32("y", &[1, out_hw[0], out_hw[1], o]),
    ];
    let conv = OpSpec::new(CONV_2D, &[0, 1, 2], &[3]).options(
        CONV_OPTIONS,
        &[
            (0, Field::I8(padding)),
            (1, Field::I32(stride[1])),
            (2, Field::I32(stride[0])),
            (3, Field::I8(ACT_RELU6)),
        ],
    );
    ModelSpec::new(tensors, vec![conv], &[0], &[3])
}

#[test]
fn conv_keeps_nhwc_values_with_explicit_transposes() {
    let g = import(&conv_model([7, 7], 2, 3, [3, 3], [2, 2], SAME, [4, 4]));
    assert_eq!(kinds(&g), ["Transpose", "Conv", "Clip", "Transpose"]);
    let ops = op_nodes(&g);
    assert_eq!(
        g.node(ops[0]).op,
        Op::Transpose(Transpose {
            perm: vec![0, 3, 1, 2]
        })
    );
    assert_eq!(
        g.node(ops[3]).op,
        Op::Transpose(Transpose {
            perm: vec![0, 2, 3, 1]
        })
    );
    assert_eq!(
        g.node(ops[2]).op,
        Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })
    );
    // The graph input and output keep TFLite's NHWC shapes.
    assert_eq!(
        g.value_type(ValueRef::new(g.inputs()[0], 0)).shape,
        [1, 7, 7, 2]
    );
    assert_eq!(g.value_type(g.outputs()[0]).shape, [1, 4, 4, 3]);
    assert_eq!(g.value(g.outputs()[0]).name, "y");
    let Op::Conv(conv) = &g.node(ops[1]).op else {
        unreachable!()
    };
    // SAME, stride 2 over 7: out = ceil(7/2) = 4, total pad = (4-1)*2 + 3 - 7 = 2 → 1 + 1.
    assert_eq!(conv.window.pads, [1, 1, 1, 1]);
    assert_eq!(conv.window.strides, [2, 2]);
    assert_eq!(conv.group, 1);
    // Weights become OIHW: w_oihw[o][i][h][w] = w_ohwi[o][h][w][i] = ((o*3 + h)*3 + w)*2 + i.
    let (shape, w) = constant_input(&g, ops[1], 1);
    assert_eq!(shape, [3, 2, 3, 3]);
    for (o, i, h, x) in [(0, 0, 0, 0), (0, 1, 0, 0), (1, 0, 2, 1), (2, 1, 1, 2)] {
        let oihw = ((o * 2 + i) * 3 + h) * 3 + x;
        let ohwi = ((o * 3 + h) * 3 + x) * 2 + i;
        assert_eq!(w[oihw], ohwi as f32, "weight ({o},{i},{h},{x})");
    }
    // Every node of the operator, the fused activation included, carries its span.
    for &n in &ops {
        let spans = &g.node(n).spans;
        assert_eq!(spans.len(), 1);
        assert_eq!(&*spans[0].file, "test.tflite");
        assert_eq!(&*spans[0].layer, "y");
        assert_eq!(&*spans[0].op_type, "CONV_2D");
        assert_eq!(spans[0].index, 0);
    }
}

#[test]
fn same_padding_puts_the_odd_pixel_at_the_end() {
    // 4x4 kernel, stride 1, on 5x6: out = in, total pad = k - 1 = 3 → 1 before, 2 after.
    let g = import(&conv_model([5, 6], 1, 1, [4, 4], [1, 1], SAME, [5, 6]));
    let Op::Conv(conv) = &g.node(only(&g, "Conv")).op else {
        unreachable!()
    };
    assert_eq!(conv.window.pads, [1, 1, 2, 2]);
    // VALID: no padding, out = 5 - 4 + 1 = 2 and 6 - 4 + 1 = 3.
    let g = import(&conv_model([5, 6], 1, 1, [4, 4], [1, 1], VALID, [2, 3]));
    let Op::Conv(conv) = &g.node(only(&g, "Conv")).op else {
        unreachable!()
    };
    assert_eq!(conv.window.pads, [0, 0, 0, 0]);
}

#[test]
fn depthwise_conv_is_a_grouped_conv_with_oihw_weights() {
    // C = 3 channels, depth multiplier M = 2: weights [1, 3, 3, 6].
    let w: Vec<f32> = (0..54).map(|v| v as f32).collect();
    let tensors = vec![
        TensorSpec::f32("x", &[1, 5, 5, 3]),
        TensorSpec::f32_const("w", &[1, 3, 3, 6], &w),
        TensorSpec::f32("y", &[1, 3, 3, 6]),
    ];
    let op = OpSpec::new(DEPTHWISE_CONV_2D, &[0, 1, -1], &[2]).options(
        DEPTHWISE_OPTIONS,
        &[
            (0, Field::I8(VALID)),
            (1, Field::I32(1)),
            (2, Field::I32(1)),
            (3, Field::I32(2)),
            (4, Field::I8(ACT_RELU)),
        ],
    );
    let g = import(&ModelSpec::new(tensors, vec![op], &[0], &[2]));
    assert_eq!(kinds(&g), ["Transpose", "Conv", "Relu", "Transpose"]);
    let conv_id = only(&g, "Conv");
    let Op::Conv(conv) = &g.node(conv_id).op else {
        unreachable!()
    };
    assert_eq!(conv.group, 3);
    assert_eq!(
        g.node_inputs(conv_id).len(),
        2,
        "the omitted bias (-1) is not an input"
    );
    // OIHW [6, 1, 3, 3]: out channel c*2 + m reads w[0][h][x][c*2 + m].
    let (shape, wt) = constant_input(&g, conv_id, 1);
    assert_eq!(shape, [6, 1, 3, 3]);
    for (oc, h, x) in [(0, 0, 0), (5, 2, 1), (3, 1, 2)] {
        assert_eq!(wt[(oc * 3 + h) * 3 + x], ((h * 3 + x) * 6 + oc) as f32);
    }
}

#[test]
fn max_pool_same_padding_and_window() {
    let tensors = vec![
        TensorSpec::f32("x", &[1, 8, 9, 4]),
        TensorSpec::f32("y", &[1, 4, 5, 4]),
    ];
    let op = OpSpec::new(MAX_POOL_2D, &[0], &[1]).options(
        POOL_OPTIONS,
        &[
            (0, Field::I8(SAME)),
            (1, Field::I32(2)),
            (2, Field::I32(2)),
            (3, Field::I32(3)),
            (4, Field::I32(3)),
        ],
    );
    let g = import(&ModelSpec::new(tensors, vec![op], &[0], &[1]));
    assert_eq!(kinds(&g), ["Transpose", "MaxPool", "Transpose"]);
    let Op::Pool(p) = &g.node(only(&g, "MaxPool")).op else {
        unreachable!()
    };
    assert_eq!(p.kind, PoolKind::Max);
    assert_eq!(p.window.kernel, [3, 3]);
    // H: out 4, total (4-1)*2 + 3 - 8 = 1 → 0 + 1; W: out 5, total (5-1)*2 + 3 - 9 = 2 → 1 + 1.
    assert_eq!(p.window.pads, [0, 1, 1, 1]);
    assert!(!p.count_include_pad);
}

#[test]
fn fully_connected_keeps_leading_dims() {
    let w: Vec<f32> = (0..20).map(|v| v as f32).collect();
    let tensors = vec![
        TensorSpec::f32("x", &[2, 3, 4]),
        TensorSpec::f32_const("w", &[5, 4], &w),
        TensorSpec::f32_const("b", &[5], &[1.0; 5]),
        TensorSpec::f32("y", &[2, 3, 5]),
    ];
    let op = OpSpec::new(FULLY_CONNECTED, &[0, 1, 2], &[3]).options(
        FC_OPTIONS,
        &[(0, Field::I8(ACT_RELU)), (2, Field::Bool(true))],
    );
    let g = import(&ModelSpec::new(tensors, vec![op], &[0], &[3]));
    assert_eq!(kinds(&g), ["Reshape", "Gemm", "Relu", "Reshape"]);
    let ops = op_nodes(&g);
    assert_eq!(
        g.node(ops[0]).op,
        Op::Reshape(Reshape { shape: vec![6, 4] })
    );
    assert!(matches!(
        g.node(ops[1]).op,
        Op::Gemm(Gemm {
            trans_b: true,
            trans_a: false,
            ..
        })
    ));
    assert_eq!(out_shape(&g, ops[3]), [2, 3, 5]);
}

#[test]
fn strided_slice_with_masks_negative_stride_and_shrink() {
    // x[1, -1::-2, 0:8:3] on [4, 6, 8]: axis 0 shrinks to index 1; axis 1 runs from
    // 5 down to the front (end_mask) by 2 → 5, 3, 1; axis 2 takes 0, 3, 6.
    let tensors = vec![
        TensorSpec::f32("x", &[4, 6, 8]),
        TensorSpec::i32_const("begin", &[3], &[1, -1, 0]),
        TensorSpec::i32_const("end", &[3], &[2, 0, 8]),
        TensorSpec::i32_const("strides", &[3], &[1, -2, 3]),
        TensorSpec::f32("y", &[3, 3]),
    ];
    let op = OpSpec::new(STRIDED_SLICE, &[0, 1, 2, 3], &[4]).options(
        STRIDED_SLICE_OPTIONS,
        &[(1, Field::I32(0b010)), (4, Field::I32(0b001))],
    );
    let g = import(&ModelSpec::new(tensors, vec![op], &[0], &[4]));
    assert_eq!(kinds(&g), ["Slice", "Reshape"]);
    let Op::Slice(Slice { axes }) = &g.node(only(&g, "Slice")).op else {
        unreachable!()
    };
    let got: Vec<_> = axes
        .iter()
        .map(|a| (a.axis, a.start, a.end, a.step))
        .collect();
    assert_eq!(got, [(0, 1, 2, 1), (1, 5, -1, -2), (2, 0, 8, 3)]);
    assert_eq!(out_shape(&g, only(&g, "Slice")), [1, 3, 3]);
    assert_eq!(g.value_type(g.outputs()[0]).shape, [3, 3]);
}

#[test]
fn squeeze_relu_relu6_pad_and_resize() {
    let tensors = vec![
        TensorSpec::f32("x", &[1, 4, 1, 6]),                         // 0
        TensorSpec::f32("sq", &[1, 4, 6]),                           // 1
        TensorSpec::f32("r", &[1, 4, 6]),                            // 2
        TensorSpec::f32("r6", &[1, 4, 6]),                           // 3
        TensorSpec::i32_const("pads", &[3, 2], &[0, 0, 1, 2, 0, 1]), // 4
        TensorSpec::f32_const("value", &[], &[-3.5]),                // 5
        TensorSpec::f32("p", &[1, 7, 7]),                            // 6
        TensorSpec::f32("x4", &[1, 3, 5, 2]),                        // 7
        TensorSpec::i32_const("size", &[2], &[6, 9]),                // 8
        TensorSpec::f32("bilinear", &[1, 6, 9, 2]),                  // 9
        TensorSpec::f32("nearest", &[1, 6, 9, 2]),                   // 10
    ];
    let ops = vec![
        OpSpec::new(SQUEEZE, &[0], &[1]).options(SQUEEZE_OPTIONS, &[(0, Field::VecI32(vec![-2]))]),
        OpSpec::new(RELU, &[1], &[2]),
        OpSpec::new(RELU6, &[2], &[3]),
        OpSpec::new(PADV2, &[3, 4, 5], &[6]),
        OpSpec::new(RESIZE_BILINEAR, &[7, 8], &[9])
            .options(RESIZE_BILINEAR_OPTIONS, &[(3, Field::Bool(true))]),
        OpSpec::new(RESIZE_NEAREST_NEIGHBOR, &[7, 8], &[10])
            .options(RESIZE_NEAREST_OPTIONS, &[(0, Field::Bool(true))]),
    ];
    let g = import(&ModelSpec::new(tensors, ops, &[0, 7], &[6, 9, 10]));
    assert_eq!(
        kinds(&g),
        ["Reshape", "Relu", "Clip", "Pad", "Resize", "Resize"]
    );
    // Paddings, pad value and sizes are attributes: no constant nodes are made for them.
    let constants = g
        .node_ids()
        .into_iter()
        .filter(|&n| matches!(g.node(n).op, Op::Constant(_)));
    assert_eq!(constants.count(), 0);
    assert_eq!(
        g.node(only(&g, "Reshape")).op,
        Op::Reshape(Reshape {
            shape: vec![1, 4, 6]
        })
    );
    assert_eq!(
        g.node(only(&g, "Clip")).op,
        Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 })
    );
    let pad = only(&g, "Pad");
    assert_eq!(
        g.node(pad).op,
        Op::Pad(Pad {
            begins: vec![0, 1, 0],
            ends: vec![0, 2, 1],
            mode: PadMode::Constant(-3.5)
        })
    );
    let resizes: Vec<_> = op_nodes(&g)
        .into_iter()
        .filter(|&n| g.node(n).op.kind_name() == "Resize")
        .collect();
    let Op::Resize(bilinear) = &g.node(resizes[0]).op else {
        unreachable!()
    };
    assert_eq!(
        (bilinear.mode, bilinear.coord),
        (ResizeMode::Linear, CoordTransform::HalfPixel)
    );
    assert_eq!(bilinear.sizes, [1, 6, 9, 2]);
    assert_eq!(bilinear.scales, [1.0, 2.0, 1.8, 1.0]);
    let Op::Resize(nearest) = &g.node(resizes[1]).op else {
        unreachable!()
    };
    assert_eq!(
        (nearest.mode, nearest.coord, nearest.nearest),
        (
            ResizeMode::Nearest,
            CoordTransform::AlignCorners,
            NearestMode::RoundPreferCeil
        )
    );
}

#[test]
fn operator_codes_old_and_new_style() {
    // An old file: only deprecated_builtin_code (RELU = 19).
    let mut relu = OpSpec::new(RELU, &[0], &[1]);
    relu.code = None;
    // A new op past 127: builtin_code 150 (GELU), deprecated field clamped to 127.
    let gelu = OpSpec::new(GELU, &[1], &[2]).options(GELU_OPTIONS, &[(0, Field::Bool(true))]);
    assert_eq!(gelu.deprecated_code, 127);
    let tensors = vec![
        TensorSpec::f32("x", &[2, 3]),
        TensorSpec::f32("r", &[2, 3]),
        TensorSpec::f32("y", &[2, 3]),
    ];
    let g = import(&ModelSpec::new(tensors, vec![relu, gelu], &[0], &[2]));
    assert_eq!(kinds(&g), ["Relu", "Gelu"]);
    assert_eq!(
        g.node(only(&g, "Gelu")).op,
        Op::Unary(UnaryOp::Gelu { tanh_approx: true })
    );
    assert_eq!(&*g.node(only(&g, "Gelu")).spans[0].op_type, "GELU");
}

#[test]
fn committed_cnn_imports_as_nhwc_with_layout_transposes() {
    let g = load_tflite(Path::new(&model_path("tflite_cnn"))).unwrap();
    let input = g.value_type(ValueRef::new(g.inputs()[0], 0));
    assert_eq!(
        (input.dtype, input.shape.clone()),
        (DType::F32, vec![1, 32, 32, 3])
    );
    assert_eq!(g.value_type(g.outputs()[0]).shape, [1, 10]);
    // 4 convolutions (one depthwise) and 3 pools, each wrapped NHWC → NCHW → NHWC.
    let count = |k: &str| kinds(&g).iter().filter(|&&x| x == k).count();
    assert_eq!(count("Conv"), 4);
    assert_eq!(count("MaxPool") + count("AveragePool"), 3);
    assert_eq!(count("Transpose"), 14);
    for n in op_nodes(&g) {
        if matches!(g.node(n).op, Op::Conv(_) | Op::Pool(_)) {
            let src = g.node_inputs(n)[0].node;
            assert_eq!(
                g.node(src).op,
                Op::Transpose(Transpose {
                    perm: vec![0, 3, 1, 2]
                })
            );
            assert_eq!(g.node(src).spans, g.node(n).spans);
        }
    }
    // Every one of the file's 25 operators has nodes, and spans name them in order.
    let mut indices: Vec<usize> = op_nodes(&g)
        .iter()
        .map(|&n| g.node(n).spans[0].index)
        .collect();
    indices.dedup();
    assert_eq!(indices, (0..25).collect::<Vec<_>>());
    // The first conv has BN folded and a fused RELU6, a Clip node with the conv's span.
    let clip = op_nodes(&g)
        .into_iter()
        .find(|&n| g.node(n).op.kind_name() == "Clip")
        .unwrap();
    assert_eq!(&*g.node(clip).spans[0].op_type, "CONV_2D");
    assert_eq!(g.node(clip).spans[0].index, 0);
}

#[test]
fn committed_f16_cnn_dequantizes_weights_to_f32() {
    let g = load_tflite(Path::new(&model_path("tflite_cnn_f16"))).unwrap();
    // Float16 weights are converted at import: every conv reads f32 OIHW constants.
    for n in op_nodes(&g) {
        if let Op::Conv(_) = g.node(n).op {
            let w = g.constant(g.node_inputs(n)[1]).expect("constant weights");
            assert_eq!(w.dtype(), DType::F32);
        }
    }
    let f32_model = load_tflite(Path::new(&model_path("tflite_cnn"))).unwrap();
    assert_eq!(kinds(&g), kinds(&f32_model));
}

#[test]
fn committed_transformer_imports() {
    let g = load_tflite(Path::new(&model_path("tflite_transformer"))).unwrap();
    assert_eq!(
        g.value_type(ValueRef::new(g.inputs()[0], 0)).shape,
        [1, 16, 32]
    );
    assert_eq!(g.value_type(g.outputs()[0]).shape, [1, 10]);
    let count = |k: &str| kinds(&g).iter().filter(|&&x| x == k).count();
    // Q·Kᵀ and attention·V per head, plus the two in the head of the model.
    assert_eq!(count("MatMul"), 4);
    assert_eq!(count("Softmax"), 2);
    assert_eq!(count("Gelu"), 1);
    // 4 TRANSPOSE operators in the attention, and the adj_y and adj_x operands of
    // the two BATCH_MATMULs at the end.
    assert_eq!(count("Transpose"), 6);
}

// ---- errors ----

#[test]
fn truncated_file_is_an_error() {
    let bytes = std::fs::read(model_path("tflite_cnn")).unwrap();
    let e = import_err(&bytes[..bytes.len() / 2], &["truncated or corrupt"]);
    assert!(matches!(e, TfliteError::Corrupt { .. }), "{e}");
    let e = import_err(&bytes[..5], &[]);
    assert!(matches!(e, TfliteError::TooShort { len: 5, .. }), "{e}");
}

#[test]
fn no_prefix_or_corruption_of_a_real_model_panics() {
    let bytes = std::fs::read(model_path("tflite_transformer")).unwrap();
    for len in (0..bytes.len()).step_by(61) {
        assert!(
            import_tflite(&bytes[..len], "cut.tflite").is_err(),
            "prefix of {len} bytes imported"
        );
    }
    // Overwrite bytes all over the file: each import must return, Ok or Err.
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..400 {
        let mut b = bytes.clone();
        for _ in 0..4 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let at = (rng % b.len() as u64) as usize;
            b[at] = (rng >> 32) as u8;
        }
        let _ = import_tflite(&b, "flipped.tflite");
    }
}

#[test]
fn wrong_file_identifier_is_an_error() {
    let mut spec = conv_model([7, 7], 2, 3, [3, 3], [2, 2], SAME, [4, 4]);
    spec.identifier = "ONNX";
    let e = import_err(&spec.build(), &["expected \"TFL3\""]);
    assert!(
        matches!(&e, TfliteError::BadIdentifier { found, .. } if found == "ONNX"),
        "{e}"
    );
}

#[test]
fn buffer_index_out_of_range_is_an_error() {
    let mut spec = conv_model([7, 7], 2, 3, [3, 3], [2, 2], SAME, [4, 4]);
    spec.tensors[1].buffer = Some(99);
    let e = import_err(&spec.build(), &["tensor #1 'w'", "buffer 99", "3 buffers"]);
    assert!(matches!(e, TfliteError::Invalid { .. }), "{e}");
}

#[test]
fn unsupported_operator_is_an_error_naming_it() {
    let tensors = vec![
        TensorSpec::f32("x", &[1, 4]),
        TensorSpec::f32("lstm_out", &[1, 4]),
    ];
    let spec = ModelSpec::new(tensors, vec![OpSpec::new(LSTM, &[0], &[1])], &[0], &[1]);
    let e = import_err(&spec.build(), &["LSTM", "builtin code 16", "'lstm_out'"]);
    assert!(matches!(e, TfliteError::Unsupported { .. }), "{e}");
}

/// FLOOR, CEIL and ROUND (halves to even, as TFLite's kernel rounds) on the
/// reference executor, against Rust's own rounding.
#[test]
fn floor_ceil_and_round_import_as_the_unary_ops() {
    let tensors = ["x", "floor", "ceil", "round"]
        .iter()
        .map(|n| TensorSpec::f32(n, &[6]))
        .collect();
    let ops = vec![
        OpSpec::new(FLOOR, &[0], &[1]),
        OpSpec::new(CEIL, &[0], &[2]),
        OpSpec::new(ROUND, &[0], &[3]),
    ];
    let g = import(&ModelSpec::new(tensors, ops, &[0], &[1, 2, 3]));
    let x = [-2.5f32, -1.5, -0.2, 0.5, 1.5, 2.7];
    let input =
        layoutopt::graph::Tensor::new(vec![6], layoutopt::graph::TensorData::F32(x.to_vec()));
    let out = layoutopt::reference::run(&g, &[input]).unwrap();
    let fns: [fn(f32) -> f32; 3] = [f32::floor, f32::ceil, f32::round_ties_even];
    for (t, f) in out.iter().zip(fns) {
        let want: Vec<f64> = x.iter().map(|&v| f64::from(f(v))).collect();
        assert_eq!(t.data.to_f64(), want);
    }
}

/// The builtins the converter folds away when shapes are static, so that the
/// interpreter-recorded models never hold them: EMBEDDING_LOOKUP (ids, then
/// the table), FILL, ZEROS_LIKE, ONES_LIKE and REDUCE_ALL, on the reference
/// executor against values worked out by hand.
#[test]
fn lookups_fills_and_reduce_all_import_as_their_compositions() {
    use layoutopt::graph::{Tensor, TensorData};
    let table: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let tensors = vec![
        TensorSpec::f32("x", &[2, 3]),
        TensorSpec::i32_const("ids", &[3], &[2, 0, 2]),
        TensorSpec::f32_const("table", &[4, 3], &table),
        TensorSpec::f32("rows", &[3, 3]),
        TensorSpec::i32_const("dims", &[2], &[2, 2]),
        TensorSpec::f32("filled", &[2, 2]),
        TensorSpec::f32("zeros", &[2, 3]),
        TensorSpec::f32("ones", &[2, 3]),
        TensorSpec::i32_const("axis", &[1], &[1]),
        TensorSpec {
            ttype: BOOL,
            ..TensorSpec::f32("positive", &[2, 3])
        },
        TensorSpec {
            ttype: BOOL,
            ..TensorSpec::f32("all", &[2])
        },
        TensorSpec::f32_const("value", &[], &[2.5]),
        TensorSpec::f32_const("zero", &[], &[0.0]),
    ];
    let ops = vec![
        OpSpec::new(EMBEDDING_LOOKUP, &[1, 2], &[3]),
        OpSpec::new(FILL, &[4, 11], &[5]),
        OpSpec::new(ZEROS_LIKE, &[0], &[6]),
        OpSpec::new(ONES_LIKE, &[0], &[7]),
        OpSpec::new(GREATER, &[0, 12], &[9]),
        OpSpec::new(REDUCE_ALL, &[9, 8], &[10])
            .options(REDUCER_OPTIONS, &[(0, Field::Bool(false))]),
    ];
    let g = import(&ModelSpec::new(tensors, ops, &[0], &[3, 5, 6, 7, 10]));
    let x = Tensor::new(
        vec![2, 3],
        TensorData::F32(vec![1.0, 2.0, 3.0, 4.0, -5.0, 6.0]),
    );
    let out = layoutopt::reference::run(&g, &[x]).unwrap();
    let f32s = |t: &Tensor| t.data.to_f64();
    assert_eq!(f32s(&out[0]), [6., 7., 8., 0., 1., 2., 6., 7., 8.]);
    assert_eq!(f32s(&out[1]), [2.5; 4]);
    assert_eq!(f32s(&out[2]), [0.0; 6]);
    assert_eq!(f32s(&out[3]), [1.0; 6]);
    assert_eq!(*out[4].data, TensorData::Bool(vec![true, false]));
}

/// ONE_HOT (indices outside `[0, depth)` hot nowhere, as in TensorFlow; on
/// the first axis), RANGE of constant scalars (int and float, counting down)
/// and ATAN2 in every quadrant, on its axes and at the origin, on the
/// reference executor against values worked out by hand and `f32::atan2`.
#[test]
fn one_hot_range_and_atan2_import_as_their_compositions() {
    use layoutopt::graph::{Tensor, TensorData};
    let i32_input = |name: &str, shape: &[i32]| TensorSpec {
        ttype: INT32,
        ..TensorSpec::f32(name, shape)
    };
    let tensors = vec![
        i32_input("ids", &[4]),
        TensorSpec::i32_const("depth", &[], &[3]),
        TensorSpec::f32_const("on", &[], &[2.5]),
        TensorSpec::f32_const("off", &[], &[-1.0]),
        TensorSpec::f32("hot", &[3, 4]),
        TensorSpec::i32_const("start", &[], &[7]),
        TensorSpec::i32_const("limit", &[], &[0]),
        TensorSpec::i32_const("delta", &[], &[-3]),
        i32_input("count_down", &[3]),
        TensorSpec::f32_const("from", &[], &[0.5]),
        TensorSpec::f32_const("to", &[], &[1.6]),
        TensorSpec::f32_const("by", &[], &[0.25]),
        TensorSpec::f32("steps", &[5]),
        TensorSpec::f32("y", &[9]),
        TensorSpec::f32("x", &[9]),
        TensorSpec::f32("angle", &[9]),
    ];
    let ops = vec![
        OpSpec::new(ONE_HOT, &[0, 1, 2, 3], &[4]).options(ONE_HOT_OPTIONS, &[(0, Field::I32(0))]),
        OpSpec::new(RANGE, &[5, 6, 7], &[8]),
        OpSpec::new(RANGE, &[9, 10, 11], &[12]),
        OpSpec::new(ATAN2, &[13, 14], &[15]),
    ];
    let g = import(&ModelSpec::new(tensors, ops, &[0, 13, 14], &[4, 8, 12, 15]));
    let ids = Tensor::new(vec![4], TensorData::I32(vec![2, -1, 0, 3]));
    let y = [1.0f32, 1.0, -1.0, -1.0, 0.0, 0.0, 2.0, -2.0, 0.0];
    let x = [1.0f32, -1.0, -1.0, 1.0, 3.0, -3.0, 0.0, 0.0, 0.0];
    let f32s = |v: &[f32]| Tensor::new(vec![v.len()], TensorData::F32(v.to_vec()));
    let out = layoutopt::reference::run(&g, &[ids, f32s(&y), f32s(&x)]).unwrap();
    let (on, off) = (2.5, -1.0);
    #[rustfmt::skip]
    let hot = [
        off, off, on, off,
        off, off, off, off,
        on, off, off, off,
    ];
    assert_eq!(out[0].data.to_f64(), hot);
    assert_eq!(*out[1].data, TensorData::I32(vec![7, 4, 1]));
    assert_eq!(out[2].data.to_f64(), [0.5, 0.75, 1.0, 1.25, 1.5]);
    let angles = out[3].data.to_f64();
    for ((&a, &y), &x) in angles.iter().zip(&y).zip(&x) {
        let want = f64::from(y.atan2(x));
        assert!(
            (a - want).abs() <= 1e-6,
            "atan2({y}, {x}) = {a}, want {want}"
        );
    }
}

/// Rearrangements and pads whose constants do not fit the input, and a
/// BITCAST that changes the element width, are errors naming the layer.
#[test]
fn rearrangements_that_do_not_fit_are_errors_naming_the_layer() {
    let x = || TensorSpec::f32("x", &[1, 6, 6, 2]);
    let one_op = |consts: Vec<TensorSpec>, out: TensorSpec, op: OpSpec| {
        let mut tensors = vec![x()];
        tensors.extend(consts);
        tensors.push(out);
        let last = tensors.len() as i32 - 1;
        ModelSpec::new(tensors, vec![op], &[0], &[last]).build()
    };
    let cases = [
        (
            one_op(
                vec![
                    TensorSpec::i32_const("block", &[2], &[4, 2]),
                    TensorSpec::i32_const("pads", &[2, 2], &[0, 0, 0, 0]),
                ],
                TensorSpec::f32("s2b", &[8, 2, 3, 2]),
                OpSpec::new(SPACE_TO_BATCH_ND, &[0, 1, 2], &[3]),
            ),
            vec![
                "'s2b'",
                "extent 6 of axis 1 is not a multiple of its block 4",
            ],
        ),
        (
            one_op(
                vec![
                    TensorSpec::i32_const("block", &[2], &[2, 2]),
                    TensorSpec::i32_const("crops", &[2, 2], &[0, 0, 9, 9]),
                ],
                TensorSpec::f32("b2s", &[1, 1, 1, 2]),
                OpSpec::new(BATCH_TO_SPACE_ND, &[0, 1, 2], &[3]),
            ),
            vec!["'b2s'", "batch 1 a multiple of 4"],
        ),
        (
            one_op(
                vec![TensorSpec::i32_const(
                    "pads",
                    &[4, 2],
                    &[0, 0, 6, 0, 0, 0, 0, 0],
                )],
                TensorSpec::f32("mirror", &[1, 12, 6, 2]),
                OpSpec::new(MIRROR_PAD, &[0, 1], &[2])
                    .options(MIRROR_PAD_OPTIONS, &[(0, Field::I8(0))]),
            ),
            vec!["'mirror'", "one less than the extent"],
        ),
        (
            one_op(
                vec![],
                TensorSpec::f32("s2d", &[1, 2, 2, 18]),
                OpSpec::new(SPACE_TO_DEPTH, &[0], &[1])
                    .options(SPACE_TO_DEPTH_OPTIONS, &[(0, Field::I32(4))]),
            ),
            vec!["'s2d'", "block size 4", "height 6"],
        ),
        (
            one_op(
                vec![],
                TensorSpec {
                    ttype: INT8,
                    ..TensorSpec::f32("bits", &[1, 6, 6, 2])
                },
                OpSpec::new(BITCAST, &[0], &[1]),
            ),
            vec!["'bits'", "BITCAST from f32 to i8"],
        ),
    ];
    for (bytes, needles) in cases {
        import_err(&bytes, &needles);
    }
}

#[test]
fn int8_weights_without_a_scale_are_refused_naming_the_tensor() {
    let mut spec = conv_model([7, 7], 2, 3, [3, 3], [2, 2], SAME, [4, 4]);
    spec.tensors[1].ttype = INT8;
    spec.tensors[1].data = Some(vec![1u8; 54]);
    let e = import_err(&spec.build(), &["INT8", "no quantization scale"]);
    assert!(
        matches!(&e, TfliteError::Unscaled { index: 1, tensor, .. } if tensor == "w"),
        "{e}"
    );
}

#[test]
fn bad_indices_and_sizes_are_errors() {
    let base = conv_model([7, 7], 2, 3, [3, 3], [2, 2], SAME, [4, 4]);
    let mut spec = base.clone();
    spec.ops[0].inputs[0] = 7;
    import_err(
        &spec.build(),
        &["refers to tensor 7, but subgraph 0 has 4 tensors"],
    );
    let mut spec = base.clone();
    spec.ops[0].opcode_index = Some(5);
    import_err(&spec.build(), &["opcode index 5"]);
    let mut spec = base.clone();
    spec.tensors[1].data = Some(vec![0; 10]);
    import_err(&spec.build(), &["needs 216 bytes, but buffer 1 holds 10"]);
    let mut spec = base.clone();
    spec.tensors[3].shape = vec![1, 5, 5, 3];
    let e = import_err(
        &spec.build(),
        &["declares output tensor 'y' as f32[1, 5, 5, 3]"],
    );
    assert!(matches!(e, TfliteError::Layer { .. }), "{e}");
    let mut spec = base;
    spec.version = 2;
    import_err(&spec.build(), &["schema version 2"]);
}

#[test]
fn reshape_infers_one_extent_and_rejects_impossible_shapes() {
    const RESHAPE: i32 = 22;
    let model = |shape: &[i32], out: &[i32]| {
        let tensors = vec![
            TensorSpec::f32("x", &[2, 3, 4]),
            TensorSpec::i32_const("shape", &[shape.len() as i32], shape),
            TensorSpec::f32("y", out),
        ];
        ModelSpec::new(
            tensors,
            vec![OpSpec::new(RESHAPE, &[0, 1], &[2])],
            &[0],
            &[2],
        )
    };
    // 24 elements: [-1, 8] → [3, 8].
    let g = import(&model(&[-1, 8], &[3, 8]));
    assert_eq!(
        g.node(only(&g, "Reshape")).op,
        Op::Reshape(Reshape { shape: vec![3, 8] })
    );
    // Two -1s, a -1 that does not divide, an extent product that overflows.
    for shape in [&[-1, -1][..], &[-1, 5], &[i32::MAX, i32::MAX, i32::MAX, -1]] {
        import_err(
            &model(shape, &[24]).build(),
            &["cannot reshape f32[2, 3, 4]"],
        );
    }
    // A declared tensor shape whose element count overflows is refused, not allocated.
    let mut spec = model(&[-1], &[24]);
    spec.tensors[2].shape = vec![i32::MAX; 4];
    import_err(&spec.build(), &["fits in memory"]);
}
