#!/usr/bin/env python3
"""Runs every model of the real-model suite (scripts/gen_zoo.py) through layoutopt and
prints one table: model, format, imports?, max relative error against the reference
output, transforms kept, steps on the reference executor, layoutopt ms, onnxruntime
ms and their ratio. Timings are medians of alternating rounds (layoutopt, then
onnxruntime on the same model's ONNX form), --threads each (2 unless told).

    scripts/run_zoo.sh [MODEL ...] [--zoo models/zoo] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def load_pb(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def npy_name(output: str) -> str:
    """The file `layoutopt run --output` writes an output to."""
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in output)
    return ("_" + name if not name or name.startswith(".") else name) + ".npy"


def layoutopt_run(exe: str, model: Path):
    """Runs the model once; the max relative error over every recorded output."""
    data = model.parent / "test_data_set_0"
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([exe, "run", str(model), "--output", out], capture_output=True, text=True)
        if r.returncode != 0:
            return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
        rel = 0.0
        for path in sorted(data.glob("output_*.pb")):
            t = onnx.TensorProto()
            t.ParseFromString(path.read_bytes())
            e = numpy_helper.to_array(t).astype(np.float64).reshape(-1)
            got = Path(out) / npy_name(t.name)
            if not got.exists():
                return None, f"no output named {t.name!r}"
            a = np.load(got).astype(np.float64).reshape(-1)
            err = float(np.max(np.abs(a - e)) / max(np.max(np.abs(e)), 1e-30)) if a.shape == e.shape else float("nan")
            rel = max(rel, err)
    kept = re.search(r"(\d+) transforms kept", r.stdout)
    fallback = re.search(r"(\d+) of (\d+) steps .*?run on the reference executor", r.stderr)
    return {
        "rel": rel,
        "kept": int(kept.group(1)) if kept else -1,
        "fallbacks": int(fallback.group(1)) if fallback else 0,
    }, None


def layoutopt_ms(exe: str, model: Path, threads: int) -> float:
    r = subprocess.run([exe, "bench", str(model), "--runs", "20", "--warmup", "3", "--threads",
                        str(threads), "--json"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["timing"]["p50_ms"]  # docs/json-schema.md


def ort_ms(onnx_path: Path, threads: int) -> float:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    data = onnx_path.parent / "test_data_set_0"
    feed = {i.name: load_pb(data / f"input_{k}.pb") for k, i in enumerate(sess.get_inputs())}
    for _ in range(3):
        sess.run(None, feed)
    times = []
    for _ in range(20):
        t = time.perf_counter()
        sess.run(None, feed)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("models", nargs="*", help="only these models (default: every one)")
    ap.add_argument("--zoo", type=Path, default=Path("models/zoo"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layoutopt", default="target/release/layoutopt")
    ap.add_argument("--threads", type=int, default=2, help="threads of each runtime")
    args = ap.parse_args()
    cases = sorted(
        d
        for d in args.zoo.iterdir()
        if (d / "test_data_set_0").is_dir()
        and (not args.models or d.name.rsplit("_", 1)[0] in args.models)
    )
    if not cases:
        print(f"no models under {args.zoo}: run scripts/gen_zoo.py first", file=sys.stderr)
        return 1
    head = (f"{'model':<18} {'format':<7} {'imports':<8} {'max rel err':>11} {'kept':>5} "
            f"{'fallback':>8} {'layoutopt':>10} {'ort':>9} {'ratio':>6}")
    print(head)
    print("-" * len(head))
    for d in cases:
        name, fmt = d.name.rsplit("_", 1)
        model = d / ("model.onnx" if fmt == "onnx" else "model.tflite")
        result, err = layoutopt_run(args.layoutopt, model)
        if result is None:
            print(f"{name:<18} {fmt:<7} {'no':<8} {err[:90]}", flush=True)
            continue
        # onnxruntime runs the model's ONNX form, when the suite has one.
        onnx_path = args.zoo / f"{name}_onnx" / "model.onnx"
        peer = onnx_path.exists()
        lo, rt = [], []
        for _ in range(args.rounds):
            lo.append(layoutopt_ms(args.layoutopt, model, args.threads))
            if peer:
                rt.append(ort_ms(onnx_path, args.threads))
        l = statistics.median(lo)
        if peer:
            o, ratio = f"{statistics.median(rt):>6.2f} ms", f"{l / statistics.median(rt):>5.2f}x"
        else:
            o, ratio = f"{'-':>9}", f"{'-':>6}"
        print(f"{name:<18} {fmt:<7} {'yes':<8} {result['rel']:>11.2e} {result['kept']:>5} "
              f"{result['fallbacks']:>8} {l:>7.2f} ms {o} {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
