#!/usr/bin/env python3
"""Thread scaling of layoutopt against its peer: every model at every thread
count, one or more layoutopt binaries and the peer taking turns, each figure
the median latency of its runs. The peer of an ONNX model is onnxruntime, of a
TFLite model the TFLite interpreter with its default XNNPACK delegate. Prints
one table and, with --json, writes every figure.

    python3 scripts/bench_threads.py MODEL.onnx|MODEL.tflite... --threads 1,4,8,16 \\
        --layoutopt new=target/release/layoutopt [--layoutopt old=/tmp/old] \\
        [--only-at old=1,16] [--rounds 2] [--json out.json]

Inputs are seeded noise of the declared shape (free dimensions 1); latency
does not depend on the values. A binary named in --only-at runs only at those
thread counts (to compare an older build where it matters, within a time box).
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
import onnxruntime as ort

ORT_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def timed(run, runs: int) -> float:
    """Median milliseconds of `runs` calls of `run`, after 3 untimed ones."""
    for _ in range(3):
        run()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def tflite_ms(model: Path, threads: int, runs: int) -> float:
    """The TFLite interpreter as its users run it: XNNPACK, `threads` threads."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf
        Interpreter = tf.lite.Interpreter
    interp = Interpreter(model_path=str(model), num_threads=threads)
    interp.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in interp.get_input_details():
        shape = [max(int(n), 1) for n in d["shape"]]
        value = rng.random(shape) * (1 if np.issubdtype(d["dtype"], np.floating) else 2)
        interp.set_tensor(d["index"], value.astype(d["dtype"]))
    return timed(interp.invoke, runs)


def peer_ms(model: Path, threads: int, runs: int) -> float:
    if model.suffix == ".tflite":
        return tflite_ms(model, threads, runs)
    return ort_ms(model, threads, runs)


def ort_ms(model: Path, threads: int, runs: int) -> float:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        dtype = ORT_TYPES.get(i.type, np.float32)
        feed[i.name] = (rng.random(shape) * (2 if dtype != np.float32 else 1)).astype(dtype)
    return timed(lambda: sess.run(None, feed), runs)


def layoutopt_ms(exe: str, model: Path, threads: int, runs: int) -> float:
    r = subprocess.run([exe, "bench", str(model), "--runs", str(runs), "--warmup", "3",
                        "--threads", str(threads), "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed")
    return json.loads(r.stdout)["timing"]["p50_ms"]  # docs/json-schema.md


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--layoutopt", action="append", default=[],
                    help="LABEL=PATH of a layoutopt binary (repeat)")
    ap.add_argument("--only-at", action="append", default=[],
                    help="LABEL=T1,T2: run that binary only at these thread counts")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--target-ms", type=float, default=400.0,
                    help="timed runs per figure: about this long, 5 to 50 runs")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    engines = dict(e.split("=", 1) for e in (args.layoutopt or ["layoutopt=target/release/layoutopt"]))
    only = {k: {int(t) for t in v.split(",")} for k, v in (o.split("=", 1) for o in args.only_at)}
    threads = [int(t) for t in args.threads.split(",")]
    results = []
    print(f"cpu: {os.cpu_count()} logical; onnxruntime {ort.__version__}; "
          "peer: onnxruntime for .onnx, the TFLite interpreter for .tflite", flush=True)
    head = f"{'model':<26} {'thr':>4} " + " ".join(f"{k:>10}" for k in engines) + \
        f" {'peer':>10} " + " ".join(f"{k + '/peer':>9}" for k in engines)
    print(head)
    print("-" * len(head), flush=True)
    for model in args.models:
        name = model.parent.name if model.stem == "model" else model.stem
        # Runs per figure from one quick timing of the peer at one thread.
        try:
            one = peer_ms(model, 1, 3)
        except Exception as e:  # a model the peer refuses is reported, not fatal
            print(f"{name:<26} peer: {e}", flush=True)
            continue
        runs = int(min(50, max(5, args.target_ms / max(one, 1e-3))))
        for t in threads:
            figures = {k: [] for k in list(engines) + ["peer"]}
            errors = {}
            for _ in range(args.rounds):
                for label, exe in engines.items():
                    if label in only and t not in only[label]:
                        continue
                    try:
                        figures[label].append(layoutopt_ms(exe, model, t, runs))
                    except Exception as e:
                        errors[label] = str(e)
                figures["peer"].append(peer_ms(model, t, runs))
            med = {k: statistics.median(v) if v else None for k, v in figures.items()}
            cell = lambda v: f"{v:>7.2f} ms" if v is not None else f"{'-':>10}"
            ratio = lambda v: f"{v / med['peer']:>8.2f}x" if v is not None else f"{'-':>9}"
            print(f"{name:<26} {t:>4} " + " ".join(cell(med[k]) for k in engines) +
                  f" {cell(med['peer'])} " + " ".join(ratio(med[k]) for k in engines), flush=True)
            for label, e in errors.items():
                print(f"    {label}: {e[:200]}", flush=True)
            results.append({"model": name, "threads": t, "runs": runs, "median_ms": med,
                            "errors": errors})
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
