//! Explicit pads folded into the conv or pool after them by the graph-stage
//! rules (`rules/windows.rules`): the plan report lists exactly the folds that
//! keep the meaning (fill 0 into a conv, −∞ or a fill below
//! a relu's output into a max pool, 0 into an average pool), and the planned,
//! compiled graph gives the reference executor's outputs on the unfolded source
//! within 1e-4 of their magnitude, in row-major and in blocked layouts.

use crate::support::compare::max_abs_err;
use crate::support::onnx::*;
use crate::support::values::sawtooth;
use layoutopt::graph::{Graph, Tensor};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::planner_by_name;
use layoutopt::layout::target::TargetFamily;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use onnx_protobuf::type_proto;

const F32: i32 = 1;

/// x (1x5x9x9) → [relu] → Pad(pads, fill) → `window` node, as an opset-13 model.
fn padded(window: onnx_protobuf::NodeProto, relu: bool, pads: [i64; 8], fill: f32) -> Graph {
    let mut nodes = Vec::new();
    let mut x = "x";
    if relu {
        nodes.push(node("Relu", "relu", &["x"], &["r"]));
        x = "r";
    }
    nodes.push(node("Pad", "pad", &[x, "pads", "fill"], &["p"]));
    nodes.push(window);
    let mut init = vec![
        ("pads", Tensor::from_i64(vec![8], pads.to_vec())),
        ("fill", Tensor::scalar_f32(fill)),
    ];
    let w: Vec<f32> = sawtooth(7 * 5 * 9, 37, 19, 9.0, 1.0);
    init.push(("w", Tensor::from_f32(vec![7, 5, 3, 3], w)));
    // The output's shape is left to shape inference.
    let mut y = value_info("y", F32, &[]);
    if let Some(type_proto::Value::TensorType(t)) = y.type_.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape = None.into();
    }
    let m = model(
        nodes,
        vec![value_info("x", F32, &[1, 5, 9, 9])],
        vec![y],
        init,
        13,
    );
    import_model(&m, "pad.onnx").expect("the model imports")
}

fn conv(strides: &[i64]) -> onnx_protobuf::NodeProto {
    let mut n = node("Conv", "conv", &["p", "w"], &["y"]);
    n.attribute.push(ints_attr("strides", strides));
    n
}

fn pool(op: &str) -> onnx_protobuf::NodeProto {
    let mut n = node(op, "pool", &["p"], &["y"]);
    n.attribute.push(ints_attr("kernel_shape", &[3, 3]));
    n.attribute.push(ints_attr("strides", &[2, 2]));
    n
}

/// Plans `g`, checks which pads were folded, and runs it against the reference.
fn check(g: &Graph, folded: bool, what: &str) {
    let x: Vec<f32> = sawtooth(5 * 81, 53, 29, 7.0, 2.0);
    let x = Tensor::from_f32(vec![1, 5, 9, 9], x);
    let expected = layoutopt::reference::run(g, std::slice::from_ref(&x)).unwrap();
    for family in [TargetFamily::Nchwc(16), TargetFamily::Nhwc] {
        let planner = planner_by_name("global").unwrap();
        let p = plan(g, planner.as_ref(), family, &CostModel::default()).unwrap();
        // Each fold the graph rules made: the rule and the layers it covered.
        let folds: Vec<(String, Vec<String>)> = p
            .report
            .graph_rewrite
            .iter()
            .flat_map(|r| &r.fired)
            .map(|f| {
                let layers = f.spans.iter().map(|s| s.layer.to_string()).collect();
                (f.rule.clone(), layers)
            })
            .collect();
        let want = if folded {
            let (rule, into) = if what.contains("conv") {
                ("pad-into-conv", "conv")
            } else {
                ("pad-into-pool", "pool")
            };
            vec![(rule.to_string(), vec!["pad".to_string(), into.to_string()])]
        } else {
            vec![]
        };
        assert_eq!(folds, want, "{what} {family}");
        let m = CompiledModel::compile(
            &p.graph,
            &RuntimeOptions {
                threads: 2,
                ..Default::default()
            },
        )
        .unwrap();
        let got = m.run(std::slice::from_ref(&x)).unwrap();
        assert_eq!(got[0].shape, expected[0].shape, "{what} {family}");
        let (err, mag) = max_abs_err(&expected[0], &got[0]);
        assert!(
            err <= 1e-4 * mag.max(1.0),
            "{what} {family}: error {err} (magnitude {mag})"
        );
    }
}

/// One case: `window` after a Pad of `pads` filled with `fill` (after a Relu
/// where `relu`), whether the pad folds, and what the case is.
type Case<'a> = (onnx_protobuf::NodeProto, bool, [i64; 8], f32, bool, &'a str);

fn check_cases(cases: Vec<Case>) {
    for (window, relu, pads, fill, folded, what) in cases {
        check(&padded(window, relu, pads, fill), folded, what);
    }
}

#[test]
fn zero_pads_fold_into_convolutions() {
    // Asymmetric, as TensorFlow's "same" padding at stride 2 writes it.
    let same = [0, 0, 0, 1, 0, 0, 1, 2];
    let (two, one) = ([0, 0, 2, 2, 0, 0, 2, 2], [0, 0, 1, 1, 0, 0, 1, 1]);
    let batch = [1, 0, 0, 0, 0, 0, 0, 0];
    check_cases(vec![
        (conv(&[2, 2]), false, same, 0.0, true, "conv"),
        (conv(&[1, 1]), false, two, 0.0, true, "conv"),
        // Another fill, or a pad of the batch, is not the conv's padding.
        (conv(&[1, 1]), false, one, 1.5, false, "conv fill 1.5"),
        (conv(&[1, 1]), false, batch, 0.0, false, "conv batch pad"),
    ]);
}

#[test]
fn pads_fold_into_pools_only_where_no_maximum_or_mean_changes() {
    let pads = [0, 0, 1, 1, 0, 0, 1, 1];
    let (max, mean) = (|| pool("MaxPool"), || pool("AveragePool"));
    check_cases(vec![
        (max(), false, pads, f32::NEG_INFINITY, true, "max pool −∞"),
        // Zero below a relu's output changes no maximum; without the relu it would.
        (max(), true, pads, 0.0, true, "max pool after relu"),
        (max(), false, pads, 0.0, false, "max pool fill 0"),
        // Zeros counted in every mean: the pool counts its pads.
        (mean(), false, pads, 0.0, true, "average pool"),
        (mean(), false, pads, 2.0, false, "average pool fill 2"),
    ]);
}
