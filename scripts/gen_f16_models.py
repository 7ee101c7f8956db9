"""Half-precision variants of bundled ONNX models: models/<name>_f16.

Every float32 initializer, input, output and value_info of models/<name>/model.onnx
becomes float16; the input is the float32 test input rounded to float16, and the
reference output comes from onnxruntime running the float16 model (graph
optimizations disabled, one thread). Run after scripts/gen_models.py.
"""

import argparse
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper

MODELS = Path(__file__).resolve().parent.parent / "models"


def to_f16(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    onnx.checker.check_model(m, full_check=True)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=["resnet_small", "mobilenet_small"])
    for name in ap.parse_args().names:
        src = MODELS / name
        model = to_f16(onnx.load(src / "model.onnx"))
        x = numpy_helper.to_array(onnx.load_tensor(src / "test_data_set_0" / "input_0.pb")).astype(np.float16)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        (y,) = sess.run(None, {model.graph.input[0].name: x})
        out = MODELS / f"{name}_f16"
        data = out / "test_data_set_0"
        data.mkdir(parents=True, exist_ok=True)
        (out / "model.onnx").write_bytes(model.SerializeToString())
        (data / "input_0.pb").write_bytes(numpy_helper.from_array(x, model.graph.input[0].name).SerializeToString())
        (data / "output_0.pb").write_bytes(numpy_helper.from_array(y, model.graph.output[0].name).SerializeToString())
        print(f"{out.name}: output {y.dtype} {y.shape}, max |y| {np.abs(y).max():.3g}")


if __name__ == "__main__":
    main()
