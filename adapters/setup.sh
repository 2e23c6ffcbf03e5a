#!/usr/bin/env bash
# Creates adapters/.venv with the pinned PyPI packages the Python adapters need.
# Usage: bash adapters/setup.sh            numpy, onnx, onnxruntime (requirements.txt; what CI installs)
#        bash adapters/setup.sh --heavy    also jax, jaxlib, flax, tensorflow-cpu, keras
#                                          (requirements-heavy.txt, about 2 GB installed), same venv
#        bash adapters/setup.sh --torch    also PyTorch (requirements-torch.txt: PyPI's CUDA build,
#                                          about 5 GB with its nvidia-* wheels; runs on CPU too)
#        bash adapters/setup.sh --replicated  same as --heavy --torch: what the replicated-suite
#                                          adapters need (flax_bn_sync, flax_bn_dist, tf_keras_bn_sync,
#                                          torch_dist_bn; run_all.sh --replicated); jax.distributed's
#                                          CPU collectives (gloo) ship in jaxlib, torch.distributed's
#                                          gloo backend in torch: nothing more to install
#        bash adapters/setup.sh --compilers  also PyTorch (torch.compile), OpenVINO, tinygrad, PaddlePaddle and TVM
#                                          (requirements-torch.txt + requirements-compilers.txt), same
#                                          venv; torch.compile's Inductor needs a C++ compiler (g++) and
#                                          tinygrad's CPU device needs clang: this step checks for both
#                                          and says what to install (Debian: apt-get install g++ clang)
#        bash adapters/setup.sh --flax     also only jax, jaxlib, flax (their pins in requirements-heavy.txt;
#                                          no TensorFlow), same venv: adapters/flax_family.py (run_all.sh --flax)
#        bash adapters/setup.sh --keras    Keras 3 and its backends (adapters/keras_family.py, keras_bn.py;
#                                          run_all.sh --keras): requirements-heavy.txt (keras, jax,
#                                          jaxlib, tensorflow-cpu; ml_dtypes comes with them) and
#                                          requirements-torch.txt (torch), same venv
#        bash adapters/setup.sh --mlx      also MLX's Linux CPU build (requirements-mlx.txt: mlx[cpu]),
#                                          same venv: adapters/mlx_family.py, adapters/mlx_bn.py
#        bash adapters/setup.sh --stablehlo  only the StableHLO adapter's own venv
#                                          adapters/.venv-stablehlo (adapters/stablehlo/requirements.txt:
#                                          jax/jaxlib for XLA:CPU, iree-base-compiler/-runtime);
#                                          adapters/.venv is made too only if --heavy/--torch is also given
set -euo pipefail
cd "$(dirname "$0")/.."
reqs=(-r adapters/requirements.txt)
main_venv=1
stablehlo=0
compilers=0
for arg in "$@"; do
  case $arg in
    --heavy) reqs+=(-r adapters/requirements-heavy.txt); main_venv=2 ;;
    --torch) reqs+=(-r adapters/requirements-torch.txt); main_venv=2 ;;
    --replicated) reqs+=(-r adapters/requirements-heavy.txt -r adapters/requirements-torch.txt); main_venv=2 ;;
    --compilers) reqs+=(-r adapters/requirements-torch.txt -r adapters/requirements-compilers.txt); main_venv=2; compilers=1 ;;
    --mlx) reqs+=(-r adapters/requirements-mlx.txt); main_venv=2 ;;
    --flax) reqs+=($(grep -E '^(jax|jaxlib|flax)==' adapters/requirements-heavy.txt)); main_venv=2 ;;
    --keras) reqs+=(-r adapters/requirements-heavy.txt -r adapters/requirements-torch.txt); main_venv=2 ;;
    --stablehlo) stablehlo=1 ;;
    *) echo "usage: bash adapters/setup.sh [--heavy] [--torch] [--replicated] [--compilers] [--mlx] [--flax] [--keras] [--stablehlo]" >&2; exit 2 ;;
  esac
done
if [ "$stablehlo" = 1 ]; then
  python3 -m venv adapters/.venv-stablehlo
  adapters/.venv-stablehlo/bin/pip install --quiet --upgrade pip
  adapters/.venv-stablehlo/bin/pip install -r adapters/stablehlo/requirements.txt
  [ "$main_venv" = 2 ] || exit 0
fi
python3 -m venv adapters/.venv
adapters/.venv/bin/pip install --quiet --upgrade pip
adapters/.venv/bin/pip install "${reqs[@]}"
if [ "$compilers" = 1 ]; then
  for cc in g++ clang; do
    command -v "$cc" >/dev/null || echo "setup.sh: --compilers: no $cc on PATH (torch.compile needs g++, tinygrad's CPU device clang; Debian: apt-get install $cc)" >&2
  done
fi
