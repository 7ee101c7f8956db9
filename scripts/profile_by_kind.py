#!/usr/bin/env python3
"""Where the cost model misses, by kind of step: profiles each model
(`layoutopt bench --profile --json`) and sums, over every model, each kind of
step's predicted and measured milliseconds (a convolution's kind names its
algorithm and fused epilogue: `Conv+Add+Relu (1x1-gemm)`), with the median of
the per-step ratios measured/predicted, so that a fix goes into the model of a
kind of step rather than into one model.

    scripts/profile_by_kind.py MODEL ... [--threads 2] [--runs 30] [--planner global]

Kinds are merged over their fused epilogue with --by-algo (`Conv (1x1-gemm)`).
The load average before and after is printed: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

# compare_planners.py reads the load average the same way.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_planners import load_average  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--exe", default="target/release/layoutopt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--planner", default="global")
    ap.add_argument("--by-algo", action="store_true", help="merge convolution kinds over their epilogue")
    args = ap.parse_args()
    # kind -> (predicted ms, measured ms, per-step ratios)
    kinds: dict[str, list] = defaultdict(lambda: [0.0, 0.0, []])
    load_before = load_average()
    print("model | predicted ms | measured ms (sum of step medians) | measured/predicted")
    print("--- | --- | --- | ---")
    for model in args.models:
        name = f"{model.parent.name}/{model.name}"
        cmd = [args.exe, "bench", str(model), "--profile", "--json", "--threads", str(args.threads)]
        cmd += ["--runs", str(args.runs), "--planner", args.planner]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{name} | error: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else '?'}")
            continue
        steps = json.loads(r.stdout)["profile"]
        pred = sum(s["predicted_ms"] for s in steps)
        meas = sum(s["median_ms"] for s in steps)
        print(f"{name} | {pred:.2f} | {meas:.2f} | {meas / pred:.2f}", flush=True)
        for s in steps:
            kind = s["kind"]
            if args.by_algo:
                kind = re.sub(r"^Conv\+\S+ ", "Conv ", kind)
            k = kinds[kind]
            k[0] += s["predicted_ms"]
            k[1] += s["median_ms"]
            if s["predicted_ms"] > 0:
                k[2].append(s["median_ms"] / s["predicted_ms"])
    print()
    print("kind | steps | predicted ms | measured ms | share of measured | measured/predicted | median step ratio")
    print("--- | --- | --- | --- | --- | --- | ---")
    total = sum(k[1] for k in kinds.values()) or 1.0
    for kind, (pred, meas, ratios) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        median = statistics.median(ratios) if ratios else float("nan")
        ratio = meas / pred if pred > 0 else float("nan")
        print(f"{kind} | {len(ratios)} | {pred:.2f} | {meas:.2f} | {meas / total:.1%} | {ratio:.2f} | {median:.2f}")
    print()
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
