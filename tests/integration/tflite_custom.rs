//! MediaPipe's custom operators. Convolution2DTransposeBias imports as a ConvTranspose
//! with bias; its output extent and trimming follow MediaPipe's kernel, checked here
//! against a direct transcription of that kernel (each input pixel scatters the
//! weights onto the output) where its SAME extent differs from TRANSPOSE_CONV's.
//! MaxPoolingWithArgmax2D and MaxUnpooling2D with non-overlapping windows import as
//! window reshapes with a max, an argmax and a one-hot select, checked against a
//! transcription of MediaPipe's kernels. A short or inconsistent option buffer is an
//! error naming the layer. The committed model is compared with the TFLite
//! interpreter in tflite_reference.rs.

use crate::support::text::assert_mentions;
use crate::support::tflite::*;
use layoutopt::frontend::tflite::{import_tflite, TfliteError};
use layoutopt::graph::{Op, Tensor};

const CODE: &str = "Convolution2DTransposeBias";
const SAME_PARAM: i32 = 1;
const VALID_PARAM: i32 = 2;

fn options(padding: i32, stride_w: i32, stride_h: i32) -> Vec<u8> {
    [padding, stride_w, stride_h]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// x [1, H, W, I] → Convolution2DTransposeBias with weights [O, KH, KW, I] → y.
struct Case {
    x_shape: [usize; 4],
    w_shape: [usize; 4],
    weights: Vec<f32>,
    bias: Vec<f32>,
}

impl Case {
    fn new(x_shape: [usize; 4], w_shape: [usize; 4]) -> Case {
        let n: usize = w_shape.iter().product();
        Case {
            x_shape,
            w_shape,
            weights: (0..n).map(|v| ((v * 7) % 11) as f32 * 0.25 - 1.0).collect(),
            bias: (0..w_shape[0]).map(|o| 0.5 - o as f32).collect(),
        }
    }

    fn spec(&self, options: &[u8], y_shape: [usize; 4]) -> ModelSpec {
        let dims = |s: &[usize]| s.iter().map(|&d| d as i32).collect::<Vec<_>>();
        let tensors = vec![
            TensorSpec::f32("x", &dims(&self.x_shape)),
            TensorSpec::f32_const("w", &dims(&self.w_shape), &self.weights),
            TensorSpec::f32_const("b", &[self.w_shape[0] as i32], &self.bias),
            TensorSpec::f32("upsampled", &dims(&y_shape)),
        ];
        let op = OpSpec::custom(CODE, options, &[0, 1, 2], &[3]);
        ModelSpec::new(tensors, vec![op], &[0], &[3])
    }

    /// MediaPipe's kernel: the output starts as the bias; input pixel (iy, ix) adds
    /// w[o, fy, fx, i] * x at (iy * s - trim / 2 + fy, ix * s - trim / 2 + fx).
    fn oracle(&self, x: &[f32], same: bool, stride: [usize; 2]) -> Tensor {
        let [_, ih, iw, ci] = self.x_shape;
        let [co, kh, kw, _] = self.w_shape;
        let trim = |k: usize, n: usize, s: usize| {
            if same {
                (k as i64 - ((n - 1) % s) as i64 - 1).max(0) as usize
            } else {
                0
            }
        };
        let (th, tw) = (trim(kh, ih, stride[0]), trim(kw, iw, stride[1]));
        let (oh, ow) = (
            stride[0] * (ih - 1) + kh - th,
            stride[1] * (iw - 1) + kw - tw,
        );
        let mut y: Vec<f32> = (0..oh * ow).flat_map(|_| self.bias.clone()).collect();
        for (iy, ix, fy, fx) in every_position(ih, iw, kh, kw) {
            let oy = (iy * stride[0] + fy) as i64 - (th / 2) as i64;
            let ox = (ix * stride[1] + fx) as i64 - (tw / 2) as i64;
            if !(0..oh as i64).contains(&oy) || !(0..ow as i64).contains(&ox) {
                continue;
            }
            for o in 0..co {
                for i in 0..ci {
                    let w = self.weights[((o * kh + fy) * kw + fx) * ci + i];
                    y[(oy as usize * ow + ox as usize) * co + o] += w * x[(iy * iw + ix) * ci + i];
                }
            }
        }
        Tensor::from_f32(vec![1, oh, ow, co], y)
    }
}

/// All (a, b, c, d) below the given extents.
fn every_position(
    a: usize,
    b: usize,
    c: usize,
    d: usize,
) -> impl Iterator<Item = (usize, usize, usize, usize)> {
    (0..a).flat_map(move |i| {
        (0..b).flat_map(move |j| (0..c).flat_map(move |k| (0..d).map(move |l| (i, j, k, l))))
    })
}

/// Imports the case, runs it with the reference executor and compares with the oracle.
fn check(case: &Case, padding: i32, stride: [usize; 2], y_shape: [usize; 4]) {
    let spec = case.spec(
        &options(padding, stride[1] as i32, stride[0] as i32),
        y_shape,
    );
    let g = import_tflite(&spec.build(), "custom.tflite").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        g.node_ids()
            .iter()
            .any(|&n| matches!(g.node(n).op, Op::ConvTranspose(_))),
        "no ConvTranspose"
    );
    let n: usize = case.x_shape.iter().product();
    let x: Vec<f32> = (0..n).map(|v| ((v * 5) % 9) as f32 * 0.5 - 2.0).collect();
    let input = Tensor::from_f32(case.x_shape.to_vec(), x.clone());
    let y = layoutopt::reference::run(&g, &[input]).unwrap_or_else(|e| panic!("{e}"));
    let expected = case.oracle(&x, padding == SAME_PARAM, stride);
    assert_eq!(y[0].shape, expected.shape);
    assert_eq!(expected.shape, y_shape);
    let err = y[0]
        .to_f32()
        .iter()
        .zip(expected.to_f32())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    // Sums of a few products of quarter steps: exact but for rounding.
    assert!(err <= 1e-5, "max abs err {err}");
}

#[test]
fn same_trims_as_mediapipe_where_transpose_conv_would_not() {
    // in 3, k 3, s 2: trims 3 - 0 - 1 = 2 pixels, so 5, not TRANSPOSE_CONV's 6.
    check(
        &Case::new([1, 3, 3, 2], [3, 3, 3, 2]),
        SAME_PARAM,
        [2, 2],
        [1, 5, 5, 3],
    );
    // Rows as above; columns in 4, k 3, s 2: trims 1 pixel, at the end, so 8.
    check(
        &Case::new([1, 3, 4, 1], [2, 3, 3, 1]),
        SAME_PARAM,
        [2, 2],
        [1, 5, 8, 2],
    );
    // k 4, s 3, in 2: trims 4 - 1 - 1 = 2, so 3 + 4 - 2 = 5; stride 1 rows: trims k - 1.
    check(
        &Case::new([1, 4, 2, 2], [2, 3, 4, 2]),
        SAME_PARAM,
        [1, 3],
        [1, 4, 5, 2],
    );
}

#[test]
fn valid_keeps_the_full_extent() {
    check(
        &Case::new([1, 3, 2, 2], [2, 3, 2, 2]),
        VALID_PARAM,
        [2, 3],
        [1, 7, 5, 2],
    );
}

fn custom_error(spec: &ModelSpec, needles: &[&str]) {
    let e = match import_tflite(&spec.build(), "bad.tflite") {
        Ok(_) => panic!("imported: {needles:?}"),
        Err(e) => e,
    };
    assert!(matches!(e, TfliteError::Layer { .. }), "{e}");
    let mut all = vec!["layer 'upsampled' (CUSTOM:Convolution2DTransposeBias #0)"];
    all.extend(needles);
    assert_mentions(&e.to_string(), &all);
}

#[test]
fn malformed_options_are_errors_naming_the_layer() {
    let case = Case::new([1, 3, 3, 2], [3, 3, 3, 2]);
    let y = [1, 5, 5, 3];
    let short = &options(SAME_PARAM, 2, 2)[..8];
    custom_error(
        &case.spec(short, y),
        &["custom options are 8 bytes", "needs 12"],
    );
    custom_error(&case.spec(&[], y), &["custom options are 0 bytes"]);
    let unknown = options(0, 2, 2);
    custom_error(
        &case.spec(&unknown, y),
        &["padding 0 is neither SAME (1) nor VALID (2)"],
    );
    let zero_stride = options(SAME_PARAM, 0, 2);
    custom_error(
        &case.spec(&zero_stride, y),
        &["strides [2, 0] must be positive"],
    );
    // Weights whose input channels are not the input's.
    let mismatched = Case::new([1, 3, 3, 2], [3, 3, 3, 4]);
    custom_error(
        &mismatched.spec(&options(SAME_PARAM, 2, 2), y),
        &["do not fit"],
    );
}

/// TfLitePoolParams bytes: padding (1 SAME), strides, filter, activation, and the
/// computed padding the struct ends with.
fn pool_options(stride: [i32; 2], filter: [i32; 2], activation: i32) -> Vec<u8> {
    [
        1, stride[1], stride[0], filter[1], filter[0], activation, 0, 0,
    ]
    .iter()
    .flat_map(|v| v.to_le_bytes())
    .collect()
}

/// x [1, 4, 6, 2] → MaxPoolingWithArgmax2D (2x2 windows) → pooled, indices →
/// MaxUnpooling2D → unpooled; all three are outputs.
fn pool_unpool(pool_opts: &[u8], unpool_opts: &[u8]) -> ModelSpec {
    let tensors = vec![
        TensorSpec::f32("x", &[1, 4, 6, 2]),
        TensorSpec::f32("pooled", &[1, 2, 3, 2]),
        TensorSpec::f32("indices", &[1, 2, 3, 2]),
        TensorSpec::f32("unpooled", &[1, 4, 6, 2]),
    ];
    let ops = vec![
        OpSpec::custom("MaxPoolingWithArgmax2D", pool_opts, &[0], &[1, 2]),
        OpSpec::custom("MaxUnpooling2D", unpool_opts, &[1, 2], &[3]),
    ];
    ModelSpec::new(tensors, ops, &[0], &[1, 2, 3])
}

/// MediaPipe's kernels on [1, H, W, C] `x` with k x k windows of stride k: the first
/// strict maximum of each window (a ReLU6 on it when `relu6`) and its window index
/// plus 0.1; then each value written back where its index points.
fn pool_unpool_oracle(x: &[f32], [h, w, c]: [usize; 3], k: usize, relu6: bool) -> [Vec<f32>; 3] {
    let (oh, ow) = (h / k, w / k);
    let (mut pooled, mut indices) = (vec![0.0; oh * ow * c], vec![0.0; oh * ow * c]);
    let mut unpooled = vec![0.0; h * w * c];
    for (oy, ox, ch) in
        (0..oh).flat_map(|y| (0..ow).flat_map(move |x| (0..c).map(move |ch| (y, x, ch))))
    {
        let (mut max, mut at) = (f32::MIN, 0);
        for (fy, fx) in (0..k).flat_map(|fy| (0..k).map(move |fx| (fy, fx))) {
            let v = x[((oy * k + fy) * w + ox * k + fx) * c + ch];
            if v > max {
                (max, at) = (v, fy * k + fx);
            }
        }
        let o = (oy * ow + ox) * c + ch;
        pooled[o] = if relu6 { max.clamp(0.0, 6.0) } else { max };
        indices[o] = at as f32 + 0.1;
    }
    for (iy, ix, ch) in
        (0..oh).flat_map(|y| (0..ow).flat_map(move |x| (0..c).map(move |ch| (y, x, ch))))
    {
        let i = (iy * ow + ix) * c + ch;
        let at = indices[i] as usize;
        unpooled[((iy * k + at / k) * w + ix * k + at % k) * c + ch] = pooled[i];
    }
    [pooled, indices, unpooled]
}

#[test]
fn max_pool_argmax_and_unpooling_follow_mediapipe() {
    // Ties (1.5 at flat positions i and i + 14 of a window) and negative maxima.
    let mut x: Vec<f32> = (0..48)
        .map(|v| match v % 7 {
            0 | 3 => 1.5,
            k => (k as f32 - 4.0) * ((v / 7) as f32 - 3.0),
        })
        .collect();
    // Window (0, 0) of channel 0 all equal and negative: index 0, ReLU6 gives 0.
    for at in [0, 2, 12, 14] {
        x[at] = -0.5;
    }
    for (activation, relu6) in [(0, false), (3, true)] {
        let spec = pool_unpool(
            &pool_options([2, 2], [2, 2], activation),
            &pool_options([2, 2], [2, 2], 0),
        );
        let g = import_tflite(&spec.build(), "pool.tflite").unwrap_or_else(|e| panic!("{e}"));
        let input = Tensor::from_f32(vec![1, 4, 6, 2], x.clone());
        let got = layoutopt::reference::run(&g, &[input]).unwrap_or_else(|e| panic!("{e}"));
        let expected = pool_unpool_oracle(&x, [4, 6, 2], 2, relu6);
        for (i, (got, want)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(&got.to_f32(), want, "output {i}, activation {activation}");
        }
    }
}

#[test]
fn overlapping_pool_windows_and_short_options_are_refused_naming_the_layer() {
    let tiled = pool_options([2, 2], [2, 2], 0);
    let overlapping = pool_options([2, 2], [3, 3], 0);
    for (spec, layer, needle) in [
        (
            pool_unpool(&overlapping, &tiled),
            "layer 'pooled' (CUSTOM:MaxPoolingWithArgmax2D #0)",
            "only non-overlapping windows",
        ),
        (
            pool_unpool(&tiled, &overlapping),
            "layer 'unpooled' (CUSTOM:MaxUnpooling2D #1)",
            "only non-overlapping windows",
        ),
        (
            pool_unpool(&tiled[..20], &tiled),
            "layer 'pooled'",
            "custom options are 20 bytes, but MaxPoolingWithArgmax2D needs 24",
        ),
    ] {
        let e = import_tflite(&spec.build(), "pool.tflite").unwrap_err();
        assert_mentions(&e.to_string(), &[layer, needle]);
    }
}

#[test]
fn other_mediapipe_custom_ops_are_refused_by_name() {
    let tensors = vec![
        TensorSpec::f32("x", &[1, 4, 4, 2]),
        TensorSpec::f32("y", &[1, 4, 4, 2]),
    ];
    let op = OpSpec::custom("Landmarks2TransformMatrix", &[], &[0], &[1]);
    let spec = ModelSpec::new(tensors, vec![op], &[0], &[1]);
    let e = import_tflite(&spec.build(), "custom.tflite").unwrap_err();
    assert!(matches!(e, TfliteError::Unsupported { .. }), "{e}");
    assert_mentions(
        &e.to_string(),
        &["CUSTOM:Landmarks2TransformMatrix", "not supported"],
    );
}

/// TFLite_Detection_PostProcess's options as the TFLite converter wrote them
/// (a FlexBuffers map) into models/detection/tflite_ssd_fast.
fn converted_post_process_options() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models/detection/tflite_ssd_fast/model.tflite");
    let bytes = std::fs::read(path).unwrap();
    let model = layoutopt::frontend::tflite::schema::root(&bytes).unwrap();
    let ops = model.subgraphs().unwrap().get(0).operators().unwrap();
    let options = ops.iter().find_map(|op| op.custom_options()).unwrap();
    options.bytes().to_vec()
}

/// Three anchors' encodings and scores (4 classes and the background) into
/// the post-process with `options`.
fn post_process(options: &[u8]) -> ModelSpec {
    let anchors: Vec<f32> = (0..3)
        .flat_map(|i| [0.5, 0.2 * i as f32, 0.3, 0.3])
        .collect();
    let tensors = vec![
        TensorSpec::f32("encodings", &[1, 3, 4]),
        TensorSpec::f32("scores", &[1, 3, 5]),
        TensorSpec::f32_const("anchors", &[3, 4], &anchors),
        TensorSpec::f32("boxes", &[]),
        TensorSpec::f32("classes", &[]),
        TensorSpec::f32("detection_scores", &[]),
        TensorSpec::f32("count", &[]),
    ];
    let op = OpSpec::custom(
        "TFLite_Detection_PostProcess",
        options,
        &[0, 1, 2],
        &[3, 4, 5, 6],
    );
    ModelSpec::new(tensors, vec![op], &[0, 1], &[3, 4, 5, 6])
}

#[test]
fn malformed_detection_post_process_options_are_errors_naming_the_layer() {
    let good = converted_post_process_options();
    let g = import_tflite(&post_process(&good).build(), "ssd.tflite").unwrap();
    let outputs: Vec<_> = g
        .outputs()
        .iter()
        .map(|&v| g.value_type(v).shape.clone())
        .collect();
    // 10 detections of 2 classes each.
    assert_eq!(outputs, [vec![1, 20, 4], vec![1, 20], vec![1, 20], vec![1]]);
    let layer = "layer 'boxes' (CUSTOM:TFLite_Detection_PostProcess #0)";
    // A key renamed: "num_classes" is missing.
    let at = good.windows(11).position(|w| w == b"num_classes").unwrap();
    let mut renamed = good.clone();
    renamed[at + 4] = b'k';
    for (options, needle) in [
        (&[][..], "malformed custom options"),
        (&good[..good.len() - 1], "malformed custom options"),
        (&renamed[..], "the custom options have no 'num_classes'"),
    ] {
        let e = import_tflite(&post_process(options).build(), "ssd.tflite").unwrap_err();
        assert_mentions(&e.to_string(), &[layer, needle]);
    }
    // Every cut of the options, and every byte set to 0xff: an error naming
    // the layer, or (where the cut byte was not read) a model.
    for n in 0..good.len() {
        let mut flipped = good.clone();
        flipped[n] = 0xff;
        for options in [&good[..n], &flipped[..]] {
            if let Err(e) = import_tflite(&post_process(options).build(), "ssd.tflite") {
                assert_mentions(&e.to_string(), &[layer]);
            }
        }
    }
}

#[test]
fn nms_thresholds_must_be_constant_float_scalars() {
    let tensors = vec![
        TensorSpec::f32("boxes", &[6, 4]),
        TensorSpec::f32("scores", &[6]),
        TensorSpec::i32_const("max_output_size", &[], &[4]),
        TensorSpec::f32_const("iou_threshold", &[], &[0.5]),
        TensorSpec::i32_const("score_threshold", &[], &[0]),
        TensorSpec::i32_const("selected", &[4], &[0; 4]),
        TensorSpec::i32_const("count", &[], &[0]),
    ];
    let op = OpSpec::new(120, &[0, 1, 2, 3, 4], &[5, 6]);
    let spec = ModelSpec::new(tensors, vec![op], &[0, 1], &[5, 6]);
    let e = import_tflite(&spec.build(), "nms.tflite").unwrap_err();
    assert_mentions(
        &e.to_string(),
        &[
            "NON_MAX_SUPPRESSION_V4",
            "score_threshold (input 4) must be one float32",
        ],
    );
}
