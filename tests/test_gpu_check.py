"""scripts/gpu_check.sh --cpu, as CI runs it: every benchmark row at toy sizes
(bench_vs_trainer.py's pair of processes among them: its figures are checked here), its table
appended to the file given with --out (not docs/benchmarks.md). The GPU tests are not started
there: without CUDA they skip, and the suite collects them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = ["random fp32", "block_shuffle fp32", "block_shuffle bf16", "mixup padded bf16"]
ROWS += ["mixup packed bf16", "block_shuffle bf16 lora", "block_shuffle bf16 compiled"]
ROWS += ["bare eager bf16", "bare compiled bf16"]
COMPARISONS = ["sampler", "precision", "compile", "packing", "lora", "mtl vs bare"]


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
    assert figures["hidden_size"] == {row: 32 for row in ROWS}  # every row on the tiny model
    assert list(figures["examples_per_s"]) == ROWS
    assert figures["rounds"] == 1  # --quick: each row once, that round its figure
    assert figures["examples_per_s_by_round"] == {
        r: [v] for r, v in figures["examples_per_s"].items()
    }
    assert all(v > 0 for v in figures["examples_per_s"].values())
    assert set(figures["ratios"]) == {*COMPARISONS, "mtl vs bare, compiled", "mtl_vs_trainer"}
    # each row's host time from its profiled steps; no GPU here: no busy share, no MFU
    assert all(figures["host_ms_per_step"][row] > 0 for row in ROWS)
    assert figures["gpu_busy"] == figures["mfu_real"] == dict.fromkeys(ROWS)
    assert_vs_trainer(figures["trainer"], done.stdout.splitlines())
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nwritten before\n")  # appended, nothing lost
    table = text.split("written before\n", 1)[1]
    assert "### CPU, 1 torch threads" in table
    for comparison in (*COMPARISONS, "mtl vs Trainer"):
        assert f"| {comparison}" in table
    assert "| row | ms/step | host ms/step | GPU busy | MFU real | MFU padded |" in table
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


def assert_vs_trainer(figures: dict, lines: list[str]) -> None:
    """benchmarks/bench_vs_trainer.py --quick's figures and table (printed first): each tool in
    its own process on the same examples, the ratio that of their speeds."""
    first = next(i for i, line in enumerate(lines) if "own process; load average" in line)
    header = lines[first + 1].split()
    assert header[:5] == ["run", "tool", "examples", "train", "s"] and "dev" in header
    assert [line.split()[1] for line in lines[first + 2 : first + 4]] == ["mtl", "trainer"]
    assert lines[first + 4].startswith("mtl / Trainer examples/s: median ")
    assert figures["bench"] == "vs_trainer" and figures["peer"]
    assert figures["separate_processes"] is True
    assert figures["trainer_optim"] in ("adamw_torch_fused", "adamw_torch")
    assert (figures["task"], figures["model"], figures["batch_size"]) == ("pydoc_topic", "tiny", 32)
    runs = {row["tool"]: row for row in figures["runs"]}
    assert list(runs) == ["mtl", "trainer"]
    for row in runs.values():
        assert row["examples"] == 128  # --quick: every one of the 128 train rows, once
        assert row["examples_per_s"] > 0 and row["seconds"] > 0
        assert 0 <= row["dev_accuracy"] <= 1
    ratio = runs["mtl"]["examples_per_s"] / runs["trainer"]["examples_per_s"]
    assert figures["ratio_mtl_vs_trainer"] == pytest.approx(ratio, rel=1e-2)
