#!/usr/bin/env bash
# Builds the Rust framework adapters (burn_bn, candle_bn, burn_family, candle_family; their own
# cargo workspace, target dir adapters/rust/target) and judges each with `bnconf check --exec`
# on the default suite (the BatchNorm ones) or `--family all` (the normalization-family ones),
# f32 and f64. Writes adapters/results/<adapter>-<dtype>.json (--report, committed) and
# .txt (the printed table, git-ignored).
#
# Usage: bash adapters/rust/run.sh [BNCONF]
#   BNCONF: a bnconf binary with `check --exec` (default: found as adapters/run_all.sh does:
#   $CARGO_TARGET_DIR/release/bnconf, target/release/bnconf, /work/target-adapters/release/bnconf,
#   /work/target-rustpeers/release/bnconf).
# Exits non-zero only if a build failed or the harness itself failed (status 2+); a 1 from
# `bnconf check` means the framework does not conform somewhere, which is a finding.
set -uo pipefail
cd "$(dirname "$0")/../.."
BNCONF=${1:-${BNCONF:-}}
usable() { [ -x "$1" ] && "$1" check --help 2>/dev/null | grep -q -- '--exec'; }
if [ -z "$BNCONF" ]; then
  for c in ${CARGO_TARGET_DIR:+"$CARGO_TARGET_DIR/release/bnconf"} target/release/bnconf \
           /work/target-adapters/release/bnconf /work/target-rustpeers/release/bnconf; do
    if usable "$c"; then BNCONF=$c; break; fi
  done
fi
usable "$BNCONF" || { echo "run.sh: no working bnconf binary with 'check --exec' (pass BNCONF)" >&2; exit 2; }
echo "bnconf: $BNCONF"
cargo build --release --locked --manifest-path adapters/rust/Cargo.toml \
  --target-dir adapters/rust/target --bin burn_bn --bin candle_bn --bin burn_family --bin candle_family || {
  echo "run.sh: cargo build of adapters/rust failed" >&2; exit 2; }
mkdir -p adapters/results
worst=0
for adapter in burn_bn candle_bn burn_family candle_family; do
  case $adapter in *_family) fam=(--family all) ;; *) fam=() ;; esac
  for dtype in f32 f64; do
    base=adapters/results/$adapter-$dtype
    "$BNCONF" check "${fam[@]}" --suite default --dtype "$dtype" --exec "adapters/rust/target/release/$adapter" \
      --report "$base.json" > "$base.txt" 2> "$base.stderr.txt"
    rc=$?
    echo "$adapter $dtype: exit $rc ($(tail -n1 "$base.txt"))"
    if [ "$rc" -ge 2 ]; then worst=$rc; cat "$base.stderr.txt" >&2; fi
  done
done
exit $worst
