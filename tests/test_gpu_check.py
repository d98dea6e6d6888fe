"""scripts/gpu_check.sh --cpu, as CI runs it: the GPU tests (skipped here), then every benchmark
row at toy sizes, its table appended to the file given with --out (not docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = ["random fp32", "block_shuffle fp32", "block_shuffle bf16", "mixup padded bf16"]
ROWS += ["mixup packed bf16", "block_shuffle bf16 compiled"]


@pytest.mark.slow
def test_cpu_dry_mode_runs_the_pipeline_and_writes_its_table(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\nwritten before\n")
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--cpu", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "gpu" and figures["model"] == "tiny"
    assert list(figures["examples_per_s"]) == ROWS
    assert all(v > 0 for v in figures["examples_per_s"].values())
    assert set(figures["ratios"]) == {"sampler", "precision", "compile", "packing"} | {
        "mtl_vs_trainer"
    }
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nwritten before\n")  # appended, nothing lost
    table = text.split("written before\n", 1)[1]
    assert "### CPU, 1 torch threads" in table
    for comparison in ("sampler", "precision", "compile", "packing", "mtl vs Trainer"):
        assert f"| {comparison}" in table
    assert (ROOT / "docs" / "benchmarks.md").read_text() == docs  # the real file untouched


def test_unknown_option_is_one_line_exit_2():
    done = subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--gpus", "2"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "mtl: error: gpu_check.sh: unknown option --gpus; use [--cpu] [--out PATH]"
    )


def test_every_gpu_test_is_in_the_file_gpu_check_runs():
    marked = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if path != Path(__file__) and "pytest.mark.gpu" in path.read_text()
    ]
    assert marked == ["tests/training/test_gpu.py"]
    assert "tests/training/test_gpu.py" in (ROOT / "scripts" / "gpu_check.sh").read_text()
