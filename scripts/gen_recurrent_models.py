#!/usr/bin/env python3
"""Small ONNX LSTM / GRU / RNN models with outputs recorded from onnxruntime, for
tests/integration/recurrent.rs.

    /tmp/ortvenv/bin/python scripts/gen_recurrent_models.py   # needs onnx, onnxruntime

Each case is tests/recurrent/<name>/model.onnx with test_data_set_0/{input,output}_<i>.pb
(the ONNX backend test-data layout). The cases cover what the node suite leaves out:
bidirectional layers with peepholes, initial states and every output, layout 1,
sequence_lens that differ per batch entry (as a graph input, so masking runs at run
time), clip, input_forget and non-default activations with alpha/beta.

onnxruntime's CPU kernels refuse layout 1, so a layout-1 case is recorded by running
its layout-0 twin (same weights) on the transposed inputs and transposing the outputs
back. Weights and inputs come from a fixed seed, and onnxruntime runs single-threaded
without graph optimizations, so every run writes the same bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "tests" / "recurrent"
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ["Y", "Y_h", "Y_c"], "GRU": ["Y", "Y_h"], "RNN": ["Y", "Y_h"]}
# Input positions: X, W, R, B, sequence_lens, initial_h, initial_c, P.
INPUT_NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


def build(op, attrs, shapes, values, graph_inputs, layout):
    """The model of one layer: `values` by input name; those in `graph_inputs` are
    graph inputs, the rest initializers."""
    used = [n for n in INPUT_NAMES if n in values]
    node_inputs = [n if n in values else "" for n in INPUT_NAMES[: INPUT_NAMES.index(used[-1]) + 1]]
    outputs = OUTPUTS[op]
    node = helper.make_node(op, node_inputs, outputs, name=f"/rnn/{op}", layout=layout, **attrs)
    elem = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
    ins = [helper.make_tensor_value_info(n, elem[values[n].dtype], values[n].shape) for n in graph_inputs]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs]
    inits = [numpy_helper.from_array(values[n], n) for n in used if n not in graph_inputs]
    graph = helper.make_graph([node], f"{op.lower()}_layer", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def run_ort(model, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def case(name, op, rng, steps=5, batch=3, input_size=4, hidden=6, attrs=None, optional=(),
         graph_inputs=("X",), layout=0, seq_lens=None):
    """Writes one case; `optional` names the optional inputs given."""
    attrs = dict(attrs or {})
    attrs["hidden_size"] = hidden
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    gh = GATES[op] * hidden
    f32 = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    values = {
        "X": f32(steps, batch, input_size),
        "W": f32(dirs, gh, input_size),
        "R": f32(dirs, gh, hidden),
    }
    state = (dirs, batch, hidden)
    extra = {
        "B": lambda: f32(dirs, 2 * gh),
        "sequence_lens": lambda: np.array(seq_lens, np.int32),
        "initial_h": lambda: f32(*state),
        "initial_c": lambda: f32(*state),
        "P": lambda: f32(dirs, 3 * hidden),
    }
    for n in optional:
        values[n] = extra[n]()
    shapes = {"Y": [steps, dirs, batch, hidden], "Y_h": list(state), "Y_c": list(state)}
    feeds = {n: values[n] for n in graph_inputs}
    expected = run_ort(build(op, attrs, shapes, values, graph_inputs, 0), feeds)
    if layout == 1:
        # The same layer batch-first: X [B, T, I], states [B, D, H], Y [B, T, D, H].
        values["X"] = values["X"].transpose(1, 0, 2).copy()
        for n in ("initial_h", "initial_c"):
            if n in values:
                values[n] = values[n].transpose(1, 0, 2).copy()
        shapes = {"Y": [batch, steps, dirs, hidden], "Y_h": [batch, dirs, hidden],
                  "Y_c": [batch, dirs, hidden]}
        expected = [expected[0].transpose(2, 0, 1, 3)] + [e.transpose(1, 0, 2) for e in expected[1:]]
        expected = [e.copy() for e in expected]
    model = build(op, attrs, shapes, values, graph_inputs, layout)
    out = OUT / name
    data = out / "test_data_set_0"
    data.mkdir(parents=True)
    (out / "model.onnx").write_bytes(model.SerializeToString())
    for i, n in enumerate(graph_inputs):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(values[n], n).SerializeToString())
    for i, (n, v) in enumerate(zip(OUTPUTS[op], expected)):
        (data / f"output_{i}.pb").write_bytes(numpy_helper.from_array(v, n).SerializeToString())


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    rng = np.random.default_rng(43)
    every = ("B", "initial_h", "initial_c", "P")
    case("lstm_bidirectional_peepholes", "LSTM", rng, attrs={"direction": "bidirectional"},
         optional=every)
    case("lstm_batchwise_bidirectional", "LSTM", rng, attrs={"direction": "bidirectional"},
         optional=every, graph_inputs=("X", "initial_h", "initial_c"), layout=1)
    case("lstm_sequence_lens_activations", "LSTM", rng,
         attrs={"direction": "bidirectional", "clip": 1.5, "input_forget": 1,
                "activations": ["HardSigmoid", "LeakyRelu", "ScaledTanh",
                                "Sigmoid", "Softsign", "Affine"],
                "activation_alpha": [0.3, 0.05, 0.9, 0.7],
                "activation_beta": [0.4, 1.2, 0.1]},
         optional=("B", "sequence_lens", "initial_h", "initial_c", "P"),
         graph_inputs=("X", "sequence_lens"), seq_lens=[5, 3, 1])
    case("gru_linear_before_reset", "GRU", rng,
         attrs={"direction": "bidirectional", "linear_before_reset": 1},
         optional=("B", "initial_h"))
    case("gru_sequence_lens_reverse", "GRU", rng,
         attrs={"direction": "reverse", "clip": 2.0, "activations": ["Sigmoid", "Elu"],
                "activation_alpha": [0.6]},
         optional=("B", "sequence_lens", "initial_h"), graph_inputs=("X", "sequence_lens"),
         seq_lens=[2, 5, 4], layout=1)
    case("rnn_bidirectional", "RNN", rng,
         attrs={"direction": "bidirectional", "activations": ["Relu", "ThresholdedRelu"],
                "activation_alpha": [0.2]},
         optional=("B", "initial_h"))
    print(f"cases in {OUT}: {sorted(p.name for p in OUT.iterdir())}")


if __name__ == "__main__":
    main()
