"""The tiny models of every family, as a user makes one to try a family without a download."""

from __future__ import annotations

import os
import runpy
import stat
import sys
import warnings

import pytest


def tiny_command(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`python -m mtl.models.tiny *args` in this process (its `__main__` block, as `-m` runs it):
    (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["tiny.py", *args])
    capsys.readouterr()
    code = 0
    try:
        with warnings.catch_warnings():  # the module is imported here already; under -m it is not
            warnings.simplefilter("ignore", RuntimeWarning)
            runpy.run_module("mtl.models.tiny", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = 1 if isinstance(stop.code, str) else int(stop.code or 0)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)  # what the interpreter prints for it
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_the_documented_command_writes_a_model_with_the_modes_of_the_umask(
    tmp_path, mask, monkeypatch, capsys
):
    """`python -m mtl.models.tiny gpt2 <folder>`: the model loads as a hub model folder does,
    its files 0666 less the umask (safetensors alone would leave its file 0600)."""
    from transformers import AutoConfig

    old = os.umask(mask)
    try:
        code, out, err = tiny_command(monkeypatch, capsys, "gpt2", str(tmp_path / "tiny_gpt2"))
    finally:
        os.umask(old)
    assert code == 0 and out.strip() == str(tmp_path / "tiny_gpt2")
    assert "Writing" not in err  # no progress bar
    files = list((tmp_path / "tiny_gpt2").iterdir())
    assert {f.name for f in files} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o666 & ~mask}
    assert AutoConfig.from_pretrained(tmp_path / "tiny_gpt2").model_type == "gpt2"


def test_an_unknown_family_is_the_usage_line(tmp_path, monkeypatch, capsys):
    code, _, err = tiny_command(monkeypatch, capsys, "gpt3", str(tmp_path))
    assert code == 1 and err.startswith("usage: python -m mtl.models.tiny <")
    assert "Traceback" not in err
