#!/usr/bin/env python3
"""Runs an ONNX model with free input dimensions at several shapes in one
layoutopt session and one onnxruntime session: each output checked against
onnxruntime's, each shape's compile time (the first shape is planned, the
later ones make its plan again), and the latency of both, as medians of
alternated rounds.

    python3 scripts/check_shapes.py MODEL.onnx --shapes 1x3x224x224,2x3x160x192 \\
        [--threads 1] [--runs 20] [--rounds 3] [--tolerance 1e-4]

A model's several inputs are joined by `:` in its input order. Needs the
layoutopt Python package and onnxruntime. Exits 1 when an output differs by
more than --tolerance times its largest magnitude (at least 1).
"""

import argparse
import statistics
import sys
import time

import layoutopt
import numpy as np
import onnxruntime

DTYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def parse_shapes(text):
    return [[tuple(int(d) for d in s.split("x")) for s in one.split(":")] for one in text.split(",")]


def feed(inputs, shapes, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for arg, shape in zip(inputs, shapes, strict=True):
        dtype = DTYPES.get(arg.type, np.float32)
        if np.issubdtype(dtype, np.floating):
            out[arg.name] = rng.uniform(-1, 1, shape).astype(dtype)
        else:
            out[arg.name] = rng.integers(0, 8, shape).astype(dtype)
    return out


def median_ms(session, x, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        session.run(None, x)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--shapes", required=True, type=parse_shapes)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    a = ap.parse_args()

    so = layoutopt.SessionOptions()
    so.intra_op_num_threads = a.threads
    lo = layoutopt.InferenceSession(a.model, so)
    oo = onnxruntime.SessionOptions()
    oo.intra_op_num_threads = a.threads
    ort = onnxruntime.InferenceSession(a.model, oo, providers=["CPUExecutionProvider"])

    print(f"{a.model}, {a.threads} thread(s)")
    print("| shape | compile (ms) | max error / magnitude | layoutopt (ms) | onnxruntime (ms) | ratio |")
    print("|---|---|---|---|---|---|")
    failed = False
    for i, shapes in enumerate(a.shapes):
        x = feed(ort.get_inputs(), shapes, seed=i)
        got = lo.run(None, x)
        compile_ms = lo.last_compile_seconds * 1e3
        want = ort.run(None, x)
        worst = 0.0
        for g, w in zip(got, want, strict=True):
            scale = max(float(np.max(np.abs(w))) if w.size else 0.0, 1.0)
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w))) / scale if w.size else 0.0)
        failed |= worst > a.tolerance
        ours, theirs = [], []
        for _ in range(a.rounds):
            ours.append(median_ms(lo, x, a.runs))
            theirs.append(median_ms(ort, x, a.runs))
        o, t = statistics.median(ours), statistics.median(theirs)
        name = ":".join("x".join(map(str, s)) for s in shapes)
        print(f"| {name} | {compile_ms:.1f} | {worst:.1e} | {o:.3f} | {t:.3f} | {o / t:.2f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
