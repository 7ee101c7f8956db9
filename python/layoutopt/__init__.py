"""layoutopt: graph-level layout planning for neural-network models.

    import layoutopt, numpy as np
    model = layoutopt.load("model.onnx", input_shapes={"input": [1, 3, 224, 224]})
    plan = model.plan(planner="global", target="nchwc")
    compiled = plan.compile(threads=0)
    outputs = compiled.run({"input": np.zeros((1, 3, 224, 224), np.float32)})

A plan's data is the JSON document of ``layoutopt plan --json`` (schema in
docs/json-schema.md of the repository), so the command line and Python agree.

A script written for onnxruntime runs with its import changed:

    import layoutopt as ort
    sess = ort.InferenceSession("model.onnx")
    outputs = sess.run(None, {"input": x})

Its session compiles the model for each new combination of input shapes once
(a model with free dimensions runs at any shape it declares); the layouts planned
at the first shape serve every later one, so those compile without planning.
"""

import enum as _enum
import json as _json
import warnings as _warnings

from . import _native
from ._native import SCHEMA_VERSION, Error

__all__ = [
    "load",
    "Model",
    "Plan",
    "Compiled",
    "InferenceSession",
    "SessionOptions",
    "NodeArg",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "Error",
    "SCHEMA_VERSION",
]


def load(path, input_shapes=None):
    """Imports an ONNX or TFLite model.

    ``input_shapes`` maps graph input names to whole shapes, binding the
    model's symbolic dimensions (a dynamic batch, free H and W).
    """
    shapes = None
    if input_shapes is not None:
        shapes = {name: [int(d) for d in dims] for name, dims in input_shapes.items()}
    return Model(_native.load(str(path), shapes))


class _Wrapped:
    """The Python face of an object of the native module."""

    def __init__(self, native):
        self._native = native


def _native_property(name, doc):
    """A read-only property that is the native object's ``name``."""
    return property(lambda self: getattr(self._native, name), doc=doc)


class Model(_Wrapped):
    """An imported model: its interface, and ``plan`` to plan its layouts."""

    inputs = _native_property("inputs", 'The graph inputs: a list of {"name", "dtype", "shape"}.')
    outputs = _native_property("outputs", 'The graph outputs: a list of {"name", "dtype", "shape"}.')

    def plan(self, planner="global", target="nchwc", pinned=None):
        """Plans every tensor's layout.

        ``planner``: keep, local, greedy or global; ``target``: nchw, nhwc,
        nchwc (block width from this CPU) or nchw<x>c. ``pinned`` maps graph
        inputs and outputs to the layout they arrive or leave in (e.g.
        ``{"input": "NHWC"}``: the compiled model then takes that input as an
        array of shape [N, H, W, C]).
        """
        return Plan(self._native.plan(planner, target, pinned))


class Plan(_Wrapped):
    """What a planner decided for a model.

    ``layouts`` maps every model tensor the planned graph keeps to its layout;
    ``tensors`` adds its dtype and shape; ``transforms`` lists the kept layout
    transforms that move data, with their source spans, and ``relabels`` those
    between layouts with the same bytes (no data moves); ``solver`` is the global planner's
    account (None for the others); ``document`` is the whole JSON document.
    """

    def __init__(self, native):
        super().__init__(native)
        self.document = _json.loads(native.to_json())
        self.planner = self.document["planner"]
        self.target = self.document["target"]
        self.tensors = self.document["tensors"]
        self.layouts = {name: t["layout"] for name, t in self.tensors.items()}
        self.transforms = self.document["transforms"]
        self.relabels = self.document["relabels"]
        self.solver = self.document["solver"]
        self.estimated_cost_ns = self.document["estimated_cost_ns"]

    def to_json(self):
        """The plan as the JSON document of ``layoutopt plan --json``."""
        return self._native.to_json()

    def layout_of(self, name):
        """The layout of the model tensor ``name``; None if planning folded it away."""
        return self._native.layout_of(name)

    def compile(self, threads=0):
        """Compiles the planned model for this CPU (threads: 0 = one per core)."""
        return Compiled(self._native.compile(int(threads)))

    def export(self, path, force=False):
        """Writes the planned graph as an ONNX model; returns the export document."""
        return _json.loads(self._native.export(str(path), force))

    def explore(self, path, against="local", force=False):
        """Writes an HTML explorer of this plan beside the ``against`` planner's."""
        self._native.explore(str(path), against, force)

    def __repr__(self):
        return "<layoutopt.Plan {} for {}: {} transforms, {} relabels>".format(
            self.planner,
            self.target,
            self.document["transform_count"],
            self.document["relabel_count"],
        )


class Compiled(_Wrapped):
    """A planned model compiled for this CPU."""

    threads = _native_property("threads", "Worker threads the model runs on.")

    def run(self, inputs):
        """Runs the model on {input name: numpy array}; returns {output name: array}.

        A C-contiguous float32 array is read in place; float32 outputs are
        arrays over the runtime's own buffers (no copies).
        """
        return self._native.run(inputs)


# onnxruntime's names of the element types ("tensor(float)").
_ONNX_TYPE_NAMES = {
    "f32": "float",
    "f16": "float16",
    "bf16": "bfloat16",
    "f64": "double",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "u64": "uint64",
    "u32": "uint32",
    "u16": "uint16",
    "u8": "uint8",
    "i4": "int4",
    "u4": "uint4",
    "bool": "bool",
    "f8e4m3fn": "float8e4m3fn",
    "f8e4m3fnuz": "float8e4m3fnuz",
    "f8e5m2": "float8e5m2",
    "f8e5m2fnuz": "float8e5m2fnuz",
}


class GraphOptimizationLevel(_enum.IntEnum):
    """onnxruntime's optimization levels, accepted for its scripts; layoutopt
    always plans and rewrites the whole graph."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(_enum.IntEnum):
    """onnxruntime's execution modes, accepted for its scripts; layoutopt runs
    its steps in order, each across the worker threads."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """The options of an :class:`InferenceSession`, as onnxruntime names them.

    ``intra_op_num_threads`` is the number of worker threads (0: one per
    core). The other attributes onnxruntime scripts set are kept so that such
    a script runs unchanged, but have no effect on layoutopt.
    """

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.log_severity_level = 2
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_profiling = False
        self._config = {}

    def add_session_config_entry(self, key, value):
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key):
        return self._config[str(key)]


class NodeArg:
    """An input or output of a session: ``name``, ``shape`` (a symbolic
    dimension as its name, a free one as None) and ``type``
    (e.g. ``"tensor(float)"``), as onnxruntime's NodeArg."""

    def __init__(self, declared):
        self.name = declared["name"]
        self.shape = declared["shape"]
        dtype = declared["dtype"]
        self.type = None if dtype is None else "tensor({})".format(_ONNX_TYPE_NAMES[dtype])

    def __repr__(self):
        return "NodeArg(name={!r}, type={!r}, shape={!r})".format(self.name, self.type, self.shape)


def _bounds_text(input_shapes):
    """``{"x": [1, 3, (32, 1024)]}`` as ``{"x": "1,3,32..1024"}``, the
    ``--input-shape`` form; None stays None."""
    if input_shapes is None:
        return None

    def dim(d):
        if isinstance(d, (tuple, list)):
            lo, hi = d
            return "{}..{}".format(int(lo), int(hi))
        return str(int(d))

    return {str(name): ",".join(dim(d) for d in dims) for name, dims in input_shapes.items()}


class InferenceSession:
    """A model ready to run, in the shape of onnxruntime's InferenceSession.

    ``sess_options``: a :class:`SessionOptions` (its ``intra_op_num_threads``
    sets the worker threads). ``providers``: accepted for onnxruntime
    scripts; layoutopt runs on this CPU, and warns of any other provider
    asked for. layoutopt's own options are keyword arguments: ``planner``
    (keep, local, greedy, global), ``target`` (nchw, nhwc, nchwc, nchw<x>c),
    ``isa`` (avx512, avx2, portable), ``memory_limit`` (bytes or e.g. "8G",
    for this process), ``max_shapes`` (compiled shapes kept) and
    ``input_shapes``: bounds on input shapes, by input name, each dimension an
    int or an inclusive range ``(lo, hi)``, e.g. ``{"x": [1, 3, (32, 1024),
    (32, 1024)]}``. A shape outside them is refused; when they bound every
    free dimension, the session plans and compiles ahead at the largest.

    A model whose inputs are all static is compiled here; one with free
    dimensions is compiled at each new combination of input shapes, once,
    with the layouts planned at the first.
    """

    def __init__(
        self,
        path_or_bytes,
        sess_options=None,
        providers=None,
        provider_options=None,
        planner="global",
        target="nchwc",
        isa=None,
        memory_limit=None,
        max_shapes=8,
        input_shapes=None,
    ):
        if isinstance(path_or_bytes, (bytes, bytearray)):
            raise ValueError("InferenceSession: give the model's path (bytes are not read)")
        for p in providers or []:
            name = p[0] if isinstance(p, tuple) else p
            if name != "CPUExecutionProvider":
                _warnings.warn(
                    "layoutopt runs on this CPU; provider {!r} is not used".format(name),
                    stacklevel=2,
                )
        options = sess_options if sess_options is not None else SessionOptions()
        if memory_limit is not None:
            _native.set_memory_limit(str(memory_limit))
        self._options = options
        self._path = str(path_or_bytes)
        self._native = _native.open_session(
            self._path,
            threads=int(options.intra_op_num_threads),
            planner=planner,
            target=target,
            isa=isa,
            max_shapes=int(max_shapes),
            input_shapes=_bounds_text(input_shapes),
        )
        self._inputs = [NodeArg(d) for d in self._native.inputs]
        self._outputs = [NodeArg(d) for d in self._native.outputs]
        self.last_compile_seconds = 0.0

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_providers(self):
        return ["CPUExecutionProvider"]

    def get_session_options(self):
        return self._options

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model on ``input_feed`` ({input name: numpy array}) and
        returns the outputs named in ``output_names`` (None: all), in that
        order. ``last_compile_seconds`` then tells how long this run spent
        compiling for new input shapes (0.0 when they were seen before; NaN
        for a model run in stages, cut before an op whose output shape
        depends on values, whose later stages compile as extents come)."""
        outputs, self.last_compile_seconds = self._native.run(dict(input_feed))
        if output_names is None:
            output_names = [o.name for o in self._outputs]
        missing = [n for n in output_names if n not in outputs]
        if missing:
            raise ValueError(
                "run: the model has no output {} (its outputs: {})".format(
                    ", ".join(repr(n) for n in missing), [o.name for o in self._outputs]
                )
            )
        return [outputs[n] for n in output_names]

    @property
    def compiled_shapes(self):
        """The input shapes compiled and kept, the most recently used last."""
        return self._native.compiled_shapes
