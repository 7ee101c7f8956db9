#!/usr/bin/env python3
"""Records reference outputs for MediaPipe's published TFLite models (gitignored, too
large to commit), from a MediaPipe checkout's `mediapipe/modules`:

    face_detection_full_range_sparse  sparse float16 weights (DENSIFY, DEQUANTIZE)
    pose_detection                    sparse float16 weights (DENSIFY, DEQUANTIZE)
    selfie_segmentation               the custom op Convolution2DTransposeBias

Each is copied to models/full/mediapipe_<name>/model.tflite with test_data_set_0 (a
seeded input uniform in [-1, 1], and the TFLite interpreter's output). The Python
interpreter has no kernel for Convolution2DTransposeBias, so for selfie_segmentation
the outputs come from the same file with that operator rewritten as TRANSPOSE_CONV
(output_shape from MediaPipe's extent rule, same padding and strides, the bias as
input 3), which computes the same thing (see gen_custom_tflite.py).

Usage: python scripts/gen_mediapipe_refs.py MEDIAPIPE_MODULES_DIR [--out models/full]
"""

import argparse
import os
import struct

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import flatbuffers  # noqa: E402
import numpy as np  # noqa: E402
from tensorflow.lite.python import schema_py_generated as schema  # noqa: E402

from gen_tflite_models import interpreter, write_tensor  # noqa: E402

MODELS = {
    "face_detection_full_range_sparse": "face_detection/face_detection_full_range_sparse.tflite",
    "pose_detection": "pose_detection/pose_detection.tflite",
    "selfie_segmentation": "selfie_segmentation/selfie_segmentation.tflite",
}
CUSTOM_CODE = b"Convolution2DTransposeBias"


def as_transpose_conv(tflite):
    """Rewrites each Convolution2DTransposeBias (input, weights, bias) as TRANSPOSE_CONV
    (output_shape, weights, input, bias)."""
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(tflite, 0))
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.TRANSPOSE_CONV
    code.version = 3
    model.operatorCodes.append(code)
    sg = model.subgraphs[0]
    for op in sg.operators:
        if model.operatorCodes[op.opcodeIndex].customCode != CUSTOM_CODE:
            continue
        padding, stride_w, stride_h = struct.unpack("<iii", bytes(bytearray(op.customOptions[:12])))
        x, w, bias = op.inputs
        out_shape = [int(d) for d in sg.tensors[op.outputs[0]].shape]
        buffer = schema.BufferT()
        buffer.data = list(np.array(out_shape, np.int32).tobytes())
        model.buffers.append(buffer)
        shape_tensor = schema.TensorT()
        shape_tensor.shape, shape_tensor.type = [4], schema.TensorType.INT32
        shape_tensor.buffer, shape_tensor.name = len(model.buffers) - 1, b"output_shape"
        sg.tensors.append(shape_tensor)
        options = schema.TransposeConvOptionsT()
        options.padding = schema.Padding.SAME if padding == 1 else schema.Padding.VALID
        options.strideW, options.strideH = stride_w, stride_h
        op.opcodeIndex = len(model.operatorCodes) - 1
        op.inputs = [len(sg.tensors) - 1, w, x, bias]
        op.builtinOptionsType = schema.BuiltinOptions.TransposeConvOptions
        op.builtinOptions = options
        op.customOptions = None
    b = flatbuffers.Builder(0)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def record(name, tflite, out_dir, seed):
    runnable = as_transpose_conv(tflite) if CUSTOM_CODE in tflite else tflite
    interp = interpreter(runnable)
    interp.allocate_tensors()
    d = os.path.join(out_dir, f"mediapipe_{name}")
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(d, "model.tflite"), "wb") as f:
        f.write(tflite)
    rng = np.random.default_rng(seed)
    for i, det in enumerate(interp.get_input_details()):
        x = rng.uniform(-1.0, 1.0, det["shape"]).astype(np.float32)
        interp.set_tensor(det["index"], x)
        write_tensor(os.path.join(data, f"input_{i}.pb"), x, det["name"])
    interp.invoke()
    for i, det in enumerate(interp.get_output_details()):
        y = interp.get_tensor(det["index"])
        write_tensor(os.path.join(data, f"output_{i}.pb"), y, det["name"])
        print(f"{name} output {i} {list(y.shape)}: range [{y.min():.4g}, {y.max():.4g}]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", help="mediapipe/modules of a MediaPipe checkout")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "models", "full"))
    args = ap.parse_args()
    for seed, (name, path) in enumerate(MODELS.items()):
        with open(os.path.join(args.modules, path), "rb") as f:
            record(name, f.read(), args.out, seed=40 + seed)


if __name__ == "__main__":
    main()
