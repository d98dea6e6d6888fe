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
    "padding_efficiency.py": "padding_efficiency",
    "bench_train_speed.py": "train_speed",
    "bench_task_types.py": "task_types",
}


def run_quick(script: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) > 2  # a table before the JSON line
    return json.loads(lines[-1])


@pytest.mark.slow
@pytest.mark.parametrize(("script", "name"), BENCHMARKS.items())
def test_script_runs_quick_and_prints_its_json_line(script, name):
    assert run_quick(script)["bench"] == name


@pytest.mark.slow
def test_padding_efficiency_has_the_peers_and_writes_its_plot(tmp_path):
    png = tmp_path / "padding.png"
    figures = run_quick("padding_efficiency.py", "--plot", str(png))
    for data in ("pydoc", "synthetic"):
        rows = figures[data]
        for row in ("random", "token_budget", "torch_dataloader", "hf_length_grouped"):
            assert 0 < rows[row] <= 1
        assert rows["block_shuffle(sort_bs_num=50)"] > rows["random"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_train_speed_runs_both_samplers_and_writes_its_plot(tmp_path):
    png = tmp_path / "speed.png"
    figures = run_quick("bench_train_speed.py", "--plot", str(png))
    assert set(figures["examples_per_s"]) == {"random", "block_shuffle"}
    assert all(v > 0 for runs in figures["examples_per_s"].values() for v in runs)
    assert set(figures["dev"]["random"]) == {"pydoc_topic"}
    assert png.is_file()


def test_train_speed_compares_any_two_samplers_with_options():
    figures = run_quick(
        "bench_train_speed.py", "--samplers", "block_shuffle", "token_budget:max_tokens=400"
    )
    assert set(figures["examples_per_s"]) == {"block_shuffle", "token_budget:max_tokens=400"}
    assert "ratio_token_budget:max_tokens=400_vs_block_shuffle" in figures
