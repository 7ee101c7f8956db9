#!/usr/bin/env python3
"""Counts the layout transforms each planner leaves in a model, side by side:

- layoutopt: data-moving transforms and relabels of the global plan, for the
  blocked (nchwc) and channels-last (nhwc) targets (`layoutopt plan --json`);
- onnxruntime: the NCHWc reorders (`ReorderInput`/`ReorderOutput`) its graph
  optimizer leaves at ORT_ENABLE_ALL (its NCHWc transformer is the blocked
  counterpart of layoutopt's nchwc target);
- TVM Relax: the `permute_dims` left on activations after `ConvertLayout` to NHWC
  and constant folding (the permutes of weights fold away), when `tvm` imports.

    scripts/peer_transforms.py MODEL.onnx ... [--exe target/release/layoutopt]

onnxruntime and TVM are optional (a column reads "-" without them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def layoutopt_counts(exe: str, model: Path, target: str) -> str:
    r = subprocess.run(
        [exe, "plan", "--json", "--target", target, str(model)], capture_output=True, text=True
    )
    if r.returncode != 0:
        return "error"
    doc = json.loads(r.stdout)
    return f"{doc['transform_count']} (+{doc['relabel_count']} relabels)"


def ort_reorders(model: Path) -> str:
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        return "-"
    ort.set_default_logger_severity(3)  # not the warning that the saved model is CPU-specific
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        graph = onnx.load(opts.optimized_model_filepath).graph
    reorders = sum(n.op_type in ("ReorderInput", "ReorderOutput") for n in graph.node)
    transposes = sum(n.op_type == "Transpose" for n in graph.node)
    return f"{reorders} (+{transposes} Transpose)"


def tvm_permutes(model: Path) -> str:
    try:
        import onnx
        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx
    except ImportError:
        return "-"
    try:
        mod = from_onnx(onnx.load(str(model)), keep_params_in_input=False)
        mod = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OHWI"]})(mod)
        mod = relax.transform.FoldConstant()(mod)
    except Exception as e:  # noqa: BLE001 - any frontend failure is reported, not fatal
        return f"failed: {str(e).splitlines()[0][:60]}"
    count = 0

    def visit(e):
        nonlocal count
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax.permute_dims":
            count += 1

    for _, f in mod.functions.items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f, visit)
    return str(count)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--exe", default="target/release/layoutopt")
    args = ap.parse_args()
    header = ("model", "layoutopt nchwc", "layoutopt nhwc", "onnxruntime NCHWc reorders", "TVM NHWC permute_dims")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for model in args.models:
        name = model.parent.name if model.name == "model.onnx" else model.stem
        row = (
            name,
            layoutopt_counts(args.exe, model, "nchwc"),
            layoutopt_counts(args.exe, model, "nhwc"),
            ort_reorders(model),
            tvm_permutes(model),
        )
        print(" | ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
