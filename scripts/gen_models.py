#!/usr/bin/env python3
"""Build the bundled test models with onnx.helper and record onnxruntime outputs.

Run from the repository root (Python packages: scripts/requirements.txt):

    python3 scripts/gen_models.py           # small models into models/<name>/
    python3 scripts/gen_models.py --full    # also ResNet-18 and MobileNetV2 at
                                            # 1x3x224x224 into models/full/ (gitignored)

Every model directory holds `model.onnx` and `test_data_set_0/{input,output}_<i>.pb`
(serialized onnx.TensorProto named after the graph input/output), the layout of the
ONNX backend test cases, so one loader reads both. Weights and inputs come from
numpy generators with fixed seeds, and onnxruntime runs single-threaded with all
graph optimizations off (an unoptimized oracle), so every run writes the same bytes.
The script also writes models/README.md, the table describing the models.

Architectures are built by hand (no torch): node and weight names follow the style
of torch.onnx exports ("/layer1/0/conv1/Conv", "layer1.0.conv1.weight") so that
per-layer spans have realistic names.
"""

from __future__ import annotations

import argparse
import collections
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "models"

# Activations of every layer must stay within these standard deviations, else the
# random weights are badly scaled and the model would test overflow, not layouts.
ACT_STD_RANGE = (1e-2, 50.0)
# Allowed max |onnxruntime - onnx.reference| relative to max(1, max |output|).
CROSS_CHECK_TOL = 1e-4


class GraphBuilder:
    """Accumulates nodes and initializers; every method returns output names."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._node_names: collections.Counter[str] = collections.Counter()

    def node(self, op: str, inputs: list[str], scope: str, **attrs) -> str:
        base = f"/{scope.replace('.', '/')}/{op}" if scope else f"/{op}"
        # Exporters disambiguate repeated names with a numeric suffix.
        k = self._node_names[base]
        self._node_names[base] += 1
        name = base if k == 0 else f"{base}_{k}"
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def constant(self, scope: str, value: np.ndarray) -> str:
        """A Constant node, the way exporters emit shape-computation constants."""
        return self.node("Constant", [], scope, value=numpy_helper.from_array(value))

    def normal(self, shape, std: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def conv(
        self,
        x: str,
        scope: str,
        cin: int,
        cout: int,
        k: int,
        stride: int = 1,
        group: int = 1,
        bias: bool = False,
        gain: float = 2.0,
    ) -> str:
        # He init: std = sqrt(gain / fan_in) keeps the activation variance steady
        # (gain 2 before a ReLU-like activation, 1 for a linear layer).
        fan_in = cin // group * k * k
        w = self.init(f"{scope}.weight", self.normal((cout, cin // group, k, k), math.sqrt(gain / fan_in)))
        inputs = [x, w]
        if bias:
            inputs.append(self.init(f"{scope}.bias", self.normal((cout,), 0.05)))
        return self.node(
            "Conv",
            inputs,
            scope,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[k // 2] * 4,
            dilations=[1, 1],
            group=group,
        )

    def batchnorm(self, x: str, scope: str, c: int, gamma_scale: float = 1.0) -> str:
        """Inference BatchNormalization. The running statistics are placeholders until
        calibrate_batchnorm() sets them from real activations."""
        gamma = (self.rng.uniform(0.8, 1.2, c) * gamma_scale).astype(np.float32)
        beta = self.normal((c,), 0.1)
        mean = np.zeros(c, np.float32)
        var = np.ones(c, np.float32)
        names = [
            self.init(f"{scope}.{p}", v)
            for p, v in (("weight", gamma), ("bias", beta), ("running_mean", mean), ("running_var", var))
        ]
        return self.node("BatchNormalization", [x, *names], scope, epsilon=1e-5, momentum=0.9)

    def gemm(self, x: str, scope: str, cin: int, cout: int) -> str:
        """nn.Linear as torch exports it: Gemm with a transposed [out, in] weight."""
        w = self.init(f"{scope}.weight", self.normal((cout, cin), 1.0 / math.sqrt(cin)))
        b = self.init(f"{scope}.bias", self.normal((cout,), 0.05))
        return self.node("Gemm", [x, w, b], scope, alpha=1.0, beta=1.0, transB=1)

    def linear(self, x: str, scope: str, cin: int, cout: int, gain: float = 1.0) -> str:
        """nn.Linear on a 3-D input as torch exports it: MatMul by [in, out] + Add."""
        w = self.init(f"{scope}.weight", self.normal((cin, cout), math.sqrt(gain / cin)))
        b = self.init(f"{scope}.bias", self.normal((cout,), 0.05))
        return self.node("Add", [self.node("MatMul", [x, w], scope), b], scope)

    def layernorm(self, x: str, scope: str, c: int) -> str:
        gamma = self.init(f"{scope}.weight", self.rng.uniform(0.8, 1.2, c).astype(np.float32))
        beta = self.init(f"{scope}.bias", self.normal((c,), 0.05))
        return self.node("LayerNormalization", [x, gamma, beta], scope, axis=-1, epsilon=1e-5)

    def runtime_shape(self, x: str, scope: str, dims: list[int], tail: list[int]) -> str:
        """Shape -> Gather -> Unsqueeze -> Concat: the shape [x.shape[d] for d in dims] + tail
        computed at run time, as exporters emit for x.view(x.size(0), ...)."""
        shape = self.node("Shape", [x], scope)
        parts = []
        for d in dims:
            dim = self.node("Gather", [shape, self.constant(scope, np.array(d, np.int64))], scope, axis=0)
            parts.append(self.node("Unsqueeze", [dim, self.constant(scope, np.array([0], np.int64))], scope))
        parts.append(self.constant(scope, np.array(tail, np.int64)))
        return self.node("Concat", parts, scope, axis=0)


# ---------------------------------------------------------------- architectures


@dataclass(frozen=True)
class ResNetConfig:
    stem_kernel: int  # 7 with stride 2 for ImageNet ResNets, 3 with stride 1 for small inputs
    stem_stride: int
    stem_channels: int
    stages: tuple[tuple[int, int, int], ...]  # (channels, blocks, stride of first block)
    classes: int


def resnet(b: GraphBuilder, x: str, cfg: ResNetConfig) -> str:
    """torchvision ResNet with BasicBlocks; BatchNormalization kept as real nodes."""
    c = cfg.stem_channels
    y = b.conv(x, "conv1", 3, c, cfg.stem_kernel, cfg.stem_stride)
    y = b.node("Relu", [b.batchnorm(y, "bn1", c)], "relu")
    y = b.node("MaxPool", [y], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for si, (cout, blocks, stride) in enumerate(cfg.stages, start=1):
        for bi in range(blocks):
            s = f"layer{si}.{bi}"
            st = stride if bi == 0 else 1
            branch = b.conv(y, f"{s}.conv1", c, cout, 3, st)
            branch = b.node("Relu", [b.batchnorm(branch, f"{s}.bn1", cout)], f"{s}.relu")
            branch = b.conv(branch, f"{s}.conv2", cout, cout, 3)
            # A smaller gamma on the branch's last BN keeps the residual sum from
            # doubling its variance at every block.
            branch = b.batchnorm(branch, f"{s}.bn2", cout, gamma_scale=0.5)
            if st != 1 or c != cout:
                shortcut = b.conv(y, f"{s}.downsample.0", c, cout, 1, st, gain=1.0)
                shortcut = b.batchnorm(shortcut, f"{s}.downsample.1", cout)
            else:
                shortcut = y
            y = b.node("Relu", [b.node("Add", [branch, shortcut], s)], f"{s}.relu_1")
            c = cout
    y = b.node("GlobalAveragePool", [y], "avgpool")
    y = b.node("Flatten", [y], "", axis=1)
    return b.gemm(y, "fc", c, cfg.classes)


@dataclass(frozen=True)
class MobileNetV2Config:
    stem_channels: int
    # (expansion t, output channels c, repeats n, stride of first repeat s), as in the paper.
    settings: tuple[tuple[int, int, int, int], ...]
    last_channels: int
    classes: int
    batchnorm: bool  # False: conv+BN already folded into a biased conv, as exporters emit


def mobilenet_v2(b: GraphBuilder, x: str, cfg: MobileNetV2Config) -> str:
    clip_min = b.init("clip_min", np.array(0.0, np.float32))
    clip_max = b.init("clip_max", np.array(6.0, np.float32))

    def conv_unit(
        y: str, scope: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, relu6: bool = True
    ) -> str:
        # The linear projection of a bottleneck gets a variance-preserving (gain 1) init.
        gain = 2.0 if relu6 else 1.0
        if cfg.batchnorm:
            y = b.conv(y, f"{scope}.0", cin, cout, k, stride, group, gain=gain)
            y = b.batchnorm(y, f"{scope}.1", cout, gamma_scale=1.0 if relu6 else 0.5)
        else:
            y = b.conv(y, f"{scope}.0", cin, cout, k, stride, group, bias=True, gain=gain)
        return b.node("Clip", [y, clip_min, clip_max], f"{scope}.2") if relu6 else y

    c = cfg.stem_channels
    y = conv_unit(x, "features.0", 3, c, 3, stride=2)
    idx = 1
    for t, cout, n, s in cfg.settings:
        for i in range(n):
            scope = f"features.{idx}.conv"
            stride = s if i == 0 else 1
            hidden = c * t
            h = y
            j = 0
            if t != 1:
                h = conv_unit(h, f"{scope}.{j}", c, hidden, 1)
                j += 1
            h = conv_unit(h, f"{scope}.{j}", hidden, hidden, 3, stride, group=hidden)
            h = conv_unit(h, f"{scope}.{j + 1}", hidden, cout, 1, relu6=False)
            if stride == 1 and c == cout:
                h = b.node("Add", [y, h], f"features.{idx}")
            y = h
            c = cout
            idx += 1
    y = conv_unit(y, f"features.{idx}", c, cfg.last_channels, 1)
    y = b.node("GlobalAveragePool", [y], "")
    y = b.node("Reshape", [y, b.runtime_shape(y, "", [0], [-1])], "")
    return b.gemm(y, "classifier.1", cfg.last_channels, cfg.classes)


@dataclass(frozen=True)
class TransformerConfig:
    seq: int
    hidden: int
    heads: int
    mlp: int


def transformer_block(b: GraphBuilder, x: str, cfg: TransformerConfig) -> str:
    """Pre-norm encoder block: x + Attn(LN(x)), then h + MLP(LN(h))."""
    d = cfg.hidden // cfg.heads
    ln1 = b.layernorm(x, "ln_1", cfg.hidden)
    split_shape = b.runtime_shape(x, "attn", [0, 1], [cfg.heads, d])  # [batch, seq, heads, d]

    def heads(name: str, perm: list[int]) -> str:
        y = b.linear(ln1, f"attn.{name}", cfg.hidden, cfg.hidden)
        y = b.node("Reshape", [y, split_shape], f"attn.{name}")
        return b.node("Transpose", [y], f"attn.{name}", perm=perm)

    q = heads("q_proj", [0, 2, 1, 3])  # [b, h, s, d]
    kt = heads("k_proj", [0, 2, 3, 1])  # [b, h, d, s]
    v = heads("v_proj", [0, 2, 1, 3])  # [b, h, s, d]
    scores = b.node("MatMul", [q, kt], "attn")
    scores = b.node("Div", [scores, b.init("attn.scale", np.array(math.sqrt(d), np.float32))], "attn")
    probs = b.node("Softmax", [scores], "attn", axis=-1)
    ctx = b.node("MatMul", [probs, v], "attn")
    ctx = b.node("Transpose", [ctx], "attn", perm=[0, 2, 1, 3])
    # Reshape's 0 copies the input dimension: [b, s, heads, d] -> [b, s, hidden].
    ctx = b.node("Reshape", [ctx, b.constant("attn", np.array([0, 0, cfg.hidden], np.int64))], "attn")
    h = b.node("Add", [x, b.linear(ctx, "attn.out_proj", cfg.hidden, cfg.hidden)], "")
    m = b.linear(b.layernorm(h, "ln_2", cfg.hidden), "mlp.fc1", cfg.hidden, cfg.mlp, gain=2.0)
    m = b.node("Gelu", [m], "mlp.act")
    m = b.linear(m, "mlp.fc2", cfg.mlp, cfg.hidden)
    return b.node("Add", [h, m], "")


# ---------------------------------------------------------------- model zoo


@dataclass(frozen=True)
class ModelSpec:
    name: str  # directory under models/
    seed: int
    opset: int
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    build: Callable[[GraphBuilder, str], str]  # (builder, input name) -> output name
    description: str
    full: bool = False


SPECS = [
    ModelSpec(
        "resnet_small",
        seed=1,
        opset=17,
        input_shape=(1, 3, 32, 32),
        output_shape=(1, 10),
        build=lambda b, x: resnet(b, x, ResNetConfig(3, 1, 24, ((24, 1, 1), (40, 1, 2), (40, 1, 1)), 10)),
        description="ResNet-style CNN: 3x3 stem (24 ch), MaxPool, 3 stages of BasicBlocks "
        "(24, 40 with a stride-2 1x1 projection, 40), BN as real nodes, GAP, Flatten, Gemm.",
    ),
    ModelSpec(
        "mobilenet_small",
        seed=2,
        opset=17,
        input_shape=(1, 3, 32, 32),
        output_shape=(1, 10),
        build=lambda b, x: mobilenet_v2(
            b, x, MobileNetV2Config(16, ((1, 8, 1, 1), (6, 12, 2, 2), (6, 20, 2, 2)), 72, 10, batchnorm=False)
        ),
        description="MobileNetV2-style CNN: inverted residuals (1x1 expand + Clip(0,6), 3x3 "
        "depthwise, 1x1 linear project, residual Add), BN folded into biased convs, stride-2 "
        "blocks, GAP, Shape/Gather/Unsqueeze/Concat/Reshape head, Gemm.",
    ),
    ModelSpec(
        "transformer_block",
        seed=3,
        opset=20,
        input_shape=(1, 16, 64),
        output_shape=(1, 16, 64),
        build=lambda b, x: transformer_block(b, x, TransformerConfig(seq=16, hidden=64, heads=4, mlp=256)),
        description="Pre-norm transformer encoder block, 4 heads: LayerNormalization, Q/K/V "
        "MatMul+Add, run-time-shaped Reshape + Transpose into heads, softmax attention, output "
        "projection, residual Add, LayerNormalization, MLP with Gelu (opset 20), residual Add.",
    ),
    ModelSpec(
        "full/resnet18",
        seed=4,
        opset=17,
        input_shape=(1, 3, 224, 224),
        output_shape=(1, 1000),
        build=lambda b, x: resnet(
            b, x, ResNetConfig(7, 2, 64, ((64, 2, 1), (128, 2, 2), (256, 2, 2), (512, 2, 2)), 1000)
        ),
        description="torchvision ResNet-18, BN as real nodes.",
        full=True,
    ),
    ModelSpec(
        "full/mobilenetv2",
        seed=5,
        opset=17,
        input_shape=(1, 3, 224, 224),
        output_shape=(1, 1000),
        build=lambda b, x: mobilenet_v2(
            b,
            x,
            MobileNetV2Config(
                32,
                (
                    (1, 16, 1, 1),
                    (6, 24, 2, 2),
                    (6, 32, 3, 2),
                    (6, 64, 4, 2),
                    (6, 96, 3, 1),
                    (6, 160, 3, 2),
                    (6, 320, 1, 1),
                ),
                1280,
                1000,
                batchnorm=True,
            ),
        ),
        description="torchvision MobileNetV2 (width 1.0), BN as real nodes, Reshape head.",
        full=True,
    ),
]


def build_model(spec: ModelSpec) -> tuple[onnx.ModelProto, np.random.Generator]:
    """The model with placeholder BatchNormalization statistics, and the generator
    that drew its weights, to draw the inputs next."""
    rng = np.random.default_rng(spec.seed)
    b = GraphBuilder(rng)
    out = spec.build(b, "input")
    for n in b.nodes:  # name the graph output plainly
        n.output[:] = ["output" if o == out else o for o in n.output]
    graph = helper.make_graph(
        b.nodes,
        spec.name.replace("/", "_"),
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, spec.input_shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, spec.output_shape)],
        b.inits,
    )
    opsets = [helper.make_opsetid("", spec.opset)]
    model = helper.make_model(
        graph,
        opset_imports=opsets,
        ir_version=helper.find_min_ir_version_for(opsets),
        producer_name="layoutopt scripts/gen_models.py",
        doc_string=spec.description,
    )
    onnx.checker.check_model(model, full_check=True)
    return model, rng


def calibrate_batchnorm(model: onnx.ModelProto, x: np.ndarray) -> None:
    """Set each BatchNormalization's running mean/var to the per-channel statistics of
    its input on a calibration input, in graph order, as training would leave them.
    With made-up statistics the activations drift by a constant factor per layer
    and vanish or blow up over a deep network."""
    inits = {t.name: i for i, t in enumerate(model.graph.initializer)}
    for n in model.graph.node:
        if n.op_type != "BatchNormalization":
            continue
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        probe.graph.output.append(helper.make_empty_tensor_value_info(n.input[0]))
        act = ort_session(probe).run([n.input[0]], {"input": x})[0].astype(np.float64)
        axes = (0, *range(2, act.ndim))
        for name, value in ((n.input[3], act.mean(axis=axes)), (n.input[4], act.var(axis=axes))):
            model.graph.initializer[inits[name]].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def check_activation_scale(model: onnx.ModelProto, x: np.ndarray) -> tuple[float, float]:
    """Run with every float node output exposed; fail if any layer's std leaves ACT_STD_RANGE."""
    probe = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    float_values = {vi.name for vi in probe.graph.value_info if vi.type.tensor_type.elem_type == TensorProto.FLOAT}
    graph_outputs = {o.name for o in probe.graph.output}
    for n in probe.graph.node:
        for o in n.output:
            if o in float_values and o not in graph_outputs:
                probe.graph.output.append(helper.make_empty_tensor_value_info(o))
    names = [o.name for o in probe.graph.output]
    stds = {
        n: float(v.std()) for n, v in zip(names, ort_session(probe).run(None, {"input": x}), strict=True) if v.size > 1
    }
    lo, hi = min(stds.values()), max(stds.values())
    bad = [f"{n}: std {s:.3g}" for n, s in stds.items() if not ACT_STD_RANGE[0] <= s <= ACT_STD_RANGE[1]]
    if bad:
        sys.exit(f"badly scaled activations in {model.graph.name}: " + "; ".join(bad))
    return lo, hi


def cross_check(model: onnx.ModelProto, x: np.ndarray, y: np.ndarray) -> None:
    """The onnxruntime output must agree with onnx's own Python reference evaluator,
    an independent implementation, to float32 rounding accumulated over the layers."""
    (r,) = ReferenceEvaluator(model).run(None, {"input": x})
    err = float(np.abs(r - y).max())
    if err > CROSS_CHECK_TOL * max(1.0, float(np.abs(y).max())):
        sys.exit(f"{model.graph.name}: onnxruntime and onnx.reference differ by {err:.3g}")


def write_case(out_dir: Path, model: onnx.ModelProto, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    """model.onnx + test_data_set_0/{input,output}_<i>.pb, as in ONNX backend test data."""
    data = out_dir / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    for stale in data.glob("*.pb"):
        stale.unlink()
    (out_dir / "model.onnx").write_bytes(model.SerializeToString())
    for kind, values, infos in (("input", inputs, model.graph.input), ("output", outputs, model.graph.output)):
        for i, (v, info) in enumerate(zip(values, infos, strict=True)):
            (data / f"{kind}_{i}.pb").write_bytes(numpy_helper.from_array(v, info.name).SerializeToString())


def summarize(spec: ModelSpec, model: onnx.ModelProto) -> dict:
    ops = collections.Counter(n.op_type for n in model.graph.node)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    return {
        "spec": spec,
        "ops": ", ".join(f"{op} {k}" for op, k in sorted(ops.items())),
        "nodes": len(model.graph.node),
        "params": params,
        "bytes": model.ByteSize(),
    }


README_HEAD = """\
# Bundled models

Generated by `python3 scripts/gen_models.py` (this file too; do not edit by hand).
Weights are seeded random (He-style init), so the models compute nothing meaningful but
have the structure and the numerics of real exports. Each model directory holds
`model.onnx` and `test_data_set_0/input_0.pb`, `output_0.pb`: serialized
`onnx.TensorProto`s named after the graph input/output, in the layout of the ONNX
backend test cases. The input is seeded standard-normal; the reference output comes
from onnxruntime {ort_version} (CPUExecutionProvider, graph optimizations disabled,
one thread), and agrees with `onnx.reference.ReferenceEvaluator` within {tol}
(relative to max(1, max |output|)).
BatchNormalization running statistics are set from the activations on a separate seeded
calibration input, as training would leave them; the script checks every layer's
activation std stays within {lo}..{hi}.

The `models/full/` models are gitignored: build them with
`python3 scripts/gen_models.py --full`.

`resnet_small_f16` and `mobilenet_small_f16` are the same models stored in float16
(`python3 scripts/gen_f16_models.py`): every float initializer and value is float16,
the input is the float32 test input rounded to float16, and the reference output is
onnxruntime's run of the float16 model.

| model | input | output | opset | nodes | parameters | model.onnx | ops (count) | description |
|---|---|---|---|---|---|---|---|---|
"""


def dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def write_readme(rows: list[dict]) -> None:
    text = README_HEAD.format(
        ort_version=ort.__version__, tol=CROSS_CHECK_TOL, lo=ACT_STD_RANGE[0], hi=ACT_STD_RANGE[1]
    )
    for r in rows:
        s = r["spec"]
        text += (
            f"| `{s.name}` | {dims(s.input_shape)} | {dims(s.output_shape)} | {s.opset} | {r['nodes']} "
            f"| {r['params']:,} | {r['bytes'] / 1024:,.0f} KiB | {r['ops']} | {s.description} |\n"
        )
    (MODELS / "README.md").write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--full", action="store_true", help="also build full-size ResNet-18 and MobileNetV2 into models/full/"
    )
    args = ap.parse_args()
    rows = []
    for spec in SPECS:
        model, rng = build_model(spec)
        rows.append(summarize(spec, model))
        if spec.full and not args.full:
            continue
        calibration = rng.standard_normal(spec.input_shape).astype(np.float32)
        x = rng.standard_normal(spec.input_shape).astype(np.float32)
        calibrate_batchnorm(model, calibration)
        lo, hi = check_activation_scale(model, x)
        (y,) = ort_session(model).run(None, {"input": x})
        cross_check(model, x, y)
        write_case(MODELS / spec.name, model, [x], [y])
        print(
            f"{spec.name}: {rows[-1]['nodes']} nodes, {rows[-1]['params']:,} params, "
            f"layer std {lo:.3g}..{hi:.3g}, output std {y.std():.3g} max |y| {np.abs(y).max():.3g}"
        )
    write_readme(rows)


if __name__ == "__main__":
    main()
