#!/usr/bin/env python3
"""Generates a TFLite test model with MediaPipe's custom operator
Convolution2DTransposeBias, and its reference outputs.

The Python TFLite interpreter has no kernel for MediaPipe's custom operators, so the
model is made from one it can run: a Keras upsampling head of transposed convolutions
with bias (SAME and VALID, strides 2) is converted to TRANSPOSE_CONV operators, and
each is then rewritten in the flatbuffer as Convolution2DTransposeBias (inputs: input,
weights OHWI, bias; custom_options: padding 1 SAME / 2 VALID, stride_w, stride_h as
int32). The input extents are multiples of the stride, where MediaPipe's SAME output
extent (s * (in - 1) + k - max(0, k - (in - 1) % s - 1)) equals TRANSPOSE_CONV's
(in * s). The recorded output is the interpreter's on the TRANSPOSE_CONV model; a
numpy transcription of MediaPipe's kernel run on the rewritten model must agree with
it before anything is written.

    tflite_transpose_conv_bias   models/<name>/model.tflite and test_data_set_0

Usage: python scripts/gen_custom_tflite.py [--out models]
Requirements: scripts/requirements-tflite.txt
"""

import argparse
import os
import struct

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import flatbuffers  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.lite.python import schema_py_generated as schema  # noqa: E402

from gen_tflite_models import interpreter, write_tensor  # noqa: E402

keras = tf.keras
layers = keras.layers

NAME = "tflite_transpose_conv_bias"
CUSTOM_CODE = b"Convolution2DTransposeBias"
SAME, VALID = 1, 2  # TfLitePadding


def upsampler(seed=30):
    keras.utils.set_random_seed(seed)
    x_in = keras.Input((4, 6, 3), batch_size=1, name="x")
    a = layers.Conv2DTranspose(4, 3, strides=2, padding="same", bias_initializer="random_normal")(x_in)
    b = layers.Conv2DTranspose(4, 2, strides=2, padding="valid", bias_initializer="random_normal")(x_in)
    y = layers.Add()([a, b])
    y = layers.Conv2DTranspose(2, 4, strides=2, padding="same", bias_initializer="random_normal")(y)
    return keras.Model(x_in, y, name=NAME)


def builtin_names():
    return {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def rewrite_as_custom(tflite):
    """Every TRANSPOSE_CONV (output_shape, weights, input, bias) becomes
    Convolution2DTransposeBias (input, weights, bias)."""
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(tflite, 0))
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode = CUSTOM_CODE
    code.version = 1
    model.operatorCodes.append(code)
    custom_index = len(model.operatorCodes) - 1
    rewritten = 0
    for op in model.subgraphs[0].operators:
        oc = model.operatorCodes[op.opcodeIndex]
        if max(oc.builtinCode, oc.deprecatedBuiltinCode) != schema.BuiltinOperator.TRANSPOSE_CONV:
            continue
        o = op.builtinOptions
        assert o.fusedActivationFunction == 0 and len(op.inputs) == 4 and op.inputs[3] >= 0
        padding = SAME if o.padding == schema.Padding.SAME else VALID
        op.opcodeIndex = custom_index
        op.inputs = [op.inputs[2], op.inputs[1], op.inputs[3]]
        op.builtinOptionsType, op.builtinOptions = 0, None
        op.customOptions = list(struct.pack("<iii", padding, o.strideW, o.strideH))
        rewritten += 1
    assert rewritten == 3, rewritten
    b = flatbuffers.Builder(0)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def mediapipe_transpose_conv_bias(x, w, bias, padding, stride_w, stride_h):
    """MediaPipe's kernel: each input pixel scatters weights (OHWI) onto the output."""
    n, ih, iw, _ = x.shape
    o, kh, kw, _ = w.shape

    def trimmed(k, i, s):
        return max(0, k - (i - 1) % s - 1) if padding == SAME else 0

    ph, pw = trimmed(kh, ih, stride_h), trimmed(kw, iw, stride_w)
    oh, ow = stride_h * (ih - 1) + kh - ph, stride_w * (iw - 1) + kw - pw
    y = np.broadcast_to(bias, (n, oh, ow, o)).astype(np.float64)
    for iy in range(ih):
        for ix in range(iw):
            for fy in range(kh):
                for fx in range(kw):
                    oy, ox = iy * stride_h - ph // 2 + fy, ix * stride_w - pw // 2 + fx
                    if 0 <= oy < oh and 0 <= ox < ow:
                        y[:, oy, ox, :] += x[:, iy, ix, :] @ w[:, fy, fx, :].T
    return y.astype(np.float32)


def run_custom_with_numpy(tflite, x):
    """Runs the rewritten model (only the custom op and ADD) with numpy."""
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(tflite, 0))
    sg = model.subgraphs[0]
    names = builtin_names()

    def const(t):
        tensor = sg.tensors[t]
        data = model.buffers[tensor.buffer].data
        return np.frombuffer(bytes(bytearray(data)), np.float32).reshape(tensor.shape)

    values = {sg.inputs[0]: x}
    for op in sg.operators:
        oc = model.operatorCodes[op.opcodeIndex]
        if oc.customCode == CUSTOM_CODE:
            padding, sw, sh = struct.unpack("<iii", bytes(bytearray(op.customOptions)))
            i, w, bias = op.inputs
            y = mediapipe_transpose_conv_bias(values[i], const(w), const(bias), padding, sw, sh)
        else:
            assert names[oc.builtinCode] == "ADD", names[oc.builtinCode]
            y = values[op.inputs[0]] + values[op.inputs[1]]
        values[op.outputs[0]] = y
    return values[sg.outputs[0]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "models"))
    args = ap.parse_args()
    builtin = tf.lite.TFLiteConverter.from_keras_model(upsampler()).convert()
    custom = rewrite_as_custom(builtin)
    interp = interpreter(builtin)
    interp.allocate_tensors()
    x = np.random.default_rng(31).standard_normal(interp.get_input_details()[0]["shape"]).astype(np.float32)
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    y = interp.get_tensor(interp.get_output_details()[0]["index"])
    oracle = run_custom_with_numpy(custom, x)
    err = np.abs(oracle - y).max()
    print(f"{NAME}: {len(custom)} bytes; numpy MediaPipe kernel vs interpreter: max abs err {err:.3g}")
    assert err <= 1e-5 * np.abs(y).max(), err
    d = os.path.join(args.out, NAME)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(d, "model.tflite"), "wb") as f:
        f.write(custom)
    write_tensor(os.path.join(d, "test_data_set_0", "input_0.pb"), x, "x")
    write_tensor(os.path.join(d, "test_data_set_0", "output_0.pb"), y, "y")
    print(f"  output {list(y.shape)}, range [{y.min():.4g}, {y.max():.4g}]")


if __name__ == "__main__":
    main()
