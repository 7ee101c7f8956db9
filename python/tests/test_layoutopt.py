"""The Python package against onnxruntime on the bundled models.

Tolerance: an output agrees when every element is within 1e-4 * max(1, max
|reference|) of onnxruntime's, the bound the bundled models' README states
for onnxruntime against the ONNX reference evaluator.
"""

import json
import os
import pathlib
import subprocess
import sys

import layoutopt
import numpy as np
import onnxruntime as ort
import pytest

MODELS = pathlib.Path(__file__).resolve().parents[2] / "models"
ONNX_MODELS = ["resnet_small", "mobilenet_small", "transformer_block"]


def model_path(name):
    return MODELS / name / "model.onnx"


def random_inputs(model, seed=0):
    rng = np.random.default_rng(seed)
    return {
        i["name"]: rng.standard_normal(i["shape"]).astype(np.float32) for i in model.inputs
    }


def onnxruntime_outputs(path, inputs):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))


def assert_agree(got, expected):
    assert sorted(got) == sorted(expected)
    for name, ref in expected.items():
        out = got[name]
        assert out.shape == ref.shape, name
        assert out.dtype == ref.dtype, name
        tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
        err = float(np.abs(out.astype(np.float64) - ref).max())
        assert err <= tol, f"{name}: max abs error {err:.3e} > {tol:.3e}"


@pytest.mark.parametrize("name", ONNX_MODELS)
@pytest.mark.parametrize("planner", ["keep", "global"])
def test_runs_agree_with_onnxruntime(name, planner):
    model = layoutopt.load(model_path(name))
    inputs = random_inputs(model)
    compiled = model.plan(planner=planner, target="nchwc").compile(threads=1)
    assert_agree(compiled.run(inputs), onnxruntime_outputs(model_path(name), inputs))


def test_tflite_model_runs_against_its_recorded_output():
    # onnxruntime does not read TFLite: the oracle is the output the TFLite
    # interpreter recorded beside the model (read through onnx's TensorProto).
    from onnx import TensorProto, numpy_helper

    folder = MODELS / "tflite_cnn"
    model = layoutopt.load(folder / "model.tflite")

    def read(p):
        t = TensorProto()
        t.ParseFromString(p.read_bytes())
        return numpy_helper.to_array(t)

    x = read(folder / "test_data_set_0" / "input_0.pb")
    expected = read(folder / "test_data_set_0" / "output_0.pb")
    outputs = model.plan().compile().run({model.inputs[0]["name"]: x})
    [out] = outputs.values()
    tol = 1e-4 * max(1.0, float(np.abs(expected).max()))
    assert float(np.abs(out - expected).max()) <= tol


def test_plan_object_names_model_tensors():
    model = layoutopt.load(model_path("resnet_small"))
    plan = model.plan(planner="global", target="nchw16c")
    assert plan.planner == "global"
    assert plan.target == "NCHW16c"
    # Every graph input and output keeps its model name and a layout.
    for t in model.inputs + model.outputs:
        assert t["name"] in plan.layouts
    assert plan.layouts[model.inputs[0]["name"]] == "NCHW"
    assert any(layout == "NCHW16c" for layout in plan.layouts.values())
    for name, layout in plan.layouts.items():
        assert plan.layout_of(name) == layout
    assert plan.layout_of("no such tensor") is None
    # Transforms name model tensors and carry structured spans. Whether the
    # global plan keeps any depends on the measured kernel times; the local
    # planner takes each node's own best layout, so this CNN's blocked convs and
    # row-major Gemm head meet at a transform.
    local = model.plan(planner="local", target="nchw16c")
    assert local.transforms, "a local blocked plan of a CNN keeps transforms"
    for p in (plan, local):
        for t in p.transforms:
            assert t["tensor"] in p.layouts
            assert t["moved_bytes"] > 0 and not t["relabel"]
    for t in plan.relabels:
        assert t["tensor"] in plan.layouts
        assert t["moved_bytes"] == 0 and t["relabel"]
        for span in t["spans"]:
            assert set(span) == {"file", "layer", "op_type", "index"}
            assert span["file"] == "model.onnx"
    # The solver's account: its lower bound never passes its objective.
    solver = plan.solver
    assert solver["lower_bound_ns"] <= solver["objective_ns"] * (1 + 1e-9)
    assert 0.0 <= solver["gap"] <= 1.0
    assert model.plan(planner="keep").solver is None


def test_plan_document_is_the_command_lines():
    plan = layoutopt.load(model_path("resnet_small")).plan(planner="greedy", target="nhwc")
    doc = json.loads(plan.to_json())
    assert doc["schema_version"] == layoutopt.SCHEMA_VERSION == 3
    assert doc["command"] == "plan"
    assert doc["model_file"] == "model.onnx"
    assert doc == plan.document


def test_the_command_line_and_python_make_the_same_plan(tmp_path):
    """Both plan through the library's api with this machine's measured costs:
    given one measurement cache (fresh, written by the first, read by the
    second), their `plan --json` documents are identical, key order included,
    timings aside."""
    exe = pathlib.Path(__file__).resolve().parents[2] / "target" / "release" / "layoutopt"
    assert exe.exists(), f"{exe}: build it first (cargo build --release)"
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    path = str(model_path("resnet_small"))
    cli = subprocess.run(
        [str(exe), "plan", "--json", path], env=env, capture_output=True, text=True, check=True
    ).stdout
    code = "import layoutopt, sys; print(layoutopt.load(sys.argv[1]).plan().to_json())"
    python = subprocess.run(
        [sys.executable, "-c", code, path], env=env, capture_output=True, text=True, check=True
    ).stdout

    cli_doc, python_doc = json.loads(cli), json.loads(python)
    cli_doc.pop("timings")
    python_doc.pop("timings")
    assert list(cli_doc) == list(python_doc)
    assert json.dumps(cli_doc) == json.dumps(python_doc)


def test_float32_outputs_are_not_copied():
    model = layoutopt.load(model_path("resnet_small"))
    compiled = model.plan().compile()
    x = random_inputs(model)
    [out] = compiled.run(x).values()
    # A view of the runtime's buffer, owned by the object that keeps it alive.
    assert not out.flags.owndata
    assert out.base is not None
    # A second run writes a new buffer: the first result stays as it was.
    first = out.copy()
    compiled.run({k: v * 2 for k, v in x.items()})
    np.testing.assert_array_equal(out, first)


def test_non_contiguous_input_gives_the_same_result():
    model = layoutopt.load(model_path("resnet_small"))
    compiled = model.plan().compile()
    name = model.inputs[0]["name"]
    x = random_inputs(model)[name]
    strided = np.asfortranarray(x)
    assert not strided.flags.c_contiguous
    a = compiled.run({name: x})
    b = compiled.run({name: strided})
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_export_runs_in_onnxruntime(tmp_path):
    model = layoutopt.load(model_path("mobilenet_small"))
    plan = model.plan(planner="global", target="nchw8c")
    out = tmp_path / "planned.onnx"
    doc = plan.export(out)
    assert doc["command"] == "export" and doc["output_file"] == "planned.onnx"
    inputs = random_inputs(model)
    assert_agree(
        onnxruntime_outputs(out, inputs), onnxruntime_outputs(model_path("mobilenet_small"), inputs)
    )


def test_explore_writes_a_page(tmp_path):
    out = tmp_path / "explorer.html"
    layoutopt.load(model_path("resnet_small")).plan().explore(out, against="keep")
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "'keep'" in page or "keep" in page


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(layoutopt.Error, match="no-such-model.onnx"):
        layoutopt.load(tmp_path / "no-such-model.onnx")
    model = layoutopt.load(model_path("resnet_small"))
    with pytest.raises(ValueError, match="unknown planner 'fastest'"):
        model.plan(planner="fastest")
    with pytest.raises(ValueError, match="target"):
        model.plan(target="nchw0c")
    with pytest.raises(layoutopt.Error, match="input"):
        layoutopt.load(model_path("resnet_small"), input_shapes={"input": [1, 3, 8]})
    compiled = model.plan().compile()
    name = model.inputs[0]["name"]
    x = random_inputs(model)[name]
    with pytest.raises(ValueError, match=r"shape is \[1, 3, 16, 16\]"):
        compiled.run({name: np.zeros((1, 3, 16, 16), np.float32)})
    with pytest.raises(ValueError, match="dtype is float64"):
        compiled.run({name: x.astype(np.float64)})
    with pytest.raises(ValueError, match=f"input '{name}' is not given"):
        compiled.run({})
    with pytest.raises(ValueError, match="no input 'other'"):
        compiled.run({name: x, "other": x})
    with pytest.raises(ValueError, match="numpy.ndarray"):
        compiled.run({name: x.tolist()})
    with pytest.raises(ValueError, match="threads"):
        model.plan().compile(threads=10**6)
    with pytest.raises(layoutopt.Error, match="refusing to overwrite"):
        model.plan().export(model_path("resnet_small"))


def test_a_pinned_input_is_taken_channels_last():
    model = layoutopt.load(model_path("resnet_small"))
    name = model.inputs[0]["name"]
    x = random_inputs(model)[name]
    plan = model.plan(planner="global", target="nchw8c", pinned={name: "NHWC"})
    assert plan.layouts[name] == "NHWC"
    got = plan.compile().run({name: np.ascontiguousarray(x.transpose(0, 2, 3, 1))})
    assert_agree(got, onnxruntime_outputs(model_path("resnet_small"), {name: x}))
    with pytest.raises(layoutopt.Error, match="pinned layout"):
        model.plan(pinned={"nothing": "NHWC"})
