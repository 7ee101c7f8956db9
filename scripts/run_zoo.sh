#!/usr/bin/env bash
# Builds layoutopt and runs the real-model suite table (scripts/run_zoo.py). The suite
# itself comes from scripts/gen_zoo.py; both use .venv-zoo (made here on first use).
#   scripts/run_zoo.sh [--zoo models/zoo] [--rounds 3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-zoo"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet -r "$root/scripts/requirements-zoo.txt"
fi
cargo build --release --quiet --manifest-path "$root/Cargo.toml" --bin layoutopt
cd "$root"
exec "$venv/bin/python" scripts/run_zoo.py "$@"
