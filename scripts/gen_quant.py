#!/usr/bin/env python3
"""Quantized forms of float ONNX models, made the way users make them, with
onnxruntime's outputs as their references.

    python3 scripts/gen_quant.py [SRC_DIR...] [--convnet] --out models/quant

--adds writes OUT/qlinear_add_{u8,s8}: one com.microsoft QLinearAdd of every pair
of integers of the type (two [1, 256, 16, 16] inputs quantized by QuantizeLinear,
the sum dequantized), with onnxruntime's output: its rounding of each sum.

--convnet adds a float conv net made here (convs with relu, a depthwise conv, a
residual add, a max pool) whose output is a 16x16x16 feature map: enough
elements to count how many quantized outputs match exactly. For each SRC_DIR (holding model.onnx and test_data_set_0/input_0.pb) it writes
OUT/<name>_<form>/model.onnx and test_data_set_0/{input_0,output_0}.pb, where
<form> is one of:
  qdq_s8   quantize_static, QDQ, per-channel int8 weights, int8 activations
  qdq_u8   quantize_static, QDQ, per-channel int8 weights, uint8 activations
  qop_u8   quantize_static, QOperator (QLinearConv ...), uint8 activations
  dynamic  quantize_dynamic (int8 weights, activations quantized per run)
Calibration reads seeded uniform inputs of the model's input shape; the
reference output is onnxruntime's on test_data_set_0/input_0.pb.
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
    """Seeded inputs like the reference input: its shape, values in its range."""

    def __init__(self, name: str, like: np.ndarray, count: int = 8):
        rng = np.random.default_rng(0)
        lo, hi = float(like.min()), float(like.max())
        self.feeds = iter([{name: rng.uniform(lo, hi, like.shape).astype(np.float32)}
                           for _ in range(count)] + [{name: like}])

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


# (scale, zero point) of a, b and c: the u8 grids are those of a residual add
# in ResNet50 quantized by gen_quant.py, the s8 ones made up.
ADD_GRIDS = {
    "u8": (np.uint8, [(0.0029654512, 130), (0.0012956475, 129), (0.0016087081, 0)]),
    "s8": (np.int8, [(0.011, -3), (0.0047, 17), (0.013, -20)]),
}


def qlinear_adds(out: Path) -> None:
    """QLinearAdd of every pair of integers, on onnxruntime."""
    from onnx import TensorProto, helper
    for form, (dtype, grids) in ADD_GRIDS.items():
        info = np.iinfo(dtype)
        ints = np.arange(info.min, info.max + 1)
        qa, qb = np.meshgrid(ints, ints, indexing="ij")
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        inits = []
        for k, (scale, zero) in zip("abc", grids):
            inits.append(helper.make_tensor(f"{k}.scale", TensorProto.FLOAT, [], [scale]))
            inits.append(helper.make_tensor(f"{k}.zero", elem, [], [zero]))
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "a.scale", "a.zero"], ["qa"]),
            helper.make_node("QuantizeLinear", ["y", "b.scale", "b.zero"], ["qb"]),
            helper.make_node("QLinearAdd", ["qa", "a.scale", "a.zero", "qb", "b.scale", "b.zero",
                                            "c.scale", "c.zero"], ["qc"], domain="com.microsoft"),
            helper.make_node("DequantizeLinear", ["qc", "c.scale", "c.zero"], ["sum"]),
        ]
        shape = [1, 256, 16, 16]
        graph = helper.make_graph(
            nodes, f"qlinear_add_{form}",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "xy"],
            [helper.make_tensor_value_info("sum", TensorProto.FLOAT, shape)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        dst = out / f"qlinear_add_{form}"
        (dst / "test_data_set_0").mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(dst / "model.onnx"))
        # Each input the float value of its integer: quantized back exactly.
        (sa, za), (sb, zb) = grids[0], grids[1]
        x = ((qa - za) * np.float32(sa)).astype(np.float32).reshape(shape)
        y = ((qb - zb) * np.float32(sb)).astype(np.float32).reshape(shape)
        sess = ort.InferenceSession(str(dst / "model.onnx"), providers=["CPUExecutionProvider"])
        total = sess.run(None, {"x": x, "y": y})[0]
        for k, v in enumerate([x, y]):
            save_pb(v, dst / "test_data_set_0" / f"input_{k}.pb")
        save_pb(total, dst / "test_data_set_0" / "output_0.pb")
        print(f"{dst}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="*", type=Path)
    ap.add_argument("--convnet", action="store_true")
    ap.add_argument("--adds", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("models/quant"))
    ap.add_argument("--forms", default=",".join(list(FORMS) + ["dynamic"]))
    args = ap.parse_args()
    if args.adds:
        qlinear_adds(args.out)
    made = tempfile.TemporaryDirectory()
    if args.convnet:
        args.sources.append(convnet(Path(made.name) / "convnet"))
    for src in args.sources:
        x = load_pb(src / "test_data_set_0" / "input_0.pb")
        name = onnx.load(str(src / "model.onnx")).graph.input[0].name
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
                    quantize_static(str(pre), str(model), Noise(name, x), per_channel=True,
                                    weight_type=QuantType.QInt8, **FORMS[form])
                sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
                y = sess.run(None, {name: x})[0]
                save_pb(x, dst / "test_data_set_0" / "input_0.pb")
                save_pb(y, dst / "test_data_set_0" / "output_0.pb")
                print(f"{dst}: {model.stat().st_size >> 10} KiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
