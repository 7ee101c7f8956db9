"""layoutopt.InferenceSession against onnxruntime's, by the same script.

Tolerance as in test_layoutopt.py: every element within 1e-4 * max(1, max
|reference|) of onnxruntime's output.
"""

import pathlib

import layoutopt
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

MODELS = pathlib.Path(__file__).resolve().parents[2] / "models"


def dynamic_model(path):
    """A small CNN with a symbolic batch, height and width: a conv map output
    keeps the spatial dims, a pooled head drops them."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2")
    fc = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["map"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["map"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "dynamic_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [
            helper.make_tensor_value_info("map", TensorProto.FLOAT, ["batch", 8, None, None]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4]),
        ],
        [w, b, w2, fc],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def ort_style_script(rt, path, feeds):
    """An onnxruntime script, written once, run with `rt` = onnxruntime or
    layoutopt: the two-line swap the README shows."""
    so = rt.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = rt.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    results = []
    for feed in feeds:
        inputs = {i.name: feed[k] for k, i in enumerate(sess.get_inputs())}
        results.append(dict(zip(names, sess.run(None, inputs), strict=True)))
    interface = [(a.name, a.type, a.shape) for a in sess.get_inputs() + sess.get_outputs()]
    return interface, results


def assert_close(got, expected):
    for name, ref in expected.items():
        out = got[name]
        assert out.shape == ref.shape and out.dtype == ref.dtype, name
        tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
        err = float(np.abs(out.astype(np.float64) - ref).max())
        assert err <= tol, f"{name}: max abs error {err:.3e} > {tol:.3e}"


@pytest.mark.parametrize("name", ["resnet_small", "mobilenet_small", "transformer_block"])
def test_an_onnxruntime_script_runs_with_its_import_changed(name):
    path = MODELS / name / "model.onnx"
    probe = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds = [[rng.standard_normal(i.shape).astype(np.float32) for i in probe.get_inputs()]]
    ours, got = ort_style_script(layoutopt, path, feeds)
    theirs, expected = ort_style_script(onnxruntime, path, feeds)
    assert ours == theirs
    assert_close(got[0], expected[0])


def test_a_dynamic_model_runs_at_every_shape_in_one_session(tmp_path):
    path = dynamic_model(tmp_path / "dynamic.onnx")
    rng = np.random.default_rng(2)
    shapes = [(1, 3, 32, 32), (1, 3, 48, 40), (4, 3, 32, 32), (1, 3, 32, 32)]
    feeds = [[rng.standard_normal(s).astype(np.float32)] for s in shapes]
    ours, got = ort_style_script(layoutopt, path, feeds)
    theirs, expected = ort_style_script(onnxruntime, path, feeds)
    # Symbolic dimensions by name, a free one as None, as onnxruntime shows them.
    assert ours == theirs
    assert ours[0] == ("x", "tensor(float)", ["batch", 3, "height", "width"])
    for g, e in zip(got, expected, strict=True):
        assert_close(g, e)


def test_each_shape_is_compiled_once_and_the_cache_is_bounded(tmp_path):
    path = dynamic_model(tmp_path / "dynamic.onnx")
    so = layoutopt.SessionOptions()
    so.intra_op_num_threads = 1
    sess = layoutopt.InferenceSession(path, so, max_shapes=2)
    assert sess.compiled_shapes == []
    x = {s: np.ones(s, np.float32) for s in [(1, 3, 16, 16), (2, 3, 16, 16), (1, 3, 24, 16)]}
    first = sess.run(None, {"x": x[(1, 3, 16, 16)]})
    assert sess.last_compile_seconds > 0
    again = sess.run(["logits"], {"x": x[(1, 3, 16, 16)]})
    assert sess.last_compile_seconds == 0.0
    np.testing.assert_array_equal(again[0], first[1])
    sess.run(None, {"x": x[(2, 3, 16, 16)]})
    sess.run(None, {"x": x[(1, 3, 24, 16)]})
    # At most two kept, the least recently used dropped first.
    assert sess.compiled_shapes == [[[2, 3, 16, 16]], [[1, 3, 24, 16]]]


def test_a_static_model_compiles_when_the_session_opens():
    sess = layoutopt.InferenceSession(MODELS / "resnet_small" / "model.onnx")
    [arg] = sess.get_inputs()
    assert sess.compiled_shapes == [[arg.shape]]


def test_shapes_the_model_does_not_declare_are_clear_errors(tmp_path):
    path = dynamic_model(tmp_path / "dynamic.onnx")
    sess = layoutopt.InferenceSession(path)
    with pytest.raises(ValueError, match=r"input 'x': dimension 1 is 4, the model declares 3"):
        sess.run(None, {"x": np.zeros((1, 4, 8, 8), np.float32)})
    with pytest.raises(ValueError, match="input 'x': the array has rank 3"):
        sess.run(None, {"x": np.zeros((3, 8, 8), np.float32)})
    with pytest.raises(ValueError, match="no output 'nothing'"):
        sess.run(["nothing"], {"x": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(ValueError, match="no input 'y'"):
        sess.run(None, {"y": np.zeros((1, 3, 8, 8), np.float32)})
    static = layoutopt.InferenceSession(MODELS / "resnet_small" / "model.onnx")
    with pytest.raises(ValueError, match="dimension 2 is 16, the model declares 32"):
        static.run(None, {"input": np.zeros((1, 3, 16, 16), np.float32)})
    with pytest.raises(ValueError, match="memory_limit"):
        layoutopt.InferenceSession(path, memory_limit="lots")
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        layoutopt.InferenceSession(path, providers=["CUDAExecutionProvider"])
    with pytest.raises(TypeError):
        layoutopt.InferenceSession(path, no_such_option=1)


def test_input_shape_bounds_plan_ahead_and_refuse_shapes_outside_them(tmp_path):
    path = dynamic_model(tmp_path / "dynamic.onnx")
    bounds = {"x": [(1, 4), 3, (16, 48), (16, 48)]}
    sess = layoutopt.InferenceSession(path, input_shapes=bounds)
    # Every free dimension bounded: planned and compiled ahead at the largest.
    assert sess.compiled_shapes == [[[4, 3, 48, 48]]]
    x = np.random.default_rng(3).standard_normal((2, 3, 24, 40)).astype(np.float32)
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(None, {"x": x}), strict=True))
    ort = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert_close(got, dict(zip(names, ort.run(None, {"x": x}), strict=True)))
    with pytest.raises(ValueError, match=r"input 'x': dimension 2 is 64, outside the bounds 16\.\.48"):
        sess.run(None, {"x": np.zeros((1, 3, 64, 16), np.float32)})
    with pytest.raises(ValueError, match=r"input_shapes: input 'x': the range 9\.\.2 is empty"):
        layoutopt.InferenceSession(path, input_shapes={"x": [(9, 2), 3, 16, 16]})


def test_a_model_cut_at_nonzero_runs_in_stages_as_onnxruntime_does():
    """NonZero of a mask computed at run time: its output's extent depends on
    the values, so the session runs the model in stages. At two batch sizes
    and an input with nothing above the threshold, every output equals
    onnxruntime's (integers exactly)."""
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data_dependent" / "nonzero_mask" / "model.onnx"
    rng = np.random.default_rng(3)
    feeds = [rng.standard_normal((n, 6)).astype(np.float32) for n in (2, 4)]
    feeds.append(np.full((3, 6), -1.0, np.float32))
    ours = layoutopt.InferenceSession(str(path))
    theirs = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for x in feeds:
        got = ours.run(None, {"x": x})
        want = theirs.run(None, {"x": x})
        assert np.isnan(ours.last_compile_seconds)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            if w.dtype.kind == "f":
                assert np.abs(g - w).max(initial=0.0) <= 1e-4 * max(1.0, np.abs(w).max(initial=0.0))
            else:
                assert np.array_equal(g, w)
