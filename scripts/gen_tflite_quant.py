#!/usr/bin/env python3
"""Quantized TFLite models, made the way users make them, with the TFLite
interpreter's outputs as their references.

    python3 scripts/gen_tflite_quant.py --out models/quant

A small Keras CNN (convs with ReLU6, a depthwise conv, a residual add, an
average pool, a dense layer) with seeded weights, converted with
`Optimize.DEFAULT`:
  tflite_int8      full-integer (representative dataset; int8 input and output)
  tflite_dynamic   dynamic-range (int8 weights, float activations)
With --keras NAME..., the same two forms of Keras applications (e.g.
MobileNetV2 ResNet50) at 224x224, seeded random weights (there is no download
here) and logits out (no softmax: random weights would flatten it to one
value), as OUT/<NAME>_tflite_int8 and OUT/<NAME>_tflite_dynamic.
Each OUT/<name>/ holds model.tflite and test_data_set_0/{input_0,output_0}.pb
(the interpreter's output on input_0, in the model's own input/output types).
Needs tensorflow-cpu and onnx (for the .pb files).
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx.numpy_helper
import tensorflow as tf


def model() -> tf.keras.Model:
    tf.keras.utils.set_random_seed(3)
    x = inputs = tf.keras.Input((24, 24, 3), batch_size=1)
    x = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu6")(x)
    y = tf.keras.layers.DepthwiseConv2D(3, padding="same", activation="relu6")(x)
    y = tf.keras.layers.Conv2D(16, 1)(y)
    x = tf.keras.layers.Add()([x, y])
    x = tf.keras.layers.Conv2D(24, 3, strides=2, padding="same", activation="relu")(x)
    x = tf.keras.layers.AveragePooling2D(2)(x)
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(10)(x)
    return tf.keras.Model(inputs, x)


def save_pb(array: np.ndarray, path: Path) -> None:
    path.write_bytes(onnx.numpy_helper.from_array(array).SerializeToString())


def keras_application(name: str) -> tf.keras.Model:
    tf.keras.utils.set_random_seed(3)
    make = getattr(tf.keras.applications, name)
    return make(weights=None, input_shape=(224, 224, 3), classifier_activation=None)


def write_forms(m: tf.keras.Model, prefix: str, out_dir: Path) -> None:
    """The full-integer and dynamic-range forms of `m`, with references."""
    rng = np.random.default_rng(0)
    shape = (1, *m.input_shape[1:])
    samples = [rng.uniform(0, 1, shape).astype(np.float32) for _ in range(16)]
    for form in ["tflite_int8", "tflite_dynamic"]:
        conv = tf.lite.TFLiteConverter.from_keras_model(m)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        if form == "tflite_int8":
            conv.representative_dataset = lambda: ([s] for s in samples)
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            conv.inference_input_type = tf.int8
            conv.inference_output_type = tf.int8
        blob = conv.convert()
        dst = out_dir / f"{prefix}{form}"
        (dst / "test_data_set_0").mkdir(parents=True, exist_ok=True)
        (dst / "model.tflite").write_bytes(blob)
        interp = tf.lite.Interpreter(model_content=blob)
        interp.allocate_tensors()
        inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
        x = samples[0]
        if inp["dtype"] == np.int8:
            scale, zp = inp["quantization"]
            x = np.clip(np.round(x / scale) + zp, -128, 127).astype(np.int8)
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        save_pb(x, dst / "test_data_set_0" / "input_0.pb")
        save_pb(interp.get_tensor(out["index"]), dst / "test_data_set_0" / "output_0.pb")
        print(f"{dst}: {len(blob) >> 10} KiB, output quantization {out['quantization']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("models/quant"))
    ap.add_argument("--keras", nargs="*", default=[], metavar="NAME",
                    help="Keras applications to convert instead of the small CNN")
    args = ap.parse_args()
    if not args.keras:
        write_forms(model(), "", args.out)
    for name in args.keras:
        write_forms(keras_application(name), f"{name}_", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
