#!/usr/bin/env python3
"""The real-model suite: Keras applications with seeded random weights (no downloads),
as ONNX (tf2onnx, opset 13) and as TFLite (TFLiteConverter), each with an input and the
reference output.

    python3 -m venv .venv-zoo && .venv-zoo/bin/pip install -r scripts/requirements-zoo.txt
    .venv-zoo/bin/python scripts/gen_zoo.py [--out models/zoo] [MODEL ...]

Writes `<out>/<model>_onnx/model.onnx` and `<out>/<model>_tflite/model.tflite`, each
with `test_data_set_0/{input_0,output_0}.pb`, the layout `layoutopt run` reads, and
for a few models older-opset ONNX variants `<out>/<model>-opset<N>_onnx/` (VARIANTS).
A conversion that fails (a converter's limit) is reported and the others are still
written; the exit status is then 1. The
reference outputs come from onnxruntime (ONNX) and the TFLite interpreter (TFLite).
Every model is built with `classifier_activation=None`: the outputs are logits, since
with random weights a softmax is nearly uniform and would make the check weak.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf2onnx  # noqa: E402
import onnx  # noqa: E402
import onnx.version_converter  # noqa: E402
from onnx import numpy_helper  # noqa: E402

APPS = tf.keras.applications
L = tf.keras.layers


def blaze_landmark(weights=None, input_shape=(128, 128, 3), classifier_activation=None):
    """A small face-landmark network in MediaPipe's BlazeFace style: PReLU (one
    slope per channel) after each convolution, residual blocks of a depthwise
    and a 1x1 convolution, and at each downsampling a shortcut that max-pools
    and then zero-pads its channels with tf.pad on C up to the block's width.
    The slopes are drawn at random (Keras starts them at 0, a ReLU). `weights`
    and `classifier_activation` are accepted for the Keras-applications
    signature `build` calls with; there are no pretrained weights."""
    assert weights is None and classifier_activation is None

    def prelu(x):
        slope = tf.keras.initializers.RandomUniform(0.05, 0.5)
        return L.PReLU(alpha_initializer=slope, shared_axes=[1, 2])(x)

    def block(x, width, stride=1):
        y = L.DepthwiseConv2D(3, strides=stride, padding="same")(x)
        y = L.Conv2D(width, 1)(y)
        shortcut = x
        if stride > 1:
            shortcut = L.MaxPool2D(stride)(shortcut)
        extra = width - x.shape[-1]
        if extra > 0:
            pad = [[0, 0], [0, 0], [0, 0], [0, extra]]
            shortcut = L.Lambda(lambda t: tf.pad(t, pad))(shortcut)
        return prelu(L.Add()([y, shortcut]))

    inp = tf.keras.Input(input_shape)
    x = prelu(L.Conv2D(16, 3, strides=2, padding="same")(inp))
    for width, stride in [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1)]:
        x = block(x, width, stride)
    x = L.GlobalAveragePooling2D()(x)
    return tf.keras.Model(inp, L.Dense(136)(x), name="BlazeLandmark")


# name: (constructor, input side)
MODELS = {
    "ResNet50": (APPS.ResNet50, 224),
    "DenseNet121": (APPS.DenseNet121, 224),
    "InceptionV3": (APPS.InceptionV3, 299),
    "Xception": (APPS.Xception, 299),
    "EfficientNetB0": (APPS.EfficientNetB0, 224),
    "EfficientNetV2B0": (APPS.EfficientNetV2B0, 224),
    "MobileNetV3Small": (APPS.MobileNetV3Small, 224),
    "MobileNetV3Large": (APPS.MobileNetV3Large, 224),
    "NASNetMobile": (APPS.NASNetMobile, 224),
    "ConvNeXtTiny": (APPS.ConvNeXtTiny, 224),
    "VGG16": (APPS.VGG16, 224),
    "BlazeLandmark": (blaze_landmark, 128),
}


def build(name: str, seed: int) -> tf.keras.Model:
    ctor, side = MODELS[name]
    tf.keras.utils.set_random_seed(seed)
    return ctor(weights=None, input_shape=(side, side, 3), classifier_activation=None)


def write_case(d: Path, model_bytes: bytes, file: str, x: np.ndarray, y: np.ndarray, names):
    data = d / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    (d / file).write_bytes(model_bytes)
    (data / "input_0.pb").write_bytes(numpy_helper.from_array(x, names[0]).SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(y, names[1]).SerializeToString())


# Older-opset variants: tf2onnx at opsets 9 and 10, and opset 7 by onnx's version
# converter from the opset-9 export (tf2onnx does not write opset 7).
VARIANTS = {"ResNet50": (7, 9, 10), "MobileNetV3Small": (9, 10), "DenseNet121": (9,)}

# Models converted without tf2onnx's graph optimizers: on VGG16's 138M weights they
# need more than 24 GB (the conversion itself peaks at 13.5 GB without them). The
# result keeps tf2onnx's per-layer transposes, which layoutopt's planner removes.
UNOPTIMIZED = {"VGG16"}


def to_onnx(model: tf.keras.Model, spec, opset: int, optimize: bool = True):
    """The Keras model as ONNX at `opset`."""
    if opset >= 9:
        kw = {} if optimize else {"optimizers": {}}
        return tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset, **kw)[0]
    return onnx.version_converter.convert_version(to_onnx(model, spec, 9, optimize), opset)


def write_onnx(out: Path, onnx_model, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    y = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    names = (sess.get_inputs()[0].name, sess.get_outputs()[0].name)
    write_case(out, onnx_model.SerializeToString(), "model.onnx", x, y, names)
    return y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--out", type=Path, default=Path("models/zoo"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    failed = 0
    for name in args.models:
        if name not in MODELS:
            print(f"unknown model {name}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        model = build(name, args.seed)
        side = MODELS[name][1]
        x = np.random.default_rng(args.seed).uniform(-1, 1, (1, side, side, 3)).astype(np.float32)
        spec = (tf.TensorSpec((1, side, side, 3), tf.float32, name="input"),)

        for opset in (13, *VARIANTS.get(name, ())):
            label = f"{name}_onnx" if opset == 13 else f"{name}-opset{opset}_onnx"
            try:
                write_onnx(args.out / label, to_onnx(model, spec, opset, name not in UNOPTIMIZED), x)
                print(f"{label}: written")
            except Exception as e:  # a converter's limit: reported, the other formats still written
                failed += 1
                print(f"{label}: not written: {str(e).splitlines()[0][:300]}", file=sys.stderr)

        tfl = tf.lite.TFLiteConverter.from_keras_model(model).convert()
        interp = tf.lite.Interpreter(model_content=tfl)
        interp.allocate_tensors()
        inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        yt = interp.get_tensor(out["index"])
        write_case(args.out / f"{name}_tflite", tfl, "model.tflite", x, yt, (inp["name"], out["name"]))
        print(f"{name}_tflite: {len(tfl) / 1e6:.1f} MB, logits {yt.shape}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
