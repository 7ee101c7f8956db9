#!/usr/bin/env bash
# Times layoutopt, onnxruntime and tract side by side (same model, input and
# thread count) and prints one table. Creates .venv-compare on first use.
#   scripts/compare_runtimes.sh [--threads N] [--runs N] MODEL.onnx...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-compare"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet onnxruntime tract onnx numpy
fi
cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin layoutopt
exec "$venv/bin/python" "$root/scripts/compare_runtimes.py" --layoutopt "$root/target/release/layoutopt" "$@"
