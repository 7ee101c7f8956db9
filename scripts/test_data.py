"""A model with recorded inputs and outputs, written in the ONNX backend test-data layout
(`model.onnx` and `test_data_set_0/{input,output}_<i>.pb`) that the Rust tests read."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def write_case(case: Path, model: onnx.ModelProto, inputs: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
    """Replaces the folder `case` with `model` and its named inputs and outputs, in order."""
    if case.exists():
        shutil.rmtree(case)
    data = case / "test_data_set_0"
    data.mkdir(parents=True)
    (case / "model.onnx").write_bytes(model.SerializeToString())
    for kind, values in (("input", inputs), ("output", outputs)):
        for i, (name, value) in enumerate(values.items()):
            (data / f"{kind}_{i}.pb").write_bytes(numpy_helper.from_array(value, name).SerializeToString())
