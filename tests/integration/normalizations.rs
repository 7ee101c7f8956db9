//! Layer and RMS normalizations spelled as reductions and elementwise ops,
//! recognized by the graph rules (`rules/normalizations.rules`) as the one
//! op they compute: each exporter's spelling rewrites to one
//! LayerNormalization or RMSNormalization, the rewritten graph gives the
//! reference executor's outputs on the source within 1e-5 of their
//! magnitude, and a spelling over the wrong axes or with a scale that varies
//! per row stays as it is. The recognized op runs as one row kernel.

use crate::support::compare::assert_rewrite_keeps_outputs;
use crate::support::onnx::*;
use crate::support::plan::{graph_rules_fired, steps_per_target};
use crate::support::values::sawtooth;
use layoutopt::graph::{Graph, Op, Tensor};
use layoutopt::ops::LayerNorm;

const SHAPE: [usize; 3] = [2, 6, 16];
const DIMS: [i64; 3] = [2, 6, 16];

/// x (2x6x16) → `nodes` → y at opset 13, with the constants "eps" (1e-3),
/// "two", "gamma" and "beta" (of shape `params`, 16 values by default).
fn spelled(nodes: Vec<onnx_protobuf::NodeProto>, params: &[usize]) -> Graph {
    let n: usize = params.iter().product();
    let init = vec![
        ("eps", Tensor::scalar_f32(1e-3)),
        ("two", Tensor::scalar_f32(2.0)),
        (
            "gamma",
            Tensor::from_f32(params.to_vec(), sawtooth(n, 7, 5, 2.0, 0.5)),
        ),
        (
            "beta",
            Tensor::from_f32(params.to_vec(), sawtooth(n, 11, 3, 1.0, 0.5)),
        ),
    ];
    elementwise_graph(nodes, &DIMS, init, 13, "normalization.onnx")
}

/// A ReduceMean over `axes`, keeping them.
fn mean(name: &str, input: &str, out: &str, axes: &[i64]) -> onnx_protobuf::NodeProto {
    let mut n = node("ReduceMean", name, &[input], &[out]);
    n.attribute.push(ints_attr("axes", axes));
    n.attribute.push(int_attr("keepdims", 1));
    n
}

/// Values around 3, so that the mean matters.
fn input() -> Tensor {
    let n = SHAPE.iter().product();
    let v = sawtooth(n, 53, 97, 4.0, 2.0)
        .iter()
        .map(|v| v + 3.0)
        .collect();
    Tensor::from_f32(SHAPE.to_vec(), v)
}

/// `g` rewritten by the bundled graph rules: the normalization rules kept
/// (the others tidy up: the constant put second, the reshape of a scale
/// that has its shape already dropped), and the normalizations of the result.
fn recognize(g: &Graph) -> (Graph, Vec<String>, Vec<LayerNorm>) {
    let (out, fired) = graph_rules_fired(g, |r| r.contains("-norm"));
    let norms = (out.node_ids().into_iter())
        .filter_map(|id| match &out.node(id).op {
            Op::LayerNorm(l) => Some(l.clone()),
            _ => None,
        })
        .collect();
    (out, fired, norms)
}

/// Checks that `g` rewrites with exactly `rules` (in any order) to one
/// normalization over the last axis (`centered` or not), and computes what
/// it computed.
fn check(g: &Graph, rules: &[&str], centered: bool) {
    let rule = rules.join(", ");
    let (out, mut fired, norms) = recognize(g);
    fired.sort();
    let mut want_fired = rules.to_vec();
    want_fired.sort();
    assert_eq!(fired, want_fired);
    let want = LayerNorm {
        axis: 2,
        epsilon: 1e-3,
        centered,
    };
    assert_eq!(norms, [want], "{rule}");
    assert_rewrite_keeps_outputs(g, &out, &[input()], 1e-5);
}

/// mean, x − mean and the variance as every layer-norm spelling begins.
fn moments(axes: &[i64]) -> Vec<onnx_protobuf::NodeProto> {
    vec![
        mean("mean", "x", "m", axes),
        node("Sub", "deviation", &["x", "m"], &["d"]),
        node("Mul", "square", &["d", "d"], &["d2"]),
        mean("variance", "d2", "v", axes),
        node("Add", "add_eps", &["v", "eps"], &["ve"]),
        node("Sqrt", "std", &["ve"], &["s"]),
    ]
}

/// Keras 3: x·k + (−mean·k + beta) with k = gamma / std (the shift left out
/// without `beta`).
fn keras(axes: &[i64], beta: bool) -> Vec<onnx_protobuf::NodeProto> {
    let mut nodes = moments(axes);
    nodes.extend([
        node("Reciprocal", "rsqrt", &["s"], &["r"]),
        node("Mul", "scaled", &["r", "gamma"], &["k"]),
        node("Neg", "neg", &["m"], &["nm"]),
        node("Mul", "shift", &["nm", "k"], &["sh"]),
        node("Mul", "mul", &["x", "k"], &["xk"]),
    ]);
    match beta {
        true => nodes.extend([
            node("Add", "add_beta", &["sh", "beta"], &["b"]),
            node("Add", "out", &["xk", "b"], &["y"]),
        ]),
        false => nodes.push(node("Add", "out", &["xk", "sh"], &["y"])),
    }
    nodes
}

#[test]
fn layer_norm_spellings_of_each_exporter_are_recognized() {
    let params = [16];
    check(
        &spelled(keras(&[-1], true), &params),
        &["layer-norm-keras"],
        true,
    );
    check(
        &spelled(keras(&[2], false), &params),
        &["layer-norm-keras-without-shift"],
        true,
    );
    // tf.keras 2: x·k + (beta − mean·k), the scale a constant of rank 3.
    let mut keras2 = moments(&[-1]);
    keras2.extend([
        node("Reciprocal", "rsqrt", &["s"], &["r"]),
        node("Mul", "scaled", &["gamma", "r"], &["k"]),
        node("Mul", "shift", &["m", "k"], &["mk"]),
        node("Sub", "offset", &["beta", "mk"], &["b"]),
        node("Mul", "mul", &["x", "k"], &["xk"]),
        node("Add", "out", &["xk", "b"], &["y"]),
    ]);
    check(&spelled(keras2, &[1, 1, 16]), &["layer-norm-keras2"], true);
    // tf2onnx: Keras 3's spelling with each mean a GlobalAveragePool.
    let mut tf2onnx = keras(&[-1], true);
    for n in tf2onnx.iter_mut().filter(|n| n.op_type == "ReduceMean") {
        n.op_type = "GlobalAveragePool".into();
        n.attribute.clear();
    }
    check(&spelled(tf2onnx, &params), &["layer-norm-keras"], true);
    // PyTorch before opset 17: (x − mean) / std · gamma + beta, the square a
    // Pow; the scale and the shift join the normalization.
    let mut torch = moments(&[-1]);
    torch[2] = node("Pow", "square", &["d", "two"], &["d2"]);
    torch.push(node("Div", "normalized", &["d", "s"], &["n"]));
    let mut affine = torch.clone();
    affine.extend([
        node("Mul", "scaled", &["n", "gamma"], &["ng"]),
        node("Add", "out", &["ng", "beta"], &["y"]),
    ]);
    let joined = [
        "layer-norm-divided",
        "scale-into-normalization",
        "shift-into-normalization",
    ];
    check(&spelled(affine, &params), &joined, true);
    // Without `elementwise_affine`: the normalization alone.
    torch.last_mut().unwrap().output[0] = "y".into();
    check(&spelled(torch, &params), &["layer-norm-divided"], true);
}

#[test]
fn rms_norm_spellings_are_recognized() {
    let square = || {
        vec![
            node("Mul", "square", &["x", "x"], &["x2"]),
            mean("mean_square", "x2", "ms", &[-1]),
            node("Add", "add_eps", &["ms", "eps"], &["mse"]),
            node("Sqrt", "rms", &["mse"], &["r"]),
        ]
    };
    // keras_hub's Llama: x · 1/rms, the scale folded away.
    let mut llama = square();
    llama.extend([
        node("Reciprocal", "inv", &["r"], &["i"]),
        node("Mul", "out", &["x", "i"], &["y"]),
    ]);
    check(&spelled(llama.clone(), &[16]), &["rms-norm"], false);
    // The same through tf2onnx: the scale inside, x · (1/rms · gamma).
    let last = llama.len() - 1;
    llama[last] = node("Mul", "scaled", &["i", "gamma"], &["k"]);
    llama.push(node("Mul", "out", &["x", "k"], &["y"]));
    check(&spelled(llama, &[16]), &["rms-norm-keras"], false);
    // PyTorch: x / rms · gamma.
    let mut torch = square();
    torch.extend([
        node("Div", "normalized", &["x", "r"], &["n"]),
        node("Mul", "out", &["n", "gamma"], &["y"]),
    ]);
    check(
        &spelled(torch, &[16]),
        &["rms-norm-divided", "scale-into-normalization"],
        false,
    );
}

#[test]
fn spellings_that_are_not_normalizations_stay() {
    // Moments over the middle axis: not a row of the trailing axes.
    let g = spelled(keras(&[1], true), &[16]);
    assert_eq!(recognize(&g).1, Vec::<String>::new());
    // A scale with one value per row (6x1) is not a per-element scale.
    let g = spelled(keras(&[-1], true), &[6, 1]);
    assert_eq!(recognize(&g).1, Vec::<String>::new());
    // After a normalization, such a scale stays a Mul of its own.
    let mut torch = moments(&[-1]);
    torch.extend([
        node("Div", "normalized", &["d", "s"], &["n"]),
        node("Mul", "out", &["n", "gamma"], &["y"]),
    ]);
    let g = spelled(torch, &[6, 1]);
    let (out, fired, _) = recognize(&g);
    assert_eq!(fired, ["layer-norm-divided"]);
    assert_rewrite_keeps_outputs(&g, &out, &[input()], 1e-5);
}

/// The recognized normalization runs as one row kernel, which gives the
/// reference outputs of the source, in every target's plan.
#[test]
fn a_recognized_layer_norm_runs_as_one_step() {
    let g = spelled(keras(&[-1], true), &[16]);
    for (family, steps) in steps_per_target(&g, &input(), 1e-5) {
        assert!(
            steps.len() == 1 && steps[0].contains("LayerNormalization"),
            "{family}: {steps:?}"
        );
    }
}
