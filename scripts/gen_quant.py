#!/usr/bin/env python3
"""Quantized forms of float ONNX models, made the way users make them, with
onnxruntime's outputs as their references.

    python3 scripts/gen_quant.py [SRC_DIR...] [--convnet] [--pairs] [--softmaxes] [--matmuls]
        [--lstms] [--pools]
        --out models/quant

--pairs writes OUT/qlinear_pairs_{u8,s8}: a com.microsoft QLinearAdd and a
QLinearMul of every pair of integers of the type (two [1, 256, 16, 16] inputs
quantized by QuantizeLinear, the sum and the product dequantized), with
onnxruntime's outputs: its rounding of each sum and product.

--softmaxes writes OUT/qlinear_softmax_{u8,s8}: quantized softmaxes of
random integers in the forms onnxruntime runs with its own arithmetic
(com.microsoft QLinearSoftmax of opsets 13 and 12, and the QDQ form it fuses
into that kernel), and a QLinearWhere, with onnxruntime's outputs.

--matmuls writes OUT/qlinear_matmul_{u8,s8}: products of two quantized
activations (a QLinearMatMul, and the QDQ form onnxruntime fuses into it),
batched and broadcast, one with fewer columns than a vector, on grids whose
ratio `sa * sb / sy` is a half in exact arithmetic (so the f32 rounding of the
ratio decides every tie), with onnxruntime's outputs.

--lstms writes OUT/lstm_dynamic and OUT/lstm_dynamic_per_channel: a float
bidirectional LSTM through quantize_dynamic (a com.microsoft
DynamicQuantizeLSTM, its weights int8 with a scale per direction or per gate
row), with onnxruntime's outputs.

--pools writes OUT/qdq_average_pool_u8: a QDQ AveragePool (which onnxruntime
fuses into QLinearAveragePool) of random values on a u8 grid, with
onnxruntime's output.

--convnet adds a float conv net made here (convs with relu, a depthwise conv, a
residual add, a max pool) whose output is a 16x16x16 feature map: enough
elements to count how many quantized outputs match exactly. For each SRC_DIR (holding
model.onnx and test_data_set_0/input_<k>.pb) it writes OUT/<name>_<form>/model.onnx and
test_data_set_0/{input,output}_<k>.pb, where
<form> is one of:
  qdq_s8   quantize_static, QDQ, per-channel int8 weights, int8 activations
  qdq_u8   quantize_static, QDQ, per-channel int8 weights, uint8 activations
  qop_u8   quantize_static, QOperator (QLinearConv ...), uint8 activations
  dynamic  quantize_dynamic (int8 weights, activations quantized per run)
Calibration reads seeded uniform inputs of the float inputs' shapes (other
inputs, such as token ids, as recorded); the reference outputs are
onnxruntime's on the recorded inputs.
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

FORMS = {
    "qdq_s8": dict(quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8),
    "qdq_u8": dict(quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8),
    "qop_u8": dict(quant_format=QuantFormat.QOperator, activation_type=QuantType.QUInt8),
}


class Noise(CalibrationDataReader):
    """Seeded inputs like the reference inputs: each float one of the same
    shape with values in its range, the others (token ids, masks) as recorded."""

    def __init__(self, like: dict, count: int = 8):
        rng = np.random.default_rng(0)

        def noisy(x: np.ndarray) -> np.ndarray:
            if x.dtype != np.float32:
                return x
            return rng.uniform(float(x.min()), float(x.max()), x.shape).astype(np.float32)

        self.feeds = iter([{name: noisy(x) for name, x in like.items()} for _ in range(count)]
                          + [like])

    def get_next(self):
        return next(self.feeds, None)


def load_pb(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return onnx.numpy_helper.to_array(t)


def save_pb(array: np.ndarray, path: Path) -> None:
    path.write_bytes(onnx.numpy_helper.from_array(array).SerializeToString())


def convnet(dst: Path) -> Path:
    """A small float conv net with a feature-map output, and its input."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(1)
    inits, nodes = [], []

    def conv(name, x, cin, cout, k, group=1, stride=1):
        w = rng.normal(0, (2.0 / (cin // group * k * k)) ** 0.5, (cout, cin // group, k, k))
        inits.append(onnx.numpy_helper.from_array(w.astype(np.float32), f"{name}.w"))
        inits.append(onnx.numpy_helper.from_array(rng.normal(0, 0.1, cout).astype(np.float32),
                                                  f"{name}.b"))
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [name],
                                      pads=[k // 2] * 4, group=group, strides=[stride] * 2))
        return name

    def relu(x):
        nodes.append(helper.make_node("Relu", [x], [x + ".relu"]))
        return x + ".relu"

    y = relu(conv("stem", "input", 3, 16, 3))
    y = relu(conv("dw", y, 16, 16, 3, group=16))
    y = conv("pw", y, 16, 16, 1)
    nodes.append(helper.make_node("Add", [y, "stem.relu"], ["sum"]))
    nodes.append(helper.make_node("MaxPool", ["sum"], ["pooled"], kernel_shape=[2, 2],
                                  strides=[2, 2]))
    conv("output", "pooled", 16, 16, 3)
    graph = helper.make_graph(
        nodes, "convnet", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 16, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (dst / "test_data_set_0").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst / "model.onnx"))
    save_pb(rng.uniform(0, 1, (1, 3, 32, 32)).astype(np.float32),
            dst / "test_data_set_0" / "input_0.pb")
    return dst


def save_with_contrib_ops(graph, dst: Path) -> Path:
    """Saves `graph` as DST/model.onnx, of opset 17 with onnxruntime's
    com.microsoft operators (IR version 8, which onnxruntime reads), and makes
    DST/test_data_set_0; returns DST."""
    from onnx import helper
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    (dst / "test_data_set_0").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dst / "model.onnx"))
    return dst


# (scale, zero point) of a, b, their sum and their product: the u8 grids of
# a, b and the sum are those of a residual add in ResNet50 quantized by
# gen_quant.py, the others made up to hold the products.
PAIR_GRIDS = {
    "u8": (np.uint8, [(0.0029654512, 130), (0.0012956475, 129), (0.0016087081, 0),
                      (0.0005, 128)]),
    "s8": (np.int8, [(0.011, -3), (0.0047, 17), (0.013, -20), (0.0075, -5)]),
}


def qlinear_pairs(out: Path) -> None:
    """QLinearAdd and QLinearMul of every pair of integers, on onnxruntime."""
    from onnx import TensorProto, helper
    for form, (dtype, grids) in PAIR_GRIDS.items():
        info = np.iinfo(dtype)
        ints = np.arange(info.min, info.max + 1)
        qa, qb = np.meshgrid(ints, ints, indexing="ij")
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        inits = []
        for k, (scale, zero) in zip("abcd", grids):
            inits.append(helper.make_tensor(f"{k}.scale", TensorProto.FLOAT, [], [scale]))
            inits.append(helper.make_tensor(f"{k}.zero", elem, [], [zero]))
        grid = {k: [f"{k}.scale", f"{k}.zero"] for k in "abcd"}
        nodes = [
            helper.make_node("QuantizeLinear", ["x", *grid["a"]], ["qa"]),
            helper.make_node("QuantizeLinear", ["y", *grid["b"]], ["qb"]),
            helper.make_node("QLinearAdd", ["qa", *grid["a"], "qb", *grid["b"], *grid["c"]],
                             ["qc"], domain="com.microsoft"),
            helper.make_node("DequantizeLinear", ["qc", *grid["c"]], ["sum"]),
            helper.make_node("QLinearMul", ["qa", *grid["a"], "qb", *grid["b"], *grid["d"]],
                             ["qd"], domain="com.microsoft"),
            helper.make_node("DequantizeLinear", ["qd", *grid["d"]], ["product"]),
        ]
        shape = [1, 256, 16, 16]
        graph = helper.make_graph(
            nodes, f"qlinear_pairs_{form}",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "xy"],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
             for n in ("sum", "product")], inits)
        dst = save_with_contrib_ops(graph, out / f"qlinear_pairs_{form}")
        # Each input the float value of its integer: quantized back exactly.
        (sa, za), (sb, zb) = grids[0], grids[1]
        x = ((qa - za) * np.float32(sa)).astype(np.float32).reshape(shape)
        y = ((qb - zb) * np.float32(sb)).astype(np.float32).reshape(shape)
        sess = ort.InferenceSession(str(dst / "model.onnx"), providers=["CPUExecutionProvider"])
        for k, v in enumerate([x, y]):
            save_pb(v, dst / "test_data_set_0" / f"input_{k}.pb")
        for k, v in enumerate(sess.run(None, {"x": x, "y": y})):
            save_pb(v, dst / "test_data_set_0" / f"output_{k}.pb")
        print(f"{dst}", flush=True)


# Softmax grids (scale, zero point) of each form's input and output: the first
# two outputs on the grid onnxruntime's quantizer gives a softmax (1/255 from
# the least integer), the last on a step whose inverse is not whole (the peer
# takes floor(1 / step)). Each form quantizes x on its own grid: onnxruntime
# fuses the QDQ form only where its quantized input has no other reader.
SOFTMAX_GRIDS = {
    "u8": (np.uint8, [((0.0731, 131), (1 / 255, 0)), ((0.0687, 120), (1 / 255, 0)),
                      ((0.125, 128), (0.0043, 3))]),
    "s8": (np.int8, [((0.0731, 3), (1 / 255, -128)), ((0.0687, -8), (1 / 255, -128)),
                     ((0.125, 0), (0.0043, -120))]),
}

# The grid of the QLinearWhere's second input.
WHERE_GRID = {"u8": (0.05, 100), "s8": (0.05, -10)}


# (scale, zero point) of a, b and the product of each matmul form: the first
# two forms' ratio sa * sb / sy is 1/2 in exact arithmetic (every odd sum a
# tie that the f32 ratio decides), the third's made up.
MATMUL_GRIDS = {
    "u8": (np.uint8, [(0.1, 128), (0.3, 120), (0.06, 130)]),
    "s8": (np.int8, [(0.1, 3), (0.3, -5), (0.06, -2)]),
}


def qlinear_matmuls(out: Path) -> None:
    """Products of two quantized activations on onnxruntime: x [2, 3, 40, 24]
    by y [3, 24, 17] (batch broadcast) as a QLinearMatMul, u by v of the same
    shapes in the QDQ form DequantizeLinear x2 -> MatMul -> QuantizeLinear
    (operands of their own, so that no product is computed twice), and x by
    z [24, 5] (fewer columns than a vector) as a QLinearMatMul; each
    dequantized. The inputs are integers of their grids, so quantizing them
    is exact."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(3)
    shapes = {"x": [2, 3, 40, 24], "y": [3, 24, 17], "u": [2, 3, 40, 24], "v": [3, 24, 17],
              "z": [24, 5]}
    for form, (dtype, grids) in MATMUL_GRIDS.items():
        info = np.iinfo(dtype)
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        inits = []
        for k, (scale, zero) in zip("aby", grids):
            inits.append(helper.make_tensor(f"{k}.scale", TensorProto.FLOAT, [], [scale]))
            inits.append(helper.make_tensor(f"{k}.zero", elem, [], [zero]))
        a, b, y = (["a.scale", "a.zero"], ["b.scale", "b.zero"], ["y.scale", "y.zero"])
        nodes = []
        # Each form quantizes its inputs itself: onnxruntime fuses a QDQ
        # product only where each quantized input has one reader.
        for k, (name, grid) in enumerate([("x", a), ("y", b), ("u", a), ("v", b), ("x", a),
                                          ("z", b)]):
            nodes.append(helper.make_node("QuantizeLinear", [name, *grid], [f"q{k}"]))
        nodes += [
            helper.make_node("QLinearMatMul", ["q0", *a, "q1", *b, *y], ["p0"]),
            helper.make_node("DequantizeLinear", ["p0", *y], ["out0"]),
            helper.make_node("DequantizeLinear", ["q2", *a], ["d2"]),
            helper.make_node("DequantizeLinear", ["q3", *b], ["d3"]),
            helper.make_node("MatMul", ["d2", "d3"], ["m1"]),
            helper.make_node("QuantizeLinear", ["m1", *y], ["p1"]),
            helper.make_node("DequantizeLinear", ["p1", *y], ["out1"]),
            helper.make_node("QLinearMatMul", ["q4", *a, "q5", *b, *y], ["p2"]),
            helper.make_node("DequantizeLinear", ["p2", *y], ["out2"]),
        ]
        graph = helper.make_graph(
            nodes, f"qlinear_matmul_{form}",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
            [helper.make_tensor_value_info(f"out{k}", TensorProto.FLOAT, None)
             for k in range(3)], inits)
        dst = save_with_contrib_ops(graph, out / f"qlinear_matmul_{form}")
        feeds = {}
        operand_grids = [grids[0], grids[1], grids[0], grids[1], grids[1]]
        for (name, shape), (scale, zero) in zip(shapes.items(), operand_grids):
            q = rng.integers(info.min, info.max + 1, shape)
            feeds[name] = ((q - zero) * np.float32(scale)).astype(np.float32)
        sess = ort.InferenceSession(str(dst / "model.onnx"), providers=["CPUExecutionProvider"])
        for k, v in enumerate(feeds.values()):
            save_pb(v, dst / "test_data_set_0" / f"input_{k}.pb")
        for k, v in enumerate(sess.run(None, feeds)):
            save_pb(v, dst / "test_data_set_0" / f"output_{k}.pb")
        print(f"{dst}", flush=True)


def qlinear_softmaxes(out: Path) -> None:
    """Quantized softmaxes on onnxruntime: x [3, 40, 197] of random values
    (one row constant, one spanning two steps) quantized and put through a
    com.microsoft QLinearSoftmax of opset 13 (rows of 197); the QDQ form
    DequantizeLinear -> Softmax -> QuantizeLinear (which onnxruntime fuses into
    the same kernel); and, on x read as [60, 2, 197], a QLinearSoftmax of
    opset 12 with axis 1 (rows of 2 x 197); each dequantized. A fourth output
    is a com.microsoft QLinearWhere of two quantized forms of x."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(2)
    shape = [3, 40, 197]
    for form, (dtype, grids) in SOFTMAX_GRIDS.items():
        info = np.iinfo(dtype)
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        inits = []
        for k, grid in enumerate(grids):
            for name, (scale, zero) in zip(("x", "y"), grid):
                inits.append(helper.make_tensor(f"{name}{k}.scale", TensorProto.FLOAT, [],
                                                [scale]))
                inits.append(helper.make_tensor(f"{name}{k}.zero", elem, [], [zero]))
        # The opset-12 form reads x as [60, 2, 197]: rows of 394.
        inits.append(helper.make_tensor("pairs", TensorProto.INT64, [3], [60, 2, 197]))
        nodes = [helper.make_node("Reshape", ["x", "pairs"], ["x2"])]
        for k, x in enumerate(["x", "x", "x2"]):
            nodes.append(helper.make_node("QuantizeLinear", [x, f"x{k}.scale", f"x{k}.zero"],
                                          [f"qx{k}"]))
        qlinear = ["x0.scale", "x0.zero", "y0.scale", "y0.zero"]
        nodes += [
            helper.make_node("QLinearSoftmax", ["qx0", *qlinear], ["q0"],
                             domain="com.microsoft", axis=-1, opset=13),
            helper.make_node("DequantizeLinear", ["qx1", "x1.scale", "x1.zero"], ["dx1"]),
            helper.make_node("Softmax", ["dx1"], ["p1"], axis=-1),
            helper.make_node("QuantizeLinear", ["p1", "y1.scale", "y1.zero"], ["q1"]),
            helper.make_node("QLinearSoftmax", ["qx2", "x2.scale", "x2.zero", "y2.scale",
                                                "y2.zero"], ["q2"],
                             domain="com.microsoft", axis=1, opset=12),
        ]
        # And a com.microsoft QLinearWhere where x > 0.5 of the first form's
        # input and x on a grid of its own (so that the QDQ form's quantized
        # input keeps one reader), onto the first form's grid.
        where_scale, where_zero = WHERE_GRID[form]
        inits += [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
                  helper.make_tensor("x3.scale", TensorProto.FLOAT, [], [where_scale]),
                  helper.make_tensor("x3.zero", elem, [], [where_zero])]
        nodes += [
            helper.make_node("Greater", ["x", "half"], ["mask"]),
            helper.make_node("QuantizeLinear", ["x", "x3.scale", "x3.zero"], ["qx3"]),
            helper.make_node("QLinearWhere", ["mask", "qx0", "x0.scale", "x0.zero", "qx3",
                                              "x3.scale", "x3.zero", "x0.scale", "x0.zero"],
                             ["q3"], domain="com.microsoft"),
            helper.make_node("DequantizeLinear", ["q3", "x0.scale", "x0.zero"], ["y3"]),
        ]
        outputs = []
        for k, y_shape in enumerate([shape, shape, [60, 2, 197]]):
            nodes.append(helper.make_node("DequantizeLinear", [f"q{k}", f"y{k}.scale",
                                                               f"y{k}.zero"], [f"y{k}"]))
            outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, y_shape))
        outputs.append(helper.make_tensor_value_info("y3", TensorProto.FLOAT, shape))
        graph = helper.make_graph(
            nodes, f"qlinear_softmax_{form}",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], outputs, inits)
        dst = save_with_contrib_ops(graph, out / f"qlinear_softmax_{form}")
        (xs, xz), _ = grids[0]
        q = rng.integers(info.min, info.max + 1, shape)
        q[0, 0, :] = xz + 7
        q[0, 1, :] = xz + rng.integers(0, 2, shape[2])
        x = ((q - xz) * np.float32(xs)).astype(np.float32)
        sess = ort.InferenceSession(str(dst / "model.onnx"), providers=["CPUExecutionProvider"])
        save_pb(x, dst / "test_data_set_0" / "input_0.pb")
        for k, y in enumerate(sess.run(None, {"x": x})):
            save_pb(y, dst / "test_data_set_0" / f"output_{k}.pb")
        print(f"{dst}", flush=True)


def average_pools(out: Path) -> None:
    """OUT/qdq_average_pool_u8: a QDQ AveragePool (3x3, stride 2, padding 1,
    padding not counted; onnxruntime fuses it into QLinearAveragePool) of a
    [1, 32, 24, 24] input of random values on the u8 grid of a relu's output
    (zero point 0), rounded onto the same grid (as onnxruntime's quantizer
    leaves an average pool), with onnxruntime's output, dequantized."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(4)
    inits = [helper.make_tensor(f"{k}.scale", TensorProto.FLOAT, [], [0.0127]) for k in "xy"]
    inits += [helper.make_tensor(f"{k}.zero", TensorProto.UINT8, [], [0]) for k in "xy"]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x.scale", "x.zero"], ["qx"]),
        helper.make_node("DequantizeLinear", ["qx", "x.scale", "x.zero"], ["dx"]),
        helper.make_node("AveragePool", ["dx"], ["pooled"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["pooled", "y.scale", "y.zero"], ["qy"]),
        helper.make_node("DequantizeLinear", ["qy", "y.scale", "y.zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qdq_average_pool_u8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 12, 12])], inits)
    dst = save_with_contrib_ops(graph, out / "qdq_average_pool_u8")
    x = (rng.integers(0, 256, (1, 32, 24, 24)) * np.float32(0.0127)).astype(np.float32)
    sess = ort.InferenceSession(str(dst / "model.onnx"), providers=["CPUExecutionProvider"])
    save_pb(x, dst / "test_data_set_0" / "input_0.pb")
    save_pb(sess.run(None, {"x": x})[0], dst / "test_data_set_0" / "output_0.pb")
    print(f"{dst}", flush=True)


def lstms(out: Path) -> None:
    """A float bidirectional LSTM (X [10, 2, 8], hidden 16, biases) through
    quantize_dynamic, which makes it a com.microsoft
    DynamicQuantizeLSTM: OUT/lstm_dynamic (a scale per direction) and
    OUT/lstm_dynamic_per_channel (per direction and gate row), with
    onnxruntime's outputs Y, Y_h and Y_c; test_data_set_1 holds its float
    LSTM's outputs on the dequantized weights."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(3)
    steps, batch, size, hidden, dirs = 10, 2, 8, 16, 2
    weights = {
        "W": rng.normal(0, 0.4, (dirs, 4 * hidden, size)),
        "R": rng.normal(0, 0.3, (dirs, 4 * hidden, hidden)),
        "B": rng.normal(0, 0.2, (dirs, 8 * hidden)),
    }
    inits = [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden,
                            direction="bidirectional")
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [steps, dirs, batch, hidden])]
    outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [dirs, batch, hidden])
                for n in ("Y_h", "Y_c")]
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                       [steps, batch, size])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    x = rng.normal(0, 1, (steps, batch, size)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "lstm.onnx"
        onnx.save(model, str(src))
        for name, per_channel in (("lstm_dynamic", False), ("lstm_dynamic_per_channel", True)):
            dst = out / name
            (dst / "test_data_set_0").mkdir(parents=True, exist_ok=True)
            quantize_dynamic(str(src), str(dst / "model.onnx"), weight_type=QuantType.QInt8,
                             per_channel=per_channel)
            sess = ort.InferenceSession(str(dst / "model.onnx"),
                                        providers=["CPUExecutionProvider"])
            save_pb(x, dst / "test_data_set_0" / "input_0.pb")
            for k, y in enumerate(sess.run(None, {"X": x})):
                save_pb(y, dst / "test_data_set_0" / f"output_{k}.pb")
            # test_data_set_1: onnxruntime's float LSTM on the weights
            # dequantized, (q - zero point) * scale, back in the LSTM's layout.
            quantized = {i.name: onnx.numpy_helper.to_array(i)
                         for i in onnx.load(str(dst / "model.onnx")).graph.initializer}
            dequantized = {}
            for k in ("W", "R"):
                q, scale, zero = (quantized[f"{k}_{part}"]
                                  for part in ("quantized", "scale", "zero_point"))
                w = ((q.astype(np.float32) - zero.reshape(dirs, 1, -1).astype(np.float32))
                     * scale.reshape(dirs, 1, -1)).transpose(0, 2, 1)
                dequantized[k] = np.ascontiguousarray(w, dtype=np.float32)
            float_model = onnx.ModelProto()
            float_model.CopyFrom(model)
            for init in float_model.graph.initializer:
                if init.name in dequantized:
                    init.CopyFrom(onnx.numpy_helper.from_array(dequantized[init.name], init.name))
            float_sess = ort.InferenceSession(float_model.SerializeToString(),
                                              providers=["CPUExecutionProvider"])
            (dst / "test_data_set_1").mkdir(exist_ok=True)
            save_pb(x, dst / "test_data_set_1" / "input_0.pb")
            for k, y in enumerate(float_sess.run(None, {"X": x})):
                save_pb(y, dst / "test_data_set_1" / f"output_{k}.pb")
            print(f"{dst}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="*", type=Path)
    ap.add_argument("--convnet", action="store_true")
    ap.add_argument("--pairs", action="store_true")
    ap.add_argument("--softmaxes", action="store_true")
    ap.add_argument("--matmuls", action="store_true")
    ap.add_argument("--lstms", action="store_true")
    ap.add_argument("--pools", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("models/quant"))
    ap.add_argument("--forms", default=",".join(list(FORMS) + ["dynamic"]))
    args = ap.parse_args()
    if args.pairs:
        qlinear_pairs(args.out)
    if args.softmaxes:
        qlinear_softmaxes(args.out)
    if args.matmuls:
        qlinear_matmuls(args.out)
    if args.lstms:
        lstms(args.out)
    if args.pools:
        average_pools(args.out)
    made = tempfile.TemporaryDirectory()
    if args.convnet:
        args.sources.append(convnet(Path(made.name) / "convnet"))
    for src in args.sources:
        graph = onnx.load(str(src / "model.onnx")).graph
        weights = {i.name for i in graph.initializer}
        names = [i.name for i in graph.input if i.name not in weights]
        feeds = {name: load_pb(src / "test_data_set_0" / f"input_{k}.pb")
                 for k, name in enumerate(names)}
        with tempfile.TemporaryDirectory() as tmp:
            pre = Path(tmp) / "pre.onnx"
            quant_pre_process(str(src / "model.onnx"), str(pre), skip_symbolic_shape=True)
            for form in args.forms.split(","):
                dst = args.out / f"{src.name}_{form}"
                (dst / "test_data_set_0").mkdir(parents=True, exist_ok=True)
                model = dst / "model.onnx"
                if form == "dynamic":
                    quantize_dynamic(str(pre), str(model), weight_type=QuantType.QInt8)
                else:
                    quantize_static(str(pre), str(model), Noise(feeds), per_channel=True,
                                    weight_type=QuantType.QInt8, **FORMS[form])
                sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
                for k, name in enumerate(names):
                    save_pb(feeds[name], dst / "test_data_set_0" / f"input_{k}.pb")
                for k, y in enumerate(sess.run(None, feeds)):
                    save_pb(y, dst / "test_data_set_0" / f"output_{k}.pb")
                print(f"{dst}: {model.stat().st_size >> 10} KiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
