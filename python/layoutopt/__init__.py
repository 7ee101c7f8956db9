"""layoutopt: graph-level layout planning for neural-network models.

    import layoutopt, numpy as np
    model = layoutopt.load("model.onnx", input_shapes={"input": [1, 3, 224, 224]})
    plan = model.plan(planner="global", target="nchwc")
    compiled = plan.compile(threads=0)
    outputs = compiled.run({"input": np.zeros((1, 3, 224, 224), np.float32)})

A plan's data is the JSON document of ``layoutopt plan --json`` (schema in
docs/json-schema.md of the repository), so the command line and Python agree.
"""

import json as _json

from . import _native
from ._native import SCHEMA_VERSION, Error

__all__ = ["load", "Model", "Plan", "Compiled", "Error", "SCHEMA_VERSION"]


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
