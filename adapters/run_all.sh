#!/usr/bin/env bash
# Judges every adapter in f32 and f64 with `bnconf check --exec` (default suite).
# Writes adapters/results/<adapter>-<dtype>.json (--report) and .txt (the printed table).
# Needs: bash adapters/setup.sh (the venv), and a built bnconf:
#   CARGO_TARGET_DIR=/work/target-adapters cargo build --release -p bnconf
# or point BNCONF at one.  Exits non-zero only if the harness itself failed (status 2+).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-adapters/.venv/bin/python}
BNCONF=${BNCONF:-}
usable() { [ -x "$1" ] && "$1" check --help 2>/dev/null | grep -q -- '--exec'; }
if [ -z "$BNCONF" ]; then
  for c in ${CARGO_TARGET_DIR:+"$CARGO_TARGET_DIR/release/bnconf"} target/release/bnconf /work/target-adapters/release/bnconf; do
    if usable "$c"; then BNCONF=$c; break; fi
  done
fi
usable "$BNCONF" || { echo "run_all.sh: no working bnconf binary with 'check --exec' (set BNCONF=...)" >&2; exit 2; }
echo "bnconf: $BNCONF"
[ -x "$PY" ] || { echo "run_all.sh: no $PY (run bash adapters/setup.sh)" >&2; exit 2; }
mkdir -p adapters/results
worst=0
for adapter in numpy_bn onnxruntime_bn; do
  for dtype in f32 f64; do
    base=adapters/results/$adapter-$dtype
    "$BNCONF" check --suite default --dtype "$dtype" --exec "$PY adapters/$adapter.py" \
      --report "$base.json" > "$base.txt" 2> "$base.stderr.txt"
    rc=$?
    echo "$adapter $dtype: exit $rc ($(tail -n1 "$base.txt"))"
    if [ "$rc" -ge 2 ]; then worst=$rc; cat "$base.stderr.txt" >&2; fi
  done
done
# Diagnostic: ORT in f64 with eps folded into the handed-in variance (see onnxruntime_bn.py),
# to separate the float32 epsilon attribute from ORT's own arithmetic.
base=adapters/results/onnxruntime_bn_epsfold-f64
ORT_BN_EPS=fold "$BNCONF" check --suite default --dtype f64 --ops eval,sync_forward \
  --exec "$PY adapters/onnxruntime_bn.py" --report "$base.json" > "$base.txt" 2> "$base.stderr.txt"
rc=$?
echo "onnxruntime_bn (ORT_BN_EPS=fold) f64 eval,sync_forward: exit $rc ($(tail -n1 "$base.txt"))"
if [ "$rc" -ge 2 ]; then worst=$rc; cat "$base.stderr.txt" >&2; fi
exit $worst
