#!/usr/bin/env python3
"""A small BERT-style encoder for the real-model suite, built with onnx.helper.

    python3 scripts/gen_bert.py [--out models/zoo]

Writes `<out>/BertEncoder_onnx/model.onnx` and `test_data_set_0/` (inputs
input_ids, attention_mask, token_type_ids; outputs last_hidden_state and the
logits of a 3-way classification head on the pooled [CLS] token). The graph
has the structure of a Hugging Face BERT export at opset 13: word, position and
token-type embeddings gathered by id, post-norm encoder layers (LayerNorm
decomposed into ReduceMean/Sub/Pow/Sqrt/Div as older exporters write it, GELU
as x * 0.5 * (1 + erf(x / sqrt 2))), an attention mask built with
Unsqueeze/Cast/Sub/Mul, and a Tanh pooler. Weights are seeded random; the
reference outputs come from onnxruntime. The last tokens are masked padding.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, LAYERS, HEADS, FFN, SEQ, CLASSES = 1000, 128, 2, 4, 512, 32, 3


class Builder:
    def __init__(self, rng: np.random.Generator):
        self.rng, self.nodes, self.inits, self.n = rng, [], [], 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def init(self, base: str, a: np.ndarray) -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(a, n))
        return n

    def weight(self, base: str, shape, scale=None) -> str:
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[0])
        return self.init(base, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, inputs, base: str, **attrs) -> str:
        out = self.name(base)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def scalar(self, v: float) -> str:
        return self.init("c", np.array(v, np.float32))

    def linear(self, x: str, base: str, n_in: int, n_out: int) -> str:
        y = self.op("MatMul", [x, self.weight(f"{base}.weight", (n_in, n_out))], base)
        return self.op("Add", [y, self.init(f"{base}.bias", (self.rng.standard_normal(n_out) * 0.02).astype(np.float32))], base)

    def layer_norm(self, x: str, base: str) -> str:
        mean = self.op("ReduceMean", [x], base, axes=[-1])
        d = self.op("Sub", [x, mean], base)
        var = self.op("ReduceMean", [self.op("Pow", [d, self.scalar(2.0)], base)], base, axes=[-1])
        std = self.op("Sqrt", [self.op("Add", [var, self.scalar(1e-12)], base)], base)
        y = self.op("Div", [d, std], base)
        gamma = self.init(f"{base}.weight", (1 + 0.1 * self.rng.standard_normal(HIDDEN)).astype(np.float32))
        beta = self.init(f"{base}.bias", (0.1 * self.rng.standard_normal(HIDDEN)).astype(np.float32))
        return self.op("Add", [self.op("Mul", [y, gamma], base), beta], base)

    def gelu(self, x: str, base: str) -> str:
        e = self.op("Erf", [self.op("Div", [x, self.scalar(math.sqrt(2.0))], base)], base)
        return self.op("Mul", [self.op("Mul", [x, self.scalar(0.5)], base), self.op("Add", [e, self.scalar(1.0)], base)], base)

    def ints(self, v) -> str:
        return self.init("shape", np.array(v, np.int64))


def bert(seed: int) -> onnx.ModelProto:
    b = Builder(np.random.default_rng(seed))
    d = HIDDEN // HEADS
    words = b.op("Gather", [b.weight("word_embeddings", (VOCAB, HIDDEN), 0.5), "input_ids"], "embeddings")
    pos = b.weight("position_embeddings", (SEQ, HIDDEN), 0.5)
    types = b.op("Gather", [b.weight("token_type_embeddings", (2, HIDDEN), 0.5), "token_type_ids"], "embeddings")
    h = b.op("Add", [b.op("Add", [words, pos], "embeddings"), types], "embeddings")
    h = b.layer_norm(h, "embeddings.LayerNorm")
    # [1, S] -> [1, 1, 1, S]: 0 where attended, -10000 at padding.
    mask = b.op("Unsqueeze", ["attention_mask", b.ints([1, 2])], "mask")
    mask = b.op("Cast", [mask], "mask", to=TensorProto.FLOAT)
    mask = b.op("Mul", [b.op("Sub", [b.scalar(1.0), mask], "mask"), b.scalar(-10000.0)], "mask")
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"

        def heads(x: str, perm) -> str:
            x = b.op("Reshape", [x, b.ints([1, SEQ, HEADS, d])], p)
            return b.op("Transpose", [x], p, perm=perm)

        q = heads(b.linear(h, f"{p}.attention.query", HIDDEN, HIDDEN), [0, 2, 1, 3])
        k = heads(b.linear(h, f"{p}.attention.key", HIDDEN, HIDDEN), [0, 2, 3, 1])
        v = heads(b.linear(h, f"{p}.attention.value", HIDDEN, HIDDEN), [0, 2, 1, 3])
        scores = b.op("Div", [b.op("MatMul", [q, k], p), b.scalar(math.sqrt(d))], p)
        probs = b.op("Softmax", [b.op("Add", [scores, mask], p)], p, axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v], p)], p, perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, b.ints([1, SEQ, HIDDEN])], p)
        attn = b.linear(ctx, f"{p}.attention.output.dense", HIDDEN, HIDDEN)
        h = b.layer_norm(b.op("Add", [attn, h], p), f"{p}.attention.output.LayerNorm")
        ff = b.gelu(b.linear(h, f"{p}.intermediate.dense", HIDDEN, FFN), p)
        ff = b.linear(ff, f"{p}.output.dense", FFN, HIDDEN)
        h = b.layer_norm(b.op("Add", [ff, h], p), f"{p}.output.LayerNorm")
    b.nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"], name="last_hidden_state"))
    cls = b.op("Gather", [h, b.init("cls", np.array(0, np.int64))], "pooler", axis=1)
    pooled = b.op("Tanh", [b.linear(cls, "pooler.dense", HIDDEN, HIDDEN)], "pooler")
    logits = b.linear(pooled, "classifier", HIDDEN, CLASSES)
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="logits"))
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, SEQ]) for n in ("input_ids", "attention_mask", "token_type_ids")]
    outs = [
        helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, SEQ, HIDDEN]),
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES]),
    ]
    graph = helper.make_graph(b.nodes, "bert_encoder", ints, outs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="layoutopt gen_bert.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("models/zoo"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    model = bert(args.seed)
    rng = np.random.default_rng(args.seed + 1)
    real = SEQ - 5
    feeds = {
        "input_ids": rng.integers(0, VOCAB, (1, SEQ), dtype=np.int64),
        "attention_mask": np.array([[1] * real + [0] * (SEQ - real)], np.int64),
        "token_type_ids": np.array([[0] * (real // 2) + [1] * (SEQ - real // 2)], np.int64),
    }
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = sess.run(None, feeds)
    out = args.out / "BertEncoder_onnx"
    data = out / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    (out / "model.onnx").write_bytes(model.SerializeToString())
    for i, name in enumerate(feeds):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(feeds[name], name).SerializeToString())
    for i, (o, y) in enumerate(zip(sess.get_outputs(), outputs)):
        (data / f"output_{i}.pb").write_bytes(numpy_helper.from_array(y, o.name).SerializeToString())
    print(f"BertEncoder: {model.ByteSize() / 1e6:.1f} MB, {len(model.graph.node)} nodes, logits {outputs[1]}")


if __name__ == "__main__":
    main()
