"""`balancer=upgrad loader=mixup` as `mtl-train` runs it once composed (in this process), and what
it logs: the task-interaction diagnostics, the keys the W&B workspace plots, the report's
figure."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

from mtl.cli.job import train
from mtl.reporting.figures import report
from mtl.reporting.workspace import workspace_spec
from mtl.training.diagnostics import diagnostic_keys
from tests.conftest import compose_config

TASKS = ["synthetic_cls", "synthetic_tag", "synthetic_reg"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("upgrad")
    args = ["model=tiny", "debug=fast", "logger=none", "balancer=upgrad", "loader=mixup"]
    args += [f"task=[{','.join(TASKS)}]", "trainer.diagnose_every=2", "trainer.export=false"]
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        train(compose_config(*args, f"output_dir={folder}/run"))
    assert "does nothing here" not in stderr.getvalue()  # mixup steps hold every task
    return folder / "run"


def diagnosed_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if any(key.startswith("grad_norm/") for key in row)]


def test_diagnostics_are_logged_every_diagnose_every_steps(run_dir):
    rows = diagnosed_rows(run_dir)
    assert [row["step"] for row in rows] == [2, 4]
    for row in rows:
        assert set(row) - {"step"} == set(diagnostic_keys(TASKS))
        assert all(math.isfinite(v) for v in row.values())
        assert all(-1 - 1e-6 <= row[k] <= 1 + 1e-6 for k in row if k.startswith("grad_cos/"))
        assert all(row[f"grad_norm/{t}"] > 0 for t in TASKS)
        weights = [row[f"task_weight/{t}"] for t in TASKS]  # UPGrad's weights are positive
        assert all(w > 0 for w in weights)


def test_the_workspace_plots_exactly_the_diagnostics_keys(run_dir):
    spec = workspace_spec("e", "p", dict.fromkeys(TASKS), [])
    (section,) = [s for s in spec["sections"] if s["name"].startswith("Task interaction")]
    plotted = [key for panel in section["panels"] for key in panel["y"]]
    logged = set(diagnosed_rows(run_dir)[-1]) - {"step"}
    assert sorted(plotted) == sorted(logged)


def test_the_report_draws_the_interaction_figure(run_dir):
    written = report(run_dir)
    assert run_dir / "report_interaction.png" in written
    assert (run_dir / "report_interaction.png").stat().st_size > 10_000
