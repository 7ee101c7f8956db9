#!/usr/bin/env python3
"""Small models in the operator versions of ONNX opsets 7 to 10, for the importer's
old-opset adapters.

Run from the repository root (Python packages: scripts/requirements.txt):

    python3 scripts/gen_opset_cases.py

It rewrites tests/onnx_opsets/ from scratch: one directory per case, `model.onnx` +
`test_data_set_0/{input,output}_<i>.pb`, the layout of the ONNX backend node tests.
Each model is written with the attribute forms of its opset (Slice and Pad with
attributes, Clip bounds as attributes, Upsample, Resize-10, BatchNormalization's
`spatial`, Dropout's `ratio`, Softmax coercing to 2-D, Gemm broadcasting, ...). The
expected outputs are onnxruntime's, and every model also passes `onnx.checker` at its
opset. Inputs are seeded random values, so the files are the same on every run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "tests" / "onnx_opsets"
RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def case(name, opset, nodes, inputs, outputs, initializers=()):
    """inputs and initializers: [(name, array)]; outputs: [(name, None)]."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n, _ in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if opset < 8 else 4 if opset < 10 else 5
    if model.ir_version < 4:
        # IR 3 lists every initializer among the graph inputs too.
        model.graph.input.extend(
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in initializers
        )
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results = sess.run(None, {n: a for n, a in inputs})
    # The outputs are declared with the shapes onnxruntime computed.
    del model.graph.output[:]
    model.graph.output.extend(
        helper.make_tensor_value_info(n, TensorProto.FLOAT, r.shape)
        for (n, _), r in zip(outputs, results)
    )
    onnx.checker.check_model(model)
    d = OUT / f"{name}_opset{opset}"
    data = d / "test_data_set_0"
    data.mkdir(parents=True)
    (d / "model.onnx").write_bytes(model.SerializeToString())
    for i, (n, a) in enumerate(inputs):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(a, n).SerializeToString())
    for i, ((n, _), r) in enumerate(zip(outputs, results)):
        (data / f"output_{i}.pb").write_bytes(numpy_helper.from_array(r, n).SerializeToString())


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    x4 = rand(1, 3, 6, 5)
    case("slice_attrs", 9, [node("Slice", ["x"], ["y"], starts=[1, -4], ends=[3, 100], axes=[1, 3])],
         [("x", x4)], [("y", None)])
    case("pad_attrs", 9, [node("Pad", ["x"], ["y"], pads=[0, 0, 1, 2, 0, 1, 0, 1], value=1.5)],
         [("x", x4)], [("y", None)])
    case("pad_reflect", 10, [node("Pad", ["x"], ["y"], mode="reflect", pads=[0, 0, 2, 1, 0, 0, 1, 2])],
         [("x", x4)], [("y", None)])
    case("clip_attrs", 9, [node("Clip", ["x"], ["y"], min=-0.5, max=0.7)], [("x", x4)], [("y", None)])
    case("clip_one_bound", 7, [node("Clip", ["x"], ["y"], max=0.2)], [("x", x4)], [("y", None)])
    case("upsample_nearest", 7, [node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])],
         [("x", x4)], [("y", None)])
    case("upsample_linear", 9, [node("Upsample", ["x", "s"], ["y"], mode="linear")],
         [("x", x4)], [("y", None)], [("s", np.array([1, 1, 2, 2], np.float32))])
    case("resize_nearest", 10, [node("Resize", ["x", "s"], ["y"])],
         [("x", x4)], [("y", None)], [("s", np.array([1, 1, 1.5, 2], np.float32))])
    case("resize_linear", 10, [node("Resize", ["x", "s"], ["y"], mode="linear")],
         [("x", x4)], [("y", None)], [("s", np.array([1, 1, 2, 2], np.float32))])
    c = 3
    bn = [("scale", rand(c)), ("bias", rand(c)), ("mean", rand(c)),
          ("var", np.abs(rand(c)) + 0.5)]
    case("batchnorm_spatial", 7,
         [node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], spatial=1, epsilon=1e-3)],
         [("x", x4)], [("y", None)], bn)
    case("batchnorm", 9, [node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"])],
         [("x", x4)], [("y", None)], bn)
    case("dropout_ratio", 7, [node("Dropout", ["x"], ["y"], ratio=0.3)], [("x", x4)], [("y", None)])
    case("dropout_mask", 10, [node("Dropout", ["x"], ["y", "m"], ratio=0.5)], [("x", x4)], [("y", None)])
    x3 = rand(2, 3, 4)
    case("softmax_coerced", 9, [node("Softmax", ["x"], ["y"], axis=1)], [("x", x3)], [("y", None)])
    case("logsoftmax_coerced", 11, [node("LogSoftmax", ["x"], ["y"], axis=0)], [("x", x3)], [("y", None)])
    case("gemm_broadcast", 7, [node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5)],
         [("a", rand(2, 4))], [("y", None)], [("b", rand(3, 4)), ("c", rand(3))])
    case("squeeze_attrs", 9, [node("Unsqueeze", ["x"], ["u"], axes=[0, 3]), node("Squeeze", ["u"], ["y"], axes=[0])],
         [("x", x3)], [("y", None)])
    case("reduce_attrs", 11, [node("ReduceSum", ["x"], ["s"], axes=[1], keepdims=0),
                               node("ReduceMean", ["s"], ["y"], axes=[-1])],
         [("x", x3)], [("y", None)])
    case("split_attr", 9, [node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3])],
         [("x", x3)], [("a", None), ("b", None)])
    abc = [("a", rand(2, 3, 4)), ("b", rand(3, 1)), ("c", rand(4))]
    case("sum_broadcast", 8, [node("Sum", ["a", "b", "c"], ["y"])], abc, [("y", None)])
    case("mean_broadcast", 9, [node("Mean", ["a", "b", "c"], ["y"])], abc, [("y", None)])
    case("max_three", 8, [node("Max", ["a", "b", "c"], ["y"])], abc, [("y", None)])
    case("sum_one", 8, [node("Sum", ["a"], ["y"])], abc[:1], [("y", None)])
    # The shape of the Caffe2-converted model-zoo classifiers (AlexNet, ZFNet).
    w = rand(8, 3, 3, 3) * 0.3
    case("zoo_cnn", 9,
         [node("Conv", ["x", "w", "wb"], ["c"], pads=[1, 1, 1, 1]),
          node("Relu", ["c"], ["r"]),
          node("LRN", ["r"], ["n"], size=3, alpha=1e-3, beta=0.75, bias=1.0),
          node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
          node("Reshape", ["p", "shape"], ["f"]),
          node("Gemm", ["f", "fw", "fb"], ["g"], transB=1),
          node("Dropout", ["g"], ["d"], ratio=0.5),
          node("Softmax", ["d"], ["y"])],
         [("x", rand(1, 3, 8, 8))], [("y", None)],
         [("w", w), ("wb", rand(8)), ("shape", np.array([1, -1], np.int64)),
          ("fw", rand(10, 8 * 4 * 4) * 0.1), ("fb", rand(10))])
    print(f"wrote {len(list(OUT.iterdir()))} cases to {OUT}")


if __name__ == "__main__":
    main()
