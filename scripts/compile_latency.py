#!/usr/bin/env python3
"""Compile latency of layoutopt against its peer's session creation: for every
model, import, plan and compile with empty measurement caches (cold), then
again with the caches the cold run filled (warm), each stage timed apart by
`layoutopt bench --json`, beside the wall time of the whole process. The peer
of an ONNX model is onnxruntime (`InferenceSession` creation), of a TFLite
model the TFLite interpreter (`Interpreter` plus `allocate_tensors`, with its
default XNNPACK delegate), each timed in a fresh process. Prints one table.

    python3 scripts/compile_latency.py MODEL.onnx|MODEL.tflite... \\
        [--layoutopt target/release/layoutopt] [--threads 1] [--rounds 3] [--deep 1000]

`--deep N` adds a generated ONNX model of about N nodes (`deep_resnet`): a
residual network of 3x3 convolutions, as deep as N allows, whose few distinct
layer shapes repeat, as a deep network's do.

Each figure is the median of --rounds rounds; a cold round starts from an
empty cache folder of its own. Run it on a quiet machine and note `vmstat`:
measurements taken under load are cached all the same, so a warm figure
after a loaded cold round still holds.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEER = {
    ".onnx": (
        "import onnxruntime as ort, sys, time\n"
        "o = ort.SessionOptions(); o.intra_op_num_threads = int(sys.argv[2])\n"
        "t = time.perf_counter()\n"
        "ort.InferenceSession(sys.argv[1], o, providers=['CPUExecutionProvider'])\n"
        "print((time.perf_counter() - t) * 1e3)\n"
    ),
    ".tflite": (
        "import tensorflow as tf, sys, time\n"
        "t = time.perf_counter()\n"
        "i = tf.lite.Interpreter(model_path=sys.argv[1], num_threads=int(sys.argv[2]))\n"
        "i.allocate_tensors()\n"
        "print((time.perf_counter() - t) * 1e3)\n"
    ),
}


def layoutopt_stages(exe: str, model: Path, threads: int, cache: str) -> dict:
    """Import, plan and compile milliseconds of one `bench` process, and its wall time."""
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    t = time.perf_counter()
    r = subprocess.run(
        [exe, "bench", str(model), "--runs", "1", "--warmup", "0", "--threads", str(threads), "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = (time.perf_counter() - t) * 1e3
    doc = json.loads(r.stdout)  # docs/json-schema.md
    return {
        "import": doc["import_ms"],
        "plan": doc["plan_ms"],
        "compile": doc["timing"]["compile_ms"],
        "wall": wall,
    }


def deep_resnet(nodes: int, path: Path) -> Path:
    """Writes to `path` a residual network of about `nodes` ONNX nodes on a
    1x3x32x32 input: a stem convolution, then four stages of 32, 64, 128 and 256
    channels (each after the first halving the image, its first block's
    shortcut a strided 1x1 convolution) of blocks Conv-Relu-Conv-Add-Relu, and
    a global average pool. Weights are seeded, scaled by 1/sqrt(fan-in) (the
    residual branch's second convolution by a fifth of that)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes_out, inits = [], []

    def conv(x, cin, cout, k, stride, gain=1.0):
        name = f"conv{len(nodes_out)}"
        w = (gain * rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, name + "_w"))
        inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), name + "_b"))
        nodes_out.append(
            helper.make_node(
                "Conv",
                [x, name + "_w", name + "_b"],
                [name],
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[k // 2] * 4,
            )
        )
        return name

    def op(kind, *xs):
        name = f"{kind.lower()}{len(nodes_out)}"
        nodes_out.append(helper.make_node(kind, list(xs), [name]))
        return name

    widths = [32, 64, 128, 256]
    blocks = max(1, (nodes - 4) // (5 * len(widths)))
    x = op("Relu", conv("x", 3, widths[0], 3, 1))
    cin = widths[0]
    for stage, width in enumerate(widths):
        for b in range(blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            # A residual branch scaled down, as a trained network's is, so
            # that activations stay bounded over the blocks.
            y = conv(op("Relu", conv(x, cin, width, 3, stride)), width, width, 3, 1, gain=0.2)
            shortcut = conv(x, cin, width, 1, stride) if stride > 1 else x
            x = op("Relu", op("Add", y, shortcut))
            cin = width
    out = op("GlobalAveragePool", x)
    graph = helper.make_graph(
        nodes_out,
        "deep_resnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, widths[-1], 1, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    print(f"{path}: {len(nodes_out)} nodes, {blocks} blocks per stage", file=sys.stderr)
    return path


def peer_ms(model: Path, threads: int) -> float | None:
    code = PEER.get(model.suffix)
    if code is None:
        return None
    r = subprocess.run([sys.executable, "-c", code, str(model), str(threads)], capture_output=True, text=True)
    return float(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--layoutopt", default="target/release/layoutopt")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--deep", type=int, metavar="NODES", help="add a generated residual network of about NODES nodes")
    args = ap.parse_args()
    generated = tempfile.TemporaryDirectory()
    if args.deep:
        path = Path(generated.name) / f"deep{args.deep}" / "model.onnx"
        path.parent.mkdir()
        args.models.append(deep_resnet(args.deep, path))
    cols = ["import", "plan", "compile", "wall"]
    print(f"threads {args.threads}, medians of {args.rounds} rounds, ms")
    print(
        f"{'model':<32} "
        + " ".join(f"{'cold ' + c:>12}" for c in cols)
        + " "
        + " ".join(f"{'warm ' + c:>12}" for c in cols)
        + f" {'peer':>8}"
    )
    for model in args.models:
        cold, warm, peer = [], [], []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as cache:
                cold.append(layoutopt_stages(args.layoutopt, model, args.threads, cache))
                warm.append(layoutopt_stages(args.layoutopt, model, args.threads, cache))
            peer.append(peer_ms(model, args.threads))

        def med(rows, c):
            return statistics.median(r[c] for r in rows)

        peers = [p for p in peer if p is not None]
        name = f"{model.parent.name}/{model.name}"
        print(
            f"{name:<32} "
            + " ".join(f"{med(cold, c):>12.0f}" for c in cols)
            + " "
            + " ".join(f"{med(warm, c):>12.0f}" for c in cols)
            + (f" {statistics.median(peers):>8.0f}" if peers else f" {'-':>8}")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
