#!/usr/bin/env python3
"""How far layoutopt's outputs of quantized ONNX models are from onnxruntime's,
counted in quantization steps of each output.

    python3 scripts/quant_steps.py BIN MODEL_DIR... [--threads N] [--conv-algo A]
        [--first-divergence [--exact PCT]]

Each MODEL_DIR holds model.onnx and test_data_set_0/input_K.pb, one per graph
input in order (as scripts/gen_quant.py writes them). Both engines run those
inputs; an output made
by a DequantizeLinear is compared in steps of its scale, any other output in
absolute terms. Prints, per output, the share of elements off by 0, 1, 2 and
more steps, and the largest difference. With --first-divergence it instead
bisects a QDQ model for the first dequantized activation that is less than
PCT% (99.9) exact, to find the op where the two engines part.
"""

import argparse
import bisect
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


def steps_apart(got: np.ndarray, want: np.ndarray, step: float) -> np.ndarray:
    """Per element, how many quantization steps of `step` apart the two are."""
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return np.rint(diff / step).astype(np.int64)


def load_inputs(d: Path, model: onnx.ModelProto) -> dict:
    """The recorded inputs of the model in `d`, by the graph's input names."""
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    return {n: load_pb(d / "test_data_set_0" / f"input_{k}.pb") for k, n in enumerate(names)}


def run_both(bin_path: Path, model: onnx.ModelProto, feeds: dict, args) -> tuple:
    """onnxruntime's and layoutopt's outputs of `model` on the inputs of
    `feeds` it reads, by name."""
    feeds = {i.name: feeds[i.name] for i in model.graph.input if i.name in feeds}
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model, str(path))
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        given = []
        for k, (name, x) in enumerate(feeds.items()):
            np.save(Path(tmp) / f"input_{k}.npy", x)
            given += ["--input", f"{name}={tmp}/input_{k}.npy"]
        out = Path(tmp) / "out"
        subprocess.run([str(bin_path), "run", str(path), *given,
                        "--output", str(out), "--threads", str(args.threads),
                        "--conv-algo", args.conv_algo], check=True, capture_output=True)
        got = {p.stem: np.load(p) for p in out.glob("*.npy")}
    return got, want


def first_divergence(bin_path: Path, model: onnx.ModelProto, feeds: dict, args) -> None:
    """Bisects the activations' DequantizeLinear outputs, in graph order, for
    the first whose exact share falls below --exact: the model cut after it
    (its only output) is run on both engines."""
    inits = {i.name for i in model.graph.initializer}
    taps = [n for n in model.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] not in inits
            and n.input[1] in inits]
    scale = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    extractor = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(model))
    inputs = [i.name for i in model.graph.input if i.name not in inits]

    def exact_share(k: int) -> float:
        node = taps[k]
        cut = extractor.extract_model(inputs, [node.output[0]])
        # The output's file name is its tensor name with odd characters replaced.
        got, want = run_both(bin_path, cut, feeds, args)
        g = next(iter(got.values()))
        k_steps = steps_apart(g, want[node.output[0]], float(scale[node.input[1]].reshape(-1)[0]))
        share = float(np.mean(k_steps == 0) * 100)
        print(f"  {k:3d} {node.name} ({node.output[0]}): exact {share:.2f}%, "
              f"max {k_steps.max()} steps", flush=True)
        return share

    k = bisect.bisect_left(range(len(taps)), True, key=lambda k: exact_share(k) < args.exact)
    if k == len(taps):
        print(f"every one of {len(taps)} dequantized activations is at least {args.exact}% exact")
    else:
        print(f"first below {args.exact}% exact: {taps[k].name}, after "
              f"{taps[k - 1].name if k else 'the input'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin", type=Path)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--conv-algo", default="auto",
                    help="layoutopt's --conv-algo (direct: float convolutions)")
    ap.add_argument("--first-divergence", action="store_true",
                    help="bisect the QDQ model's dequantized activations for the first "
                         "whose exact share is below --exact")
    ap.add_argument("--exact", type=float, default=99.9)
    args = ap.parse_args()
    for d in args.models:
        model = onnx.load(str(d / "model.onnx"))
        feeds = load_inputs(d, model)
        if args.first_divergence:
            print(d.name)
            first_divergence(args.bin, model, feeds, args)
            continue
        got, want = run_both(args.bin, model, feeds, args)
        for o, step in output_steps(model).items():
            g, w = got[o].astype(np.float64), want[o].astype(np.float64)
            diff = np.abs(g - w)
            if step:
                k = steps_apart(g, w, step)
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
