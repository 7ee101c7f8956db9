#!/usr/bin/env python3
"""A Gated DeltaNet-style block at opset 27 with outputs recorded from onnx.reference,
for tests/integration/transformer.rs.

    /tmp/confvenv/bin/python scripts/gen_linear_attention_block.py   # needs onnx, numpy

Writes tests/transformer/gated_deltanet_block/model.onnx with
test_data_set_0/{input,output}_<i>.pb (the ONNX backend test-data layout). The block,
built with onnx.helper, is a linear-attention decoder layer continuing from a state:

    x -> Q projection (4 heads), K projection (2 heads, L2-normalized per head), V projection
      -> decay = -Softplus(x Wg) per key/value head, beta = Sigmoid(x Wb) per head
      -> LinearAttention (gated_delta, q_num_heads 4, kv_num_heads 2, past_state)
      -> output projection, residual Add -> y; and the present state

onnxruntime (1.31) does not read opset 27, so the recording is onnx.reference's (the
specification's own implementation), checked against a float64 numpy run of the
recurrence written here from the specification's update rule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from test_data import write_case

OUT = Path(__file__).resolve().parent.parent / "tests" / "transformer" / "gated_deltanet_block"
BATCH, SEQ, HIDDEN, Q_HEADS, KV_HEADS, HEAD = 2, 24, 64, 4, 2, 16


def build(rng: np.random.Generator) -> onnx.ModelProto:
    def weight(name, *shape, scale=0.1):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    kv = KV_HEADS * HEAD
    inits = [
        weight("wq", HIDDEN, Q_HEADS * HEAD),
        weight("wk", HIDDEN, kv),
        weight("wv", HIDDEN, kv),
        weight("wg", HIDDEN, KV_HEADS),
        weight("wb", HIDDEN, KV_HEADS),
        weight("wo", Q_HEADS * HEAD, HIDDEN),
        numpy_helper.from_array(np.array([BATCH, SEQ, KV_HEADS, HEAD], np.int64), "k_heads"),
        numpy_helper.from_array(np.array([BATCH, SEQ, kv], np.int64), "k_packed"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "wk"], ["k_raw"], name="k_proj"),
        helper.make_node("Reshape", ["k_raw", "k_heads"], ["k_split"], name="k_split"),
        helper.make_node("LpNormalization", ["k_split"], ["k_unit"], name="k_norm", axis=-1, p=2),
        helper.make_node("Reshape", ["k_unit", "k_packed"], ["k"], name="k_join"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v_proj"),
        helper.make_node("MatMul", ["x", "wg"], ["g_raw"], name="g_proj"),
        helper.make_node("Softplus", ["g_raw"], ["g_soft"], name="g_softplus"),
        helper.make_node("Neg", ["g_soft"], ["decay"], name="g_neg"),
        helper.make_node("MatMul", ["x", "wb"], ["b_raw"], name="b_proj"),
        helper.make_node("Sigmoid", ["b_raw"], ["beta"], name="b_sigmoid"),
        helper.make_node(
            "LinearAttention",
            ["q", "k", "v", "past_state", "decay", "beta"],
            ["attn", "present_state"],
            name="linear_attention",
            q_num_heads=Q_HEADS,
            kv_num_heads=KV_HEADS,
            update_rule="gated_delta",
        ),
        helper.make_node("MatMul", ["attn", "wo"], ["o"], name="o_proj"),
        helper.make_node("Add", ["x", "o"], ["y"], name="residual"),
    ]
    state = [BATCH, KV_HEADS, HEAD, HEAD]
    graph = helper.make_graph(
        nodes,
        "gated_deltanet_block",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, SEQ, HIDDEN]),
            helper.make_tensor_value_info("past_state", TensorProto.FLOAT, state),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, SEQ, HIDDEN]),
            helper.make_tensor_value_info("present_state", TensorProto.FLOAT, state),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    model.ir_version = 11
    onnx.checker.check_model(model, full_check=True)
    return model


def by_numpy(model: onnx.ModelProto, x: np.ndarray, past: np.ndarray) -> list[np.ndarray]:
    """The block in float64, the recurrence as the specification's update rule states it."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    x = x.astype(np.float64)
    heads = lambda a, h: a.reshape(BATCH, SEQ, h, -1)  # noqa: E731
    q = heads(x @ w["wq"], Q_HEADS)
    k = heads(x @ w["wk"], KV_HEADS)
    k = k / np.sqrt((k * k).sum(-1, keepdims=True))
    v = heads(x @ w["wv"], KV_HEADS)
    decay = -np.log1p(np.exp(x @ w["wg"]))
    beta = 1.0 / (1.0 + np.exp(-(x @ w["wb"])))
    state = past.astype(np.float64).copy()
    out = np.zeros((BATCH, SEQ, Q_HEADS, HEAD))
    group = Q_HEADS // KV_HEADS
    for t in range(SEQ):
        state *= np.exp(decay[:, t])[:, :, None, None]
        retrieved = np.einsum("bhdm,bhd->bhm", state, k[:, t])
        update = beta[:, t][:, :, None] * (v[:, t] - retrieved)
        state += k[:, t][..., :, None] * update[..., None, :]
        for h in range(Q_HEADS):
            out[:, t, h] = np.einsum("bd,bdm->bm", q[:, t, h], state[:, h // group]) / np.sqrt(HEAD)
    y = x + out.reshape(BATCH, SEQ, -1) @ w["wo"]
    return [y, state]


def main() -> None:
    rng = np.random.default_rng(27)
    model = build(rng)
    x = rng.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    past = (rng.standard_normal((BATCH, KV_HEADS, HEAD, HEAD)) * 0.1).astype(np.float32)
    feeds = {"x": x, "past_state": past}
    outputs = ReferenceEvaluator(model).run(None, feeds)
    err = max(float(np.max(np.abs(a - b))) for a, b in zip(outputs, by_numpy(model, x, past)))
    if err > 1e-4:
        raise SystemExit(f"onnx.reference and the float64 recurrence differ by {err}")

    write_case(OUT, model, feeds, dict(zip(["y", "present_state"], outputs)))
    print(f"wrote {OUT} (onnx.reference vs the float64 recurrence: max error {err:.2e})")


if __name__ == "__main__":
    main()
