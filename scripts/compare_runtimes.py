#!/usr/bin/env python3
"""Time layoutopt, onnxruntime and tract on the same models, input and thread
count; print one table of median latencies (and layoutopt's ratio to
onnxruntime). Normally started by compare_runtimes.sh, which sets up the
virtualenv with onnxruntime, tract, onnx and numpy.

The input is the model's test_data_set_0/input_0.pb when present, else seeded
uniform noise in [0, 1); layoutopt reads the same .pb (or, without one, its own
seeded noise: latency does not depend on the values).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import tract


def model_input(model: Path, session: ort.InferenceSession) -> np.ndarray:
    pb = model.parent / "test_data_set_0" / "input_0.pb"
    if pb.exists():
        t = onnx.TensorProto()
        t.ParseFromString(pb.read_bytes())
        return onnx.numpy_helper.to_array(t)
    shape = [d if isinstance(d, int) else 1 for d in session.get_inputs()[0].shape]
    return np.random.default_rng(0).random(shape, dtype=np.float32)


def median_ms(fn, warmup: int, runs: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def time_onnxruntime(model: Path, x: np.ndarray, threads: int, warmup: int, runs: int):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return median_ms(lambda: sess.run(None, {name: x}), warmup, runs)


def time_tract(model: Path, x: np.ndarray, warmup: int, runs: int):
    onnx_loader = tract.onnx()
    if hasattr(onnx_loader, "model_for_path"):  # tract-python before 0.22
        m = onnx_loader.model_for_path(str(model)).into_optimized().into_runnable()
    else:  # 0.22 and later: into_model() yields the optimized typed model
        m = onnx_loader.load(str(model)).into_model().into_runnable()
    return median_ms(lambda: m.run([x]), warmup, runs)


def time_layoutopt(binary: str, model: Path, threads: int, warmup: int, runs: int):
    out = subprocess.run(
        [binary, "bench", str(model), "--threads", str(threads), "--runs", str(runs),
         "--warmup", str(warmup), "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    timing = json.loads(out)["timing"]  # docs/json-schema.md
    return timing["p50_ms"], timing["compile_ms"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--layoutopt", default="target/release/layoutopt")
    args = ap.parse_args()

    # tract has no thread setting in its Python API; say what it used.
    rows = []
    for model in args.models:
        if not model.exists():
            print(f"error: {model} does not exist", file=sys.stderr)
            return 1
        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        x = model_input(model, sess)
        ort_ms = time_onnxruntime(model, x, args.threads, args.warmup, args.runs)
        tract_ms = time_tract(model, x, args.warmup, args.runs)
        lo_ms, compile_ms = time_layoutopt(args.layoutopt, model, args.threads, args.warmup, args.runs)
        rows.append((model.parent.name, ort_ms, tract_ms, lo_ms, lo_ms / ort_ms, compile_ms))

    print(f"median latency, batch 1, {args.threads} threads (tract: its default), "
          f"{args.runs} runs after {args.warmup} warm-up, {os.cpu_count()} cores")
    head = f"{'model':<16} {'onnxruntime':>12} {'tract':>10} {'layoutopt':>10} {'lo/ort':>7} {'lo compile':>11}"
    print(head)
    print("-" * len(head))
    for name, o, t, l, r, c in rows:
        print(f"{name:<16} {o:>9.2f} ms {t:>7.2f} ms {l:>7.2f} ms {r:>6.2f}x {c:>8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
