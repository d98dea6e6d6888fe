"""The tiny models of every family, as a user makes one to try a family without a download."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_the_documented_command_writes_a_model_with_the_modes_of_the_umask(tmp_path, mask):
    """`python -m mtl.models.tiny gpt2 <folder>`: the model loads as a hub model folder does,
    its files 0666 less the umask (safetensors alone would leave its file 0600)."""
    from transformers import AutoConfig

    old = os.umask(mask)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mtl.models.tiny", "gpt2", str(tmp_path / "tiny_gpt2")],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
    finally:
        os.umask(old)
    assert done.returncode == 0 and done.stdout.strip() == str(tmp_path / "tiny_gpt2")
    assert "Writing" not in done.stderr  # no progress bar
    files = list((tmp_path / "tiny_gpt2").iterdir())
    assert {f.name for f in files} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o666 & ~mask}
    assert AutoConfig.from_pretrained(tmp_path / "tiny_gpt2").model_type == "gpt2"


def test_an_unknown_family_is_the_usage_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "mtl.models.tiny", "gpt3", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.startswith("usage: python -m mtl.models.tiny <")
    assert "Traceback" not in done.stderr
