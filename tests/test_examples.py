"""examples/custom_project: a user's own task, task type, head, metric, sampler and loader,
trained from the project's own folder through the `mtl-train` command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import balanced_accuracy_score

from mtl.testing import check_sampler

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_project"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the example project in a folder outside the checkout, importable."""
    folder = tmp_path_factory.mktemp("user") / "custom_project"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    for name in [m for m in sys.modules if m.startswith("my_project")]:
        del sys.modules[name]


def test_the_project_trains_from_its_own_folder(project, train_here, monkeypatch):
    """`mtl-train` in-process from the project's folder (the console script's own process is
    tests/test_wheel.py's)."""
    monkeypatch.chdir(project)
    code, err = train_here(
        "--config-dir",
        "conf",
        "task=[reviews,ratings,synthetic_cls]",
        "sampler=longest_first",
        "loader=blocks",
        "debug=fast",
        "trainer.max_steps=8",
    )
    assert code == 0, err[-3000:]
    runs = list((project / "outputs" / "runs").glob("*/*"))
    assert len(runs) == 1
    results = json.loads((runs[0] / "results.json").read_text())
    assert results["step"] == 8
    for key in (
        "eval/reviews/accuracy",
        "eval/reviews/balanced_accuracy",  # the project's metric
        "eval/ratings/accuracy",  # the project's task type
        "eval/ratings/mae",
        "eval/synthetic_cls/accuracy",  # one of mtl's own tasks beside them
    ):
        assert 0 <= results[key] <= (4 if key.endswith("mae") else 1), key
    config = (runs[0] / ".hydra" / "config.yaml").read_text()
    assert "my_project.loaders.BlockLoader" in config
    assert "my_project.samplers.LongestFirstBatchSampler" in config


def test_sampler_example_keeps_the_sampler_contract(project):
    from my_project.samplers import LongestFirstBatchSampler

    lengths = np.random.default_rng(0).integers(1, 300, 203)
    s = LongestFirstBatchSampler(lengths, 16, seed=4)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        assert sorted(i for b in batches for i in b) == list(range(203))
        assert max(lengths[batches[0]]) == lengths.max()
    # the contract checks a user runs on a sampler of their own (docs/extending.md)
    check_sampler(LongestFirstBatchSampler, batch_size=16)


def test_loader_example_runs_blocks_of_one_task_and_resumes(project):
    from my_project.loaders import BlockLoader

    sizes = {"a": 10, "b": 3, "c": 7}
    loader = BlockLoader({n: range(k) for n, k in sizes.items()}, seed=2, block=4)
    schedule = loader.schedule(0)
    assert len(loader) == sum(sizes.values())
    assert np.bincount(schedule).tolist() == [10, 3, 7]
    runs = np.split(schedule, np.flatnonzero(np.diff(schedule)) + 1)
    assert max(len(r) for r in runs) <= 4 * 2  # two runs of a task may meet
    state = None
    seen = []
    for step, batch in enumerate(loader):
        seen.append(batch)
        if step == 5:
            state = loader.state_dict()
    resumed = BlockLoader({n: range(k) for n, k in sizes.items()}, seed=2, block=4)
    resumed.load_state_dict(state)
    assert list(resumed) == seen[6:]
    assert not np.array_equal(loader.schedule(1), schedule)


def test_head_and_metric_examples(project):
    from my_project.heads import AttentionPoolHead
    from my_project.metrics import balanced_accuracy

    head = AttentionPoolHead(8, 3, dropout=0.0)
    hidden = torch.randn(4, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0]] * 4)
    logits = head(hidden, mask)
    changed = hidden.clone()
    changed[:, 3:] = 100.0  # padding must not matter
    assert torch.allclose(head(changed, mask), logits)
    assert head.loss(logits, torch.tensor([0, 1, 2, 0])).ndim == 0
    rng = np.random.default_rng(0)
    for _ in range(50):
        ref, pred = rng.integers(0, 4, 40), rng.integers(0, 4, 40)
        assert balanced_accuracy(pred, ref) == pytest.approx(balanced_accuracy_score(ref, pred))


def test_the_project_s_run_folders_are_ignored_by_git():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    probe = "examples/custom_project/outputs/runs/2026-01-01/00-00-00/metrics.jsonl"
    result = subprocess.run(["git", "check-ignore", "-q", probe], cwd=ROOT)
    assert result.returncode == 0  # 1: git would list outputs/ as untracked
