#!/usr/bin/env python3
"""ONNX models of the families Keras does not ship, built with onnx.helper in the
patterns PyTorch's exporter writes (batch norm folded into each Conv's weights and
bias, Relu, MaxPool, Add, GlobalAveragePool, Flatten, Gemm), with seeded random
weights: no download, no torch.

    /path/to/venv/bin/python scripts/gen_onnx_zoo.py [--out models/zoo] [MODEL ...]

needs `onnx`, `onnxruntime` and `numpy` (scripts/requirements-zoo.txt has them).
Writes `<out>/<model>_onnx/model.onnx` with `test_data_set_0/{input_0,output_0}.pb`,
the output recorded from onnxruntime, the layout `layoutopt run` reads.

Models:
- ResNeXt50_32x4d: torchvision's resnext50_32x4d (grouped 3x3 convolutions of 32
  groups, 4 to 32 channels each).
- RegNetY_800MF: torchvision's regnet_y_800mf (grouped 3x3 convolutions of 16
  channels per group, squeeze-excite on each block).
- ResNeXtSmall: a small ResNeXt of groups of 4, 8 and 16 channels.
- ShuffleNetG3: a ShuffleNet (v1) of 3 groups: grouped 1x1 convolutions, a channel
  shuffle (Reshape, Transpose, Reshape), depthwise 3x3, and concatenated shortcuts
  through an average pool.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """A graph under construction: nodes, initializers, and seeded weights."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}_{self.count}"

    def const(self, kind: str, value: np.ndarray) -> str:
        n = self.name(kind)
        self.inits.append(numpy_helper.from_array(value, n))
        return n

    def node(self, op: str, inputs: list, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride=1, groups=1, gain=1.0) -> str:
        """A conv with its batch norm folded in (weights scaled for unit variance)."""
        fan_in = cin // groups * k * k
        w = self.rng.normal(0, gain * np.sqrt(2.0 / fan_in), (cout, cin // groups, k, k))
        b = self.rng.normal(0, 0.05, cout)
        p = k // 2
        return self.node(
            "Conv",
            [x, self.const("w", w.astype(np.float32)), self.const("b", b.astype(np.float32))],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[p, p, p, p],
            group=groups,
        )

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def head(self, x: str, channels: int, classes: int) -> str:
        x = self.node("GlobalAveragePool", [x])
        x = self.node("Flatten", [x], axis=1)
        w = self.rng.normal(0, np.sqrt(1.0 / channels), (classes, channels)).astype(np.float32)
        b = np.zeros(classes, np.float32)
        return self.node("Gemm", [x, self.const("fc_w", w), self.const("fc_b", b)], transB=1)

    def model(self, name: str, x: str, y: str, side: int, classes: int):
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, side, side])],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, classes])],
            self.inits,
        )
        # The oldest IR version the opset allows: onnx's default follows its own
        # release, which may be newer than the installed onnxruntime reads.
        opsets = [helper.make_opsetid("", 13)]
        m = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
        m.producer_name = "gen_onnx_zoo"
        onnx.checker.check_model(m)
        return m


def stem(b: Builder, x: str, cout: int) -> str:
    x = b.relu(b.conv(x, 3, cout, 7, stride=2))
    return b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def bottleneck(
    b: Builder, x: str, cin: int, width: int, cout: int, stride: int, groups: int, first: bool,
    excite: bool = False,
) -> str:
    """A residual block: 1x1, grouped 3x3, squeeze-excite to a quarter of the input
    channels (where `excite`), 1x1, plus the shortcut (a strided 1x1 on the `first`
    block of a stage), relu."""
    y = b.relu(b.conv(x, cin, width, 1))
    y = b.relu(b.conv(y, width, width, 3, stride=stride, groups=groups))
    if excite:
        squeezed = max(1, cin // 4)
        s = b.node("GlobalAveragePool", [y])
        s = b.relu(b.conv(s, width, squeezed, 1))
        s = b.node("Sigmoid", [b.conv(s, squeezed, width, 1)])
        y = b.node("Mul", [y, s])
    # The last conv of a residual branch starts small, as in a trained net.
    y = b.conv(y, width, cout, 1, gain=0.3)
    shortcut = b.conv(x, cin, cout, 1, stride=stride) if first else x
    return b.relu(b.node("Add", [y, shortcut]))


def resnext50_32x4d(seed: int, side: int, classes: int):
    b = Builder(seed)
    x = stem(b, "input", 64)
    cin = 64
    for stage, (blocks, planes) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512))):
        width, cout = planes * 2, planes * 4  # 32 groups of 4 * planes / 64 channels
        for i in range(blocks):
            stride = 2 if stage > 0 and i == 0 else 1
            x = bottleneck(b, x, cin, width, cout, stride, 32, i == 0)
            cin = cout
    return b.model("resnext50_32x4d", "input", b.head(x, cin, classes), side, classes)


def regnety_800mf(seed: int, side: int, classes: int):
    b = Builder(seed)
    x = b.relu(b.conv("input", 3, 32, 3, stride=2))
    cin = 32
    for depth, width in zip((1, 3, 8, 2), (64, 144, 320, 784)):
        for i in range(depth):
            stride = 2 if i == 0 else 1
            x = bottleneck(b, x, cin, width, width, stride, width // 16, i == 0, excite=True)
            cin = width
    return b.model("regnet_y_800mf", "input", b.head(x, cin, classes), side, classes)


def resnext_small(seed: int, side: int, classes: int):
    """Three stages of two ResNeXt blocks, 8 groups of 4, 8 and 16 channels (the
    widths ResNeXt and RegNet have), squeeze-excite in the last stage."""
    b = Builder(seed)
    x = b.relu(b.conv("input", 3, 32, 3, stride=2))
    cin = 32
    for stage, width in enumerate((32, 64, 128)):
        for i in range(2):
            x = bottleneck(b, x, cin, width, 2 * width, 2 if i == 0 else 1, 8, i == 0, excite=stage == 2)
            cin = 2 * width
    return b.model("resnext_small", "input", b.head(x, cin, classes), side, classes)


def shufflenet_g3(seed: int, side: int, classes: int):
    groups = 3
    b = Builder(seed)
    x = stem(b, "input", 24)
    cin, input_side, side = 24, side, side // 4

    def shuffle(v: str, channels: int, side: int) -> str:
        v = b.node("Reshape", [v, b.const("s", np.array([1, groups, channels // groups, side, side]))])
        v = b.node("Transpose", [v], perm=[0, 2, 1, 3, 4])
        return b.node("Reshape", [v, b.const("s", np.array([1, channels, side, side]))])

    for blocks, cout in zip((4, 8, 4), (240, 480, 960)):
        for i in range(blocks):
            down = i == 0
            branch = cout - cin if down else cout
            mid = branch // 4 // groups * groups
            # The first 1x1 of the net is dense (24 input channels).
            y = b.relu(b.conv(x, cin, mid, 1, groups=1 if cin == 24 else groups))
            y = shuffle(y, mid, side)
            side_out = side // 2 if down else side
            y = b.conv(y, mid, mid, 3, stride=2 if down else 1, groups=mid)
            y = b.conv(y, mid, branch, 1, groups=groups, gain=0.3)
            if down:
                pooled = b.node(
                    "AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
                )
                x = b.relu(b.node("Concat", [pooled, y], axis=1))
            else:
                x = b.relu(b.node("Add", [y, x]))
            cin, side = cout, side_out
    return b.model("shufflenet_g3", "input", b.head(x, cin, classes), input_side, classes)


# name: (builder, input side, classes)
MODELS = {
    "ResNeXt50_32x4d": (resnext50_32x4d, 224, 1000),
    "RegNetY_800MF": (regnety_800mf, 224, 1000),
    "ShuffleNetG3": (shufflenet_g3, 224, 1000),
    # The committed ones (tests/integration/zoo_subset.rs): 3.5 MB and 1.1 MB.
    "ShuffleNetG3_96": (shufflenet_g3, 96, 10),
    "ResNeXtSmall_64": (resnext_small, 64, 10),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--out", type=Path, default=Path("models/zoo"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in args.models:
        if name not in MODELS:
            print(f"unknown model {name}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        build, side, classes = MODELS[name]
        model = build(args.seed, side, classes)
        x = np.random.default_rng(args.seed).uniform(-1, 1, (1, 3, side, side)).astype(np.float32)
        data = model.SerializeToString()
        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        y = sess.run(None, {"input": x})[0]
        out = args.out / f"{name}_onnx"
        (out / "test_data_set_0").mkdir(parents=True, exist_ok=True)
        (out / "model.onnx").write_bytes(data)
        for file, value, tensor in (("input_0.pb", x, "input"), ("output_0.pb", y, model.graph.output[0].name)):
            (out / "test_data_set_0" / file).write_bytes(
                numpy_helper.from_array(value, tensor).SerializeToString()
            )
        print(f"{name}_onnx: {len(data) / 1e6:.1f} MB, {len(model.graph.node)} nodes, logits {y.shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
