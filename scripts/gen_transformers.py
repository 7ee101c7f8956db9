#!/usr/bin/env python3
"""The transformer suite: keras_hub backbones built from small configs with seeded
random weights (no downloads), as ONNX (tf2onnx) and as TFLite (TFLiteConverter),
each with its inputs and the reference outputs.

    python3 -m venv .venv-zoo && .venv-zoo/bin/pip install -r scripts/requirements-zoo.txt
    .venv-zoo/bin/python scripts/gen_transformers.py [--out models/zoo] [--size tiny|small] [MODEL ...]

Writes `<out>/<model>_onnx/model.onnx` and `<out>/<model>_tflite/model.tflite`, each
with `test_data_set_0/{input_K,output_K}.pb` in the order of the model's own inputs
and outputs, the layout `layoutopt run` and `scripts/run_zoo.py` read. The reference
outputs come from onnxruntime (ONNX) and the TFLite interpreter (TFLite).

The models cover what exporters write for transformers: BERT (post-norm encoder,
GELU, padding mask), GPT-2 (pre-norm causal decoder), Llama (RMS norm, rotary
embeddings, grouped-query attention, SwiGLU) and ViT (patch embedding by a strided
convolution, class token). `GPT2Step` is one decoding step of the GPT-2 model with a
key/value cache as input, as a generation loop runs it. A conversion that fails (a
converter's limit) is reported and the others are still written; the exit status is
then 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf2onnx  # noqa: E402
import tf2onnx.handler  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
from onnx import numpy_helper  # noqa: E402

# `tiny` is small enough to commit, wide enough that every head has several
# lanes of work; `small` (--size small) is the size to time them at, about
# BERT-mini's, with 128 tokens or a 224x224 image in 16x16 patches.
SIZES = {
    "tiny": dict(seq=16, vocab=500, layers=2, hidden=64, mlp=128, image=32, patch=8),
    "small": dict(seq=128, vocab=8000, layers=4, hidden=256, mlp=1024, image=224, patch=16),
}
SEQ, VOCAB, TEXT, IMAGE = 0, 0, {}, {}


def configure(size: str):
    global SEQ, VOCAB, TEXT, IMAGE
    c = SIZES[size]
    SEQ, VOCAB = c["seq"], c["vocab"]
    TEXT = dict(vocabulary_size=VOCAB, num_layers=c["layers"], hidden_dim=c["hidden"],
                intermediate_dim=c["mlp"])
    IMAGE = dict(image_shape=(c["image"], c["image"], 3), patch_size=c["patch"],
                 num_layers=c["layers"], hidden_dim=c["hidden"], mlp_dim=c["mlp"])


def bert():
    return keras_hub.models.BertBackbone(num_heads=4, max_sequence_length=4 * SEQ, **TEXT)


def gpt2():
    return keras_hub.models.GPT2Backbone(num_heads=4, max_sequence_length=4 * SEQ, **TEXT)


def llama():
    return keras_hub.models.LlamaBackbone(num_query_heads=4, num_key_value_heads=2, **TEXT)


def vit():
    return keras_hub.models.ViTBackbone(num_heads=4, **IMAGE)


def text_inputs(model, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Token ids, segment ids where the model takes them, and a padding mask whose
    last three tokens are padding."""
    feeds = {}
    for i in model.inputs:
        name = i.name
        if name == "token_ids":
            feeds[name] = rng.integers(1, VOCAB, (1, SEQ)).astype(np.int32)
        elif name == "segment_ids":
            feeds[name] = (np.arange(SEQ) >= SEQ // 2).astype(np.int32)[None]
        elif name == "padding_mask":
            feeds[name] = (np.arange(SEQ) < SEQ - 3).astype(np.int32)[None]
        else:
            raise ValueError(f"unknown text input {name}")
    return feeds


def backbone_function(model, feeds: dict[str, np.ndarray]):
    """The backbone as a tf.function of fixed shapes, its outputs in a fixed order."""
    spec = [tf.TensorSpec(v.shape, tf.as_dtype(v.dtype), name=k) for k, v in feeds.items()]
    names = list(feeds)

    @tf.function(input_signature=spec)
    def f(*args):
        out = model(dict(zip(names, args)) if len(names) > 1 else args[0])
        if isinstance(out, dict):
            return {k: out[k] for k in sorted(out)}
        return {"output": out}

    return f


def concat_update(inputs, start_indices, updates):
    """keras's slice_update at constant starts as slices and a concat, the form
    exporters write a cache update in (tf2onnx has no XlaDynamicUpdateSlice)."""
    axes = [a for a, (n, m) in enumerate(zip(inputs.shape, updates.shape)) if n != m]
    if len(axes) > 1 or not all(isinstance(s, int) for s in start_indices):
        raise ValueError("a cache update along one axis at a constant index")
    if not axes:
        return updates
    a, s = axes[0], start_indices[axes[0]]
    n = updates.shape[a]
    head = tf.gather(inputs, tf.range(0, s), axis=a)
    tail = tf.gather(inputs, tf.range(s + n, inputs.shape[a]), axis=a)
    return tf.concat([head, updates, tail], axis=a)


def gpt2_step(rng: np.random.Generator):
    """One decoding step of a GPT-2 causal LM with its key/value caches, one
    input per layer of shape (1, 2, 2*SEQ, heads, head_dim) holding SEQ - 1
    earlier positions: the step writes position SEQ - 1 of each and returns the
    logits and the updated caches, as keras_hub's `call_with_cache` runs it."""
    keras.src.backend.core.slice_update = concat_update
    lm = keras_hub.models.GPT2CausalLM(backbone=gpt2(), preprocessor=None)
    backbone, index = lm.backbone, SEQ - 1
    heads = 4
    shape = (1, 2, 2 * SEQ, heads, TEXT["hidden_dim"] // heads)
    feeds = {"token_ids": rng.integers(1, VOCAB, (1, 1)).astype(np.int32)}
    for i in range(TEXT["num_layers"]):
        cache = rng.normal(0, 1, shape).astype(np.float32)
        cache[:, :, index:] = 0.0
        feeds[f"cache_{i}"] = cache
    spec = [tf.TensorSpec(v.shape, tf.as_dtype(v.dtype), name=k) for k, v in feeds.items()]

    @tf.function(input_signature=spec)
    def f(token_ids, *caches):
        tokens = backbone.token_embedding(token_ids)
        positions = backbone.position_embedding(tokens, start_index=index)
        x = backbone.embeddings_add((tokens, positions))
        out = {}
        for i, (layer, cache) in enumerate(zip(backbone.transformer_layers, caches)):
            x, out[f"new_cache_{i}"] = layer(
                x, self_attention_cache=cache, self_attention_cache_update_index=index
            )
        out["logits"] = backbone.token_embedding(backbone.layer_norm(x), reverse=True)
        return out

    return f, feeds


@tf2onnx.handler.tf_op("Erfc")
class Erfc:
    """erfc(x) = 1 - erf(x): Keras's exact GELU is written with erfc, which
    tf2onnx does not convert."""

    @classmethod
    def version_9(cls, ctx, node, **kwargs):
        erf = ctx.make_node("Erf", [node.input[0]], op_name_scope=node.name)
        one = ctx.make_const(tf2onnx.utils.make_name("one"), np.array(1, np.float32))
        node.type = "Sub"
        ctx.replace_inputs(node, [one.output[0], erf.output[0]])


def write_case(d: Path, model_bytes: bytes, file: str, ins, outs):
    """`ins` and `outs` are (name, array) pairs in the model's own order."""
    data = d / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    (d / file).write_bytes(model_bytes)
    for kind, pairs in (("input", ins), ("output", outs)):
        for k, (name, a) in enumerate(pairs):
            (data / f"{kind}_{k}.pb").write_bytes(numpy_helper.from_array(a, name).SerializeToString())


def write_onnx(d: Path, f, feeds: dict[str, np.ndarray], opset: int, model=None):
    """`model`: a Keras model of one input, converted whole (its function
    captures a constant that tf2onnx's function conversion leaves an input)."""
    if model is not None:
        proto, _ = tf2onnx.convert.from_keras(model, input_signature=f.input_signature, opset=opset)
    else:
        proto, _ = tf2onnx.convert.from_function(f, input_signature=f.input_signature, opset=opset)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    # tf2onnx may list a constant as a graph input with its initializer too.
    ins = [(i.name, feeds[i.name]) for i in sess.get_inputs() if i.name in feeds]
    ys = sess.run(None, dict(ins))
    outs = [(o.name, y) for o, y in zip(sess.get_outputs(), ys)]
    write_case(d, proto.SerializeToString(), "model.onnx", ins, outs)


def write_tflite(d: Path, f, feeds: dict[str, np.ndarray]) -> int:
    tfl = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()]).convert()
    interp = tf.lite.Interpreter(model_content=tfl)
    interp.allocate_tensors()
    ins = []
    for i in interp.get_input_details():
        key = next(k for k in feeds if i["name"].endswith(k) or k in i["name"])
        interp.set_tensor(i["index"], feeds[key])
        ins.append((i["name"], feeds[key]))
    interp.invoke()
    outs = [(o["name"], interp.get_tensor(o["index"])) for o in interp.get_output_details()]
    write_case(d, tfl, "model.tflite", ins, outs)
    return len(tfl)


MODELS = {"BertTiny": bert, "GPT2Tiny": gpt2, "LlamaTiny": llama, "ViTTiny": vit, "GPT2Step": None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--out", type=Path, default=Path("models/zoo"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--size", choices=list(SIZES), default="tiny")
    args = ap.parse_args()
    configure(args.size)
    failed = 0
    for name in args.models:
        if name not in MODELS:
            print(f"unknown model {name}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        keras.utils.set_random_seed(args.seed)
        rng = np.random.default_rng(args.seed)
        model = None
        if name == "GPT2Step":
            f, feeds = gpt2_step(rng)
        else:
            model = MODELS[name]()
            if name == "ViTTiny":
                side = IMAGE["image_shape"][0]
                feeds = {"images": rng.uniform(-1, 1, (1, side, side, 3)).astype(np.float32)}
            else:
                feeds = text_inputs(model, rng)
            f = backbone_function(model, feeds)
        whole = model if name == "ViTTiny" else None
        for fmt, write in (("onnx", lambda d: write_onnx(d, f, feeds, args.opset, whole)),
                           ("tflite", lambda d: write_tflite(d, f, feeds))):
            sized = name if args.size == "tiny" else name.replace("Tiny", "") + args.size.title()
            label = f"{sized}_{fmt}"
            try:
                write(args.out / label)
                print(f"{label}: written")
            except Exception as e:  # a converter's limit: reported, the other format still written
                failed += 1
                print(f"{label}: not written: {str(e).splitlines()[0][:300]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
