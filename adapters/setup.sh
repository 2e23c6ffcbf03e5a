#!/usr/bin/env bash
# Creates adapters/.venv with the pinned PyPI packages the Python adapters need.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv adapters/.venv
adapters/.venv/bin/pip install --quiet --upgrade pip
adapters/.venv/bin/pip install -r adapters/requirements.txt
