//! Graph rewrites before planning. Per-channel Mul/Add/Sub after a convolution
//! folded into its weights and bias by the graph rules (`rules/conv_affine.rules`):
//! exactly the foldable ones fold (per-channel or scalar constants, a conv output
//! with no other reader, Sub only as `conv - c`), and the folded graph, planned
//! and compiled, gives the reference executor's outputs on the unfolded source
//! within 1e-5 of their magnitude. Batch norms after a convolution folded the
//! same way (for `export --for onnxruntime`). Spatial means and maxima as global
//! pools.

use crate::support::compare::{assert_rewrite_keeps_outputs, max_abs_err};
use crate::support::onnx::*;
use crate::support::values::sawtooth;
use layoutopt::graph::{fold_conv_batchnorm, Graph, Op, Tensor};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::extract::{rewrite_graph, RewriteLimits};
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::planner_by_name;
use layoutopt::layout::rules::RuleSource;
use layoutopt::layout::target::TargetFamily;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};

const F32: i32 = 1;

/// x (1x6x7x7) → Conv(6→8, 3x3, pad 1, bias) → `tail` nodes (reading "c"), as an
/// opset-13 model whose output is "y".
fn conv_then(tail: Vec<onnx_protobuf::NodeProto>, init: Vec<(&str, Tensor)>) -> Graph {
    let mut conv = node("Conv", "conv", &["x", "w", "b"], &["c"]);
    conv.attribute.push(ints_attr("pads", &[1, 1, 1, 1]));
    let mut nodes = vec![conv];
    nodes.extend(tail);
    let w: Vec<f32> = sawtooth(8 * 6 * 9, 37, 19, 9.0, 1.0);
    let mut all = vec![
        ("w", Tensor::from_f32(vec![8, 6, 3, 3], w)),
        (
            "b",
            Tensor::from_f32(vec![8], (0..8).map(|i| i as f32 * 0.1).collect()),
        ),
    ];
    all.extend(init);
    let m = model(
        nodes,
        vec![value_info("x", F32, &[1, 6, 7, 7])],
        vec![value_info("y", F32, &[1, 8, 7, 7])],
        all,
        13,
    );
    import_model(&m, "affine.onnx").expect("the model imports")
}

fn channels(shape: Vec<usize>, k: f32) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape, (0..n).map(|i| 0.5 + k * i as f32).collect())
}

fn convs(g: &Graph) -> usize {
    let ids = g.node_ids();
    ids.iter()
        .filter(|&&id| matches!(g.node(id).op, Op::Conv(_)))
        .count()
}

/// `g` rewritten by the bundled graph rules, and how many folds of a scale or
/// shift into a convolution the result keeps.
fn fold_by_rules(g: &Graph) -> (Graph, usize) {
    let rules = RuleSource::Bundled.load().unwrap();
    let (out, report) = rewrite_graph(g, &rules.graph, &RewriteLimits::default()).unwrap();
    let folds = report
        .fired
        .iter()
        .filter(|f| f.rule.contains("-into-conv"))
        .count();
    (out, folds)
}

/// Folds `g`, checks the fold count and that the folded graph (plain, and
/// planned NCHW16c and compiled) computes what `g` computes.
fn check(g: &Graph, folds: usize) {
    let (folded, folded_count) = fold_by_rules(g);
    assert_eq!(folded_count, folds);
    assert_eq!(convs(&folded), 1, "one conv remains");
    let x = Tensor::from_f32(vec![1, 6, 7, 7], sawtooth(294, 53, 23, 11.0, 1.0));
    let expected = layoutopt::reference::run(g, std::slice::from_ref(&x)).unwrap();
    let planner = planner_by_name("global").unwrap();
    let planned = plan(
        g,
        planner.as_ref(),
        TargetFamily::Nchwc(16),
        &CostModel::default(),
    )
    .unwrap();
    let compiled = CompiledModel::compile(
        &planned.graph,
        &RuntimeOptions {
            threads: 1,
            ..Default::default()
        },
    )
    .unwrap()
    .run(std::slice::from_ref(&x))
    .unwrap();
    for got in [layoutopt::reference::run(&folded, &[x]).unwrap(), compiled] {
        let (err, mag) = max_abs_err(&expected[0], &got[0]);
        assert!(err <= 1e-5 * mag.max(1.0), "error {err} at magnitude {mag}");
    }
}

#[test]
fn per_channel_mul_add_sub_fold_into_the_conv() {
    let tail = vec![
        node("Mul", "scale", &["s", "c"], &["m"]),
        node("Add", "shift", &["m", "t"], &["a"]),
        node("Sub", "centre", &["a", "u"], &["y0"]),
        node("Relu", "relu", &["y0"], &["y"]),
    ];
    let init = vec![
        ("s", channels(vec![8, 1, 1], 0.25)),
        ("t", channels(vec![1, 8, 1, 1], -0.5)),
        ("u", Tensor::scalar_f32(0.75)),
    ];
    check(&conv_then(tail, init), 3);
}

/// tf2onnx's channels-last form: the conv's output transposed to NHWC, then
/// per-channel constants along the last axis; both fold through the transpose.
#[test]
fn per_channel_ops_after_a_transpose_fold_into_the_conv() {
    let mut to_nhwc = node("Transpose", "to_nhwc", &["c"], &["h"]);
    to_nhwc.attribute.push(ints_attr("perm", &[0, 2, 3, 1]));
    let mut to_nchw = node("Transpose", "to_nchw", &["a"], &["y"]);
    to_nchw.attribute.push(ints_attr("perm", &[0, 3, 1, 2]));
    let tail = vec![
        to_nhwc,
        node("Mul", "scale", &["h", "s"], &["m"]),
        node("Add", "shift", &["t", "m"], &["a"]),
        to_nchw,
    ];
    let init = vec![
        ("s", channels(vec![8], 0.25)),
        ("t", channels(vec![1, 1, 1, 8], -0.5)),
    ];
    check(&conv_then(tail, init), 2);
    // A constant along W of the transposed output is not per channel.
    let mut to_nhwc = node("Transpose", "to_nhwc", &["c"], &["h"]);
    to_nhwc.attribute.push(ints_attr("perm", &[0, 2, 3, 1]));
    let mut to_nchw = node("Transpose", "to_nchw", &["m"], &["y"]);
    to_nchw.attribute.push(ints_attr("perm", &[0, 3, 1, 2]));
    let tail = vec![to_nhwc, node("Mul", "scale", &["h", "s"], &["m"]), to_nchw];
    let g = conv_then(tail, vec![("s", channels(vec![7, 1], 0.1))]);
    assert_eq!(fold_by_rules(&g).1, 0);
}

/// A batch norm folds into the conv before it (the folded graph computes the
/// source's outputs within 1e-5 of their magnitude); one whose conv output has
/// another reader stays.
#[test]
fn batch_norms_after_a_conv_fold_into_it() {
    let bn = |y: &str| {
        let mut n = node("BatchNormalization", "bn", &["c", "s", "t", "m", "v"], &[y]);
        n.attribute.push(float_attr("epsilon", 1e-3));
        n
    };
    let params = || {
        vec![
            ("s", channels(vec![8], 0.25)),
            ("t", channels(vec![8], -0.5)),
            ("m", channels(vec![8], 0.1)),
            ("v", channels(vec![8], 0.3)),
        ]
    };
    let g = conv_then(
        vec![bn("b0"), node("Relu", "relu", &["b0"], &["y"])],
        params(),
    );
    let mut folded = g.clone();
    assert_eq!(fold_conv_batchnorm(&mut folded).unwrap(), 1);
    let ops: Vec<&str> = (folded.node_ids().into_iter())
        .map(|id| folded.node(id).op.kind_name())
        .collect();
    assert!(!ops.contains(&"BatchNormalization"), "{ops:?}");
    let x = Tensor::from_f32(vec![1, 6, 7, 7], sawtooth(294, 53, 23, 11.0, 1.0));
    assert_rewrite_keeps_outputs(&g, &folded, &[x], 1e-5);
    // The conv output is also read by the Add: the batch norm stays.
    let tail = vec![bn("b0"), node("Add", "join", &["b0", "c"], &["y"])];
    let mut g = conv_then(tail, params());
    assert_eq!(fold_conv_batchnorm(&mut g).unwrap(), 0);
}

#[test]
fn other_readers_spatial_constants_and_reversed_sub_keep_their_nodes() {
    // The conv output has a second reader: the Mul cannot fold.
    let tail = vec![
        node("Mul", "scale", &["c", "s"], &["m"]),
        node("Add", "join", &["m", "c"], &["y"]),
    ];
    let g = conv_then(tail, vec![("s", channels(vec![8, 1, 1], 0.25))]);
    let (folded, folds) = fold_by_rules(&g);
    assert_eq!((folds, convs(&folded)), (0, 1));
    // A constant varying along W is not per channel; `c - conv` is not a shift.
    for (tail, init) in [
        (
            vec![node("Mul", "scale", &["c", "s"], &["y"])],
            vec![("s", channels(vec![1, 1, 7], 0.1))],
        ),
        (
            vec![node("Sub", "flip", &["s", "c"], &["y"])],
            vec![("s", channels(vec![8, 1, 1], 0.1))],
        ),
    ] {
        let g = conv_then(tail, init);
        let (folded, folds) = fold_by_rules(&g);
        assert_eq!((folds, convs(&folded)), (0, 1));
    }
}

/// Means and maxima over all axes but the batch and one other become global
/// pools (after a transpose when that axis is not 1, with a reshape when the
/// shapes differ); other reductions stay. The rewritten graph computes what the
/// source computes.
#[test]
fn spatial_means_and_maxima_become_global_pools() {
    use layoutopt::graph::reductions_as_global_pools;
    let reduce = |op: &str, name: &str, axes: &[i64], keep: i64, out: &str| {
        let mut n = node(op, name, &["x"], &[out]);
        n.attribute.push(ints_attr("axes", axes));
        n.attribute.push(int_attr("keepdims", keep));
        n
    };
    let nodes = vec![
        reduce("ReduceMean", "mean_kept", &[2, 3], 1, "a"),
        reduce("ReduceMax", "max_dropped", &[3, 2], 0, "b"),
        reduce("ReduceMean", "channels_last", &[1, 2], 1, "c"),
        reduce("ReduceMax", "rows_dropped", &[3, 1], 0, "e"),
        reduce("ReduceMean", "batch_reduced", &[0, 2, 3], 1, "f"),
        // ReduceSum takes its axes as an input from opset 13.
        {
            let mut n = node("ReduceSum", "sum", &["x", "sum_axes"], &["d"]);
            n.attribute.push(int_attr("keepdims", 1));
            n
        },
    ];
    let outputs = [
        ("a", vec![1, 6, 1, 1]),
        ("b", vec![1, 6]),
        ("c", vec![1, 1, 1, 5]),
        ("d", vec![1, 6, 1, 1]),
        ("e", vec![1, 4]),
        ("f", vec![1, 6, 1, 1]),
    ];
    let m = model(
        nodes,
        vec![value_info("x", F32, &[1, 6, 4, 5])],
        outputs
            .iter()
            .map(|(n, s)| value_info(n, F32, &s.iter().map(|&d| d as i64).collect::<Vec<_>>()))
            .collect(),
        vec![("sum_axes", Tensor::from_i64(vec![2], vec![2, 3]))],
        13,
    );
    let g = import_model(&m, "reduce.onnx").expect("the model imports");
    let mut pooled = g.clone();
    assert_eq!(reductions_as_global_pools(&mut pooled).unwrap(), 4);
    let count = |g: &Graph, pred: fn(&Op) -> bool| {
        g.node_ids()
            .into_iter()
            .filter(|&id| pred(&g.node(id).op))
            .count()
    };
    assert_eq!(count(&pooled, |op| matches!(op, Op::GlobalPool(_))), 4);
    assert_eq!(count(&pooled, |op| matches!(op, Op::Transpose(_))), 2);
    assert_eq!(count(&pooled, |op| matches!(op, Op::Reduce(_))), 2);
    let x = Tensor::from_f32(vec![1, 6, 4, 5], sawtooth(120, 29, 31, 7.0, 2.0));
    assert_rewrite_keeps_outputs(&g, &pooled, &[x], 1e-6);
}

/// A graph of one transposed convolution of `x` with constant weights and
/// bias: `(stride, kernel, pad begin, pad end, output padding)` per axis.
fn conv_transpose_graph(x: &[usize], cout_g: usize, group: usize, axes: &[[usize; 5]]) -> Graph {
    use layoutopt::graph::{ConvTranspose, DType, ValueRef, ValueType, Window};
    let mut g = Graph::new("conv_transpose");
    let input = g.add_input("x", ValueType::new(DType::F32, x.to_vec()), vec![]);
    let kernel: Vec<usize> = axes.iter().map(|a| a[1]).collect();
    let w_shape: Vec<usize> = [x[1], cout_g].iter().chain(&kernel).copied().collect();
    let n = w_shape.iter().product();
    let w = g.add_constant(
        "w",
        Tensor::from_f32(w_shape, sawtooth(n, 29, 23, 7.0, 1.5)),
        vec![],
    );
    let cout = cout_g * group;
    let b = g.add_constant(
        "b",
        Tensor::from_f32(vec![cout], sawtooth(cout, 5, 7, 3.0, 1.0)),
        vec![],
    );
    let op = Op::ConvTranspose(ConvTranspose {
        window: Window {
            kernel,
            strides: axes.iter().map(|a| a[0]).collect(),
            dilations: vec![1; axes.len()],
            pads: axes
                .iter()
                .map(|a| a[2])
                .chain(axes.iter().map(|a| a[3]))
                .collect(),
        },
        group,
        output_padding: axes.iter().map(|a| a[4]).collect(),
    });
    let y = g
        .add_node(op, "up", &[input, w, b], &["y".into()], vec![])
        .unwrap();
    g.set_outputs(vec![ValueRef::new(y, 0)]);
    g
}

/// Transposed convolutions become convolutions over their stride phases: in
/// 1, 2 and 3 spatial axes, strides 1-3, kernels smaller and larger than the
/// stride, pads beyond a stride, output padding and groups, the rewritten
/// graph gives the reference executor's outputs on the source within 1e-5 of
/// their magnitude, and compiled (NCHW16c and NHWC plans; 1 and 2 spatial
/// axes) runs no transposed convolution and no fallback step, and matches too.
#[test]
fn transposed_convolutions_run_as_convolutions_over_stride_phases() {
    use layoutopt::graph::conv_transposes_as_convs;
    /// Input shape, output channels per group, groups, and per spatial axis
    /// (stride, kernel, pad begin, pad end, output padding).
    type Case<'a> = (&'a [usize], usize, usize, &'a [[usize; 5]]);
    let cases: [Case; 8] = [
        (&[1, 8, 9, 7], 4, 1, &[[2, 2, 0, 0, 0], [2, 2, 0, 0, 0]]),
        (&[1, 6, 5, 6], 3, 2, &[[2, 3, 1, 1, 1], [2, 3, 1, 0, 0]]),
        (&[2, 4, 6, 5], 5, 1, &[[3, 5, 4, 2, 2], [1, 3, 1, 1, 0]]),
        (&[1, 3, 4, 4], 2, 1, &[[2, 1, 0, 0, 1], [3, 2, 0, 1, 2]]),
        (&[1, 16, 12, 12], 16, 1, &[[2, 4, 1, 1, 0], [2, 4, 1, 1, 0]]),
        (&[1, 4, 11], 3, 2, &[[4, 7, 5, 2, 3]]),
        (
            &[1, 2, 3, 4, 3],
            2,
            1,
            &[[2, 3, 1, 1, 1], [1, 2, 0, 0, 0], [2, 2, 0, 1, 0]],
        ),
        (&[1, 5, 6, 6], 1, 5, &[[2, 4, 3, 3, 1], [2, 4, 0, 3, 1]]),
    ];
    for (i, (x_shape, cout_g, group, axes)) in cases.into_iter().enumerate() {
        let g = conv_transpose_graph(x_shape, cout_g, group, axes);
        let mut rewritten = g.clone();
        assert_eq!(
            conv_transposes_as_convs(&mut rewritten).unwrap(),
            1,
            "case {i}"
        );
        let n = x_shape.iter().product();
        let x = Tensor::from_f32(x_shape.to_vec(), sawtooth(n, 31, 17, 5.0, 1.7));
        assert_rewrite_keeps_outputs(&g, &rewritten, std::slice::from_ref(&x), 1e-5);
        // 3-D convolutions have no native kernel yet.
        if x_shape.len() == 5 {
            continue;
        }
        let expected = layoutopt::reference::run(&g, std::slice::from_ref(&x)).unwrap();
        for family in [TargetFamily::Nchwc(16), TargetFamily::Nhwc] {
            let planner = planner_by_name("global").unwrap();
            let planned = plan(&g, planner.as_ref(), family, &CostModel::default()).unwrap();
            let compiled =
                CompiledModel::compile(&planned.graph, &RuntimeOptions::default()).unwrap();
            let steps = compiled.describe();
            assert!(
                steps.iter().all(|s| !s.contains("ConvTranspose")),
                "case {i}: {steps:?}"
            );
            assert_eq!(compiled.fallback_steps(), vec![], "case {i} {family:?}");
            let got = compiled.run(std::slice::from_ref(&x)).unwrap();
            let (err, mag) = max_abs_err(&expected[0], &got[0]);
            assert!(
                err <= 1e-5 * mag.max(1.0),
                "case {i} {family:?}: error {err} at magnitude {mag}"
            );
        }
    }
}

/// A 1-D network (a strided conv, a dilated depthwise conv, a max pool, a
/// grouped conv and an average pool counting its pads) has its five windows
/// lifted to 2-D, and planned NCHW16c or NHWC it compiles with no step on the
/// reference executor and gives the reference executor's outputs on the
/// source within 1e-5 of their magnitude.
#[test]
fn one_dimensional_windows_run_on_the_two_dimensional_kernels() {
    use layoutopt::graph::lift_1d_windows;
    let conv = |name: &str, ins: &[&str], out: &str, attrs: &[(&str, &[i64])]| {
        let mut n = node("Conv", name, ins, &[out]);
        n.attribute
            .extend(attrs.iter().map(|(a, v)| ints_attr(a, v)));
        n
    };
    let mut dw = conv(
        "dw",
        &["r", "w2", "b2"],
        "d",
        &[
            ("kernel_shape", &[3]),
            ("dilations", &[2]),
            ("pads", &[2, 2]),
        ],
    );
    dw.attribute.push(int_attr("group", 16));
    let mut max = node("MaxPool", "max", &["d"], &["m"]);
    max.attribute.push(ints_attr("kernel_shape", &[3]));
    max.attribute.push(ints_attr("strides", &[2]));
    max.attribute.push(ints_attr("pads", &[1, 1]));
    let mut grouped = conv("grouped", &["m", "w3"], "g", &[("kernel_shape", &[3])]);
    grouped.attribute.push(int_attr("group", 4));
    let mut avg = node("AveragePool", "avg", &["g"], &["y"]);
    avg.attribute.push(ints_attr("kernel_shape", &[2]));
    avg.attribute.push(ints_attr("strides", &[2]));
    avg.attribute.push(ints_attr("pads", &[1, 1]));
    avg.attribute.push(int_attr("count_include_pad", 1));
    let nodes = vec![
        conv(
            "strided",
            &["x", "w1", "b1"],
            "c",
            &[("kernel_shape", &[5]), ("strides", &[2]), ("pads", &[2, 2])],
        ),
        node("Relu", "relu", &["c"], &["r"]),
        dw,
        max,
        grouped,
        avg,
    ];
    let weights = |shape: Vec<usize>, k: usize| {
        let n = shape.iter().product();
        Tensor::from_f32(shape, sawtooth(n, 29 + k, 13, 5.0, 1.0))
    };
    let m = model(
        nodes,
        vec![value_info("x", F32, &[1, 8, 50])],
        vec![value_info("y", F32, &[1, 16, 6])],
        vec![
            ("w1", weights(vec![16, 8, 5], 0)),
            ("b1", weights(vec![16], 1)),
            ("w2", weights(vec![16, 1, 3], 2)),
            ("b2", weights(vec![16], 3)),
            ("w3", weights(vec![16, 4, 3], 4)),
        ],
        13,
    );
    let g = import_model(&m, "windows_1d.onnx").expect("the model imports");
    let x = Tensor::from_f32(vec![1, 8, 50], sawtooth(400, 31, 17, 5.0, 1.7));
    let mut lifted = g.clone();
    assert_eq!(lift_1d_windows(&mut lifted).unwrap(), 5);
    assert_rewrite_keeps_outputs(&g, &lifted, std::slice::from_ref(&x), 1e-5);
    let expected = layoutopt::reference::run(&g, std::slice::from_ref(&x)).unwrap();
    for family in [TargetFamily::Nchwc(16), TargetFamily::Nhwc] {
        let planner = planner_by_name("global").unwrap();
        let planned = plan(&g, planner.as_ref(), family, &CostModel::default()).unwrap();
        let compiled = CompiledModel::compile(&planned.graph, &RuntimeOptions::default()).unwrap();
        assert_eq!(compiled.fallback_steps(), vec![], "{family:?}");
        let got = compiled.run(std::slice::from_ref(&x)).unwrap();
        let (err, mag) = max_abs_err(&expected[0], &got[0]);
        assert!(
            err <= 1e-5 * mag.max(1.0),
            "{family:?}: error {err} at magnitude {mag}"
        );
    }
}
