#!/usr/bin/env python3
"""Small ONNX models with If, Loop and Scan, with outputs recorded from onnxruntime,
for tests/integration/control_flow.rs.

    /tmp/ortvenv/bin/python scripts/gen_control_flow.py   # needs onnx, onnxruntime

Each case is tests/control_flow/<name>/model.onnx with test_data_set_0/{input,output}_<i>.pb
(the ONNX backend test-data layout, as tests/recurrent/ stores its models). The cases:

  if_constant_condition   an If on a condition import-time folding computes (from a shape),
                          whose taken branch reads a weight of the main graph: inlined
  if_runtime_then/_else   an If on a data-dependent condition, fed inputs that take each
                          branch; the else branch holds a nested If, and both read values
                          of the enclosing graphs
  loop_scan_outputs       a Loop with a constant trip count of 70 (too many to unroll), two
                          loop-carried values (one reading the iteration number) and two
                          scan outputs
  loop_unrolled           a Loop of 3 iterations whose body slices a row by the iteration
                          number: unrolled at import
  loop_data_dependent     a Loop that runs while a value it doubles stays small
  scan_forward            a Scan carrying a running sum over rows, two scan inputs
  scan_reverse            a Scan walking its input backwards along axis 1, its output
                          stacked backwards along axis 1

Inputs come from a fixed seed, and onnxruntime runs single-threaded without graph
optimizations, so every run writes the same bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "tests" / "control_flow"
F = TensorProto.FLOAT
OPSET = 17


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value)))


def model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "control_flow", inputs, outputs, list(inits))
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


def write(name, m, feeds):
    expected = run_ort(m, feeds)
    out = OUT / name
    data = out / "test_data_set_0"
    data.mkdir(parents=True)
    (out / "model.onnx").write_bytes(m.SerializeToString())
    for i, (n, v) in enumerate(feeds.items()):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(v, n).SerializeToString())
    for i, (o, v) in enumerate(zip(m.graph.output, expected)):
        (data / f"output_{i}.pb").write_bytes(numpy_helper.from_array(v, o.name).SerializeToString())


def if_constant_condition(rng):
    """cond = (shape(x)[0] == 2): known once shapes are, so the branch is inlined."""
    w = rng.standard_normal((2, 3)).astype(np.float32)
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t0"], name="scale"),
         helper.make_node("Relu", ["t0"], ["then_out"], name="relu")],
        "then", [], [vi("then_out", F, [2, 3])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["else_out"], name="negate")],
        "else", [], [vi("else_out", F, [2, 3])])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        const("zero", np.int64(0)),
        helper.make_node("Gather", ["shape", "zero"], ["rows"]),
        const("two", np.int64(2)),
        helper.make_node("Equal", ["rows", "two"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], name="pick", then_branch=then_g, else_branch=else_g),
    ]
    m = model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])],
              [numpy_helper.from_array(w, "w")])
    write("if_constant_condition", m, {"x": rng.standard_normal((2, 3)).astype(np.float32)})


def if_runtime(rng):
    """cond = sum(x) > 0 at run time. then: relu(x) * w; else: a nested If on
    sum(y) > 0 choosing tanh(x) + y or x - y."""
    w = rng.standard_normal((3, 4)).astype(np.float32)
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "w"], ["then_out"], name="scale")],
        "then", [], [vi("then_out", F, [3, 4])])
    inner_then = helper.make_graph(
        [helper.make_node("Tanh", ["x"], ["th"], name="tanh"),
         helper.make_node("Add", ["th", "y"], ["inner_then_out"], name="add")],
        "inner_then", [], [vi("inner_then_out", F, [3, 4])])
    inner_else = helper.make_graph(
        [helper.make_node("Sub", ["x", "y"], ["inner_else_out"], name="sub")],
        "inner_else", [], [vi("inner_else_out", F, [3, 4])])
    else_g = helper.make_graph(
        [helper.make_node("ReduceSum", ["y"], ["ys"], name="sum_y", keepdims=0),
         const("zero_f", np.float32(0)),
         helper.make_node("Greater", ["ys", "zero_f"], ["ycond"], name="positive"),
         helper.make_node("If", ["ycond"], ["else_out"], name="inner",
                          then_branch=inner_then, else_branch=inner_else)],
        "else", [], [vi("else_out", F, [3, 4])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        const("zero", np.float32(0)),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["out"], name="branch", then_branch=then_g, else_branch=else_g),
    ]
    m = model(nodes, [vi("x", F, [3, 4]), vi("y", F, [3, 4])], [vi("out", F, [3, 4])],
              [numpy_helper.from_array(w, "w")])
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    pos, neg = np.abs(x) + 0.1, -np.abs(x) - 0.1
    write("if_runtime_then", m, {"x": pos, "y": y})
    write("if_runtime_else", m, {"x": neg, "y": np.abs(y)})


def loop_scan_outputs(rng):
    """M = 70: acc = acc * 0.5 + x * i; n = n + 1; scan outputs acc and acc summed."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], name="iteration", to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"], name="scale"),
         const("half", np.float32(0.5)),
         helper.make_node("Mul", ["acc_in", "half"], ["decayed"], name="decay"),
         helper.make_node("Add", ["decayed", "xi"], ["acc_out"], name="accumulate"),
         const("one", np.int64(1)),
         helper.make_node("Add", ["n_in", "one"], ["n_out"], name="count"),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], name="total", keepdims=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
         vi("acc_in", F, [2, 3]), vi("n_in", TensorProto.INT64, [])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [2, 3]),
         vi("n_out", TensorProto.INT64, []), vi("acc_scan", F, [2, 3]), vi("total", F, [])])
    # The scan output acc_scan is acc_out again, under its own name.
    body.node.append(helper.make_node("Identity", ["acc_out"], ["acc_scan"], name="record"))
    nodes = [
        const("M", np.int64(70)),
        const("acc0", np.zeros((2, 3), np.float32)),
        const("n0", np.int64(0)),
        helper.make_node("Loop", ["M", "", "acc0", "n0"], ["acc", "n", "accs", "totals"],
                         name="accumulate_loop", body=body),
    ]
    m = model(nodes, [vi("x", F, [2, 3])],
              [vi("acc", F, [2, 3]), vi("n", TensorProto.INT64, []), vi("accs", F, [70, 2, 3]),
               vi("totals", F, [70])])
    write("loop_scan_outputs", m, {"x": rng.standard_normal((2, 3)).astype(np.float32)})


def loop_unrolled(rng):
    """M = 3: y = y + x[i] (row i sliced by the iteration number), rows scanned."""
    body = helper.make_graph(
        [const("one", np.int64(1)),
         helper.make_node("Add", ["i", "one"], ["end"], name="end"),
         const("axes0", np.array([0], np.int64)),
         helper.make_node("Unsqueeze", ["i", "axes0"], ["starts"], name="starts"),
         helper.make_node("Unsqueeze", ["end", "axes0"], ["ends"], name="ends"),
         helper.make_node("Slice", ["x", "starts", "ends"], ["row"], name="row"),
         helper.make_node("Add", ["y_in", "row"], ["y_out"], name="add"),
         helper.make_node("Identity", ["y_out"], ["y_scan"], name="record"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("y_in", F, [1, 4])],
        [vi("cond_out", TensorProto.BOOL, []), vi("y_out", F, [1, 4]), vi("y_scan", F, [1, 4])])
    nodes = [
        const("M", np.int64(3)),
        const("go", np.bool_(True)),
        helper.make_node("Loop", ["M", "go", "y0"], ["y", "ys"], name="rows", body=body),
    ]
    m = model(nodes, [vi("x", F, [3, 4]), vi("y0", F, [1, 4])],
              [vi("y", F, [1, 4]), vi("ys", F, [3, 1, 4])])
    write("loop_unrolled", m, {"x": rng.standard_normal((3, 4)).astype(np.float32),
                               "y0": rng.standard_normal((1, 4)).astype(np.float32)})


def loop_data_dependent(rng):
    """No trip count: y = 2 y + x while sum(|y|) < 1000."""
    body = helper.make_graph(
        [const("two", np.float32(2)),
         helper.make_node("Mul", ["y_in", "two"], ["y2"], name="double"),
         helper.make_node("Add", ["y2", "x"], ["y_out"], name="add_x"),
         helper.make_node("Abs", ["y_out"], ["a"], name="abs"),
         helper.make_node("ReduceSum", ["a"], ["size"], name="size", keepdims=0),
         const("bound", np.float32(1000)),
         helper.make_node("Less", ["size", "bound"], ["cond_out"], name="small")],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("y_in", F, [4])],
        [vi("cond_out", TensorProto.BOOL, []), vi("y_out", F, [4])])
    nodes = [
        const("go", np.bool_(True)),
        helper.make_node("Loop", ["", "go", "y0"], ["y"], name="grow", body=body),
    ]
    m = model(nodes, [vi("x", F, [4]), vi("y0", F, [4])], [vi("y", F, [4])])
    write("loop_data_dependent", m, {"x": np.abs(rng.standard_normal(4)).astype(np.float32) + 0.5,
                                     "y0": rng.standard_normal(4).astype(np.float32)})


def scan_forward(rng):
    """Running sum over the rows of a [5, 3] input, times a [5, 3] gate row."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "row"], ["sum_out"], name="add"),
         helper.make_node("Mul", ["sum_out", "gate"], ["gated"], name="gate")],
        "body",
        [vi("sum_in", F, [3]), vi("row", F, [3]), vi("gate", F, [3])],
        [vi("sum_out", F, [3]), vi("gated", F, [3])])
    nodes = [helper.make_node("Scan", ["s0", "x", "g"], ["s", "ys"], name="running_sum",
                              body=body, num_scan_inputs=2)]
    m = model(nodes, [vi("s0", F, [3]), vi("x", F, [5, 3]), vi("g", F, [5, 3])],
              [vi("s", F, [3]), vi("ys", F, [5, 3])])
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    write("scan_forward", m, {"s0": f(3), "x": f(5, 3), "g": f(5, 3)})


def scan_reverse(rng):
    """x [2, 4]: columns walked last first, carrying a product; each step's
    output stacked backwards along axis 1, the state scaled by a weight of the
    main graph."""
    w = rng.standard_normal(2).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Mul", ["p_in", "col"], ["p_mul"], name="multiply"),
         helper.make_node("Add", ["p_mul", "w"], ["p_out"], name="shift"),
         helper.make_node("Sigmoid", ["p_out"], ["step"], name="squash")],
        "body",
        [vi("p_in", F, [2]), vi("col", F, [2])],
        [vi("p_out", F, [2]), vi("step", F, [2])])
    nodes = [helper.make_node("Scan", ["p0", "x"], ["p", "steps"], name="backwards", body=body,
                              num_scan_inputs=1, scan_input_axes=[1], scan_input_directions=[1],
                              scan_output_axes=[-1], scan_output_directions=[1])]
    m = model(nodes, [vi("p0", F, [2]), vi("x", F, [2, 4])],
              [vi("p", F, [2]), vi("steps", F, [2, 4])], [numpy_helper.from_array(w, "w")])
    write("scan_reverse", m, {"p0": rng.standard_normal(2).astype(np.float32),
                              "x": rng.standard_normal((2, 4)).astype(np.float32)})


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    rng = np.random.default_rng(43)
    if_constant_condition(rng)
    if_runtime(rng)
    loop_scan_outputs(rng)
    loop_unrolled(rng)
    loop_data_dependent(rng)
    scan_forward(rng)
    scan_reverse(rng)
    print(f"wrote {len(list(OUT.iterdir()))} cases to {OUT}")


if __name__ == "__main__":
    main()
