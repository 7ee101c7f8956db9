#!/usr/bin/env python3
"""Writes the committed cases of the hostile-input regression suite
(tests/bad_input/hostile.rs) into tests/hostile/: small ONNX models, recorded outputs,
and cases.json, which says for each case the command line, the exit code, a
message it must print and its time and peak-memory bounds.

Cases that need no ONNX tooling (FIFOs, devices, truncated files, thread
counts, TFLite models, output paths) are built by the Rust test itself.

    /work/venv-main/bin/python scripts/gen_hostile.py   # needs onnx, numpy, onnxruntime
"""

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

OUT = Path(__file__).resolve().parent.parent / "tests" / "hostile"
RNG = np.random.default_rng(20)
CASES = []

# Bounds: an import refused in well under a second; a small model planned,
# compiled and run in a few. Peak RSS of the whole process.
IMPORT = {"seconds": 10, "mb": 300}
RUN = {"seconds": 30, "mb": 500}


def vi(name, dims, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, dims)


def save(name, nodes, inputs, outputs, inits=(), opset=13, folder=False):
    g = h.make_graph(nodes, name, inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    path = OUT / name / "model.onnx" if folder else OUT / f"{name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    # No checker: most of these models are wrong on purpose.
    path.write_bytes(m.SerializeToString())
    return path


def case(name, cls, args, code, stderr=None, stdout=None, bounds=IMPORT, **extra):
    CASES.append(
        {"name": name, "class": cls, "args": args, "exit": code, "stderr": stderr,
         "stdout": stdout, **bounds, **extra}
    )


def refused(name, nodes, inputs, outputs, needle, inits=(), opset=13, command="run"):
    """A model every command must refuse with `needle`, exit 1."""
    save(name, nodes, inputs, outputs, inits, opset)
    case(name, "no panic", [command, f"{{dir}}/{name}.onnx"], 1, stderr=needle)


def ints(name, values):
    return nh.from_array(np.array(values, np.int64), name)


def panics():
    """Item 1: inputs that panicked or aborted, and their neighbours: every
    count or size read from the file is checked before it is used."""
    x = [vi("x", [2, 4])]
    y = [vi("y", None)]  # no declared shape: only the op is at fault
    refused("relu_second_output_consumed",
            [h.make_node("Relu", ["x"], ["a", "b"]), h.make_node("Neg", ["b"], ["y"])],
            x, y, "output 'b' is not produced")
    for n, label in [(-1, "minus_one"), (2**40, "2pow40"), (0, "zero"), (2**62, "2pow62")]:
        refused(f"split_num_outputs_{label}",
                [h.make_node("Split", ["x"], ["a", "b"], num_outputs=n, axis=0)],
                x, [vi("a", None)], f"num_outputs is {n}", opset=18)
    refused("split_sizes_negative",
            [h.make_node("Split", ["x", "s"], ["a", "b"], axis=1)],
            x, [vi("a", None)], "Split", [ints("s", [-1, 5])])
    refused("split_sizes_wrong_sum",
            [h.make_node("Split", ["x", "s"], ["a", "b"], axis=1)],
            x, [vi("a", None)], "Split", [ints("s", [1, 1])])
    refused("concat_axis_99", [h.make_node("Concat", ["x", "x"], ["y"], axis=99)], x, y, "axis")
    refused("transpose_perm_repeated",
            [h.make_node("Transpose", ["x"], ["y"], perm=[0, 0])], x, y, "perm")
    refused("transpose_perm_out_of_range",
            [h.make_node("Transpose", ["x"], ["y"], perm=[0, 2**40])], x, y, "perm")
    refused("reshape_two_minus_ones",
            [h.make_node("Reshape", ["x", "s"], ["y"])], x, y, "Reshape", [ints("s", [-1, -1])])
    refused("reshape_huge",
            [h.make_node("Reshape", ["x", "s"], ["y"])], x, y, "Reshape",
            [ints("s", [2**40, 2**40])])
    refused("gather_axis_out_of_range",
            [h.make_node("Gather", ["x", "i"], ["y"], axis=7)], x, y, "axis", [ints("i", [0])])
    refused("softmax_axis_out_of_range",
            [h.make_node("Softmax", ["x"], ["y"], axis=-9)], x, y, "axis")
    refused("flatten_axis_out_of_range",
            [h.make_node("Flatten", ["x"], ["y"], axis=9)], x, y, "axis")
    refused("squeeze_axis_not_one",
            [h.make_node("Squeeze", ["x", "a"], ["y"])], x, y, "Squeeze", [ints("a", [1])])
    refused("unsqueeze_axis_repeated",
            [h.make_node("Unsqueeze", ["x", "a"], ["y"])], x, y, "Unsqueeze", [ints("a", [0, 0])])
    refused("slice_step_zero",
            [h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])], x, y, "step",
            [ints("s", [0]), ints("e", [2]), ints("a", [0]), ints("st", [0])])
    refused("tile_repeats_negative",
            [h.make_node("Tile", ["x", "r"], ["y"])], x, y, "Tile", [ints("r", [-1, 2])])
    refused("expand_incompatible",
            [h.make_node("Expand", ["x", "s"], ["y"])], x, y, "Expand", [ints("s", [3, 5])])
    refused("expand_huge",
            [h.make_node("Expand", ["x", "s"], ["y"])], x, y, "Expand",
            [ints("s", [2**31, 2**31, 4])])
    refused("topk_k_too_large",
            [h.make_node("TopK", ["x", "k"], ["y", "i"], axis=1)], x, y, "TopK", [ints("k", [9])])
    refused("cast_to_undefined", [h.make_node("Cast", ["x"], ["y"], to=0)], x, y, "Cast")
    refused("cast_to_99", [h.make_node("Cast", ["x"], ["y"], to=99)], x, y, "Cast")
    refused("attribute_of_wrong_type",
            [h.make_node("Softmax", ["x"], ["y"], axis=1.5)], x, y, "axis")
    refused("unknown_operator", [h.make_node("NoSuchOp", ["x"], ["y"])], x, y,
            "unsupported operators: 'NoSuchOp'")
    seq = [vi("x", [3, 2, 4])]
    refused("lstm_weights_not_hidden_size",
            [h.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=5)], seq, y,
            "W has shape [1, 16, 4], expected [1, 20, 4]",
            [nh.from_array(np.ones((1, 16, 4), np.float32), "w"),
             nh.from_array(np.ones((1, 16, 4), np.float32), "r")], opset=14)
    # RoiAlign regions read at run time: one whose adaptive sampling grid has
    # no bound, one of an image outside the batch.
    roi_align = [h.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=2,
                             output_width=2)]
    for name, box, image, needle in [
            ("roi_align_region_without_bound", [0, 0, 1e30, 1], 0, "more than 4194304 bilinear samples"),
            ("roi_align_image_outside_the_batch", [0, 0, 4, 4], 3,
             "names image 3, outside the batch of 1")]:
        refused(name, roi_align, [vi("x", [1, 2, 8, 8])], y, needle,
                [nh.from_array(np.array([box], np.float32), "rois"), ints("batch", [image])],
                opset=16)
    # Quantized operators whose parameters do not fit (onnxruntime's
    # com.microsoft domain).
    quantized = [nh.from_array(np.ones((1, 3, 8), np.int8), "w"),
                 nh.from_array(np.ones((1, 2, 8), np.int8), "r"),
                 nh.from_array(np.ones(3, np.float32), "w_scale"),
                 nh.from_array(np.zeros(3, np.int8), "w_zero"),
                 nh.from_array(np.ones(1, np.float32), "r_scale"),
                 nh.from_array(np.zeros(1, np.int8), "r_zero")]
    refused("dynamic_quantize_lstm_scale_fits_nothing",
            [h.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "w_scale",
                                                 "w_zero", "r_scale", "r_zero"], ["y"],
                         domain="com.microsoft", hidden_size=2)],
            [vi("x", [4, 2, 3])], y, "W's scale has shape [3], expected [1] or [1, 8]",
            quantized, opset=14)
    refused("qlinear_softmax_without_opset",
            [h.make_node("QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"],
                         domain="com.microsoft")],
            [vi("x", [2, 4], T.UINT8)], y, "needs its `opset` attribute",
            [nh.from_array(np.array(0.1, np.float32), "s"),
             nh.from_array(np.array(0, np.uint8), "z")])
    refused("cycle",
            [h.make_node("Relu", ["b"], ["a"]), h.make_node("Relu", ["a"], ["b"]),
             h.make_node("Relu", ["b"], ["y"])], x, y, "cycle")
    refused("output_produced_twice",
            [h.make_node("Relu", ["x"], ["y"]), h.make_node("Neg", ["x"], ["y"])], x, y,
            "already produced")
    refused("input_never_produced", [h.make_node("Add", ["x", "ghost"], ["y"])], x, y, "'ghost'")
    refused("no_graph_outputs", [h.make_node("Relu", ["x"], ["y"])], x, [], "declares no outputs")
    refused("output_nobody_computes", [h.make_node("Relu", ["x"], ["y"])], x, [vi("z", [2, 4])],
            "graph output 'z' is not produced")
    refused("opset_99", [h.make_node("Relu", ["x"], ["y"])], x, y, "opset 99", opset=99)
    refused("opset_6", [h.make_node("Relu", ["x"], ["y"])], x, y, "opset 6", opset=6)
    refused("input_dim_negative", [h.make_node("Relu", ["x"], ["y"])], [vi("x", [2, -5])], y,
            "negative dimension")
    refused("input_dims_overflow", [h.make_node("Relu", ["x"], ["y"])],
            [vi("x", [2**62, 2**62, 16])], y, "x")
    refused("input_4_tib", [h.make_node("Relu", ["x"], ["y"])], [vi("x", [2**40])], y, "memory")
    img = [vi("x", [1, 3, 8, 8])]
    w = nh.from_array(RNG.random((4, 3, 3, 3), np.float32), "w")
    for attrs, label, needle in [
        ({"group": 0}, "group_zero", "group"),
        ({"strides": [0, 0]}, "strides_zero", "stride"),
        ({"dilations": [0, 0]}, "dilations_zero", "dilation"),
        ({"pads": [-5, -5, -5, -5]}, "pads_negative", "pad"),
        ({"pads": [2**62, 0, 2**62, 0]}, "pads_overflow", "Conv"),
        ({"auto_pad": "SAME_UPPER", "dilations": [2**63 - 1, 1]}, "same_padding_overflow",
         "SAME_UPPER padding overflows"),
        ({"kernel_shape": [5, 5]}, "kernel_shape_disagrees", "kernel"),
    ]:
        refused(f"conv_{label}", [h.make_node("Conv", ["x", "w"], ["y"], **attrs)], img, y,
                needle, [w])
    for attrs, label, needle in [
        ({"kernel_shape": [0, 0]}, "kernel_zero", "kernel"),
        ({"kernel_shape": [9, 9]}, "kernel_larger_than_input", "MaxPool"),
        ({"kernel_shape": [2, 2], "strides": [0, 0]}, "strides_zero", "stride"),
    ]:
        refused(f"maxpool_{label}", [h.make_node("MaxPool", ["x"], ["y"], **attrs)], img, y,
                needle)
    bad = nh.from_array(np.ones(4, np.float32), "w")
    bad.dims[:] = [2**40, 2**40]
    refused("initializer_dims_overflow", [h.make_node("Add", ["x", "w"], ["y"])], x, y, "'w'",
            [bad])
    short = nh.from_array(np.ones(8, np.float32), "w")
    short.raw_data = short.raw_data[:5]
    refused("initializer_raw_data_short", [h.make_node("Add", ["x", "w"], ["y"])], x, y, "'w'",
            [short])


def conv_then(name, tail, out_dims, extra_inits=(), out_elem=T.FLOAT):
    """x[1,20,8,8] -> conv (20 channels: NCHW16c pads them) -> tail -> y, with
    onnxruntime's outputs recorded beside it."""
    w = nh.from_array(RNG.standard_normal((20, 20, 3, 3)).astype(np.float32) * 0.2, "w")
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])] + tail
    path = save(name, nodes, [vi("x", [1, 20, 8, 8])], [vi("y", out_dims, out_elem)],
                [w, *extra_inits], folder=True)
    x = RNG.standard_normal((1, 20, 8, 8)).astype(np.float32)
    (y,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    record(path.parent, [x], [y])
    return path


def record(folder, inputs, outputs):
    data = folder / "test_data_set_0"
    data.mkdir(exist_ok=True)
    for i, a in enumerate(inputs):
        (data / f"input_{i}.pb").write_bytes(nh.from_array(a).SerializeToString())
    for i, a in enumerate(outputs):
        (data / f"output_{i}.pb").write_bytes(nh.from_array(a).SerializeToString())


def planners():
    """Item 6b: every planner plans every model the reference runs, an op that
    cannot run in the planned layout falling back to row-major."""
    models = {
        "plan_pad_reflect": conv_then(
            "plan_pad_reflect", [h.make_node("Pad", ["c", "p"], ["y"], mode="reflect")],
            [1, 20, 10, 10], [ints("p", [0, 0, 1, 1, 0, 0, 1, 1])]),
        "plan_pad_edge_channels": conv_then(
            "plan_pad_edge_channels", [h.make_node("Pad", ["c", "p"], ["y"], mode="edge")],
            [1, 22, 8, 8], [ints("p", [0, 1, 0, 0, 0, 1, 0, 0])]),
        "plan_resize_linear": conv_then(
            "plan_resize_linear",
            [h.make_node("Resize", ["c", "", "s"], ["y"], mode="linear")], [1, 20, 16, 16],
            [nh.from_array(np.array([1, 1, 2, 2], np.float32), "s")]),
        "plan_where_broadcast": conv_then(
            "plan_where_broadcast",
            [h.make_node("Greater", ["c", "z"], ["g"]), h.make_node("Where", ["g", "c", "b"], ["y"])],
            [1, 20, 8, 8],
            [nh.from_array(RNG.standard_normal((1, 1, 1, 8)).astype(np.float32), "b"),
             nh.from_array(np.zeros(1, np.float32), "z")]),
        "plan_cast_round_trip": conv_then(
            "plan_cast_round_trip",
            [h.make_node("Cast", ["c"], ["i"], to=T.INT32),
             h.make_node("Cast", ["i"], ["y"], to=T.FLOAT)], [1, 20, 8, 8]),
    }
    for name in models:
        for planner in ["local", "greedy", "global"]:
            case(f"{name}_{planner}", "planners",
                 ["run", f"{{dir}}/{name}/model.onnx", "--planner", planner, "--threads", "1"],
                 0, stdout="max abs error vs recorded output", bounds=RUN, max_error=1e-3)


def recorded():
    """Item 6: recorded outputs are checked before comparing; NaN is reported."""
    def relu_case(name, x, outs, code, stderr=None, stdout=None, op="Relu"):
        path = save(name, [h.make_node(op, ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])],
                    folder=True)
        record(path.parent, [x], outs)
        case(name, "recorded outputs", ["run", f"{{dir}}/{name}/model.onnx"], code,
             stderr=stderr, stdout=stdout, bounds=RUN)

    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    relu_case("recorded_wrong_shape", x, [np.zeros((3, 2), np.float32)], 1,
              stderr="recorded output 0 is f32[3, 2], but output 'y' is f32[2, 3]")
    relu_case("recorded_wrong_dtype", x, [np.zeros((2, 3), np.int64)], 1,
              stderr="recorded output 0 is i64[2, 3], but output 'y' is f32[2, 3]")
    relu_case("recorded_too_many", x, [np.maximum(x, 0), np.maximum(x, 0)], 1,
              stderr="2 recorded outputs for a model with 1 outputs")
    nan_ref = np.maximum(x, 0)
    nan_ref[0, 0] = np.nan
    relu_case("recorded_nan_in_reference", x, [nan_ref], 0,
              stdout="1 element(s) are NaN or infinite on one side only")
    nan_in = x.copy()
    nan_in[1, 2] = np.nan
    relu_case("recorded_nan_in_output", nan_in, [np.maximum(x, 0)], 0,
              stdout="1 element(s) are NaN or infinite on one side only")
    relu_case("recorded_nan_on_both_sides", nan_in, [np.where(np.isnan(nan_in), np.nan,
                                                              np.maximum(nan_in, 0))], 0,
              stdout="1 element(s) are NaN or infinite")
    inf_ref = np.maximum(x, 0)
    inf_ref[1, 1] = np.inf
    relu_case("recorded_inf_in_reference", x, [inf_ref], 0,
              stdout="1 element(s) are NaN or infinite on one side only")


def external(name, location, data=None):
    """A model whose initializer lies at `location`; the Rust test makes
    hostile files (FIFOs, links to devices) there."""
    w = nh.from_array(np.full((2, 4), 0.5, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = T.EXTERNAL
    for k, v in [("location", location), ("offset", "0"), ("length", "32")]:
        w.external_data.add(key=k, value=v)
    path = save(name, [h.make_node("Add", ["x", "w"], ["y"])], [vi("x", [2, 4])],
                [vi("y", [2, 4])], [w], folder=True)
    if data is not None:
        (path.parent / location).write_bytes(data)


def wire(field, payload):
    """A length-delimited protobuf field."""
    def varint(n):
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def nested_ifs(depth):
    """A model whose If 'if<depth-1>' holds an If in its then_branch, and so on
    `depth` levels down; every else_branch is a leaf."""
    leaf = h.make_graph([h.make_node("Identity", ["x"], ["leaf"])], "leaf", [],
                        [vi("leaf", [4])]).SerializeToString()
    inner = h.make_graph([h.make_node("Identity", ["x"], ["out0"])], "level0", [],
                         [vi("out0", [4])]).SerializeToString()
    graph_attr = lambda name, g: wire(1, name.encode()) + b"\xa0\x01\x05" + wire(6, g)  # noqa: E731
    for level in range(1, depth):
        node = (wire(1, b"c") + wire(2, f"out{level}".encode()) + wire(3, f"if{level}".encode())
                + wire(4, b"If") + wire(5, graph_attr("then_branch", inner))
                + wire(5, graph_attr("else_branch", leaf)))
        top = level == depth - 1
        outputs = vi("y" if top else f"out{level}", [4]).SerializeToString()
        if top:
            node = node.replace(wire(2, f"out{level}".encode()), wire(2, b"y"))
        inner = wire(1, node) + wire(2, f"level{level}".encode()) + wire(12, outputs)
    inputs = b"".join(wire(11, v.SerializeToString()) for v in [vi("c", [], T.BOOL), vi("x", [4])])
    opset = h.make_opsetid("", 13).SerializeToString()
    return b"\x08\x08" + wire(8, opset) + wire(7, inner + inputs)


def control_flow():
    """Issue 43: If, Loop and Scan models that must be refused naming the node,
    never hang, overflow the stack or exhaust memory."""
    x = [vi("x", [4])]
    y = [vi("y", None)]

    def body(nodes, inputs, outputs):
        return h.make_graph(nodes, "body", inputs, outputs)

    # A scan output of 2^62 iterations is refused at import: its shape is static.
    grows = body([h.make_node("Add", ["v_in", "v_in"], ["v_out"]),
                  h.make_node("Identity", ["v_out"], ["row"]),
                  h.make_node("Identity", ["c_in"], ["c_out"])],
                 [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("v_in", [4])],
                 [vi("c_out", [], T.BOOL), vi("v_out", [4]), vi("row", [4])])
    refused("loop_trip_count_2pow62_scan_output",
            [h.make_node("Loop", ["M", "", "x"], ["y", "rows"], name="grow_forever", body=grows)],
            x, [vi("y", None), vi("rows", None)],
            "layer 'grow_forever' (Loop #0): output shape [4611686018427387904, 4] overflows",
            [ints("M", 2**62)], opset=17)
    # 2^32 rows of 16 bytes: countable, but past the memory budget.
    refused("loop_trip_count_2pow32_scan_output",
            [h.make_node("Loop", ["M", "", "x"], ["y", "rows"], name="grow_large", body=grows)],
            x, [vi("y", None), vi("rows", None)],
            "layer 'grow_large' (Loop #0): output 1 f32[4294967296, 4] would need 68719476736 bytes (64.0 GiB), more than the memory limit",
            [ints("M", 2**32)], opset=17)
    # No trip count and a condition that stays true: stopped by the iteration limit.
    forever = body([h.make_node("Add", ["v_in", "v_in"], ["v_out"]),
                    h.make_node("Identity", ["c_in"], ["c_out"])],
                   [vi("i", [], T.INT64), vi("c_in", [], T.BOOL), vi("v_in", [4])],
                   [vi("c_out", [], T.BOOL), vi("v_out", [4])])
    true = nh.from_array(np.array(True), "go")
    save("loop_without_end", [h.make_node("Loop", ["", "go", "x"], ["y"], name="spin", body=forever)],
         x, [vi("y", [4])], [true], opset=17)
    case("loop_without_end", "no panic", ["run", "{dir}/loop_without_end.onnx"], 1,
         stderr="the loop ran 100000 iterations without ending", bounds=RUN)
    # If nested 2000 deep: refused by the depth limit before decoding. Written
    # on the wire by hand: protobuf's Python library refuses to build it.
    (OUT / "if_nested_2000_deep.onnx").write_bytes(nested_ifs(2000))
    case("if_nested_2000_deep", "no panic", ["run", "{dir}/if_nested_2000_deep.onnx"], 1,
         stderr="node #0 ('if1983') holds subgraphs nested deeper than 16 levels")
    # Branches that disagree in output count, and in element type.
    two = h.make_graph([h.make_node("Neg", ["x"], ["a"]), h.make_node("Abs", ["x"], ["b"])],
                       "then", [], [vi("a", [4]), vi("b", [4])])
    one = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", [4])])
    refused("if_branches_disagree_in_count",
            [h.make_node("If", ["c"], ["y"], name="pick", then_branch=two, else_branch=one)],
            [vi("c", [], T.BOOL), *x], y, "then_branch computes 2 outputs, else_branch 1")
    ints_out = h.make_graph([h.make_node("Cast", ["x"], ["e"], to=T.INT64)], "else", [],
                            [vi("e", [4], T.INT64)])
    refused("if_branches_disagree_in_dtype",
            [h.make_node("If", ["c"], ["y"], name="pick", then_branch=one, else_branch=ints_out)],
            [vi("c", [], T.BOOL), *x], y, "in then_branch ('e') but i64 in else_branch")
    # Scan inputs of 3 and 4 rows.
    rows = body([h.make_node("Add", ["s_in", "a"], ["s_mid"]), h.make_node("Add", ["s_mid", "b"], ["s_out"])],
                [vi("s_in", [2]), vi("a", [2]), vi("b", [2])], [vi("s_out", [2])])
    refused("scan_lengths_disagree",
            [h.make_node("Scan", ["s0", "p", "q"], ["y"], name="walk", body=rows, num_scan_inputs=2)],
            [vi("s0", [2]), vi("p", [3, 2]), vi("q", [4, 2])], y,
            "the scan inputs disagree in length: 'p' has 3", opset=17)


def for_rust():
    """Models the Rust test puts hostile files beside."""
    save("tiny", [h.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])])
    external("ext_ok", "w.bin", np.full(8, 0.5, np.float32).tobytes())
    for name in ["ext_fifo", "ext_to_dev_zero", "ext_directory"]:
        external(name, "w.bin")
    external("ext_absolute", "/etc/hostname")
    external("ext_parent", "../w.bin")


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    panics()
    planners()
    recorded()
    control_flow()
    for_rust()
    (OUT / "cases.json").write_text(json.dumps(CASES, indent=1) + "\n")
    print(f"{len(CASES)} cases in {OUT}")


if __name__ == "__main__":
    main()
