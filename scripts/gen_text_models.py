#!/usr/bin/env python3
"""Small ONNX TfIdfVectorizer models with outputs recorded from onnxruntime, for
tests/integration/text.rs.

    /tmp/ortvenv/bin/python scripts/gen_text_models.py   # needs onnx, onnxruntime

Each case is tests/text/<name>/model.onnx with test_data_set_0/{input,output}_<i>.pb.
All count 1- to 3-grams of token ids with up to 2 items skipped, from a pool whose
ngram_indexes are permuted (the pool's first n-gram is output 6), over 3 rows of 20
ids in 1..8 (int64) or one row of 24 (int32), weighted but for the last:

  tfidf_tf       counts
  tfidf_idf      the pool's weight of each n-gram present, in pool order
  tfidf_tfidf    counts times those weights
  tfidf_int32    counts of a 1-D int32 sequence, 2-grams only

The weights are what the operator's specification and onnxruntime apply: the i-th
weight to the i-th n-gram of the pool (the specification's Python reference reads
them by output coordinate, which differs here).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "tests" / "text"
# 1-grams 2, 3, 5, 4; 2-grams (5, 6), (7, 8), (6, 7); 3-grams (1, 2, 3), (3, 3, 3).
POOL = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 1, 2, 3, 3, 3, 3]
STARTS = [0, 4, 10]
COORDS = [6, 0, 1, 2, 3, 4, 5, 8, 7]
WEIGHTS = [0.5, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def model(mode, elem, shape, lengths=(1, 3), weighted=True):
    weights = {"weights": WEIGHTS} if weighted else {}
    node = helper.make_node(
        "TfIdfVectorizer", ["x"], ["y"], min_gram_length=lengths[0],
        max_gram_length=lengths[1], max_skip_count=2, mode=mode, ngram_counts=STARTS,
        ngram_indexes=COORDS, pool_int64s=POOL, **weights,
    )
    out = shape[:-1] + [max(COORDS) + 1]
    g = helper.make_graph(
        [node], "text", [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def write(name, m, x):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})
    data = OUT / name / "test_data_set_0"
    data.mkdir(parents=True)
    (OUT / name / "model.onnx").write_bytes(m.SerializeToString())
    (data / "input_0.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(y, "y").SerializeToString())


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    rng = np.random.default_rng(9)
    rows = rng.integers(1, 9, size=(3, 20)).astype(np.int64)
    for mode in ["TF", "IDF", "TFIDF"]:
        write(f"tfidf_{mode.lower()}", model(mode, TensorProto.INT64, [3, 20]), rows)
    seq = rng.integers(1, 9, size=24).astype(np.int32)
    write("tfidf_int32", model("TF", TensorProto.INT32, [24], (2, 2), weighted=False), seq)


if __name__ == "__main__":
    main()
