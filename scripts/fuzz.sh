#!/usr/bin/env bash
# Runs each cargo-fuzz target for a bounded time (default 600 s each, one after the
# other): the ONNX importer, the TFLite importer and the rules parser.
#
#   scripts/fuzz.sh [seconds-per-target] [target...]
#
# With a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`) it runs the
# coverage-guided libFuzzer targets: inputs that grow coverage go to
# fuzz/corpus/<target>/ (commit the small ones). Without them it runs the stable
# mutation fuzzer of tests/bad_input/fuzz_regressions.rs (timed_mutation_fuzzing) over the
# same harness, seeded by the corpus and the bundled models. Either way a crash
# is saved under fuzz/artifacts/<target>/ and the script exits non-zero. Copy a
# crash into fuzz/regressions/<target>/ once fixed: tests/bad_input/fuzz_regressions.rs
# replays them.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(onnx_import tflite_import rules_parse)
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz (nightly) not found: running the stable mutation fuzzer"
    cd ..
    targets_csv=$(IFS=,; echo "${targets[*]}")
    exec env LAYOUTOPT_FUZZ_SECONDS="$secs" LAYOUTOPT_FUZZ_TARGETS="$targets_csv" \
        cargo test --release --test bad_input -- --ignored --nocapture \
        timed_mutation_fuzzing
fi
cargo +nightly fuzz build -O
status=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    echo "== $t: ${secs}s"
    log="artifacts/$t/last_run.log"
    # -rss_limit_mb: the importers must refuse huge models, not allocate them.
    set +e
    cargo +nightly fuzz run -O "$t" "corpus/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -max_len=1048576 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|SUMMARY|panicked" "$log" || true
    if [ $rc -ne 0 ]; then
        echo "!! $t exited $rc (a crash?): see fuzz/artifacts/$t/ and $log" >&2
        status=1
    fi
done
exit $status
