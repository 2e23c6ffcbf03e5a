#!/usr/bin/env bash
# Judges the adapters in f32 and f64 with `bnconf check --exec` (default suite).
# Writes adapters/results/<adapter>-<dtype>.json (--report, committed) and .txt / .stderr.txt
# (the printed table and the adapter's stderr, git-ignored).
#
# Usage: bash adapters/run_all.sh            numpy_bn, onnxruntime_bn, onnxruntime_family (the cheap set)
#        bash adapters/run_all.sh --heavy    also jax_bn(_stable), flax_bn(_twopass), tf_keras_bn, tf_fused_bn
#                                            (bash adapters/setup.sh --heavy), the Flax family (--flax), and the Rust
#                                            peers through adapters/rust/run.sh if it exists
#        bash adapters/run_all.sh --flax     only Flax's family (jax, jaxlib, flax of requirements-heavy.txt; no
#                                            TensorFlow needed): flax_family (nn.LayerNorm, nn.RMSNorm,
#                                            nn.GroupNorm with Flax's defaults, use_fast_variance=True) and
#                                            flax_family_twopass (FLAX_FAMILY_FAST_VARIANCE=0) in f32, f64, f16,
#                                            bf16, f16+f32, bf16+f32, --family all
#        bash adapters/run_all.sh --torch    also torch_bn, torch_family, torch_compile_family (PyTorch on CPU; setup.sh --torch;
#                                            TORCH_BN_DEVICE=cuda on a GPU machine)
#        bash adapters/run_all.sh --stablehlo  only the StableHLO adapter (bash adapters/setup.sh --stablehlo;
#                                            its venv adapters/.venv-stablehlo): shlo_xla, shlo_iree and
#                                            their diagnostics (docs/ADAPTERS.md, "StableHLO"); with
#                                            --heavy/--torch also the cheap set and those
#        SHLO_ENGINES=xla ... --stablehlo            only the XLA engine (default: "xla iree")
#        bash adapters/run_all.sh --compilers  only the compilers and engines of issue 30 (bash adapters/setup.sh
#                                            --compilers): torch_compile_bn (torch.compile, Inductor's CPU C++),
#                                            openvino_bn (OpenVINO's CPU plugin), tinygrad_bn (tinygrad's CPU
#                                            device, which compiles with clang), paddle_bn (PaddlePaddle's CPU
#                                            kernels; paddle_family: its layer_norm, rms_norm, group_norm in six
#                                            precisions, --family all), tvm_bn (Apache TVM's Relax batch_norm built for the CPU
#                                            with LLVM; tvm_family: its Relax layer_norm, group_norm, rms_norm,
#                                            forward, six precisions, --family all), openvino_family (MVN +
#                                            affine, GroupNormalization; forward, six precisions, --family all),
#                                            and the f32 diagnostic torch_compile_bn_dynamic
#                                            (TORCH_COMPILE_DYNAMIC=1: Dynamo's default dynamic=None); with
#                                            --heavy/--torch also those
#        COMPILER_ADAPTERS="openvino_bn" ... --compilers   only those (default: all nine)
#        bash adapters/run_all.sh --mlx      only MLX on the CPU (bash adapters/setup.sh --mlx): mlx_family
#                                            (mx.fast.layer_norm/rms_norm, nn.GroupNorm as constructed by
#                                            default) and mlx_family_ptc (nn.GroupNorm pytorch_compatible=True,
#                                            group_norm only) in f32, f64, f16, bf16, f16+f32, bf16+f32, and
#                                            mlx_bn (nn.BatchNorm) in the same six
#        bash adapters/run_all.sh --keras    only Keras 3 on its backends (bash adapters/setup.sh --keras):
#                                            keras_family_<backend> (LayerNormalization, RMSNormalization,
#                                            GroupNormalization) in f32, f64, f16, bf16, f16+f32, bf16+f32 and
#                                            keras_bn_<backend> (BatchNormalization) in the same six
#        KERAS_BACKENDS="jax torch" ... --keras   only those backends (default: jax torch tensorflow numpy)
#        bash adapters/run_all.sh --replicated  only the replicated suite (sync BN across real replicas,
#                                            bnconf check --suite replicated --timeout 900): flax_bn_sync(_twopass)
#                                            (jax.pmap, 8 CPU devices), flax_bn_dist (jax.distributed, 2 processes),
#                                            tf_keras_bn_sync (MirroredStrategy), torch_dist_bn and torch_syncbn
#                                            (torch.distributed gloo, one process per rank); needs
#                                            bash adapters/setup.sh --heavy --torch; writes
#                                            adapters/results/<adapter>-replicated-<dtype>.json
#        REPL_ADAPTERS="flax_bn_sync torch_dist_bn" ... --replicated   only those (default: all six)
#        ADAPTERS_HEAVY=1 bash adapters/run_all.sh   same as --heavy
#        RUST_PEERS=0 ... --heavy                    skip adapters/rust/run.sh
# Needs: bash adapters/setup.sh (the venv), and a built bnconf:
#   CARGO_TARGET_DIR=/work/target-adapters cargo build --release -p bnconf
# or point BNCONF at one.  Exits non-zero only if the harness itself failed (status 2+);
# a 1 from `bnconf check` means a kernel does not conform, which is a finding.
set -uo pipefail
cd "$(dirname "$0")/.."
HEAVY=${ADAPTERS_HEAVY:-0}
TORCH=0
STABLEHLO=0
REPLICATED=0
COMPILERS=0
MLX=0
FLAX=0
KERAS=0
for arg in "$@"; do
  case $arg in
    --heavy) HEAVY=1 ;;
    --torch) TORCH=1 ;;
    --stablehlo) STABLEHLO=1 ;;
    --replicated) REPLICATED=1 ;;
    --compilers) COMPILERS=1 ;;
    --mlx) MLX=1 ;;
    --flax) FLAX=1 ;;
    --keras) KERAS=1 ;;
    *) echo "usage: bash adapters/run_all.sh [--heavy] [--torch] [--stablehlo] [--replicated] [--compilers] [--mlx] [--flax] [--keras]" >&2; exit 2 ;;
  esac
done
# --stablehlo alone runs only the StableHLO set (its own venv); the cheap set needs adapters/.venv
MAIN=1
if [ "$STABLEHLO" = 1 ] && [ "$HEAVY" = 0 ] && [ "$TORCH" = 0 ]; then MAIN=0; fi
# --replicated alone runs only the replicated suite, --compilers alone only the compilers
if [ "$REPLICATED" = 1 ] && [ "$STABLEHLO" = 0 ] && [ "$HEAVY" = 0 ] && [ "$TORCH" = 0 ]; then MAIN=0; fi
if [ "$COMPILERS" = 1 ] && [ "$STABLEHLO" = 0 ] && [ "$HEAVY" = 0 ] && [ "$TORCH" = 0 ]; then MAIN=0; fi
if [ "$MLX" = 1 ] && [ "$STABLEHLO" = 0 ] && [ "$HEAVY" = 0 ] && [ "$TORCH" = 0 ]; then MAIN=0; fi
if [ "$FLAX" = 1 ] && [ "$STABLEHLO" = 0 ] && [ "$HEAVY" = 0 ] && [ "$TORCH" = 0 ]; then MAIN=0; fi
# --heavy runs the Flax family too
if [ "$HEAVY" = 1 ]; then FLAX=1; fi
if [ "$KERAS" = 1 ] && [ "$STABLEHLO" = 0 ] && [ "$HEAVY" = 0 ] && [ "$TORCH" = 0 ]; then MAIN=0; fi
PY=${PY:-adapters/.venv/bin/python}
SHLO_PY=${SHLO_PY:-adapters/.venv-stablehlo/bin/python}
SHLO_ENGINES=${SHLO_ENGINES:-xla iree}
BNCONF=${BNCONF:-}
usable() { [ -x "$1" ] && "$1" check --help 2>/dev/null | grep -q -- '--exec'; }
if [ -z "$BNCONF" ]; then
  for c in ${CARGO_TARGET_DIR:+"$CARGO_TARGET_DIR/release/bnconf"} target/release/bnconf /work/target-adapters/release/bnconf; do
    if usable "$c"; then BNCONF=$c; break; fi
  done
fi
usable "$BNCONF" || { echo "run_all.sh: no working bnconf binary with 'check --exec' (set BNCONF=...)" >&2; exit 2; }
if [ "$REPLICATED" = 1 ] && ! "$BNCONF" check --help 2>/dev/null | grep -q -- '--timeout'; then
  echo "run_all.sh: --replicated needs a bnconf with 'check --suite replicated --timeout' ($BNCONF has no --timeout)" >&2
  exit 2
fi
echo "bnconf: $BNCONF"
if [ "$MAIN" = 1 ] || [ "$REPLICATED" = 1 ] || [ "$COMPILERS" = 1 ] || [ "$MLX" = 1 ] || [ "$FLAX" = 1 ] || [ "$KERAS" = 1 ]; then
  [ -x "$PY" ] || { echo "run_all.sh: no $PY (run bash adapters/setup.sh)" >&2; exit 2; }
fi
if [ "$STABLEHLO" = 1 ]; then
  for e in $SHLO_ENGINES; do
    case $e in
      xla) mod=jax ;;
      iree) mod=iree.compiler ;;
      *) echo "run_all.sh: SHLO_ENGINES: unknown engine $e (xla, iree)" >&2; exit 2 ;;
    esac
    [ -x "$SHLO_PY" ] && "$SHLO_PY" -c "import $mod" 2>/dev/null || {
      echo "run_all.sh: --stablehlo needs $mod in $SHLO_PY (run bash adapters/setup.sh --stablehlo)" >&2; exit 2; }
  done
fi
if [ "$HEAVY" = 1 ] && ! "$PY" -c 'import jax, flax, tensorflow' 2>/dev/null; then
  echo "run_all.sh: --heavy needs jax, flax and tensorflow in $PY (run bash adapters/setup.sh --heavy)" >&2
  exit 2
fi
if [ "$TORCH" = 1 ] && ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "run_all.sh: --torch needs torch in $PY (run bash adapters/setup.sh --torch)" >&2
  exit 2
fi
REPL_ADAPTERS=${REPL_ADAPTERS:-flax_bn_sync flax_bn_sync_twopass flax_bn_dist tf_keras_bn_sync torch_dist_bn torch_syncbn}
if [ "$REPLICATED" = 1 ]; then
  mods=""
  case " $REPL_ADAPTERS " in *" flax_bn"*) mods="$mods, jax, flax" ;; esac
  case " $REPL_ADAPTERS " in *" tf_keras"*) mods="$mods, tensorflow, keras" ;; esac
  case " $REPL_ADAPTERS " in *" torch_"*) mods="$mods, torch" ;; esac
  mods=${mods#, }
  if [ -n "$mods" ] && ! "$PY" -c "import $mods" 2>/dev/null; then
    echo "run_all.sh: --replicated ($REPL_ADAPTERS) needs $mods in $PY (run bash adapters/setup.sh --replicated)" >&2
    exit 2
  fi
fi
COMPILER_ADAPTERS=${COMPILER_ADAPTERS:-torch_compile_bn torch_compile_bn_dynamic openvino_bn openvino_family tinygrad_bn paddle_bn paddle_family tvm_bn tvm_family}
if [ "$COMPILERS" = 1 ]; then
  mods=""
  case " $COMPILER_ADAPTERS " in *" torch_compile_bn"*) mods="$mods, torch" ;; esac
  case " $COMPILER_ADAPTERS " in *" openvino_"*) mods="$mods, openvino" ;; esac
  case " $COMPILER_ADAPTERS " in *" tinygrad_bn "*) mods="$mods, tinygrad" ;; esac
  case " $COMPILER_ADAPTERS " in *" paddle_"*) mods="$mods, paddle" ;; esac
  case " $COMPILER_ADAPTERS " in *" tvm_"*) mods="$mods, tvm" ;; esac
  mods=${mods#, }
  if [ -n "$mods" ] && ! "$PY" -c "import $mods" 2>/dev/null; then
    echo "run_all.sh: --compilers ($COMPILER_ADAPTERS) needs $mods in $PY (run bash adapters/setup.sh --compilers)" >&2
    exit 2
  fi
fi
if [ "$MLX" = 1 ] && ! "$PY" -c 'import mlx.core' 2>/dev/null; then
  echo "run_all.sh: --mlx needs mlx in $PY (run bash adapters/setup.sh --mlx)" >&2
  exit 2
fi
if [ "$FLAX" = 1 ] && ! "$PY" -c 'import jax, flax' 2>/dev/null; then
  echo "run_all.sh: --flax needs jax and flax in $PY (run bash adapters/setup.sh --flax or --heavy)" >&2
  exit 2
fi
KERAS_BACKENDS=${KERAS_BACKENDS:-jax torch tensorflow numpy}
if [ "$KERAS" = 1 ]; then
  for b in $KERAS_BACKENDS; do
    case $b in
      jax|torch|tensorflow) mod=$b ;;
      numpy) mod=numpy ;;
      *) echo "run_all.sh: KERAS_BACKENDS: unknown backend $b (jax, torch, tensorflow, numpy)" >&2; exit 2 ;;
    esac
    "$PY" -c "import keras, ml_dtypes, $mod" 2>/dev/null || {
      echo "run_all.sh: --keras ($b) needs keras, ml_dtypes and $mod in $PY (run bash adapters/setup.sh --keras)" >&2; exit 2; }
  done
fi
mkdir -p adapters/results
worst=0
SUITE=default

# run NAME SCRIPT DTYPE "ENV=VAL ..." [extra bnconf check arguments]
run() {
  local name=$1 script=$2 dtype=$3 envs=$4
  shift 4
  local base=adapters/results/$name-$dtype
  local tag=""
  [ "$SUITE" = default ] || { base=adapters/results/$name-$SUITE-$dtype; tag=" $SUITE"; }
  local t0=$SECONDS
  # shellcheck disable=SC2086  # $envs: zero or more VAR=value words
  env $envs "$BNCONF" check --suite "$SUITE" --dtype "$dtype" "$@" --exec "${RUN_PY:-$PY} adapters/$script" \
    --report "$base.json" > "$base.txt" 2> "$base.stderr.txt"
  local rc=$?
  echo "$name$tag $dtype${envs:+ ($envs)}: exit $rc in $((SECONDS - t0)) s ($(tail -n1 "$base.txt"))"
  if [ "$rc" -ge 2 ]; then worst=$rc; tail -n 30 "$base.stderr.txt" >&2; fi
}

if [ "$MAIN" = 1 ]; then
for dtype in f32 f64; do
  run numpy_bn numpy_bn.py $dtype ""
  run onnxruntime_bn onnxruntime_bn.py $dtype ""
done
# Diagnostic: ORT in f64 with eps folded into the handed-in variance (see onnxruntime_bn.py),
# to separate the float32 epsilon attribute from ORT's own arithmetic.
run onnxruntime_bn_epsfold onnxruntime_bn.py f64 "ORT_BN_EPS=fold" --ops eval,sync_forward
# The family (layer_norm, rms_norm, group_norm): ORT's LayerNormalization-17,
# RMSNormalization-23 and GroupNormalization-21 (onnxruntime_family.py)
for dtype in f32 f64 f16; do
  run onnxruntime_family onnxruntime_family.py $dtype "" --family all
done
fi

if [ "$HEAVY" = 1 ]; then
  for dtype in f32 f64; do
    run jax_bn jax_bn.py $dtype ""
    run jax_bn_stable jax_bn.py $dtype "JAX_BN_ALGORITHM=stable"
    run flax_bn flax_bn.py $dtype ""
    run flax_bn_twopass flax_bn.py $dtype "FLAX_BN_FAST_VARIANCE=0"
    run tf_keras_bn tf_keras_bn.py $dtype ""
    run tf_fused_bn tf_fused_bn.py $dtype ""
  done
  # Diagnostic: the fused op's forward with var read from reserve_space_2 (the biased batch
  # variance on CPU) instead of its Bessel-corrected batch_variance output (tf_fused_bn.py).
  run tf_fused_bn_reserve tf_fused_bn.py f32 "TF_FUSED_VAR=reserve" --ops forward
  if [ "${RUST_PEERS:-1}" != 0 ] && [ -f adapters/rust/run.sh ]; then
    bash adapters/rust/run.sh "$BNCONF"
    rc=$?
    echo "adapters/rust/run.sh: exit $rc"
    if [ "$rc" -ge 2 ]; then worst=$rc; fi
  fi
fi
if [ "$TORCH" = 1 ]; then
  for dtype in f32 f64; do
    run torch_bn torch_bn.py $dtype ""
  done
  # Diagnostic: running_update through torch.native_batch_norm, which skips F.batch_norm's
  # refusal of one value per channel (its running variance is then 0/0).
  run torch_bn_native torch_bn.py f32 "TORCH_BN_NATIVE=1" --ops running_update
  # The family: F.layer_norm, F.rms_norm, F.group_norm and their autograd backwards
  # (torch_family.py), every dtype and the mixed precisions of autocast-style training.
  for dtype in f32 f64 f16 bf16 f16+f32 bf16+f32; do
    run torch_family torch_family.py $dtype "" --family all
    run torch_compile_family torch_compile_family.py $dtype "" --family all
  done
fi
if [ "$STABLEHLO" = 1 ]; then
  # adapters/stablehlo/shlo_bn.py: StableHLO's batch_norm_* ops (and templates) on nchw/nhwc.
  RUN_PY=$SHLO_PY
  ex=stablehlo/examples
  for e in $SHLO_ENGINES; do
    t0=$SECONDS
    shlo="stablehlo/shlo_bn.py --engine $e"
    for dtype in f32 f64; do
      run shlo_$e "$shlo" $dtype "" --ops forward,backward,eval --layouts nchw,nhwc
      # the two-pass forward template conforms; the one-pass one (what both compilers expand
      # batch_norm_training into) is rejected
      run shlo_${e}_twopass "$shlo --module adapters/$ex/two_pass_forward.mlir" $dtype "" --ops forward --layouts nchw,nhwc
      run shlo_${e}_onepass "$shlo --module adapters/$ex/one_pass_forward.mlir" $dtype "" --ops forward --layouts nchw,nhwc
    done
    # Diagnostics of the f32 `epsilon` attribute in f64: eval with eps folded into the variance
    # (full-precision eps), and the built-in ops judged against float32(eps) (vs_eps32.py)
    run shlo_${e}_epsfold "$shlo" f64 "SHLO_BN_EPS=fold" --ops eval --layouts nchw,nhwc
    run shlo_${e}_vs_eps32 "stablehlo/vs_eps32.py $SHLO_PY adapters/$shlo" f64 "BNCONF=$BNCONF" \
      --ops forward,backward,eval --layouts nchw,nhwc
    echo "stablehlo engine $e: $((SECONDS - t0)) s"
  done
  unset RUN_PY
fi
if [ "$COMPILERS" = 1 ]; then
  for a in $COMPILER_ADAPTERS; do
    extra=()
    case $a in
      torch_compile_bn|openvino_bn|tinygrad_bn|paddle_bn|tvm_bn) script=$a.py envs="" dtypes="f32 f64" ;;
      # Paddle's F.layer_norm / F.rms_norm / F.group_norm and their autograd (the family suites)
      paddle_family) script=$a.py envs="" dtypes="f32 f64 f16 bf16 f16+f32 bf16+f32" extra=(--family all) ;;
      # TVM's Relax layer_norm / group_norm / rms_norm (forward; no Relax gradient) and OpenVINO's
      # MVN + affine / GroupNormalization (forward; INFERENCE_PRECISION_HINT per case dtype)
      tvm_family|openvino_family) script=$a.py envs="" dtypes="f32 f64 f16 bf16 f16+f32 bf16+f32" extra=(--family all) ;;
      # Diagnostic: torch.compile with Dynamo's default dynamic=None (symbolic sizes after the
      # first recompile), f32 only
      torch_compile_bn_dynamic) script=torch_compile_bn.py envs="TORCH_COMPILE_DYNAMIC=1" dtypes=f32 ;;
      *) echo "run_all.sh: COMPILER_ADAPTERS: unknown adapter $a" >&2; exit 2 ;;
    esac
    for dtype in $dtypes; do
      run "$a" "$script" $dtype "$envs" "${extra[@]}"
    done
  done
fi
if [ "$MLX" = 1 ]; then
  for dtype in f32 f64 f16 bf16 f16+f32 bf16+f32; do
    run mlx_family mlx_family.py $dtype "" --family all
    # nn.GroupNorm(..., pytorch_compatible=True): FORMAT.md's (and PyTorch's) consecutive groups
    run mlx_family_ptc mlx_family.py $dtype "MLX_GN_PYTORCH_COMPATIBLE=1" --family group_norm
    run mlx_bn mlx_bn.py $dtype ""
  done
fi
if [ "$FLAX" = 1 ]; then
  # flax.linen.LayerNorm, RMSNorm, GroupNorm and their jax.vjp backwards (flax_family.py):
  # Flax's defaults (use_fast_variance=True), and the two-pass variance it offers
  for dtype in f32 f64 f16 bf16 f16+f32 bf16+f32; do
    run flax_family flax_family.py $dtype "" --family all
    run flax_family_twopass flax_family.py $dtype "FLAX_FAMILY_FAST_VARIANCE=0" --family all
  done
fi
if [ "$KERAS" = 1 ]; then
  # Keras 3's layers on each backend (KERAS_BACKEND, read when keras is imported); the NumPy
  # backend has no autograd: its backward cases are unsupported
  for b in $KERAS_BACKENDS; do
    for dtype in f32 f64 f16 bf16 f16+f32 bf16+f32; do
      run keras_family_$b keras_family.py $dtype "KERAS_BACKEND=$b" --family all
    done
    for dtype in f32 f64 f16 bf16 f16+f32 bf16+f32; do
      run keras_bn_$b keras_bn.py $dtype "KERAS_BACKEND=$b"
    done
  done
fi
if [ "$REPLICATED" = 1 ]; then
  SUITE=replicated
  for a in $REPL_ADAPTERS; do
    case $a in
      flax_bn_sync) script=flax_bn_sync.py envs="" ;;
      flax_bn_sync_twopass) script=flax_bn_sync.py envs="FLAX_BN_FAST_VARIANCE=0" ;;
      flax_bn_dist) script=flax_bn_dist.py envs="" ;;
      tf_keras_bn_sync) script=tf_keras_bn_sync.py envs="" ;;
      torch_dist_bn) script=torch_dist_bn.py envs="" ;;
      torch_syncbn) script=torch_dist_bn.py envs="TORCH_DIST_BN=syncbn" ;;
      *) echo "run_all.sh: REPL_ADAPTERS: unknown adapter $a" >&2; exit 2 ;;
    esac
    for dtype in f32 f64; do
      run "$a" "$script" $dtype "$envs" --timeout 900
    done
  done
  SUITE=default
fi
exit $worst
