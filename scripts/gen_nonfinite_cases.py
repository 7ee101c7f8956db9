#!/usr/bin/env python3
"""Single-op models fed NaN, +-inf and +-0, with the outputs the oracles give, for
tests/integration/nonfinite.rs (ARCHITECTURE.md, "NaN and infinities", states the rule per op).

Run from the repository root (Python packages: scripts/requirements.txt):

    python3 scripts/gen_nonfinite_cases.py

It rewrites tests/nonfinite/ from scratch: one directory per case, `model.onnx` +
`test_data_set_0/{input,output}_<i>.pb`, the layout of the ONNX backend node tests.
Activations are [1, 20, 5, 5]: 20 channels leave a partial block in NCHW8c and
NCHW16c (padded channels), 500 elements a vector body and a scalar tail, and the
special values sit in the body, in the last channels (the tail of a channel block)
and on the image border (where convolutions and pools read their spatial padding).
Row ops take [3, 37] (two 16-lane vectors and a tail of 5 per row).

The expected outputs are onnxruntime's wherever onnxruntime and the ONNX reference
evaluator (onnx.reference) agree, which the script checks element by element. Where
they differ by design the case names the oracle that follows the project's rule:
- ReduceMax, ReduceMin, GlobalMaxPool propagate NaN (numpy.max): onnx.reference.
- MaxPool skips NaN inside a window (NaN only for a window of NaN only):
  onnx.reference's pooling with stride 1, which takes the max over a window's
  non-NaN values; a strided pool is that output subsampled (its strided path and
  onnxruntime both depend on where in the window the NaN sits).
- AveragePool propagates NaN (a mean of NaN): onnxruntime; onnx.reference's
  pooling drops NaN values from the mean, as it marks padding with NaN.
- ArgMax and ArgMin point at the first NaN (the last with select_last_index),
  as numpy's argmax/argmin: onnx.reference; onnxruntime skips a NaN unless it
  comes first. TopK ranks NaN above +inf, as both oracles do.
The number of elements where the oracles differ is printed per case.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

OUT = Path(__file__).resolve().parent.parent / "tests" / "nonfinite"
RNG = np.random.default_rng(19)
NAN, INF = np.float32(np.nan), np.float32(np.inf)
C, H, W = 20, 5, 5
IMAGE = (1, C, H, W)
ROWS = (3, 37)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def image(shift=0, few=False):
    """A [1, 20, 5, 5] activation with NaN, +-inf and +-0 in the body, in the last
    channels and on the border; `shift` moves them for a second operand. `few`:
    one NaN, +inf and -inf each, for ops whose every output reads many inputs."""
    x = rand(*IMAGE)
    if few:
        x[0, 0, 0, 0], x[0, 19, 2, 2], x[0, 9, 4, 4] = NAN, INF, -INF
        return x
    specials = [
        # body: the first channels, inside the image
        (0, 0, 0, NAN), (1, 2, 2, INF), (2, 1, 3, -INF), (3, 0, 1, -0.0), (3, 0, 2, 0.0),
        # the last channels: the tail of a channel block
        (19, 4, 4, NAN), (19, 4, 3, -INF), (19, 0, 0, INF), (17, 2, 2, NAN), (18, 3, 1, -0.0),
        # the border: read next to spatial padding
        (5, 0, 4, NAN), (6, 4, 0, INF), (7, 4, 4, -INF), (8, 2, 0, NAN), (9, 0, 2, -INF),
    ]
    for c, h, w, v in specials:
        x[0, (c + shift) % C, (h + shift) % H, (w + 2 * shift) % W] = v
    return x


def rows():
    x = rand(*ROWS)
    x[0, 3] = NAN  # in the first vector
    x[1, 35] = INF  # in the tail
    x[2, 36] = -INF  # the last element (row 2 has no NaN nor +inf)
    x[2, 0] = -0.0
    return x


def model(name, opset, nodes, inputs, initializers=(), outputs=(("y", TensorProto.FLOAT),)):
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    # The outputs' shapes, from onnxruntime.
    for (n, t), y in zip(outputs, run_ort(m, dict(inputs))):
        i = [o.name for o in m.graph.output].index(n)
        m.graph.output[i].CopyFrom(helper.make_tensor_value_info(n, t, y.shape))
    onnx.checker.check_model(m, full_check=True)
    return m


def run_ort(m, feed):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feed)


def run_ref(m, feed):
    return ReferenceEvaluator(m).run(None, feed)


def same(a, b):
    """NaN where the other is NaN, equal infinities, finite values close;
    integers (indices) equal."""
    if a.dtype.kind == "i":
        return a == b
    a, b = a.astype(np.float64), b.astype(np.float64)
    nan = np.isnan(a) & np.isnan(b)
    close = np.isclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, np.nanmax(np.abs(a[np.isfinite(a)]), initial=0)))
    return nan | (a == b) | (np.isfinite(a) & np.isfinite(b) & close)


def maxpool_ref(m, feed, strides):
    """onnx.reference's MaxPool at stride 1 (the max over a window's non-NaN
    values), subsampled to the model's strides."""
    node = m.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs["strides"] = [1, 1]
    one = model("stride1", 13, [helper.make_node("MaxPool", ["x"], ["y"], **attrs)], [("x", feed["x"])])
    y = run_ref(one, feed)[0]
    return [y[:, :, :: strides[0], :: strides[1]]]


CASES = []


def case(name, nodes, inputs, initializers=(), opset=13, oracle="both", outputs=(("y", TensorProto.FLOAT),)):
    CASES.append((name, opset, nodes, inputs, initializers, oracle, outputs))


def unary(op, opset=13, **attrs):
    case(op.lower(), [helper.make_node(op, ["x"], ["y"], **attrs)], [("x", image())], opset=opset)


def conv(name, cin, cout, k, group=1, stride=1, pad=0, epilogue=(), weights=None, residual=False):
    dense = k > 1 and group == 1
    w = weights if weights is not None else rand(cout, cin // group, k, k) * 0.3
    b = rand(cout)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, strides=[stride] * 2, pads=[pad] * 4)]
    last = "c"
    if residual:
        nodes.append(helper.make_node("Add", [last, "x"], ["r"]))
        last = "r"
    for i, (op, extra) in enumerate(epilogue):
        out = "y" if i == len(epilogue) - 1 else f"e{i}"
        nodes.append(helper.make_node(op, [last, *extra], [out]))
        last = out
    if last != "y":
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    inits = [("w", w), ("b", b), ("lo", np.float32(0.0)), ("hi", np.float32(6.0))]
    used = {i for n in nodes for i in n.input}
    case(name, nodes, [("x", image(few=dense))], [(n, np.asarray(a)) for n, a in inits if n in used])


def build():
    for op in ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Erf", "Sqrt", "Log", "Reciprocal", "Softplus"]:
        unary(op)
    unary("LeakyRelu", alpha=0.1)
    unary("Elu", alpha=1.0)
    unary("HardSigmoid", alpha=0.2, beta=0.5)
    unary("HardSwish", opset=14)
    case(
        "clip_0_6",
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [("x", image())],
        [("lo", np.float32(0.0)), ("hi", np.float32(6.0))],
    )
    for op in ["Add", "Sub", "Mul", "Div", "Max", "Min"]:
        case(op.lower(), [helper.make_node(op, ["x", "z"], ["y"])], [("x", image()), ("z", image(shift=1))])
    per_channel = rand(1, C, 1, 1)
    per_channel[0, 4], per_channel[0, 18], per_channel[0, 19] = NAN, INF, -INF
    case("add_per_channel", [helper.make_node("Add", ["x", "k"], ["y"])], [("x", image())], [("k", per_channel)])
    case(
        "prelu",
        [helper.make_node("PRelu", ["x", "s"], ["y"])],
        [("x", image())],
        [("s", np.abs(rand(C, 1, 1)))],
    )
    case(
        "add_relu",
        [helper.make_node("Add", ["x", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        [("x", image()), ("z", image(shift=2))],
    )

    conv("conv_1x1", C, C, 1)
    conv("conv_3x3", C, C, 3, pad=1)
    conv("conv_3x3_stride2", C, 12, 3, stride=2, pad=1)
    conv("conv_depthwise", C, C, 3, group=C, pad=1)
    conv("conv_relu", C, C, 3, pad=1, epilogue=[("Relu", [])])
    conv("conv_clip", C, C, 1, epilogue=[("Clip", ["lo", "hi"])])
    conv("conv_depthwise_clip", C, C, 3, group=C, pad=1, epilogue=[("Clip", ["lo", "hi"])])
    conv("conv_residual_relu", C, C, 3, pad=1, residual=True, epilogue=[("Relu", [])])
    w = rand(C, C, 1, 1) * 0.3
    w[3, 5], w[19, 0] = NAN, INF  # a model exported with a broken weight
    conv("conv_nan_weight", C, C, 1, weights=w)

    bn = [rand(C), rand(C), rand(C), np.abs(rand(C)) + 0.1]
    case(
        "batchnorm_relu",
        [
            helper.make_node("BatchNormalization", ["x", "g", "be", "m", "v"], ["n"]),
            helper.make_node("Relu", ["n"], ["y"]),
        ],
        [("x", image())],
        list(zip(["g", "be", "m", "v"], bn)),
        opset=15,  # onnx.reference's BatchNormalization-9 takes the statistics of x
    )

    pool = lambda k, s, p: dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)  # noqa: E731
    for k, s, p in [(3, 1, 1), (3, 2, 1), (2, 2, 0)]:
        case(
            f"maxpool_k{k}_s{s}_p{p}",
            [helper.make_node("MaxPool", ["x"], ["y"], **pool(k, s, p))],
            [("x", image())],
            oracle=("maxpool", s),
        )
    # A window of NaN only: NaN (the only NaN of the input, so both oracles agree).
    x = rand(*IMAGE)
    x[0, 4, 2:4, 2:4] = NAN
    x[0, 19, 0:2, 0:2] = [[-INF, 1.0], [INF, -0.0]]
    case("maxpool_nan_window", [helper.make_node("MaxPool", ["x"], ["y"], **pool(2, 2, 0))], [("x", x)])
    case(
        "averagepool_k3_s1_p1",
        [helper.make_node("AveragePool", ["x"], ["y"], **pool(3, 1, 1))],
        [("x", image())],
        oracle="ort",
    )
    case("globalmaxpool", [helper.make_node("GlobalMaxPool", ["x"], ["y"])], [("x", image())], oracle="ref")
    case("globalaveragepool", [helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", image())])

    for op, axes, oracle in [
        ("ReduceMax", [1], "ref"),
        ("ReduceMax", [2, 3], "ref"),
        ("ReduceMin", [1], "ref"),
        ("ReduceSum", [1], "both"),
        ("ReduceMean", [2, 3], "both"),
    ]:
        name = f"{op.lower()}_{''.join(map(str, axes))}"
        case(name, [helper.make_node(op, ["x"], ["y"], axes=axes)], [("x", image())], oracle=oracle, opset=13 if op != "ReduceSum" else 11)

    case("softmax_channels", [helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", image())])
    case("softmax_rows", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", rows())])
    case(
        "layernorm_rows",
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
        [("x", rows())],
        [("s", rand(ROWS[1])), ("b", rand(ROWS[1]))],
        opset=17,
    )
    case(
        "gemm",
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
        [("x", rows())],
        [("w", rand(19, ROWS[1]) * 0.3), ("b", rand(19))],
    )
    case(
        "concat_channels",
        [helper.make_node("Concat", ["x", "z"], ["y"], axis=1)],
        [("x", image()), ("z", image(shift=3))],
    )
    case("transpose_nhwc", [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], [("x", image())])

    # Selection: an index output. ArgMax and ArgMin point at the first NaN (the
    # last with select_last_index), as numpy's argmax/argmin and the reference
    # evaluator; onnxruntime skips a NaN unless it comes first.
    index = (("y", TensorProto.INT64),)
    for op, axis, last, x in [
        ("ArgMax", 1, 0, image()),
        ("ArgMin", 1, 0, image()),
        ("ArgMax", 3, 1, image(shift=2)),
        ("ArgMin", -1, 1, rows()),
    ]:
        name = f"{op.lower()}_axis{axis}" + ("_last" if last else "")
        node = helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=1, select_last_index=last)
        case(name, [node], [("x", x)], oracle="ref", outputs=index)
    # TopK ranks NaN above +inf (both oracles): the values and their indices.
    k = np.array([3], np.int64)
    values_and_indices = (("y", TensorProto.FLOAT), ("i", TensorProto.INT64))
    for name, axis, largest, x in [
        ("topk_largest_channels", 1, 1, image()),
        ("topk_smallest_channels", 1, 0, image()),
        ("topk_largest_rows", -1, 1, rows()),
    ]:
        node = helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=axis, largest=largest)
        case(name, [node], [("x", x)], [("k", k)], outputs=values_and_indices)


def main():
    build()
    if OUT.exists():
        shutil.rmtree(OUT)
    for name, opset, nodes, inputs, inits, oracle, outputs in CASES:
        m = model(name, opset, nodes, inputs, inits, outputs)
        feed = dict(inputs)
        a, b = run_ort(m, feed), run_ref(m, feed)
        differ = sum(int((~same(x, z)).sum()) for x, z in zip(a, b))
        if oracle == "both":
            assert differ == 0, f"{name}: the oracles differ at {differ} elements"
            y = a
        elif oracle == "ref":
            y = b
        elif oracle == "ort":
            y = a
        else:
            y = maxpool_ref(m, feed, (oracle[1], oracle[1]))
        assert [(t.shape, t.dtype) for t in y] == [(t.shape, t.dtype) for t in a], name
        d = OUT / name
        (d / "test_data_set_0").mkdir(parents=True)
        onnx.save(m, d / "model.onnx")
        for i, (_, t) in enumerate(inputs):
            onnx.save_tensor(numpy_helper.from_array(t), d / "test_data_set_0" / f"input_{i}.pb")
        for i, t in enumerate(y):
            onnx.save_tensor(numpy_helper.from_array(t), d / "test_data_set_0" / f"output_{i}.pb")
        nonfinite = sum(int((~np.isfinite(t)).sum()) for t in y if t.dtype.kind == "f")
        size = sum(t.size for t in y)
        print(f"{name:24s} oracle {str(oracle):16s} {nonfinite:4d} of {size:4d} NaN/inf; oracles differ at {differ}")


if __name__ == "__main__":
    main()
