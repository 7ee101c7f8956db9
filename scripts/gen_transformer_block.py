#!/usr/bin/env python3
"""A small decoder block at opset 23 with outputs recorded from onnxruntime, for
tests/integration/transformer.rs.

    /tmp/ortvenv/bin/python scripts/gen_transformer_block.py   # needs onnx, onnxruntime

Writes tests/transformer/decoder_block/model.onnx with test_data_set_0/{input,output}_<i>.pb
(the ONNX backend test-data layout). The block is what PyTorch's dynamo exporter
writes for a Llama-style layer, built with onnx.helper from the opset-23 operators:

    x -> RMSNormalization -> Q, K, V projections (MatMul)
      -> RotaryEmbedding on Q and K (3-D, num_heads, position_ids as an input)
      -> Attention (3-D, q_num_heads 8, kv_num_heads 2: grouped-query, is_causal)
      -> output projection, residual Add
      -> RMSNormalization -> SiLU MLP (MatMul, Sigmoid, Mul, MatMul), residual Add -> y

Weights and inputs come from a fixed seed, and onnxruntime runs single-threaded
without graph optimizations, so every run writes the same bytes. The recording is
also checked against onnx.reference (the specification's own implementation).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from test_data import write_case

OUT = Path(__file__).resolve().parent.parent / "tests" / "transformer"
BATCH, SEQ, HIDDEN, Q_HEADS, KV_HEADS, MLP = 2, 12, 64, 8, 2, 128
HEAD = HIDDEN // Q_HEADS
MAX_POSITIONS = 32


def build(rng: np.random.Generator) -> onnx.ModelProto:
    def weight(name, *shape, scale=0.1):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    def rope(x, heads):
        inputs = [x, "cos_cache", "sin_cache", "position_ids"]
        return helper.make_node("RotaryEmbedding", inputs, [f"{x}_rot"], name=f"{x}_rope", num_heads=heads)

    angles = np.arange(MAX_POSITIONS)[:, None] / (10000.0 ** (np.arange(HEAD // 2) * 2.0 / HEAD))
    inits = [
        weight("norm1_scale", HIDDEN, scale=1.0),
        weight("wq", HIDDEN, HIDDEN),
        weight("wk", HIDDEN, KV_HEADS * HEAD),
        weight("wv", HIDDEN, KV_HEADS * HEAD),
        weight("wo", HIDDEN, HIDDEN),
        weight("norm2_scale", HIDDEN, scale=1.0),
        weight("w_up", HIDDEN, MLP),
        weight("w_down", MLP, HIDDEN),
        numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos_cache"),
        numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin_cache"),
    ]
    nodes = [
        helper.make_node("RMSNormalization", ["x", "norm1_scale"], ["h1"], name="norm1", epsilon=1e-6),
        helper.make_node("MatMul", ["h1", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["h1", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["h1", "wv"], ["v"], name="v_proj"),
        rope("q", Q_HEADS),
        rope("k", KV_HEADS),
        helper.make_node(
            "Attention",
            ["q_rot", "k_rot", "v"],
            ["attn"],
            name="attention",
            is_causal=1,
            q_num_heads=Q_HEADS,
            kv_num_heads=KV_HEADS,
        ),
        helper.make_node("MatMul", ["attn", "wo"], ["o"], name="o_proj"),
        helper.make_node("Add", ["x", "o"], ["r1"], name="residual1"),
        helper.make_node("RMSNormalization", ["r1", "norm2_scale"], ["h2"], name="norm2", epsilon=1e-6),
        helper.make_node("MatMul", ["h2", "w_up"], ["up"], name="up_proj"),
        helper.make_node("Sigmoid", ["up"], ["gate"], name="silu_gate"),
        helper.make_node("Mul", ["up", "gate"], ["act"], name="silu"),
        helper.make_node("MatMul", ["act", "w_down"], ["down"], name="down_proj"),
        helper.make_node("Add", ["r1", "down"], ["y"], name="residual2"),
    ]
    graph = helper.make_graph(
        nodes,
        "decoder_block",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, SEQ, HIDDEN]),
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, [BATCH, SEQ]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, SEQ, HIDDEN])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 11
    onnx.checker.check_model(model, full_check=True)
    return model


def run_ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def main() -> None:
    rng = np.random.default_rng(23)
    model = build(rng)
    x = rng.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    # The second sample continues at position 5 (as after a prompt of 5 tokens).
    position_ids = np.stack([np.arange(SEQ), np.arange(5, 5 + SEQ)]).astype(np.int64)
    feeds = {"x": x, "position_ids": position_ids}
    (y,) = run_ort(model, feeds)
    (y_ref,) = ReferenceEvaluator(model).run(None, feeds)
    err = float(np.max(np.abs(y - y_ref)))
    if err > 1e-4:
        raise SystemExit(f"onnxruntime and onnx.reference differ by {err}")

    case = OUT / "decoder_block"
    write_case(case, model, feeds, {"y": y})
    print(f"wrote {case} (onnxruntime vs onnx.reference: max error {err:.2e})")


if __name__ == "__main__":
    main()
