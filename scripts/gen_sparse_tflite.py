#!/usr/bin/env python3
"""Generates TFLite test models whose weights are stored sparse, and their reference
outputs from the TFLite interpreter.

A small Keras CNN gets seeded weights pruned by hand to about 80% zeros: the
convolutions element by element, the dense layer in 1x4 blocks along its input axis.
The converter (`tf.lite.Optimize.EXPERIMENTAL_SPARSITY`) then stores them with a
`sparsity` table: convolution weights as DENSE levels then a SPARSE_CSR last level,
read by DENSIFY; the dense weights with a 1x4 block map, read by FULLY_CONNECTED
directly. Writes, per model, models/<name>/model.tflite and test_data_set_0 (see
gen_tflite_models.py):

    tflite_sparse      float32 weights, sparse
    tflite_sparse_f16  float16 weights, sparse: DENSIFY then DEQUANTIZE, as MediaPipe's
                       face and pose detectors ship them; the dense layer is not pruned
                       (the interpreter's output is NaN for its block-sparse float16
                       weights)

Usage: python scripts/gen_sparse_tflite.py [--out models] [NAME ...]
Requirements: scripts/requirements-tflite.txt
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.lite.python import schema_py_generated as schema  # noqa: E402

from gen_tflite_models import write_model  # noqa: E402

keras = tf.keras
layers = keras.layers

KEEP = 0.2  # fraction of weights left non-zero


def pruned_cnn(seed=20, prune_dense=True):
    """Conv 3x3 (ReLU), depthwise 3x3, conv 1x1, depth to space, dense: weights pruned
    to ~80% zeros (the dense layer's only if `prune_dense`)."""
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((8, 8, 8), batch_size=1, name="image")
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(x_in)
    x = layers.DepthwiseConv2D(3, padding="same")(x)
    x = layers.Conv2D(16, 1, strides=2)(x)
    # DEPTH_TO_SPACE, as MediaPipe's detectors upsample their heads.
    x = layers.Lambda(lambda t: tf.nn.depth_to_space(t, 2))(x)
    x = layers.Flatten()(x)
    x = layers.Dense(32)(x)
    model = keras.Model(x_in, x, name="tflite_sparse")
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        weights = layer.get_weights()
        if not weights or (isinstance(layer, layers.Dense) and not prune_dense):
            continue
        kernel = weights[0]
        if isinstance(layer, layers.Dense):
            # Blocks of four consecutive inputs (kernel is [K, N]) kept or dropped together.
            blocks = rng.random((kernel.shape[0] // 4, kernel.shape[1])) < KEEP
            mask = np.repeat(blocks, 4, axis=0)
        else:
            mask = rng.random(kernel.shape) < KEEP
        weights[0] = kernel * mask
        layer.set_weights(weights)
    return model


def convert_sparse(model, float16=False):
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.EXPERIMENTAL_SPARSITY]
    if float16:
        converter.optimizations.append(tf.lite.Optimize.DEFAULT)
        converter.target_spec.supported_types = [tf.float16]
    tflite = converter.convert()
    describe_sparsity(tflite)
    return tflite


def describe_sparsity(tflite):
    """Prints each sparse tensor's layout; fails when the converter stored none sparse."""
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(tflite, 0))
    sparse = [t for t in model.subgraphs[0].tensors if t.sparsity is not None]
    assert sparse, "the converter stored no weights sparse"
    for t in sparse:
        sp = t.sparsity
        levels = ["DENSE %d" % d.denseSize if d.format == 0 else "CSR" for d in sp.dimMetadata]
        block_map = list(sp.blockMap) if sp.blockMap is not None else []
        order = [int(d) for d in sp.traversalOrder]
        print(f"  sparse {t.shape.tolist()}: order {order}, blocks {[int(b) for b in block_map]}, levels {levels}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "models"))
    ap.add_argument("names", nargs="*", help="models to build (default: all)")
    args = ap.parse_args()
    builds = {
        "tflite_sparse": lambda: convert_sparse(pruned_cnn()),
        "tflite_sparse_f16": lambda: convert_sparse(pruned_cnn(prune_dense=False), float16=True),
    }
    seeds = {"tflite_sparse": 20, "tflite_sparse_f16": 21}
    for name in args.names or builds:
        write_model(args.out, name, builds[name](), seed=seeds[name])


if __name__ == "__main__":
    main()
