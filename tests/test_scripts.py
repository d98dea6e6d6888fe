"""Every benchmark script runs on tiny inputs (`--quick`) and ends with its JSON line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
BENCHMARKS = {
    "bench_sampler_scale.py": "sampler_scale",
    "bench_randomness.py": "randomness",
    "bench_loader_overhead.py": "loader_overhead",
    "bench_mixup_memory.py": "mixup_memory",
    "bench_collate.py": "collate",
}


@pytest.mark.slow
@pytest.mark.parametrize(("script", "name"), BENCHMARKS.items())
def test_script_runs_quick_and_prints_its_json_line(script, name):
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) > 2  # a table before the JSON line
    figures = json.loads(lines[-1])
    assert figures["bench"] == name
