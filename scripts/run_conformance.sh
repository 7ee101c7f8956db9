#!/usr/bin/env bash
# Re-export the ONNX backend node test cases into tests/onnx_node/ (idempotent: the same
# bytes every run) and run the conformance test over them. Extra arguments go to the
# test binary after the filter that picks the conformance tests, e.g.
# `scripts/run_conformance.sh --skip compiled`.
# Needs the Python packages of scripts/requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/export_onnx_conformance.py
cargo test --release --test integration -- --nocapture onnx_conformance:: "$@"
