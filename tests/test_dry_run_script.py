"""`mtl-dry-run`: an epoch summary from task sizes alone, run as the installed console script."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def console_script(name: str) -> list[str]:
    """What the installed console script `name` runs (its `[project.scripts]` entry)."""
    text = (ROOT / "pyproject.toml").read_text()
    module, function = re.search(rf'^{name} = "([\w.]+):(\w+)"$', text, re.M).groups()
    return [
        sys.executable,
        "-c",
        f"import sys; from {module} import {function}; sys.exit({function}())",
    ]


def dry_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*console_script("mtl-dry-run"), *args], capture_output=True, text=True)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtl: error: "), result.stderr
    return lines[0]


def test_summary_counts_steps_and_passes():
    out = dry_run("mixup", "big=12", "small=3").stdout
    assert "12 steps" in out
    small = next(line for line in out.splitlines() if line.startswith("small"))
    assert small.split()[-1] == "4.00"  # 12 steps / 3 batches per pass


def test_options_and_epochs_reach_the_loader():
    out = dry_run("random", "a=3", "b=5", "loader.weighting=uniform", "epochs=2").stdout
    assert out.count("RandomLoader") == 2 and "epoch 0" in out and "epoch 1" in out


def test_unknown_loader_is_one_line():
    assert "round_robin" in one_error_line(dry_run("rr", "a=3"))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["mixup", "a=three"], "'three'"),
        (["mixup", "a"], "key=value"),
        (["mixup", "a=3", "loader.nope=1"], "nope"),
    ],
)
def test_bad_sizes_and_options_are_one_line(args, named):
    assert named in one_error_line(dry_run(*args))


def test_mtl_workspace_console_script_prints_the_spec():
    result = subprocess.run(
        [*console_script("mtl-workspace"), "entity=e", "project=p", "tasks=[a,b]",
         "dry_run=true"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert '"project": "p"' in result.stdout and "eval/a/" in result.stdout
