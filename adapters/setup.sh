#!/usr/bin/env bash
# Creates adapters/.venv with the pinned PyPI packages the Python adapters need.
# Usage: bash adapters/setup.sh            numpy, onnx, onnxruntime (requirements.txt; what CI installs)
#        bash adapters/setup.sh --heavy    also jax, jaxlib, flax, tensorflow-cpu, keras
#                                          (requirements-heavy.txt, about 2 GB installed), same venv
#        bash adapters/setup.sh --torch    also PyTorch (requirements-torch.txt: PyPI's CUDA build,
#                                          about 5 GB with its nvidia-* wheels; runs on CPU too)
set -euo pipefail
cd "$(dirname "$0")/.."
reqs=(-r adapters/requirements.txt)
for arg in "$@"; do
  case $arg in
    --heavy) reqs+=(-r adapters/requirements-heavy.txt) ;;
    --torch) reqs+=(-r adapters/requirements-torch.txt) ;;
    *) echo "usage: bash adapters/setup.sh [--heavy] [--torch]" >&2; exit 2 ;;
  esac
done
python3 -m venv adapters/.venv
adapters/.venv/bin/pip install --quiet --upgrade pip
adapters/.venv/bin/pip install "${reqs[@]}"
