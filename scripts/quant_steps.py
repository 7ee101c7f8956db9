#!/usr/bin/env python3
"""How far layoutopt's outputs of quantized ONNX models are from onnxruntime's,
counted in quantization steps of each output.

    python3 scripts/quant_steps.py BIN MODEL_DIR... [--threads N] [--conv-algo A]

Each MODEL_DIR holds model.onnx and test_data_set_0/input_0.pb (as
scripts/gen_quant.py writes them). Both engines run that input; an output made
by a DequantizeLinear is compared in steps of its scale, any other output in
absolute terms. Prints, per output, the share of elements off by 0, 1, 2 and
more steps, and the largest difference.
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort


def load_pb(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return onnx.numpy_helper.to_array(t)


def output_steps(model: onnx.ModelProto) -> dict:
    """The scale of each graph output a DequantizeLinear writes."""
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    steps = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[1] in inits:
            scale = inits[node.input[1]]
            if scale.size == 1:
                steps[node.output[0]] = float(scale.reshape(-1)[0])
    return {o.name: steps.get(o.name) for o in model.graph.output}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin", type=Path)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--conv-algo", default="auto",
                    help="layoutopt's --conv-algo (direct: float convolutions)")
    args = ap.parse_args()
    for d in args.models:
        model = onnx.load(str(d / "model.onnx"))
        x = load_pb(d / "test_data_set_0" / "input_0.pb")
        name = model.graph.input[0].name
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        sess = ort.InferenceSession(str(d / "model.onnx"), so, providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {name: x})))
        with tempfile.TemporaryDirectory() as tmp:
            np.save(Path(tmp) / "x.npy", x)
            out = Path(tmp) / "out"
            subprocess.run([str(args.bin), "run", str(d / "model.onnx"), "--input",
                            f"{name}={tmp}/x.npy", "--output", str(out),
                            "--threads", str(args.threads), "--conv-algo", args.conv_algo],
                           check=True, capture_output=True)
            got = {p.stem: np.load(p) for p in out.glob("*.npy")}
        for o, step in output_steps(model).items():
            g, w = got[o].astype(np.float64), want[o].astype(np.float64)
            diff = np.abs(g - w)
            if step:
                k = np.rint(diff / step).astype(np.int64)
                shares = [np.mean(k == i) * 100 for i in (0, 1, 2)] + [np.mean(k > 2) * 100]
                print(f"{d.name} {o}: {k.size} elements, exact {shares[0]:.2f}%, "
                      f"1 step {shares[1]:.2f}%, 2 steps {shares[2]:.2f}%, more {shares[3]:.2f}%; "
                      f"max {k.max()} steps")
            else:
                print(f"{d.name} {o}: max abs difference {diff.max():.3g} "
                      f"(output magnitude {np.abs(w).max():.3g}; not a dequantized output)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
