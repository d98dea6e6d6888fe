"""scripts/dry_run.py: an epoch summary from task sizes alone."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dry_run.py"


def dry_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_summary_counts_steps_and_passes():
    out = dry_run("mixup", "big=12", "small=3").stdout
    assert "12 steps" in out
    small = next(line for line in out.splitlines() if line.startswith("small"))
    assert small.split()[-1] == "4.00"  # 12 steps / 3 batches per pass


def test_unknown_loader_is_one_line():
    result = dry_run("rr", "a=3")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "round_robin" in result.stderr
