#!/usr/bin/env python3
"""The real-model suite: Keras applications with seeded random weights (no downloads),
as ONNX (tf2onnx, opset 13) and as TFLite (TFLiteConverter), each with an input and the
reference output.

    python3 -m venv .venv-zoo && .venv-zoo/bin/pip install -r scripts/requirements-zoo.txt
    .venv-zoo/bin/python scripts/gen_zoo.py [--out models/zoo] [MODEL ...]

Writes `<out>/<model>_onnx/model.onnx` and `<out>/<model>_tflite/model.tflite`, each
with `test_data_set_0/{input_0,output_0}.pb`, the layout `layoutopt run` reads. The
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
from onnx import numpy_helper  # noqa: E402

APPS = tf.keras.applications
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--out", type=Path, default=Path("models/zoo"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in args.models:
        if name not in MODELS:
            print(f"unknown model {name}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 2
        model = build(name, args.seed)
        side = MODELS[name][1]
        x = np.random.default_rng(args.seed).uniform(-1, 1, (1, side, side, 3)).astype(np.float32)
        spec = (tf.TensorSpec((1, side, side, 3), tf.float32, name="input"),)

        onnx_model, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=13)
        sess = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
        y = sess.run(None, {sess.get_inputs()[0].name: x})[0]
        names = (sess.get_inputs()[0].name, sess.get_outputs()[0].name)
        write_case(args.out / f"{name}_onnx", onnx_model.SerializeToString(), "model.onnx", x, y, names)

        tfl = tf.lite.TFLiteConverter.from_keras_model(model).convert()
        interp = tf.lite.Interpreter(model_content=tfl)
        interp.allocate_tensors()
        inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        yt = interp.get_tensor(out["index"])
        write_case(args.out / f"{name}_tflite", tfl, "model.tflite", x, yt, (inp["name"], out["name"]))
        print(f"{name}: onnx {len(onnx_model.SerializeToString()) / 1e6:.1f} MB, "
              f"tflite {len(tfl) / 1e6:.1f} MB, logits {y.shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
