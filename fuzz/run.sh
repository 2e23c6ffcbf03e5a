#!/usr/bin/env bash
# Build the fuzz targets with a nightly toolchain (SanitizerCoverage, libFuzzer; no cargo-fuzz
# needed) and run each for SECONDS: `fuzz/run.sh [SECONDS] [TARGET...]` (default 60 s, all
# targets). New inputs go to a scratch corpus (the committed fuzz/corpus/ is only read);
# crashes, timeouts (a unit over TIMEOUT seconds, default 2) and OOMs (over 2048 MB) are
# written to fuzz/artifacts/ and fail the run. See docs/FUZZ.md.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-60}"
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(case_parser npy_reader exact_parser kernel_outputs suite_manifest expectations)
timeout_s="${TIMEOUT:-2}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# --target keeps the instrumentation away from build scripts and proc macros.
cargo +nightly build --release --target "$triple" --bins
bin="${CARGO_TARGET_DIR:-target}/$triple/release"
# kernel_outputs and suite_manifest write a protocol directory per unit under TMPDIR; where
# the disk's syncs are slow, that and not the CPU sets the pace (measured here: 68 executions/s
# on the disk, 7000/s on tmpfs). The fuzzers (not the build) use /dev/shm when TMPDIR is unset.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi
mkdir -p artifacts
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
    mkdir -p "$scratch/$t"
    t_s="$timeout_s"
    # A manifest may name a whole suite: regenerating the default suite in f16 takes about
    # 5 s in this instrumented build (bounded by the suite, not by the input), so this target
    # gets SUITE_TIMEOUT (default 20 s); the others stay at TIMEOUT.
    [ "$t" = suite_manifest ] && t_s="${SUITE_TIMEOUT:-20}"
    echo "fuzz: $t for ${secs} s (-timeout=${t_s})"
    "$bin/$t" -max_total_time="$secs" -timeout="$t_s" -rss_limit_mb=2048 -max_len=8192 \
        -print_final_stats=1 -artifact_prefix="artifacts/$t-" "$scratch/$t" "corpus/$t" </dev/null
done
