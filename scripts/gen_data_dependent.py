#!/usr/bin/env python3
"""Small ONNX models whose shapes depend on values (NonZero, NonMaxSuppression,
Unique computed at run time), with outputs recorded from onnxruntime, for
tests/integration/data_dependent.rs.

    /tmp/zoovenv/bin/python scripts/gen_data_dependent.py   # needs onnx, onnxruntime
    python scripts/gen_data_dependent.py --tf   # also the tf2onnx cases: tensorflow-cpu, tf2onnx

Each case is tests/data_dependent/<name>/model.onnx with test_data_set_<k>/
{input,output}_<i>.pb (the ONNX backend test-data layout), one set per input
tried. The cases:

  detection_nms   a conv head predicting 64 boxes and 2 classes of scores, then
                  NonMaxSuppression; after it, the kept boxes and scores gathered,
                  their count read through Shape, and the classes kept through
                  Unique (a second cut). The scores themselves are an output of the
                  stage before the cut. Sets: two images, the second dimmer (fewer boxes kept).
  nonzero_mask    x [n, 6] (n free): the elements above 0.2 found by NonZero,
                  gathered and summed, and their squares summed; Relu(x) is an output of the first
                  stage. Sets: n = 2, n = 5, and an input with no element above 0.2
                  (the later stages see an extent of 0).

With --tf, two models exported by tf2onnx from TensorFlow functions, as another
exporter writes these ops (kept apart: most environments lack tensorflow):

  tf_nms          a Keras conv head, tf.image.non_max_suppression and tf.gather of the
                  kept boxes and scores, their count from tf.shape.
  tf_combined     two images, tf.image.combined_non_max_suppression (tf2onnx writes it as
                  NonMaxSuppression, then TopK with k from shapes, ScatterND, CumSum and
                  more) and tf.boolean_mask (NonZero): two cuts.

Inputs come from a fixed seed, and onnxruntime runs single-threaded without graph
optimizations, so every run writes the same bytes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "tests" / "data_dependent"
F, I64 = TensorProto.FLOAT, TensorProto.INT64
OPSET = 17


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value)))


def model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "data_dependent", inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def run_ort(m, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def write(name, m, feed_sets):
    out = OUT / name
    out.mkdir(parents=True)
    (out / "model.onnx").write_bytes(m.SerializeToString())
    for k, feeds in enumerate(feed_sets):
        expected = run_ort(m, feeds)
        data = out / f"test_data_set_{k}"
        data.mkdir()
        for i, (n, v) in enumerate(feeds.items()):
            (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(v, n).SerializeToString())
        for i, (o, v) in enumerate(zip(m.graph.output, expected)):
            (data / f"output_{i}.pb").write_bytes(numpy_helper.from_array(v, o.name).SerializeToString())
        shapes = ", ".join(f"{o.name} {list(v.shape)}" for o, v in zip(m.graph.output, expected))
        print(f"{name} set {k}: {shapes}")


def detection_nms(rng):
    """Conv features pooled to 8x8; per cell a box (anchor + predicted offset) and
    two class scores; NMS keeps at most 5 boxes per class."""
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    wb = (rng.standard_normal((4, 8, 1, 1)) * 0.1).astype(np.float32)
    ws = (rng.standard_normal((2, 8, 1, 1)) * 0.2).astype(np.float32)
    gy, gx = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    anchors = np.stack([gy, gx, gy + 2.5, gx + 2.5], axis=-1).reshape(1, 64, 4).astype(np.float32) / 8
    nodes = [
        helper.make_node("Conv", ["image", "w1"], ["f1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["f1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Conv", ["p1", "wb"], ["fb"], name="box_head"),
        helper.make_node("Reshape", ["fb", "shape_b"], ["fb3"], name="box_rows"),
        helper.make_node("Transpose", ["fb3"], ["offsets"], name="box_last", perm=[0, 2, 1]),
        helper.make_node("Add", ["offsets", "anchors"], ["boxes"], name="decode"),
        helper.make_node("Conv", ["p1", "ws"], ["fs"], name="score_head"),
        helper.make_node("Reshape", ["fs", "shape_s"], ["fs3"], name="score_rows"),
        helper.make_node("Sigmoid", ["fs3"], ["scores"], name="score"),
        const("max_out", np.array([6], np.int64)),
        const("iou", np.array([0.3], np.float32)),
        const("min_score", np.array([0.55], np.float32)),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "min_score"],
                         ["selected"], name="nms"),
        # After the cut: the kept boxes and scores, their count, the classes kept.
        const("col_box", np.array(2, np.int64)),
        helper.make_node("Gather", ["selected", "col_box"], ["box_index"], name="box_column", axis=1),
        const("axis0", np.array([0], np.int64)),
        helper.make_node("Squeeze", ["boxes", "axis0"], ["boxes2"], name="one_image"),
        helper.make_node("Gather", ["boxes2", "box_index"], ["kept_boxes"], name="kept_boxes", axis=0),
        helper.make_node("GatherND", ["scores", "selected"], ["kept_scores"], name="kept_scores"),
        helper.make_node("Shape", ["selected"], ["sel_shape"], name="sel_shape"),
        const("zero", np.array([0], np.int64)),
        helper.make_node("Gather", ["sel_shape", "zero"], ["count"], name="count", axis=0),
        const("col_class", np.array(1, np.int64)),
        helper.make_node("Gather", ["selected", "col_class"], ["class_index"], name="class_column", axis=1),
        helper.make_node("Unique", ["class_index"], ["classes"], name="classes", sorted=1),
    ]
    inits = [init("w1", w1), init("wb", wb), init("ws", ws), init("anchors", anchors),
             init("shape_b", np.array([1, 4, 64], np.int64)),
             init("shape_s", np.array([1, 2, 64], np.int64))]
    m = model(nodes, [vi("image", F, [1, 3, 32, 32])],
              [vi("kept_boxes", F, ["k", 4]), vi("kept_scores", F, ["k"]), vi("count", I64, [1]),
               vi("classes", I64, ["c"]), vi("scores", F, [1, 2, 64])], inits)
    sets = [{"image": (rng.standard_normal((1, 3, 32, 32)) * scale).astype(np.float32)}
            for scale in (1.0, 0.1)]
    write("detection_nms", m, sets)


def nonzero_mask(rng):
    nodes = [
        helper.make_node("Relu", ["x"], ["relu"], name="relu"),
        const("threshold", np.array(0.2, np.float32)),
        helper.make_node("Greater", ["x", "threshold"], ["mask"], name="above"),
        helper.make_node("NonZero", ["mask"], ["where"], name="where"),
        helper.make_node("Transpose", ["where"], ["positions"], name="positions", perm=[1, 0]),
        helper.make_node("GatherND", ["x", "positions"], ["picked"], name="picked"),
        helper.make_node("ReduceSum", ["picked"], ["total"], name="total", keepdims=0),
        helper.make_node("Abs", ["picked"], ["magnitudes"], name="magnitude"),
        helper.make_node("ReduceSumSquare", ["magnitudes"], ["sum_square"], name="sum_square",
                         keepdims=1),
    ]
    m = model(nodes, [vi("x", F, ["n", 6])],
              [vi("total", F, []), vi("sum_square", F, [1]), vi("relu", F, ["n", 6]),
               vi("where", I64, [2, "k"])])
    sets = [{"x": rng.standard_normal((n, 6)).astype(np.float32)} for n in (2, 5)]
    sets.append({"x": np.full((3, 6), -1.0, np.float32)})
    write("nonzero_mask", m, sets)


def tf_models(rng):
    import tensorflow as tf
    import tf2onnx

    tf.keras.utils.set_random_seed(43)

    def head(batch, classes, strides):
        inp = tf.keras.Input((64, 64, 3), batch_size=batch)
        x = inp
        for s in strides:
            x = tf.keras.layers.Conv2D(16, 3, strides=s, padding="same", activation="relu")(x)
        boxes = tf.keras.layers.Conv2D(4, 1)(x)
        scores = tf.keras.layers.Conv2D(classes, 1, activation="sigmoid")(x)
        return tf.keras.Model(inp, [boxes, scores])

    def export(name, fn, batch):
        path = OUT / f"{name}.onnx"
        tf2onnx.convert.from_function(fn, input_signature=fn.input_signature, opset=17,
                                      output_path=str(path))
        m = onnx.load(path)
        path.unlink()
        feeds = {m.graph.input[0].name: rng.standard_normal((batch, 64, 64, 3)).astype(np.float32)}
        write(name, m, [feeds])

    one = head(1, 1, (2, 2, 2))

    @tf.function(input_signature=[tf.TensorSpec([1, 64, 64, 3], tf.float32)])
    def tf_nms(img):
        b, s = one(img)
        b, s = tf.reshape(b, [-1, 4]), tf.reshape(s, [-1])
        keep = tf.image.non_max_suppression(b, s, max_output_size=10, iou_threshold=0.5,
                                            score_threshold=0.3)
        return {"boxes": tf.gather(b, keep), "scores": tf.gather(s, keep), "n": tf.shape(keep)[0]}

    two = head(2, 3, (4, 2))

    @tf.function(input_signature=[tf.TensorSpec([2, 64, 64, 3], tf.float32)])
    def tf_combined(img):
        b, s = two(img)
        b, s = tf.reshape(b, [2, -1, 1, 4]), tf.reshape(s, [2, -1, 3])
        nb, ns, nc, nv = tf.image.combined_non_max_suppression(b, s, 5, 8, iou_threshold=0.5,
                                                               score_threshold=0.4)
        return {"boxes": nb, "scores": ns, "classes": nc, "valid": nv,
                "masked": tf.boolean_mask(s, s > 0.6)}

    export("tf_nms", tf_nms, 1)
    export("tf_combined", tf_combined, 2)


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    rng = np.random.default_rng(43)
    detection_nms(rng)
    nonzero_mask(rng)
    if "--tf" in sys.argv[1:]:
        tf_models(rng)


if __name__ == "__main__":
    main()
