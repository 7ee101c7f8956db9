#!/usr/bin/env python3
"""Runs layoutopt's exported plans in onnxruntime and compares them with the
outputs recorded beside each bundled model.

For every bundled model (models/*/model.onnx and models/*/model.tflite), every
planner (keep, local, greedy, global) and every target (nchw16c, nhwc), this
script calls `layoutopt export`, checks the written model with onnx.checker,
runs it with onnxruntime (CPU, graph optimizations off) on
test_data_set_0/input_*.pb and compares with output_*.pb. It prints a table
and exits 1 if any model fails: max abs error above 1e-4 * max(1, max |expected|)
(2e-3 for float16 models, as tests/integration/export.rs).

With --conformance it also exports every ONNX backend node case of
tests/onnx_node/ (keep, and global for NCHW8c) and compares onnxruntime's
outputs with the case's recorded ones at the backend's tolerance
(1e-7 + 1e-3 * |expected|, 4e-3 for float16; exact for integers). Cases the
importer refuses as they are (inputs that must be frozen) are counted as skipped.

Every bundled model is also exported with `--for onnxruntime` and checked the
same way (rows with planner "-" and target "onnxruntime").

With --timing, it times `export --for onnxruntime` against the source model in
onnxruntime instead: for each model given (default: the bundled ONNX models and
models/full/*, see scripts/gen_models.py --full), both run on
test_data_set_0's inputs, their outputs are compared, and each is timed in
--rounds alternated rounds (source, export, export, source, ...) of about 0.3 s
each at ORT_ENABLE_ALL and ORT_ENABLE_BASIC, --threads intra-op threads;
it prints each one's median milliseconds per run, the export/source ratio, the
noise floor (a second session of the source, timed in the same rounds, over the
first) and the median of 3 session creations (onnxruntime's own graph
optimizations).
It exits 1 if an export is slower than its source by more than --slack at
ORT_ENABLE_ALL, or its outputs differ by more than 1e-4 * max(1, max |source|).
Machines shared with other work need the rounds: check `vmstat 1 5`'s steal.

Usage: python3 scripts/check_export.py [--bin target/release/layoutopt] [--conformance]
       python3 scripts/check_export.py --timing [MODEL.onnx ...] [--rounds 7] [--threads 1]
"""

import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLANNERS = ["keep", "local", "greedy", "global"]
TARGETS = ["nchw16c", "nhwc"]
TOLERANCE = 1e-4
F16_TOLERANCE = 2e-3  # float16 models, as tests/integration/export.rs


def tensors(folder, prefix):
    out = []
    i = 0
    while (folder / f"{prefix}_{i}.pb").exists():
        out.append(numpy_helper.to_array(onnx.load_tensor(str(folder / f"{prefix}_{i}.pb"))))
        i += 1
    return out


def session(path, level, threads):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3  # errors only
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def ms_per_run(sess, feeds, runs):
    t = time.perf_counter()
    for _ in range(runs):
        sess.run(None, feeds)
    return (time.perf_counter() - t) / runs * 1e3


def timing(args):
    """Source against `export --for onnxruntime` in onnxruntime; returns failures."""
    models = [pathlib.Path(m) for m in args.models] or sorted(
        p for d in [*(ROOT / "models").iterdir(), *(ROOT / "models/full").glob("*")]
        if (p := d / "model.onnx").exists()
    )
    levels = [("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL), ("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)]
    print(f"onnxruntime {ort.__version__}, {args.threads} thread(s), median of {args.rounds} alternated rounds")
    print(f"{'model':<24} {'level':<6} {'source ms':>10} {'export ms':>10} {'ratio':>6} {'noise':>6}  {'load ms (source, export)':<25} max abs err")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            out = pathlib.Path(tmp) / f"{model.parent.name}.onnx"
            cmd = [args.bin, "export", str(model), "-o", str(out), "--for", "onnxruntime"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{model.parent.name}: EXPORT FAILED: {r.stderr.strip()}")
                failed += 1
                continue
            inputs = tensors(model.parent / "test_data_set_0", "input")
            for level_name, level in levels:
                # The source twice: its second session's ratio is the noise floor.
                files = (model, out, model)
                order = [0, 1, 2]
                made = ([], [], [])
                for k in range(3):
                    for j in order if k % 2 == 0 else order[::-1]:
                        t = time.perf_counter()
                        sess = session(files[j], level, args.threads)
                        made[j].append(((time.perf_counter() - t) * 1e3, sess))
                load = [statistics.median(ms for ms, _ in m) for m in made]
                sessions = [m[-1][1] for m in made]
                feeds = [{i.name: x for i, x in zip(s.get_inputs(), inputs, strict=True)} for s in sessions]
                got = [s.run(None, f) for s, f in zip(sessions[:2], feeds, strict=False)]
                err = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(*got, strict=True))
                mag = max(1.0, max(float(np.max(np.abs(a))) for a in got[0]))
                runs = max(3, int(300 / max(ms_per_run(sessions[0], feeds[0], 3), 1e-3)))
                times = ([], [], [])
                for k in range(args.rounds):
                    # Alternated order, so none always runs first after another.
                    for j in order if k % 2 == 0 else order[::-1]:
                        times[j].append(ms_per_run(sessions[j], feeds[j], runs))
                src, exp, again = (statistics.median(t) for t in times)
                slow = level_name == "all" and exp > src * (1 + args.slack)
                bad = err > TOLERANCE * mag
                failed += slow or bad
                note = " SLOWER" if slow else ""
                note += f" MISMATCH (> {TOLERANCE} * {mag:.3g})" if bad else ""
                print(
                    f"{model.parent.name:<24} {level_name:<6} {src:>10.3f} {exp:>10.3f} {exp / src:>6.3f} "
                    f"{again / src:>6.3f}  {f'{load[0]:.1f}, {load[1]:.1f}':<25} {err:.2e}{note}"
                )
    return failed


def run_exported(path, inputs):
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3  # errors only
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs, strict=True)}
    return sess.run(None, feeds)


def conformance(binary, tmp):
    """Exports the backend node cases; returns (checked, skipped, failures)."""
    root = ROOT / "tests/onnx_node"
    checked, skipped, failures = 0, 0, []
    for case in sorted(p for p in root.iterdir() if (p / "model.onnx").exists()):
        data = case / "test_data_set_0"
        inputs, expected = tensors(data, "input"), tensors(data, "output")
        for planner, target in (("keep", "nchw"), ("global", "nchw8c")):
            out = pathlib.Path(tmp) / f"{case.name}_{planner}.onnx"
            r = subprocess.run(
                [binary, "export", str(case / "model.onnx"), "-o", str(out), "--planner", planner, "--target", target],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                skipped += 1
                continue
            checked += 1
            try:
                got = run_exported(out, inputs)
            except Exception as ex:  # a runtime refusing the model is a failure to report
                failures.append(f"{case.name} {planner}: ORT FAILED: {ex}")
                continue
            if len(got) != len(expected):
                failures.append(f"{case.name} {planner}: {len(got)} outputs, expected {len(expected)}")
            for k, (g, e) in enumerate(zip(got, expected, strict=False)):
                if g.shape != e.shape:
                    failures.append(f"{case.name} {planner}: output {k} shape {g.shape} vs {e.shape}")
                elif e.dtype.kind in "fc":
                    rtol = 4e-3 if e.dtype == np.float16 else 1e-3
                    g64, e64 = g.astype(np.float64), e.astype(np.float64)
                    with np.errstate(invalid="ignore"):  # inf - inf where both are inf
                        bad = ~(
                            (np.abs(g64 - e64) <= 1e-7 + rtol * np.abs(e64))
                            | (np.isnan(g64) & np.isnan(e64))
                            | (g64 == e64)
                        )
                    if bad.any():
                        failures.append(
                            f"{case.name} {planner}: output {k}: {int(bad.sum())} "
                            f"elements off, max error {np.nanmax(np.abs(g64 - e64)):.3g}"
                        )
                elif not np.array_equal(g, e):
                    failures.append(f"{case.name} {planner}: output {k}: values differ")
    return checked, skipped, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "target/release/layoutopt"))
    ap.add_argument(
        "--conformance", action="store_true", help="also export every ONNX backend node case of tests/onnx_node"
    )
    ap.add_argument(
        "--timing", action="store_true", help="time export --for onnxruntime against the source in onnxruntime"
    )
    ap.add_argument("models", nargs="*", help="with --timing: model.onnx files with test_data_set_0 beside them")
    ap.add_argument("--rounds", type=int, default=7, help="alternated timing rounds (median)")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    ap.add_argument(
        "--slack", type=float, default=0.05, help="timing noise an export may be slower by (shared machines: 5%%)"
    )
    args = ap.parse_args()
    if args.timing:
        return 1 if timing(args) else 0
    models = sorted(
        p
        for d in (ROOT / "models").iterdir()
        if d.is_dir()
        for p in (d / "model.onnx", d / "model.tflite")
        if p.exists()
    )
    rows = []
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            data = model.parent / "test_data_set_0"
            inputs, expected = tensors(data, "input"), tensors(data, "output")
            exports = [(p, t, ["--planner", p, "--target", t]) for t in TARGETS for p in PLANNERS]
            for planner, target, flags in [*exports, ("-", "onnxruntime", ["--for", "onnxruntime"])]:
                out = pathlib.Path(tmp) / f"{model.parent.name}_{planner}_{target}.onnx"
                cmd = [args.bin, "export", str(model), "-o", str(out), *flags]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    rows.append(
                        (model.parent.name, planner, target, "-", "-", "-", "EXPORT FAILED: " + r.stderr.strip())
                    )
                    failed += 1
                    continue
                m = onnx.load(str(out))
                ops = len(m.graph.node)
                transposes = sum(n.op_type == "Transpose" for n in m.graph.node)
                try:
                    got = run_exported(out, inputs)
                    err = max(
                        float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64))))
                        for g, e in zip(got, expected, strict=False)
                    )
                    mag = max(1.0, max(float(np.max(np.abs(e))) for e in expected))
                    tol = F16_TOLERANCE if any(e.dtype == np.float16 for e in expected) else TOLERANCE
                    ok = len(got) == len(expected) and err <= tol * mag
                    status = "ok" if ok else f"MISMATCH (> {tol} * {mag:.3g})"
                except Exception as ex:  # a runtime refusing the model is a failure to report
                    err, ok, status = float("nan"), False, f"ORT FAILED: {ex}"
                failed += not ok
                rows.append((model.parent.name, planner, target, ops, transposes, f"{err:.2e}", status))
    header = ("model", "planner", "target", "nodes", "transposes", "max abs err", "status")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]

    def line(r):
        return "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))

    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))
    print(
        f"\n{len(rows) - failed}/{len(rows)} exported plans match the recorded outputs in onnxruntime {ort.__version__}"
    )
    if args.conformance:
        with tempfile.TemporaryDirectory() as tmp:
            checked, skipped, bad = conformance(args.bin, tmp)
        for f in bad:
            print("FAIL", f)
        print(
            f"backend node cases: {checked - len(bad)}/{checked} exported models match "
            f"in onnxruntime ({skipped} exports refused: the case needs frozen inputs "
            f"or an unsupported op)"
        )
        failed += len(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
