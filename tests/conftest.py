"""Shared fixtures: compose the real Hydra config with overrides, as `train.py` would."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from mtl.cli import train
from mtl.config import register_configs

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def make_cfg(tmp_path):
    """`make_cfg(*overrides)`: the composed config, run folder in tmp_path, fast smoke preset."""

    def make(*overrides: str, output_dir: Path | None = None):
        GlobalHydra.instance().clear()
        register_configs()
        with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
            return compose(
                "config",
                overrides=[
                    "debug=fast",
                    "task=[synthetic_cls,synthetic_tag,synthetic_reg]",
                    f"output_dir={output_dir or tmp_path / 'run'}",
                    *overrides,
                ],
            )

    return make


@pytest.fixture
def train_here(monkeypatch, capsys):
    """`train_here(*args)`: `mtl-train *args` in this process (`mtl.cli.train` with `sys.argv`,
    Hydra cleared before and after); returns (exit status, stderr)."""

    def call(*args: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["mtl-train", *args])
        GlobalHydra.instance().clear()
        capsys.readouterr()
        try:
            with pytest.raises(SystemExit) as stop:
                train()
        finally:
            GlobalHydra.instance().clear()
        return stop.value.code, capsys.readouterr().err

    return call
