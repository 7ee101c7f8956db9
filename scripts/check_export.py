#!/usr/bin/env python3
"""Runs layoutopt's exported plans in onnxruntime and compares them with the
outputs recorded beside each bundled model.

For every bundled model (models/*/model.onnx and models/*/model.tflite), every
planner (keep, local, greedy, global) and every target (nchw16c, nhwc), this
script calls `layoutopt export`, checks the written model with onnx.checker,
runs it with onnxruntime (CPU, graph optimizations off) on
test_data_set_0/input_*.pb and compares with output_*.pb. It prints a table
and exits 1 if any model fails: max abs error above 1e-4 * max(1, max |expected|).

With --conformance it also exports every ONNX backend node case of
tests/onnx_node/ (keep, and global for NCHW8c) and compares onnxruntime's
outputs with the case's recorded ones at the backend's tolerance
(1e-7 + 1e-3 * |expected|, 4e-3 for float16; exact for integers). Cases the
importer refuses as they are (inputs that must be frozen) are counted as skipped.

Usage: python3 scripts/check_export.py [--bin target/release/layoutopt] [--conformance]
"""

import argparse
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLANNERS = ["keep", "local", "greedy", "global"]
TARGETS = ["nchw16c", "nhwc"]
TOLERANCE = 1e-4


def tensors(folder, prefix):
    out = []
    i = 0
    while (folder / f"{prefix}_{i}.pb").exists():
        out.append(numpy_helper.to_array(onnx.load_tensor(str(folder / f"{prefix}_{i}.pb"))))
        i += 1
    return out


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
    args = ap.parse_args()
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
            for target in TARGETS:
                for planner in PLANNERS:
                    out = pathlib.Path(tmp) / f"{model.parent.name}_{planner}_{target}.onnx"
                    cmd = [args.bin, "export", str(model), "-o", str(out), "--planner", planner, "--target", target]
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
                        ok = len(got) == len(expected) and err <= TOLERANCE * mag
                        status = "ok" if ok else f"MISMATCH (> {TOLERANCE} * {mag:.3g})"
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
