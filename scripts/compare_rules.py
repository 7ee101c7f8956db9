#!/usr/bin/env python3
"""Does each rule set pay? Times every model planned with the bundled rules
against the same model planned with other rules (by default none: an empty
folder, so that neither the graph rules nor the layout rules run), alternating
the arms A B A B over --rounds rounds of `layoutopt bench --json`, and prints
per model the median latency of each arm, the ratio of the medians
(bundled / other: below 1 the rules pay), and the rules the bundled plan kept,
counted by name (`plan --json`: `graph_rewrite.fired`, `rewrite.fired`).

    scripts/compare_rules.py MODEL ... [--exe target/release/layoutopt]
        [--other-rules DIR] [--other-exe EXE] [--rounds 5] [--runs 30]
        [--threads 1]

`--other-exe` times another build with its own bundled rules instead (the
previous release, to check that a change to the rules costs nothing). The
machine's steal time (vmstat) is printed before and after: other processes
stretch the runs of both arms alike only when they alternate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from collections import Counter
from pathlib import Path


def bench(cmd: list[str]) -> float:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["timing"]["p50_ms"]


def fired(exe: str, model: Path) -> Counter:
    out = subprocess.run([exe, "plan", str(model), "--json"], check=True, capture_output=True, text=True).stdout
    doc = json.loads(out)
    counts: Counter = Counter()
    for stage in ("graph_rewrite", "rewrite"):
        for f in (doc.get(stage) or {}).get("fired", []):
            counts[f["rule"]] += 1
    return counts


def steal() -> str:
    lines = subprocess.run(["vmstat", "1", "2"], capture_output=True, text=True).stdout.splitlines()
    head, last = lines[1].split(), lines[-1].split()
    return f"steal {last[head.index('st')]}%, idle {last[head.index('id')]}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--exe", default="target/release/layoutopt")
    ap.add_argument("--other-rules", type=Path, help="rule folder of the other arm (default: an empty one)")
    ap.add_argument("--other-exe", help="another build, with its bundled rules, as the other arm")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    empty = tempfile.TemporaryDirectory()
    common = ["--json", "--runs", str(args.runs), "--threads", str(args.threads)]
    print(f"before: {steal()}")
    print("| model | bundled rules (ms) | other (ms) | ratio | rules kept |")
    print("|---|---|---|---|---|")
    for model in args.models:
        a = [args.exe, "bench", str(model), *common]
        if args.other_exe:
            b = [args.other_exe, "bench", str(model), *common]
        else:
            b = a + ["--rules", str(args.other_rules or empty.name)]
        times: dict[str, list[float]] = {"a": [], "b": []}
        for _ in range(args.rounds):
            times["a"].append(bench(a))
            times["b"].append(bench(b))
        ma, mb = statistics.median(times["a"]), statistics.median(times["b"])
        kept = ", ".join(f"{r} {n}" for r, n in sorted(fired(args.exe, model).items()))
        name = f"{model.parent.name}/{model.name}"
        print(f"| {name} | {ma:.3f} | {mb:.3f} | {ma / mb:.3f} | {kept} |", flush=True)
    print(f"after: {steal()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
