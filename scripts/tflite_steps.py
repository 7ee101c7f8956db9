#!/usr/bin/env python3
"""How far layoutopt's outputs of quantized TFLite models are from the TFLite
interpreter's (XNNPACK), counted in steps of each output's integers.

    python3 scripts/tflite_steps.py BIN MODEL_DIR... [--threads N]
        [--ops K...] [--first-divergence [--exact PCT]]

Each MODEL_DIR holds model.tflite and test_data_set_0/input_0.pb (as
scripts/gen_tflite_quant.py writes them). Both engines run that input and
the share of output elements off by 0, 1, 2 and more integers is printed.
With --ops the model's outputs are replaced by the output tensors of those
operators (by index; without indices the operators are listed), so that each
op can be compared on its own. With --first-divergence it compares the
operators in order until the first whose output is less than PCT% (99.9)
exact, the op where the two engines part. (A scan, not a bisection: a later
op can round a difference away, so an exact op says nothing of those before
it; a bisection reported op 102 of a MobileNetV3Small whose op 3 parts.)

Needs TensorFlow (scripts/requirements-tflite.txt) for the interpreter and
its flatbuffer tools.
"""

import argparse
import copy
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import tensorflow as tf
from tensorflow.lite.tools import flatbuffer_utils


def load_pb(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return onnx.numpy_helper.to_array(t)


def run_both(bin_path: Path, model, x: np.ndarray, threads: int) -> tuple:
    """The interpreter's and layoutopt's first output of `model` (a
    flatbuffer_utils model object) on input `x`, of the interpreter's type."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.tflite"
        flatbuffer_utils.write_model(model, str(path))
        it = tf.lite.Interpreter(model_path=str(path), num_threads=threads)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        np.save(Path(tmp) / "x.npy", x)
        out = Path(tmp) / "out"
        subprocess.run([str(bin_path), "run", str(path), "--input", f"{tmp}/x.npy",
                        "--output", str(out), "--threads", str(threads)],
                       check=True, capture_output=True)
        got = np.load(next(out.glob("*.npy"))).reshape(want.shape)
    return got.astype(want.dtype), want


def op_name(model, op) -> str:
    return flatbuffer_utils.opcode_to_name(model, op.opcodeIndex)


def tapped(model, k: int):
    """`model` with operator `k`'s first output as its only output."""
    cut = copy.deepcopy(model)
    graph = cut.subgraphs[0]
    graph.outputs = np.array([graph.operators[k].outputs[0]], dtype=np.int32)
    return cut


def report(label: str, got: np.ndarray, want: np.ndarray) -> float:
    """Prints the shares of elements off by 0, 1, 2 and more integers (for a
    float output, the largest difference); returns the exact share in percent."""
    if want.dtype.kind == "f":
        diff = np.abs(got.astype(np.float64) - want)
        print(f"{label}: float, max abs difference {diff.max():.3g} "
              f"(magnitude {np.abs(want).max():.3g})", flush=True)
        return float(np.mean(diff == 0) * 100)
    off = np.abs(got.astype(np.int64) - want.astype(np.int64))
    shares = [np.mean(off == i) * 100 for i in (0, 1, 2)] + [np.mean(off > 2) * 100]
    print(f"{label}: {off.size} elements, exact {shares[0]:.2f}%, 1 step {shares[1]:.2f}%, "
          f"2 steps {shares[2]:.2f}%, more {shares[3]:.2f}%; max {off.max()}", flush=True)
    return shares[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin", type=Path)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ops", type=int, nargs="*",
                    help="compare these operators' outputs (none: list the operators)")
    ap.add_argument("--first-divergence", action="store_true",
                    help="compare the operators in order up to the first whose exact share is below --exact")
    ap.add_argument("--exact", type=float, default=99.9)
    args = ap.parse_args()
    for d in args.models:
        model = flatbuffer_utils.read_model(str(d / "model.tflite"))
        x = load_pb(d / "test_data_set_0" / "input_0.pb")
        ops = model.subgraphs[0].operators
        if args.ops == []:
            for k, op in enumerate(ops):
                print(k, op_name(model, op), list(op.inputs), list(op.outputs))
            continue
        if args.ops:
            for k in args.ops:
                got, want = run_both(args.bin, tapped(model, k), x, args.threads)
                report(f"{d.name} op {k} ({op_name(model, ops[k])})", got, want)
            continue
        if args.first_divergence:
            def below(k: int) -> bool:
                got, want = run_both(args.bin, tapped(model, k), x, args.threads)
                return report(f"  op {k} ({op_name(model, ops[k])})", got, want) < args.exact

            k = next((k for k in range(len(ops)) if below(k)), len(ops))
            if k == len(ops):
                print(f"{d.name}: every one of {len(ops)} operators is at least {args.exact}% exact")
            else:
                print(f"{d.name}: first below {args.exact}% exact: op {k} "
                      f"({op_name(model, ops[k])})")
            continue
        got, want = run_both(args.bin, model, x, args.threads)
        report(f"{d.name} output", got, want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
