#!/usr/bin/env bash
# Create .venv and install mtl with its test tools.
# TORCH_SPEC picks the torch build: the default is the CPU build; GPU users set e.g. TORCH_SPEC=torch.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
.venv/bin/python -m pip install -q -e ".[dev]"
