"""Records the TFLite interpreter's int8 HARD_SWISH at every input byte.

For each input range below, converts a Keras model whose only op is a
hard-swish to a full-integer TFLite model (the range calibrates its input
and output grids); then sets the grids of the last of them to each of
GRIDS (tiny steps, as deep layers of a seeded full-integer MobileNetV3Small
have, where TFLite's 16-bit fixed point shifts by more than 15 bits). Runs
all 256 input bytes through the interpreter (its default XNNPACK delegate)
and writes one line per model:
`input_scale input_zero_point output_scale output_zero_point: 256 outputs`.
The unit test of layoutopt's TFLite hard-swish reads the file.

    python scripts/record_tflite_hard_swish.py tests/quantized/tflite_hard_swish.txt
"""
import sys

import numpy as np
import tensorflow as tf
from tensorflow.lite.tools import flatbuffer_utils

RANGES = [(-6, 6), (-3, 9), (-20, 5), (-1, 1), (-50, 40), (-0.2, 7), (-4, 0.5), (-9, 30)]
# (input scale, zero point, output scale, zero point)
GRIDS = [(7.877481e-09, -1, 7.860309e-09, -1), (5e-09, 20, 2e-08, -60), (1e-3, 0, 1.0, 5)]


def model(lo, hi, rng):
    inp = tf.keras.Input((16, 16))
    m = tf.keras.Model(inp, tf.keras.layers.Activation("hard_swish")(inp))

    def representative():
        for _ in range(50):
            yield [rng.uniform(lo, hi, (1, 16, 16)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_keras_model(m)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    return conv.convert()


def with_grids(content, grids):
    """The one-op model `content` with its input and output grids set."""
    m = flatbuffer_utils.convert_bytearray_to_object(content)
    op = m.subgraphs[0].operators[0]
    for t, (scale, zero_point) in zip((op.inputs[0], op.outputs[0]), grids):
        q = m.subgraphs[0].tensors[t].quantization
        q.scale = np.array([scale], np.float32)
        q.zeroPoint = np.array([zero_point], np.int64)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(m))


def main(out):
    rng = np.random.default_rng(0)
    contents = [model(lo, hi, rng) for lo, hi in RANGES]
    contents += [with_grids(contents[-1], [(si, zi), (so, zo)]) for si, zi, so, zo in GRIDS]
    lines = []
    for content in contents:
        it = tf.lite.Interpreter(model_content=content)
        it.allocate_tensors()
        i, o = it.get_input_details()[0], it.get_output_details()[0]
        x = np.resize(np.arange(-128, 128, dtype=np.int8), i["shape"])
        it.set_tensor(i["index"], x)
        it.invoke()
        y = it.get_tensor(o["index"]).reshape(-1)[:256]
        (si, zi), (so, zo) = i["quantization"], o["quantization"]
        # The scales as the f32 the model stores, written exactly.
        head = f"{np.float32(si).item()!r} {zi} {np.float32(so).item()!r} {zo}"
        lines.append(head + ": " + " ".join(str(int(v)) for v in y))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
