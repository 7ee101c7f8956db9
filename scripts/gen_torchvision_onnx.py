#!/usr/bin/env python3
"""Export torchvision models to ONNX as PyTorch's exporter writes them, with
their random initial weights (no download): the CNN families of the real-model
suite that Keras lacks (grouped convolutions, channel shuffles, squeeze-excite).
Needs torch and torchvision, so it runs where a CPU build of torch imports.

    python3 scripts/gen_torchvision_onnx.py OUT_DIR [NAME...]

Writes OUT_DIR/NAME/model.onnx at batch 1 and 224x224 (opset 17).
"""

import sys
from pathlib import Path

import torch
import torchvision

DEFAULT = ["resnet50", "resnext50_32x4d", "regnet_y_800mf", "mobilenet_v3_large",
           "efficientnet_b0", "shufflenet_v2_x1_0", "convnext_tiny", "squeezenet1_1"]


def export(name: str, out: Path) -> None:
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.rand(1, 3, 224, 224)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.onnx"
    with torch.no_grad():
        try:
            torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False,
                              input_names=["input"], output_names=["output"])
        except TypeError:  # a torch without the `dynamo` switch
            torch.onnx.export(model, (x,), str(path), opset_version=17,
                              input_names=["input"], output_names=["output"])


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    for name in sys.argv[2:] or DEFAULT:
        try:
            export(name, out / name)
            print(f"{name}: {(out / name / 'model.onnx').stat().st_size >> 20} MiB", flush=True)
        except Exception as e:  # one failed export does not stop the others
            print(f"{name}: export failed: {e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
