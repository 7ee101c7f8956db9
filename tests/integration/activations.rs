//! Activations spelled as several elementwise ops, recognized by the graph
//! rules (`rules/activations.rules`) as the one op they compute: each
//! exporter's spelling of hard sigmoid, hard swish and gelu (exact and tanh)
//! rewrites to one unary op, the rewritten graph gives the reference
//! executor's outputs on the source within 1e-5 of their magnitude, and a
//! spelling with a wrong constant stays as it is. A hard swish after a
//! convolution runs in the convolution's step.

use crate::support::compare::assert_rewrite_keeps_outputs;
use crate::support::onnx::*;
use crate::support::plan::{graph_rules_fired, steps_per_target};
use crate::support::values::sawtooth;
use layoutopt::graph::{Graph, Op, Tensor, UnaryOp};

const SHAPE: [usize; 4] = [1, 8, 5, 5];
const DIMS: [i64; 4] = [1, 8, 5, 5];

/// x (1x8x5x5) → [Conv 8→8, 1x1, as "c"] → `nodes` (reading "x" or "c") → y,
/// with the scalar constants `constants`, at opset 13.
fn spelled(conv: bool, nodes: Vec<onnx_protobuf::NodeProto>, constants: &[(&str, f32)]) -> Graph {
    let mut all = vec![];
    let mut init: Vec<(&str, Tensor)> = constants
        .iter()
        .map(|&(n, v)| (n, Tensor::scalar_f32(v)))
        .collect();
    if conv {
        all.push(node("Conv", "conv", &["x", "w"], &["c"]));
        let w = sawtooth(64, 37, 19, 40.0, 0.2);
        init.push(("w", Tensor::from_f32(vec![8, 8, 1, 1], w)));
    }
    all.extend(nodes);
    elementwise_graph(all, &DIMS, init, 13, "activation.onnx")
}

/// Values from -6 to 6, past both ends of the hard sigmoid's ramp.
fn input() -> Tensor {
    Tensor::from_f32(SHAPE.to_vec(), sawtooth(200, 53, 97, 8.0, 6.0))
}

/// `g` rewritten by the bundled graph rules: the rules kept, and the unary
/// ops of the result.
fn recognize(g: &Graph) -> (Graph, Vec<String>, Vec<UnaryOp>) {
    let (out, fired) = graph_rules_fired(g, |r| r != "constant-second");
    let unary = (out.node_ids().into_iter())
        .filter_map(|id| match out.node(id).op {
            Op::Unary(u) => Some(u),
            _ => None,
        })
        .collect();
    (out, fired, unary)
}

/// Checks that `g` rewrites with exactly `rules` to the one op `want`, and
/// computes what it computed.
fn check(g: &Graph, rules: &[&str], want: UnaryOp) {
    let (out, fired, unary) = recognize(g);
    assert_eq!(fired, rules);
    assert_eq!(unary, [want], "{rules:?}");
    assert_rewrite_keeps_outputs(g, &out, &[input()], 1e-5);
}

#[test]
fn hard_sigmoid_and_hard_swish_spellings_are_recognized() {
    let three_six = [("three", 3.0), ("zero", 0.0), ("six", 6.0)];
    let gate = |scale: onnx_protobuf::NodeProto, out: &str| {
        vec![
            node("Add", "add", &["three", "x"], &["a"]),
            node("Clip", "relu6", &["a", "zero", "six"], &["r"]),
            scale,
            node("Mul", "mul", &["x", out], &["y"]),
        ]
    };
    // Keras' hard swish through tf2onnx: x * (relu6(x + 3) * 1/6).
    let mut k = three_six.to_vec();
    k.push(("sixth", 1.0 / 6.0));
    let mul = node("Mul", "scale", &["r", "sixth"], &["h"]);
    let g = spelled(false, gate(mul, "h"), &k);
    check(&g, &["hard-sigmoid", "hard-swish"], UnaryOp::HardSwish);
    // relu6(x + 3) / 6 alone is a hard sigmoid.
    let mut nodes = gate(node("Div", "scale", &["r", "six"], &["y"]), "h");
    nodes.pop();
    let hard_sigmoid = UnaryOp::HardSigmoid {
        alpha: 1.0 / 6.0,
        beta: 0.5,
    };
    check(
        &spelled(false, nodes, &three_six),
        &["hard-sigmoid"],
        hard_sigmoid,
    );
    // PyTorch's Hardswish before opset 14: x times HardSigmoid(x, 1/6), gate first.
    let mut hs = node("HardSigmoid", "gate", &["x"], &["h"]);
    hs.attribute.push(float_attr("alpha", 1.0 / 6.0));
    let nodes = vec![hs, node("Mul", "mul", &["h", "x"], &["y"])];
    check(
        &spelled(false, nodes, &[]),
        &["hard-swish-gate-first"],
        UnaryOp::HardSwish,
    );
    // A scale of 0.2 takes relu6's top to 1.2: not a hard sigmoid, nothing fires.
    let mut k = three_six.to_vec();
    k.push(("fifth", 0.2));
    let g = spelled(
        false,
        gate(node("Mul", "scale", &["r", "fifth"], &["h"]), "h"),
        &k,
    );
    assert_eq!(recognize(&g).1, Vec::<String>::new());
}

#[test]
fn gelu_spellings_of_each_exporter_are_recognized() {
    let exact = UnaryOp::Gelu { tanh_approx: false };
    let sqrt2 = std::f32::consts::SQRT_2;
    // PyTorch: (x * (erf(x / sqrt2) + 1)) * 0.5.
    let pytorch = vec![
        node("Div", "div", &["x", "sqrt2"], &["d"]),
        node("Erf", "erf", &["d"], &["e"]),
        node("Add", "add", &["e", "one"], &["a"]),
        node("Mul", "mul", &["x", "a"], &["m"]),
        node("Mul", "half", &["m", "half"], &["y"]),
    ];
    let k = [("sqrt2", sqrt2), ("one", 1.0), ("half", 0.5)];
    check(&spelled(false, pytorch, &k), &["gelu-erf"], exact);
    // Keras 2: (0.5 * x) * (1 + erf(x / sqrt2)).
    let keras2 = vec![
        node("Mul", "half", &["half", "x"], &["m"]),
        node("Div", "div", &["x", "sqrt2"], &["d"]),
        node("Erf", "erf", &["d"], &["e"]),
        node("Add", "add", &["one", "e"], &["a"]),
        node("Mul", "mul", &["m", "a"], &["y"]),
    ];
    check(&spelled(false, keras2, &k), &["gelu-erf-half-first"], exact);
    // Keras 3 through tf2onnx: (0.5 * x) * (1 - erf(-x * 1/sqrt2)).
    let erfc = |half: f32| {
        let nodes = vec![
            node("Mul", "half", &["half", "x"], &["m"]),
            node("Neg", "neg", &["x"], &["n"]),
            node("Mul", "scale", &["n", "isqrt2"], &["d"]),
            node("Erf", "erf", &["d"], &["e"]),
            node("Sub", "erfc", &["one", "e"], &["s"]),
            node("Mul", "mul", &["m", "s"], &["y"]),
        ];
        let k = [("isqrt2", 1.0 / sqrt2), ("one", 1.0), ("half", half)];
        spelled(false, nodes, &k)
    };
    check(&erfc(0.5), &["gelu-erfc"], exact);
    assert_eq!(recognize(&erfc(0.6)).1, Vec::<String>::new());
    // keras_hub's BERT and GPT-2: (0.5 * x) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
    let tanh = vec![
        node("Mul", "half", &["half", "x"], &["m"]),
        node("Pow", "cube", &["x", "three"], &["p"]),
        node("Mul", "kappa", &["c", "p"], &["q"]),
        node("Add", "inner", &["x", "q"], &["i"]),
        node("Mul", "beta", &["k", "i"], &["b"]),
        node("Tanh", "tanh", &["b"], &["t"]),
        node("Add", "plus1", &["one", "t"], &["a"]),
        node("Mul", "mul", &["m", "a"], &["y"]),
    ];
    let k = [
        ("half", 0.5),
        ("three", 3.0),
        ("c", 0.044715),
        ("k", (2.0 / std::f32::consts::PI).sqrt()),
        ("one", 1.0),
    ];
    let approx = UnaryOp::Gelu { tanh_approx: true };
    check(&spelled(false, tanh, &k), &["gelu-tanh"], approx);
}

/// The hard swish after a convolution becomes the convolution's epilogue:
/// one step, which gives the reference outputs of the source.
#[test]
fn a_recognized_hard_swish_joins_the_convolution() {
    let nodes = vec![
        node("Add", "add", &["c", "three"], &["a"]),
        node("Clip", "relu6", &["a", "zero", "six"], &["r"]),
        node("Mul", "scale", &["r", "sixth"], &["h"]),
        node("Mul", "mul", &["c", "h"], &["y"]),
    ];
    let k = [
        ("three", 3.0),
        ("zero", 0.0),
        ("six", 6.0),
        ("sixth", 1.0 / 6.0),
    ];
    let g = spelled(true, nodes, &k);
    for (family, steps) in steps_per_target(&g, &input(), 1e-5) {
        let conv: Vec<&String> = steps.iter().filter(|s| s.contains("Conv")).collect();
        assert!(
            conv.len() == 1 && conv[0].contains("HardSwish"),
            "{family}: {steps:?}"
        );
        assert!(!steps.iter().any(|s| s.contains("Clip")), "{steps:?}");
    }
}
