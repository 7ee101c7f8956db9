#!/usr/bin/env python3
"""Export the ONNX backend node test cases that layoutopt's op set can express.

Run from the repository root (Python packages: scripts/requirements.txt):

    python3 scripts/export_onnx_conformance.py

It regenerates the cases in tests/onnx_node/ from scratch (same bytes every run): one directory per
case, `model.onnx` + `test_data_set_0/{input,output}_<i>.pb` (serialized TensorProto
named after the graph input/output), plus
  - SKIPPED.md: every other case of the suite (op, dtype or feature not supported), with the reason;
  - cases.tsv: every exported case with its op, opsets, tolerances and how it was checked;
and prints the counts. The cases come from onnx's own generator
(onnx.backend.test.case.node.collect_testcases); their expected outputs are onnx's numpy
reference implementations, not onnxruntime.

A case is exported when all its nodes, those of its subgraphs included, are supported ops
of the default or ai.onnx.preview domain, and all its inputs/outputs (a subgraph's too) are tensors of
supported dtypes. A case keeps its
own opset when the importer reads it (`MIN_OPSET`..`MAX_OPSET` in src/frontend/onnx.rs);
one outside that range is converted to the nearest end with onnx.version_converter (or
restamped where it lacks an adapter), and kept only if onnxruntime or onnx.reference then
reproduces the expected outputs, which shows the conversion kept the meaning. Every
exported case is run through both oracles; cases.tsv records which of them reproduce it.
"""

from __future__ import annotations

import collections
import re
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper, version_converter
from onnx.reference import ReferenceEvaluator

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "onnx_node"



def supported_ops() -> dict[str, frozenset[str]]:
    """The importer's own lists by domain (`SUPPORTED` for the default domain and
    `SUPPORTED_PREVIEW` for ai.onnx.preview, in src/frontend/onnx/ops/mod.rs, which
    its registry test keeps equal to the registered ops), so the two never drift."""
    path = REPO / "src" / "frontend" / "onnx" / "ops" / "mod.rs"
    text = path.read_text()
    ops = {}
    for domain, name in (("", "SUPPORTED"), ("ai.onnx.preview", "SUPPORTED_PREVIEW")):
        body = re.search(rf"const {name}: &\[&str\] = &\[(.*?)\];", text, re.S)
        if body is None:
            sys.exit(f"{name} not found in {path}")
        ops[domain] = frozenset(re.findall(r'"(\w+)"', body.group(1)))
    return ops


SUPPORTED_BY_DOMAIN = supported_ops()
SUPPORTED_OPS = frozenset().union(*SUPPORTED_BY_DOMAIN.values())
SUPPORTED_DTYPES = frozenset(
    [
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.BFLOAT16,
        TensorProto.FLOAT8E4M3FN,
        TensorProto.FLOAT8E4M3FNUZ,
        TensorProto.FLOAT8E5M2,
        TensorProto.FLOAT8E5M2FNUZ,
        TensorProto.DOUBLE,
        TensorProto.INT64,
        TensorProto.INT32,
        TensorProto.INT16,
        TensorProto.INT8,
        TensorProto.UINT64,
        TensorProto.UINT32,
        TensorProto.UINT16,
        TensorProto.UINT8,
        TensorProto.INT4,
        TensorProto.UINT4,
        TensorProto.BOOL,
    ]
)

# What an inference compiler of numeric tensors leaves out, with why. SKIPPED.md
# marks these cases "out of scope"; every other unsupported case is work to do.
OUT_OF_SCOPE_OPS = {
    **dict.fromkeys(["Adagrad", "Adam", "Momentum"], "a training optimizer's update step"),
    **dict.fromkeys(
        ["Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"],
        "draws random numbers, so no output can be checked",
    ),
    **dict.fromkeys(["StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch"], "string tensors"),
    **dict.fromkeys(
        ["ArrayFeatureExtractor", "Binarizer", "LabelEncoder", "TreeEnsemble"],
        "the ai.onnx.ml domain of classical machine learning",
    ),
    "ImageDecoder": "decodes image files, a codec rather than a tensor op",
}
OUT_OF_SCOPE_DTYPES = {
    TensorProto.STRING: "string tensors",
    TensorProto.INT2: "2-bit integers",
    TensorProto.UINT2: "2-bit integers",
    TensorProto.FLOAT4E2M1: "4-bit floats",
    TensorProto.FLOAT8E8M0: "exponent-only 8-bit scales",
    TensorProto.COMPLEX64: "complex numbers",
    TensorProto.COMPLEX128: "complex numbers",
}


def dtype_skip(dtype: int, what: str) -> Skip:
    """The Skip of a case needing `dtype`, out of scope where its family is."""
    family = OUT_OF_SCOPE_DTYPES.get(dtype)
    if family is not None:
        return Skip("dtype out of scope", f"{family}: {what}")
    return Skip("unsupported dtype", what)


def importer_opsets() -> tuple[int, int]:
    """The importer's own opset range (`MIN_OPSET`, `MAX_OPSET` in src/frontend/onnx.rs)."""
    path = REPO / "src" / "frontend" / "onnx.rs"
    text = path.read_text()
    found = [re.search(rf"pub const {name}: i64 = (\d+);", text) for name in ("MIN_OPSET", "MAX_OPSET")]
    if None in found:
        sys.exit(f"MIN_OPSET/MAX_OPSET not found in {path}")
    return int(found[0].group(1)), int(found[1].group(1))


OPSET_MIN, OPSET_MAX = importer_opsets()
# Large enough for the 3-D pooling cases (1x3x32x32x32 in and out, 750 kB each).
MAX_CASE_BYTES = 800_000
MAX_TOTAL_BYTES = 12_000_000


class Skip(Exception):
    """A case that is not exported: `kind` groups the reasons in the summary,
    str(self) is the one-line reason for SKIPPED.md."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


@dataclass
class Exported:
    name: str
    op: str
    source_opset: int
    model: onnx.ModelProto
    inputs: list[TensorProto]
    outputs: list[TensorProto]
    rtol: float
    atol: float
    check: str  # how the exported model was checked against the expected outputs


def dtype_name(t: int) -> str:
    return TensorProto.DataType.Name(t)


def default_opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def check_nodes(graph: onnx.GraphProto, unsupported: set[str]) -> None:
    """Raise Skip for a node of `graph` or of its subgraphs (If, Loop and Scan
    bodies) that we cannot run; collect unsupported op types."""
    for n in graph.node:
        domain = "" if n.domain == "ai.onnx" else n.domain
        if domain not in SUPPORTED_BY_DOMAIN:
            raise Skip("op outside the supported domains", f"{n.domain}.{n.op_type}")
        if n.op_type not in SUPPORTED_BY_DOMAIN[domain]:
            unsupported.add(n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                check_subgraph_values(a.g)
                check_nodes(a.g, unsupported)
            # Element types the graph creates internally must be supported too.
            if n.op_type == "Cast" and a.name == "to" and a.i not in SUPPORTED_DTYPES:
                raise dtype_skip(a.i, f"Cast to {dtype_name(a.i)}")
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type not in SUPPORTED_DTYPES:
                raise dtype_skip(a.t.data_type, f"{n.op_type} {a.name} of {dtype_name(a.t.data_type)}")


def check_subgraph_values(graph: onnx.GraphProto) -> None:
    """Subgraphs pass tensors only (no sequences or optionals)."""
    for vi in [*graph.input, *graph.output]:
        kind = vi.type.WhichOneof("value")
        if kind not in (None, "tensor_type"):
            raise Skip("non-tensor subgraph value", f"{vi.name} is a {kind.removesuffix('_type')}")


def check_graph(model: onnx.ModelProto) -> None:
    """Raise Skip unless every node is a supported op we can run."""
    if model.functions:
        raise Skip("model-local functions")
    unsupported = set()
    check_nodes(model.graph, unsupported)
    if unsupported:
        raise Skip("expansion uses unsupported ops", ", ".join(sorted(unsupported)))


def check_value_types(model: onnx.ModelProto) -> None:
    for vi in [*model.graph.input, *model.graph.output]:
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            raise Skip("non-tensor input/output", f"{vi.name} is a {kind.removesuffix('_type')}")
        if vi.type.tensor_type.elem_type not in SUPPORTED_DTYPES:
            elem = vi.type.tensor_type.elem_type
            raise dtype_skip(elem, f"{vi.name} is {dtype_name(elem)}")


def to_tensors(values, infos) -> list[TensorProto]:
    """The data set's values as TensorProtos named after the graph inputs/outputs."""
    values = list(values)
    if len(values) != len(infos):
        raise Skip("data set does not match the graph", f"{len(values)} values for {len(infos)} graph values")
    tensors = []
    for v, info in zip(values, infos, strict=True):
        if isinstance(v, TensorProto):
            t = TensorProto()
            t.CopyFrom(v)
            t.name = info.name
        elif isinstance(v, (np.ndarray, np.generic)):  # np.generic: a numpy scalar, a 0-d tensor
            t = numpy_helper.from_array(np.asarray(v), info.name)
        else:
            raise Skip("non-tensor input/output", f"{info.name} data is a {type(v).__name__}")
        declared = info.type.tensor_type.elem_type
        if t.data_type != declared:
            raise Skip(
                "data set does not match the graph",
                f"{info.name} data is {dtype_name(t.data_type)}, declared {dtype_name(declared)}",
            )
        tensors.append(t)
    return tensors


def check_dropout(model: onnx.ModelProto, inputs: list[TensorProto]) -> None:
    """Training-mode Dropout draws a random mask nobody else can reproduce."""
    feeds = {t.name: t for t in inputs}
    for n in model.graph.node:
        if n.op_type == "Dropout" and len(n.input) > 2 and n.input[2]:
            mode = feeds.get(n.input[2])
            if mode is None or numpy_helper.to_array(mode).any():
                raise Skip("op out of scope", "training-mode Dropout draws a random mask, so no output can be checked")


def run_checks(
    model: onnx.ModelProto, inputs: list[TensorProto], outputs: list[TensorProto], rtol: float, atol: float
) -> list[str]:
    """Which of onnxruntime / onnx.reference reproduce the expected outputs (empty: none)."""
    feeds = {t.name: numpy_helper.to_array(t) for t in inputs}
    expected = [numpy_helper.to_array(t) for t in outputs]
    agreeing = []

    def ort_run():
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = 1
        so.log_severity_level = 4
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)

    def ref_run():
        return ReferenceEvaluator(model).run(None, feeds)

    for name, run in (("onnxruntime", ort_run), ("onnx.reference", ref_run)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # numpy warnings on inf/nan test data
                got = run()
        except Exception:  # noqa: BLE001 - any failure just means this oracle cannot confirm
            continue
        if len(got) == len(expected) and all(
            np.asarray(g).shape == e.shape
            and np.allclose(np.asarray(g, dtype=np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
            for g, e in zip(got, expected, strict=True)
        ):
            agreeing.append(name)
    return agreeing


def convert_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """The model at opset `target`, by onnx.version_converter or, where it has no adapter
    (e.g. GlobalMaxPool 22 -> 21, a bump that only admitted bfloat16), by restamping the
    opset. Either way the result must pass the checker (types and shapes valid at
    `target`); the caller then requires an oracle to reproduce the expected outputs."""
    source = default_opset(model)
    try:
        converted = version_converter.convert_version(model, target)
    except Exception as e:  # noqa: BLE001 - converter failures are C++ asserts of many kinds
        if "No Adapter" not in str(e):
            raise Skip("opset conversion failed", f"{source} -> {target}: {last_line(e)}") from None
        converted = onnx.ModelProto()
        converted.CopyFrom(model)
        next(o for o in converted.opset_import if o.domain in ("", "ai.onnx")).version = target
    # The converter keeps the source IR version; use the one that goes with the target
    # opset (the supported dtypes need no newer IR), as an exporter at that opset would.
    converted.ir_version = onnx.helper.find_min_ir_version_for(converted.opset_import)
    try:
        onnx.checker.check_model(converted, full_check=True)
    except Exception as e:  # noqa: BLE001 - checker and shape-inference errors
        if not ceil_pool_extent_fixed_in_22(converted, source, e):
            raise Skip("opset conversion failed", f"{source} -> {target}: {last_line(e)}") from None
        onnx.checker.check_model(converted)
    check_graph(converted)
    check_value_types(converted)
    return converted


def ceil_pool_extent_fixed_in_22(model: onnx.ModelProto, source: int, e: Exception) -> bool:
    """Whether a checker error is opset 21's pool shape inference disagreeing with the
    declared output shapes of a pool in ceil mode: opset 22 corrected the extent (a
    last window that would start in the end padding is dropped), and onnxruntime and
    onnx.reference compute that extent at opset 21 too. Such a case keeps its declared
    shapes, and an oracle must confirm it."""
    return (
        source >= 22
        and "Inferred shape and existing shape differ" in str(e)
        and all(
            n.op_type in ("AveragePool", "MaxPool") and any(a.name == "ceil_mode" and a.i == 1 for a in n.attribute)
            for n in model.graph.node
        )
    )


def last_line(e: Exception) -> str:
    return str(e).strip().splitlines()[-1][:120]


def export_case(case, op: str) -> Exported:
    model = case.model
    check_graph(model)
    check_value_types(model)
    ((inputs, outputs),) = case.data_sets
    inputs = to_tensors(inputs, model.graph.input)
    outputs = to_tensors(outputs, model.graph.output)
    check_dropout(model, inputs)
    source_opset = default_opset(model)
    if not OPSET_MIN <= source_opset <= OPSET_MAX:
        model = convert_opset(model, OPSET_MAX if source_opset > OPSET_MAX else OPSET_MIN)
    agreeing = run_checks(model, inputs, outputs, case.rtol, case.atol)
    if agreeing:
        check = ", ".join(agreeing)
    elif default_opset(model) != source_opset:
        raise Skip("opset conversion unconfirmed", f"from {source_opset}: no oracle reproduces the expected outputs")
    else:
        check = "none (onnx reference data only)"
    if default_opset(model) != source_opset:
        check += f" (after conversion from opset {source_opset})"
    size = model.ByteSize() + sum(t.ByteSize() for t in [*inputs, *outputs])
    if size > MAX_CASE_BYTES:
        raise Skip(f"larger than {MAX_CASE_BYTES // 1000} kB", f"{size // 1000} kB")
    return Exported(case.name, op, source_opset, model, inputs, outputs, case.rtol, case.atol, check)


def write_case(e: Exported) -> int:
    d = OUT / e.name
    data = d / "test_data_set_0"
    data.mkdir(parents=True)
    (d / "model.onnx").write_bytes(e.model.SerializeToString())
    size = e.model.ByteSize()
    for kind, tensors in (("input", e.inputs), ("output", e.outputs)):
        for i, t in enumerate(tensors):
            (data / f"{kind}_{i}.pb").write_bytes(t.SerializeToString())
            size += t.ByteSize()
    return size


def collect():
    # The generators draw from numpy's global random state: seed it for the same bytes every run.
    np.random.seed(0)
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy overflow warnings from the cast cases
        cases = collect_testcases(None)
    return sorted(cases, key=lambda c: c.name)


def main() -> None:
    cases = collect()
    # Every multi-node case is the function expansion "<base>_expanded[_verN]" of a
    # single-node case: the op under test is that case's op.
    single_op = {c.name: c.model.graph.node[0].op_type for c in cases if len(c.model.graph.node) == 1}

    exported: list[Exported] = []
    skipped: list[tuple[str, str, str, str]] = []  # (name, op, kind, reason)
    unsupported_op = collections.Counter()
    for case in cases:
        op = single_op.get(case.name.split("_expanded")[0], "?")
        if op not in SUPPORTED_OPS:
            unsupported_op[op] += 1
            if op in OUT_OF_SCOPE_OPS:
                skipped.append((case.name, op, "op out of scope", f"op out of scope: {OUT_OF_SCOPE_OPS[op]}"))
            else:
                skipped.append((case.name, op, "unsupported op", f"operator {op} is not supported"))
            continue
        try:
            exported.append(export_case(case, op))
        except Skip as s:
            skipped.append((case.name, op, s.kind, str(s)))

    # Replace the previous export; other files here (.gitattributes) stay.
    for stale in OUT.glob("test_*"):
        shutil.rmtree(stale)
    OUT.mkdir(parents=True, exist_ok=True)
    total = sum(write_case(e) for e in exported)
    if total > MAX_TOTAL_BYTES:
        sys.exit(f"exported cases total {total} bytes, over the {MAX_TOTAL_BYTES} budget")
    write_manifest(exported)
    write_skipped(skipped)

    reasons = collections.Counter(kind for _, _, kind, _ in skipped if kind != "unsupported op")
    n_op = sum(unsupported_op.values())
    print(f"{len(cases)} node cases: {len(exported)} exported ({total / 1e6:.2f} MB), {len(skipped) - n_op} skipped")
    print(f"  {n_op} cases of {len(unsupported_op)} ops outside the supported set")
    converted = sum(1 for e in exported if "conversion" in e.check)
    unconfirmed = sum(1 for e in exported if e.check.startswith("none"))
    print(f"  exported: {converted} converted to opset {OPSET_MAX}/{OPSET_MIN}; {unconfirmed} reproduced by no oracle")
    for kind, k in reasons.most_common():
        print(f"  skipped {k:4d}: {kind}")


def write_manifest(exported: list[Exported]) -> None:
    lines = ["name\top\tsource_opset\topset\trtol\tatol\tchecked_by"]
    for e in exported:
        lines.append(f"{e.name}\t{e.op}\t{e.source_opset}\t{default_opset(e.model)}\t{e.rtol:g}\t{e.atol:g}\t{e.check}")
    (OUT / "cases.tsv").write_text("\n".join(lines) + "\n")


def write_skipped(skipped: list[tuple[str, str, str, str]]) -> None:
    lines = [
        "# Skipped ONNX node test cases",
        "",
        "Generated by `python3 scripts/export_onnx_conformance.py`: every node test case of",
        f"onnx {onnx.__version__} that was not exported, with the reason: its op is not",
        "supported, or the case needs a dtype or feature that is not. The conformance test",
        "counts these as unsupported; those whose reason starts with \"op out of scope\" or",
        "\"dtype out of scope\" are left out by design (training, random numbers, strings,",
        "classical ML, image codecs, sub-byte and complex types), the others are work to do.",
        "",
        "| case | op | reason |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {op} | {reason.replace('|', '/')} |" for name, op, _, reason in skipped]
    (OUT / "SKIPPED.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
