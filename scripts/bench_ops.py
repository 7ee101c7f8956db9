#!/usr/bin/env python3
"""Times single-op ONNX models on layoutopt (planner `keep`: every tensor in the model's
NCHW layout; planner `global`: the planned layouts, NCHW at the interface) side by side
with onnxruntime, and prints per op the three median latencies and layoutopt/onnxruntime.

    python3 scripts/bench_ops.py [--threads 2] [--rounds 3] [--runs 50] [--ops add,relu]

Shapes are 1x256x56x56 f32 unless noted. Two-input ops take both operands as graph
inputs (Add: two 1x256x56x56; Concat: two 1x128x56x56 into 1x256x56x56; Where: a bool
mask and two 1x256x56x56). Each model is written to DIR/<op>/model.onnx with
test_data_set_0/ (seeded inputs, onnxruntime's outputs), so both tools read the same
inputs and `layoutopt run` checks its outputs against onnxruntime's.

Each round runs, per op, `layoutopt bench --planner keep`, `--planner global` and a
fresh onnxruntime session (default graph optimizations; the order reversed every other
round); a row reports the median over rounds of each tool's median over --runs. Planning,
compiling and session creation are not timed; a timed run is one whole inference call
on inputs already in memory. The CPU time stolen by the hypervisor and used by other
processes during the timed rounds comes from /proc/stat. --verbose adds layoutopt's
per-step profile per plan.

    python3 scripts/bench_ops.py --paths [--threads 1] [--ops maxpool,softmax]

instead times every op through both of layoutopt's kernel paths (`--kernels native`,
the hand-written kernels, and `--kernels generic`, generated TIR code for every op that
lowers to it) for each target layout family (nchw, nhwc, nchw16c; the global planner
decides whether the op runs in it), and prints each op step's time and its share of
this machine's roofline (`bench --profile`'s `% roof` column), with how many ops reach
60% on each path.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

# run_zoo.py knows the file names `layoutopt run --output` writes.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_zoo import npy_name  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PLANS = ("keep", "global")
TARGET_RATIO = 1.3  # the acceptance bar of the single-op benchmark
NCHW = [1, 256, 56, 56]
F32 = TensorProto.FLOAT


def f32(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def build(name: str, nodes, inputs: dict, outputs: dict, inits: dict | None = None):
    """A model of `nodes`: graph inputs {name: array}, f32 outputs {name: shape}, weights
    {name: array}. The checker's strict shape inference validates the output shapes."""
    graph = helper.make_graph(
        nodes,
        name,
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in inputs.items()
        ],
        [helper.make_tensor_value_info(k, F32, s) for k, s in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(
        graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets), producer_name="bench_ops.py"
    )
    onnx.checker.check_model(model, full_check=True)
    return model, inputs


# name -> (description, builder(rng) -> (model, inputs)); in the table's order.
OPS: dict[str, tuple[str, Callable]] = {}


def op(name: str, desc: str):
    def register(fn):
        OPS[name] = (desc, fn)
        return fn

    return register


def normal(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


@op("add", "Add 1x256x56x56 + 1x256x56x56")
def _add(rng):
    node = helper.make_node("Add", ["a", "b"], ["y"])
    return build("add", [node], {"a": normal(rng, NCHW), "b": normal(rng, NCHW)}, {"y": NCHW})


@op("relu", "Relu")
def _relu(rng):
    return build("relu", [helper.make_node("Relu", ["x"], ["y"])], {"x": normal(rng, NCHW)}, {"y": NCHW})


@op("bn_relu", "BatchNormalization + Relu")
def _bn_relu(rng):
    c = NCHW[1]
    inits = {
        "scale": f32(rng.uniform(0.5, 1.5, c)),
        "bias": f32(rng.uniform(-0.5, 0.5, c)),
        "mean": f32(rng.uniform(-0.5, 0.5, c)),
        "var": f32(rng.uniform(0.5, 1.5, c)),
    }
    nodes = [
        helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["t"], epsilon=1e-5),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    return build("bn_relu", nodes, {"x": normal(rng, NCHW)}, {"y": NCHW}, inits)


@op("concat", "Concat 2x 1x128x56x56 -> 1x256x56x56")
def _concat(rng):
    half = [1, 128, 56, 56]
    node = helper.make_node("Concat", ["a", "b"], ["y"], axis=1)
    return build("concat", [node], {"a": normal(rng, half), "b": normal(rng, half)}, {"y": NCHW})


@op("transpose_nhwc", "Transpose to NHWC -> 1x56x56x256")
def _transpose(rng):
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])
    return build("transpose_nhwc", [node], {"x": normal(rng, NCHW)}, {"y": [1, 56, 56, 256]})


@op("maxpool", "MaxPool 3x3/2 pad 1 -> 28x28")
def _maxpool(rng):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return build("maxpool", [node], {"x": normal(rng, NCHW)}, {"y": [1, 256, 28, 28]})


@op("softmax", "Softmax 1x12x128x128, last axis")
def _softmax(rng):
    shape = [1, 12, 128, 128]
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    return build("softmax", [node], {"x": normal(rng, shape)}, {"y": shape})


@op("layernorm", "LayerNormalization 1x512x768, last axis")
def _layernorm(rng):
    shape = [1, 512, 768]
    inits = {"gamma": f32(rng.uniform(0.5, 1.5, 768)), "beta": f32(rng.uniform(-0.5, 0.5, 768))}
    node = helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)
    return build("layernorm", [node], {"x": normal(rng, shape)}, {"y": shape}, inits)


@op("gelu", "GELU x*0.5*(1+erf(x/sqrt2)) 1x512x3072")
def _gelu(rng):
    # The five-node Erf form that BERT exports contain (opset 17 has no Gelu op).
    shape = [1, 512, 3072]
    inits = {"sqrt2": f32(math.sqrt(2.0)), "one": f32(1.0), "half": f32(0.5)}
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["x", "p"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    return build("gelu", nodes, {"x": normal(rng, shape)}, {"y": shape}, inits)


@op("reducemean", "ReduceMean over H,W keepdims -> 1x256x1x1")
def _reducemean(rng):
    # The squeeze of a squeeze-excite block as TF-converted models spell it.
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)
    return build("reducemean", [node], {"x": normal(rng, NCHW)}, {"y": [1, 256, 1, 1]})


@op("where", "Where(bool mask, a, b), all 1x256x56x56")
def _where(rng):
    inputs = {"cond": rng.random(NCHW) < 0.5, "a": normal(rng, NCHW), "b": normal(rng, NCHW)}
    return build("where", [helper.make_node("Where", ["cond", "a", "b"], ["y"])], inputs, {"y": NCHW})


@op("resize", "Resize nearest 2x -> 1x256x112x112")
def _resize(rng):
    # torch's nn.Upsample(scale_factor=2) export, as in FPN and YOLO necks.
    node = helper.make_node(
        "Resize",
        ["x", "", "scales"],
        ["y"],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    inits = {"scales": f32([1, 1, 2, 2])}
    return build("resize", [node], {"x": normal(rng, NCHW)}, {"y": [1, 256, 112, 112]}, inits)


def _resize_by(name: str, mode: str, side: int, scale: float):
    """torch's F.interpolate(mode=..., align_corners=False) export: 1x256 x side x side
    resized by `scale` with half_pixel coordinates."""

    def fn(rng):
        shape, out = [1, 256, side, side], [1, 256, int(side * scale), int(side * scale)]
        node = helper.make_node(
            "Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode="half_pixel"
        )
        inits = {"scales": f32([1, 1, scale, scale])}
        return build(name, [node], {"x": normal(rng, shape)}, {"y": out}, inits)

    return fn


op("resize_linear", "Resize linear 2x 1x256x28x28 -> 56x56")(_resize_by("resize_linear", "linear", 28, 2.0))
op("resize_linear_down", "Resize linear 0.5x -> 1x256x28x28")(_resize_by("resize_linear_down", "linear", 56, 0.5))
op("resize_cubic", "Resize cubic 2x 1x256x28x28 -> 56x56")(_resize_by("resize_cubic", "cubic", 28, 2.0))


@op("pad", "Pad constant 0, 1 each side -> 58x58")
def _pad(rng):
    inits = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int64)}
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant")
    return build("pad", [node], {"x": normal(rng, NCHW)}, {"y": [1, 256, 58, 58]}, inits)


@op("slice", "Slice channels 0:128 -> 1x128x56x56")
def _slice(rng):
    # A CSP-style channel split.
    inits = {k: np.array([v], dtype=np.int64) for k, v in (("starts", 0), ("ends", 128), ("axes", 1))}
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])
    return build("slice", [node], {"x": normal(rng, NCHW)}, {"y": [1, 128, 56, 56]}, inits)


@op("gather", "Gather axis 1, 256 permuted channel indices")
def _gather(rng):
    # A channel shuffle written as a gather.
    inits = {"idx": rng.permutation(256).astype(np.int64)}
    node = helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)
    return build("gather", [node], {"x": normal(rng, NCHW)}, {"y": NCHW}, inits)


@op("avgpool", "AveragePool 3x3/1 pad 1 (pads excluded)")
def _avgpool(rng):
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    return build("avgpool", [node], {"x": normal(rng, NCHW)}, {"y": NCHW})


@op("gap", "GlobalAveragePool -> 1x256x1x1")
def _gap(rng):
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    return build("gap", [node], {"x": normal(rng, NCHW)}, {"y": [1, 256, 1, 1]})


def _conv(name: str, cin: int, cout: int, side: int, groups: int, k: int, stride: int, act: str = "Relu"):
    """A biased convolution cin -> cout channels followed by `act` (an ONNX unary op),
    as exporters fold batch norm into it."""

    def fn(rng):
        out = (side + 2 * (k // 2) - k) // stride + 1
        inits = {
            "w": f32(normal(rng, [cout, cin // groups, k, k]) * math.sqrt(2.0 / (k * k * cin // groups))),
            "b": f32(rng.uniform(-0.1, 0.1, cout)),
        }
        conv = helper.make_node(
            "Conv", ["x", "w", "b"], ["t"], group=groups, kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4
        )
        nodes = [conv, helper.make_node(act, ["t"], ["y"])]
        return build(name, nodes, {"x": normal(rng, [1, cin, side, side])}, {"y": [1, cout, out, out]}, inits)

    return fn


# Grouped convolutions of every width the real models have: ResNeXt50-32x4d's 4 and 8
# channels per group, RegNetY's 16 (also strided, as each stage's first block), and
# ShuffleNet's three 1x1 groups; a depthwise one beside them; and the stems of RGB
# input every CNN starts with (ResNet's 7x7, MobileNet's 3x3); MobileNetV3's blocks end
# in HardSwish, which the epilogue applies after the clamp.
for _name, _desc, _shape in [
    ("gconv_g4", "Conv 3x3 1x128x56x56, 32 groups of 4 + Relu", (128, 128, 56, 32, 3, 1)),
    ("gconv_g8", "Conv 3x3 1x256x28x28, 32 groups of 8 + Relu", (256, 256, 28, 32, 3, 1)),
    ("gconv_g16", "Conv 3x3 1x144x28x28, 9 groups of 16 + Relu", (144, 144, 28, 9, 3, 1)),
    ("gconv_g16_s2", "Conv 3x3/2 1x320x28x28, 20 groups of 16 + Relu", (320, 320, 28, 20, 3, 2)),
    ("gconv1x1_g3", "Conv 1x1 1x240x28x28, 3 groups of 80 + Relu", (240, 240, 28, 3, 1, 1)),
    ("dwconv", "Conv 3x3 1x256x56x56 depthwise + Relu", (256, 256, 56, 256, 3, 1)),
    ("stem7x7", "Conv 7x7/2 1x3x224x224 -> 64 + Relu", (3, 64, 224, 1, 7, 2)),
    ("stem3x3", "Conv 3x3/2 1x3x224x224 -> 32 + Relu", (3, 32, 224, 1, 3, 2)),
    ("dwconv_hswish", "Conv 5x5 1x240x14x14 depthwise + HardSwish", (240, 240, 14, 240, 5, 1, "HardSwish")),
    ("stem3x3_hswish", "Conv 3x3/2 1x3x224x224 -> 16 + HardSwish", (3, 16, 224, 1, 3, 2, "HardSwish")),
]:
    op(_name, _desc)(_conv(_name, *_shape))


def save_pb(path: Path, name: str, a: np.ndarray):
    path.write_bytes(numpy_helper.from_array(a, name).SerializeToString())


def ort_session(model: Path, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])


def write_case(name: str, out: Path, threads: int):
    """Builds op `name` into out/name/; returns (model path, inputs, onnxruntime outputs)."""
    model, inputs = OPS[name][1](np.random.default_rng(0))
    d = out / name
    (d / "test_data_set_0").mkdir(parents=True, exist_ok=True)
    path = d / "model.onnx"
    onnx.save(model, path)
    sess = ort_session(path, threads)
    names = [o.name for o in sess.get_outputs()]
    expected = dict(zip(names, sess.run(None, inputs), strict=True))
    for k, (n, a) in enumerate(inputs.items()):
        save_pb(d / "test_data_set_0" / f"input_{k}.pb", n, a)
    for k, (n, a) in enumerate(expected.items()):
        save_pb(d / "test_data_set_0" / f"output_{k}.pb", n, a)
    return path, inputs, expected


def first_line(text: str) -> str:
    lines = [s.strip() for s in text.splitlines() if s.strip()]
    return lines[0] if lines else "(no message)"


def layoutopt(exe: str, args: list[str]):
    """Runs the CLI: (completed process, None) or (None, the first line of stderr)."""
    try:
        r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {first_line(r.stderr)}"
    return r, None


def layoutopt_check(exe: str, model: Path, plan: str, threads: int, expected: dict) -> dict:
    """One `layoutopt run`: max |error| / max |onnxruntime output| over the outputs, and
    the plan's transform and fallback counts."""
    with tempfile.TemporaryDirectory() as tmp:
        r, err = layoutopt(exe, ["run", str(model), "--planner", plan, "--threads", str(threads), "--output", tmp])
        if err:
            return {"error": err}
        rel = 0.0
        for n, e in expected.items():
            got = Path(tmp) / npy_name(n)
            if not got.exists():
                return {"error": f"no output {n!r} written"}
            a = np.load(got)
            if a.shape != e.shape:
                return {"error": f"output {n!r} has shape {list(a.shape)}, onnxruntime's {list(e.shape)}"}
            diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
            rel = max(rel, float(np.max(diff) / max(float(np.max(np.abs(e))), 1e-30)))
    kept = re.search(r"(\d+) transforms kept", r.stdout)
    fallbacks = re.search(r"(\d+) of (\d+) steps .*?run on the reference executor", r.stderr)
    return {
        "rel_err": rel,
        "transforms_kept": int(kept.group(1)) if kept else None,
        "fallbacks": int(fallbacks.group(1)) if fallbacks else 0,
    }


def bench_args(model: Path, plan: str, args) -> list[str]:
    flags = f"--planner {plan} --threads {args.threads} --runs {args.runs} --warmup {args.warmup}"
    return ["bench", str(model), *flags.split()]


def layoutopt_ms(exe: str, model: Path, plan: str, args):
    """layoutopt's p50 over --runs: (ms, None) or (None, error)."""
    r, err = layoutopt(exe, [*bench_args(model, plan, args), "--json"])
    if err:
        return None, err
    return json.loads(r.stdout)["timing"]["p50_ms"], None  # docs/json-schema.md


def layoutopt_profile(exe: str, model: Path, plan: str, args) -> str:
    """The per-step profile of one extra bench run (its whole output, for --verbose)."""
    r, err = layoutopt(exe, [*bench_args(model, plan, args), "--profile"])
    return err if err else r.stdout.rstrip()


def ort_ms(model: Path, inputs: dict, args):
    """onnxruntime's median over --runs after --warmup, in a fresh session."""
    try:
        sess = ort_session(model, args.threads)
        for _ in range(args.warmup):
            sess.run(None, inputs)
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            sess.run(None, inputs)
            times.append((time.perf_counter() - t) * 1e3)
    except Exception as e:  # one bad op must not stop the table
        return None, first_line(str(e))
    return statistics.median(times), None


def cpu_times():
    """(steal, busy, total, ours) in jiffies: the machine's from /proc/stat, `ours` this
    process's and its finished children's CPU time. None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user).
    v = [int(x) for x in fields[1:9]]
    t = os.times()
    ours = (t.user + t.system + t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK")
    return v[7], v[0] + v[1] + v[2] + v[5] + v[6], sum(v), ours


def cpu_shares(start, end):
    """Percent of all CPU time during the timed rounds that the hypervisor stole and that
    other processes used (they compete with both runtimes on a shared machine)."""
    if not start or not end:
        return None, None
    steal, busy, total, ours = (b - a for a, b in zip(start, end, strict=True))
    total = max(total, 1)
    return 100.0 * steal / total, max(0.0, 100.0 * (busy - ours) / total)


def num(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x is not None else "fail"


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(res: dict):
    """Adds to one op's results the median over rounds per tool and each plan's ratio to
    onnxruntime; a tool that failed in any round has neither."""
    med = {t: statistics.median(v) if v and t not in res["errors"] else None for t, v in res["times"].items()}
    res["median_ms"] = med
    res["ratio"] = {p: med[p] / med["ort"] if med[p] is not None and med["ort"] is not None else None for p in PLANS}


def report(names: list[str], results: dict, args, steal: float | None, others: float | None):
    """The table: per op the median over rounds per tool, the ratios, and the max
    relative error of each plan against onnxruntime."""
    print(
        f"median latency (ms), {args.threads} threads, median over {args.rounds} rounds of {args.runs} runs "
        f"after {args.warmup} warm-up; onnxruntime {ort.__version__}"
    )
    head = (
        f"{'op':<15} {'keep':>8} {'global':>8} {'ort':>8} {'keep/ort':>9} {'glob/ort':>9} "
        f"{'err keep':>9} {'err glob':>9}  description"
    )
    print(head)
    print("-" * len(head))
    for n in names:
        res = results[n]
        errs = [num(res["check"][p].get("rel_err"), ".1e") for p in PLANS]
        cells = [num(res["median_ms"][t], ".3f") for t in (*PLANS, "ort")]
        cells += [num(res["ratio"][p], ".2f") + "x" if res["ratio"][p] is not None else "-" for p in PLANS]
        print(
            f"{n:<15} {cells[0]:>8} {cells[1]:>8} {cells[2]:>8} {cells[3]:>9} {cells[4]:>9} "
            f"{errs[0]:>9} {errs[1]:>9}  {res['desc']}"
        )
        # A failure's first line goes under its row, so the table stays aligned.
        for what, err in [
            *res["errors"].items(),
            *((f"run --planner {p}", c["error"]) for p, c in res["check"].items() if "error" in c),
        ]:
            print(f"{'':<15} {what}: {err[:160]}")
        for p in PLANS:
            if res["check"][p].get("fallbacks"):
                print(f"{'':<15} {p}: {res['check'][p]['fallbacks']} step(s) on the reference executor")
    print("-" * len(head))
    for p in PLANS:
        r = [results[n]["ratio"][p] for n in names if results[n]["ratio"][p] is not None]
        within = sum(x <= TARGET_RATIO for x in r)
        print(
            f"{p:<7} layoutopt/onnxruntime: geometric mean {num(geomean(r), '.2f')}x over {len(r)} ops, "
            f"{within}/{len(names)} ops at most {TARGET_RATIO}x"
        )
    # A single op between NCHW graph inputs and outputs may leave nothing to re-layout.
    same = sum(results[n]["check"]["global"].get("transforms_kept") == 0 for n in names)
    print(f"global plans with 0 layout transforms (so the keep plan's layouts): {same}/{len(names)} ops")
    if steal is None:
        print("CPU steal and other load: n/a (no /proc/stat)")
    else:
        print(f"during the timed rounds: CPU steal {steal:.1f}%, other processes {others:.1f}% of all CPU time")
    if args.verbose:
        for n in names:
            for p in PLANS:
                print(f"\n== {n}, plan {p}: layoutopt bench --profile\n{results[n]['profile'][p]}")


KERNEL_PATHS = ("native", "generic")
FAMILIES = ("nchw", "nhwc", "nchw16c")
ROOF_GOAL = 60.0  # percent of the roofline every memory-bound op should reach
# One step row of `bench --profile`: ms, predicted ms, share, GB/s, GFLOP/s, flop/B,
# % roof, then the kind (which may hold spaces) and the step name.
STEP_ROW = re.compile(r"^\s*([\d.]+)\s+[\d.]+\s+[\d.]+%\s+\S+\s+\S+\s+\S+\s+([\d.]+)%\s+(.+?)\s+(\S+)$")


def op_steps(exe: str, model: Path, family: str, path: str, args):
    """The op's steps (layout transforms left out) in one `bench --profile`:
    [(ms, % roof, kind)], or the error's first line."""
    flags = f"--planner global --target {family} --kernels {path} --threads {args.threads} --runs {args.runs}"
    r, err = layoutopt(exe, ["bench", str(model), *flags.split(), "--profile"])
    if err:
        return err
    rows = [STEP_ROW.match(line) for line in r.stdout.splitlines()]
    steps = [(float(m[1]), float(m[2]), m[3]) for m in rows if m]
    return [s for s in steps if s[2] != "LayoutTransform"]


def report_paths(names: list[str], args) -> int:
    """--paths: every op through both kernel paths in every layout family."""
    print(f"per op step: median ms and % of the roofline, {args.threads} threads, {args.runs} runs")
    print(f"{'op':<15} {'family':<8} " + " ".join(f"{p + ' ms':>11} {'% roof':>7}" for p in KERNEL_PATHS) + "  kinds")
    reached = {p: 0 for p in KERNEL_PATHS}
    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        for n in names:
            path, _, _ = write_case(n, out, args.threads)
            for family in FAMILIES:
                cells, kinds = [], set()
                for kp in KERNEL_PATHS:
                    steps = op_steps(args.layoutopt, path, family, kp, args)
                    if isinstance(steps, str) or not steps:
                        cells.append(f"{'fail':>11} {'-':>7}")
                        kinds.add(steps if isinstance(steps, str) else "no step")
                        continue
                    ms = sum(s[0] for s in steps)
                    roof = min(s[1] for s in steps)
                    reached[kp] += roof >= ROOF_GOAL
                    kinds.update(s[2] for s in steps)
                    cells.append(f"{ms:>11.3f} {roof:>6.1f}%")
                rows += 1
                print(f"{n:<15} {family:<8} " + " ".join(cells) + "  " + ", ".join(sorted(kinds)))
    for kp in KERNEL_PATHS:
        print(f"{kp}: {reached[kp]}/{rows} op/family rows at >= {ROOF_GOAL:.0f}% of the roofline")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layoutopt", default=str(REPO / "target/release/layoutopt"), help="the layoutopt binary")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=50, help="timed runs per tool per round")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ops", help=f"comma-separated subset of: {','.join(OPS)}")
    ap.add_argument("--out", type=Path, help="keep the models in DIR (default: a temporary directory)")
    ap.add_argument("--json", type=Path, help="also write the results to FILE")
    ap.add_argument("--verbose", action="store_true", help="print layoutopt's per-step profile of every op and plan")
    ap.add_argument("--paths", action="store_true", help="compare the native and generic kernel paths instead")
    args = ap.parse_args()
    names = args.ops.split(",") if args.ops else list(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        print(f"unknown op(s) {','.join(unknown)}; known: {','.join(OPS)}", file=sys.stderr)
        return 2
    if not Path(args.layoutopt).is_file():
        print(f"no layoutopt binary at {args.layoutopt}: cargo build --release first", file=sys.stderr)
        return 1
    if args.paths:
        return report_paths(names, args)

    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        cases, results = {}, {}
        for n in names:
            path, inputs, expected = write_case(n, out, args.threads)
            cases[n] = (path, inputs)
            results[n] = {
                "desc": OPS[n][0],
                "check": {p: layoutopt_check(args.layoutopt, path, p, args.threads, expected) for p in PLANS},
                "times": {t: [] for t in (*PLANS, "ort")},
                "errors": {},
            }
            if args.verbose:
                results[n]["profile"] = {p: layoutopt_profile(args.layoutopt, path, p, args) for p in PLANS}

        start = cpu_times()
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
            for n in names:
                path, inputs = cases[n]
                tools = [*PLANS, "ort"]
                # Alternate the order so drift in machine load does not favour one tool.
                for tool in tools if r % 2 == 0 else tools[::-1]:
                    if tool == "ort":
                        ms, err = ort_ms(path, inputs, args)
                    else:
                        ms, err = layoutopt_ms(args.layoutopt, path, tool, args)
                    if err:
                        results[n]["errors"].setdefault(tool, err)
                    else:
                        results[n]["times"][tool].append(ms)
        end = cpu_times()

    steal, others = cpu_shares(start, end)
    for n in names:
        summarize(results[n])
    report(names, results, args, steal, others)
    if args.json:
        config = {k: getattr(args, k) for k in ("threads", "rounds", "runs", "warmup")}
        doc = {
            "config": config,
            "cpu_steal_pct": steal,
            "other_processes_cpu_pct": others,
            "onnxruntime": ort.__version__,
            "ops": results,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
