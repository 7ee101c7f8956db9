#!/usr/bin/env python3
"""Generates TFLite test models that end in detection post-processing, and the
TFLite interpreter's outputs for them.

    tflite_ssd_fast      a conv head (box encodings, sigmoid class scores with a
                         background class) over 6x6 cells x 3 anchors, then the
                         custom operator TFLite_Detection_PostProcess with fast
                         NMS, 2 classes per detection: the SSD tail that the
                         TensorFlow Object Detection API's TFLite export writes
    tflite_ssd_regular   the same head, regular (per-class) NMS
    tflite_nms_padded    NON_MAX_SUPPRESSION_V4 and _V5 (soft NMS, sigma 0.5)
                         with padded outputs, the V4 selection gathered from the
                         boxes

TFLite_Detection_PostProcess is made as the Object Detection API makes it: a
tf.function whose `experimental_implements` names the operator and its
attributes, which the converter turns into the custom operator (its flexbuffer
options) and the interpreter runs with its own kernel. The box encodings are
scaled so that boxes overlap and the thresholds matter; every output is
recorded from the interpreter (builtin kernels, no XNNPACK delegate).

They live in models/detection/, apart from the bundled models that the export
tests write back to ONNX: these ops have no ONNX form with padded outputs.

Usage: python scripts/gen_tflite_detection.py [--out models/detection]
Requirements: scripts/requirements-tflite.txt
"""

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from gen_tflite_models import write_model  # noqa: E402

CELLS, ANCHORS_PER_CELL, CLASSES = 6, 3, 4


def anchors():
    """SSD-style anchors (ycenter, xcenter, h, w) over a CELLS x CELLS grid."""
    rows = []
    for y in range(CELLS):
        for x in range(CELLS):
            for a, (h, w) in enumerate([(0.3, 0.3), (0.4, 0.2), (0.2, 0.4)]):
                rows.append(((y + 0.5) / CELLS, (x + 0.5) / CELLS, h, w))
    return np.array(rows, np.float32)


def post_process_attrs(regular):
    attrs = {
        "max_detections": ("i", 10),
        "max_classes_per_detection": ("i", 1 if regular else 2),
        "detections_per_class": ("i", 5),
        "use_regular_nms": ("b", "true" if regular else "false"),
        "nms_score_threshold": ("f", 0.3),
        "nms_iou_threshold": ("f", 0.5),
        "num_classes": ("i", CLASSES),
        "y_scale": ("f", 10.0),
        "x_scale": ("f", 10.0),
        "h_scale": ("f", 5.0),
        "w_scale": ("f", 5.0),
    }
    parts = ['name: "TFLite_Detection_PostProcess"']
    for key, (kind, value) in attrs.items():
        parts.append(f'attr {{ key: "{key}" value {{ {kind}: {value} }} }}')
    return " ".join(parts)


def ssd(regular, seed):
    """The detection head and its post-processing as TFLite bytes."""
    rng = np.random.default_rng(seed)
    n = CELLS * CELLS * ANCHORS_PER_CELL
    w_box = tf.constant(rng.standard_normal((3, 3, 8, 4 * ANCHORS_PER_CELL)).astype(np.float32) * 0.3)
    w_cls = tf.constant(rng.standard_normal((3, 3, 8, (CLASSES + 1) * ANCHORS_PER_CELL)).astype(np.float32) * 0.2)
    anchor_table = tf.constant(anchors())

    @tf.function(experimental_implements=post_process_attrs(regular))
    def post_process(box_encodings, class_predictions, anchor_boxes):
        # The converter replaces this body with the custom operator.
        boxes = tf.constant(0.0, dtype=tf.float32, name="boxes")
        classes = tf.constant(0.0, dtype=tf.float32, name="classes")
        scores = tf.constant(0.0, dtype=tf.float32, name="scores")
        num = tf.constant(0.0, dtype=tf.float32, name="num_detections")
        return boxes, classes, scores, num

    @tf.function(input_signature=[tf.TensorSpec([1, CELLS, CELLS, 8], tf.float32)])
    def detect(x):
        box = tf.nn.conv2d(x, w_box, 1, "SAME")
        cls = tf.nn.sigmoid(tf.nn.conv2d(x, w_cls, 1, "SAME"))
        return post_process(tf.reshape(box, [1, n, 4]), tf.reshape(cls, [1, n, CLASSES + 1]), anchor_table)

    # The composite function survives conversion only from a SavedModel, as the
    # Object Detection API's export does it.
    module = tf.Module()
    module.detect = detect
    with tempfile.TemporaryDirectory() as saved:
        tf.saved_model.save(module, saved, signatures={"serving_default": detect})
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        converter.allow_custom_ops = True
        return converter.convert()


def nms_padded():
    @tf.function(
        input_signature=[tf.TensorSpec([40, 4], tf.float32), tf.TensorSpec([40], tf.float32)]
    )
    def select(corners, logits):
        # Boxes as corners (y1, x1, y2, x2) from centers and sizes, so that many overlap.
        centers, sizes = corners[:, :2] * 0.3 + 0.5, tf.exp(corners[:, 2:] * 0.3) * 0.2
        boxes = tf.concat([centers - sizes, centers + sizes], axis=1)
        scores = tf.sigmoid(logits)
        v4, v4_count = tf.raw_ops.NonMaxSuppressionV4(
            boxes=boxes, scores=scores, max_output_size=20, iou_threshold=0.2,
            score_threshold=0.4, pad_to_max_output_size=True,
        )
        v5, v5_scores, v5_count = tf.raw_ops.NonMaxSuppressionV5(
            boxes=boxes, scores=scores, max_output_size=30, iou_threshold=0.6,
            score_threshold=0.2, soft_nms_sigma=0.5, pad_to_max_output_size=True,
        )
        return tf.gather(boxes, v4), v4_count, v5, v5_scores, v5_count

    converter = tf.lite.TFLiteConverter.from_concrete_functions([select.get_concrete_function()], select)
    return converter.convert()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "models", "detection"))
    args = ap.parse_args()
    write_model(args.out, "tflite_ssd_fast", ssd(False, 11), 12)
    write_model(args.out, "tflite_ssd_regular", ssd(True, 13), 14)
    write_model(args.out, "tflite_nms_padded", nms_padded(), 16)


if __name__ == "__main__":
    main()
