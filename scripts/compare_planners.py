#!/usr/bin/env python3
"""Plans every model with every planner, runs each plan, and checks the cost
model against the clock (`layoutopt compare --measure --json`: 3 untimed runs,
then 10 timed ones per plan):

- per model and planner: transforms, the planner's estimate, the profile's
  prediction (each step's measured kernel time, else its bytes and flops at the
  machine's peaks), the median and fastest measured run, and predicted over
  median;
- over the suite: each planner's estimated and predicted totals against its
  measured total;
- every model where `global` measured slower than another planner by more than
  --noise (default 5%) in both the median and the fastest run;
- every plan whose prediction misses its median by more than --tolerance
  (default 25%);
- the machine's load average before and after, since other processes stretch
  the runs.

    scripts/compare_planners.py MODEL ... [--exe target/release/layoutopt] [--target nchwc]

Run it on a quiet machine: the planners' runs alternate within one `compare`
call, but a loaded machine stretches each run differently.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--exe", default="target/release/layoutopt")
    ap.add_argument("--target", default="nchwc")
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--tolerance", type=float, default=0.25)
    args = ap.parse_args()
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    slower: list[str] = []
    mispredicted: list[str] = []
    load_before = load_average()
    print("model | planner | transforms | estimated ms | predicted ms | p50 ms | min ms | predicted/p50")
    print("--- | --- | --- | --- | --- | --- | --- | ---")
    for model in args.models:
        name = f"{model.parent.name}/{model.name}"
        r = subprocess.run(
            [args.exe, "compare", "--measure", "--json", "--target", args.target, str(model)],
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            print(f"{name} | error: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else '?'}")
            continue
        rows = {row["planner"]: row for row in json.loads(r.stdout)["planners"]}
        for planner, row in rows.items():
            m = row["measured"]
            est = row["estimated_cost_ns"] / 1e6
            pred = m["predicted_ms"] or 0.0
            ratio = pred / m["p50_ms"] if m["p50_ms"] > 0 else float("nan")
            print(
                f"{name} | {planner} | {row['transform_count']} | {est:.2f} | {pred:.2f} | "
                f"{m['p50_ms']:.2f} | {m['min_ms']:.2f} | {ratio:.2f}",
                flush=True,
            )
            if not abs(ratio - 1) <= args.tolerance:
                mispredicted.append(f"{name} {planner}: predicted {pred:.2f} ms, p50 {m['p50_ms']:.2f} ms")
            t = totals[planner]
            t[0] += est
            t[1] += pred
            t[2] += m["p50_ms"]
        g = rows.get("global", {}).get("measured")
        if g:
            for planner, row in rows.items():
                o = row["measured"]
                if planner != "global" and all(
                    g[k] > o[k] * (1 + args.noise) for k in ("p50_ms", "min_ms")
                ):
                    slower.append(f"{name}: global p50 {g['p50_ms']:.2f} ms vs {planner} {o['p50_ms']:.2f} ms")
    print()
    print("planner | estimated total ms | predicted total ms | measured p50 total ms | estimated/measured | predicted/measured")
    print("--- | --- | --- | --- | --- | ---")
    for planner, (est, pred, meas) in totals.items():
        print(
            f"{planner} | {est:.1f} | {pred:.1f} | {meas:.1f} | {est / meas:.2f} | {pred / meas:.2f}"
        )
    print()
    print(f"global measured slower than another planner (> {args.noise:.0%} in p50 and min):")
    for line in slower or ["none"]:
        print(f"  {line}")
    print()
    print(f"predicted off the median by more than {args.tolerance:.0%}:")
    for line in mispredicted or ["none"]:
        print(f"  {line}")
    print()
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_average()}")
    return 0


def load_average() -> str:
    """The load averages of /proc/loadavg (Linux), else '?'."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
