"""Two CPU processes (torchrun, gloo) training generation tasks: the update of one process with the
same global batch, and the generated dev figures of one process (each process writes its share
of the rows; they are gathered)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mtl.builders.weights import trained_weights
from mtl.models.tiny import save_tiny_model
from mtl.training.loop import run
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["synthetic_gen", "pydoc_heading"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def common(decoder: Path) -> list[str]:
    """Two steps of mixup, no dropout (each rank draws its own); each row's loss the mean of its
    tokens (`sequence`: the mean over a process's rows, averaged over the processes, is the mean
    over all rows; the mixed run below takes the default `token`, weighed over the processes)."""
    options = [
        f"task.{t}.{k}={v}"
        for t in TASKS
        for k, v in (("loss_reduction", "sequence"), ("generate_rows", 6), ("max_new_tokens", 4))
    ]
    no_dropout = [f"+model.config.{k}=0" for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")]
    return [
        "debug=fast", f"task=[{','.join(TASKS)}]", f"model.name_or_path={decoder}",
        "model.random_init=true", "loader=mixup", "sampler=random", "trainer.max_steps=2",
        "trainer.export=false", "trainer.lr=1e-3", *options, *no_dropout,
    ]  # fmt: skip


def batch_size(n: int, tasks: list[str] = TASKS) -> list[str]:
    return [f"task.{t}.batch_size={n}" for t in tasks]


def train_on_two_processes(overrides: list[str], folder: Path) -> None:
    """`train.py *overrides` under torchrun into `folder`, checked to have run as one run of 2
    processes (each rank's trace header)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [*TORCHRUN, str(ROOT / "train.py"), *overrides, "trainer.trace=true",
         "trainer.dist_timeout_s=30", f"hydra.run.dir={folder}"],
        cwd=folder.parent, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        header = json.loads((folder / f"trace_rank{rank}.jsonl").open().readline())
        assert header["world"] == 2 and header["rank"] == rank


def assert_same_weights(one: Path, two: Path, step: str) -> None:
    want, _ = trained_weights(str(one / step))
    got, _ = trained_weights(str(two / step))
    assert want.keys() == got.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=2e-5, msg=key)


def test_two_processes_train_and_generate_as_one(tmp_path):
    decoder = save_tiny_model("gpt2", tmp_path / "gpt2")
    two = tmp_path / "two"
    train_on_two_processes([*common(decoder), *batch_size(8)], two)
    one = tmp_path / "one"
    run(compose_config(*common(decoder), *batch_size(16), f"output_dir={one}"))
    assert_same_weights(one, two, "checkpoints/step_0000002")
    results = [json.loads((d / "results.json").read_text()) for d in (one, two)]
    for task in TASKS:  # chrF of random text is above 0: the same text, row for row
        assert results[0][f"eval/{task}/chrf"] > 0
        for metric in ("chrf", "exact_match", "rouge_l", "loss", "token_accuracy"):
            key = f"eval/{task}/{metric}"
            assert results[1][key] == pytest.approx(results[0][key], rel=1e-5), key


# headings and tagged words: each process holds its own count of tokens
MIXED = ["pydoc_heading", "synthetic_cls", "synthetic_reg", "synthetic_tag"]


def test_two_processes_train_a_mixed_run_mixing_online_as_one(tmp_path):
    """A generation task beside classification, regression and tagging tasks under mixup,
    packed (sampler=random: padded rows), weighted online by exp3 (each loss over its first
    window's), the policy updating every step: 2 processes with half the batch end with the
    weights and the mixture of one process. The generation and tagging losses are token means:
    each process's mean is weighed by its share of the tokens (`mtl.training.step.TokenMeans`)."""
    decoder = save_tiny_model("gpt2", tmp_path / "gpt2")
    options = [
        f"task=[{','.join(MIXED)}]", "task.pydoc_heading.loss_reduction=token",
        "task.pydoc_heading.generate_rows=4", "task.pydoc_heading.max_new_tokens=2",
        "loader.weighting=proportional", "loader.batches_per_step=3",
        "loader.online={policy: exp3, update_every: 1, options: {normalize: first, "
        "exploration: 0.05, smoothing: 0}}",
        "trainer.max_steps=3", "trainer.log_every=1", "model.head_dropout=0",
    ]  # fmt: skip
    base = [o for o in common(decoder) if not o.startswith(("task=", "task.", "trainer.max"))]
    two = tmp_path / "two"
    train_on_two_processes([*base, *options, *batch_size(8, MIXED)], two)
    one = tmp_path / "one"
    run(compose_config(*base, *options, *batch_size(16, MIXED), f"output_dir={one}"))
    assert_same_weights(one, two, "checkpoints/step_0000003")
    logged = []
    for folder in (one, two):
        rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
        logged.append([{k: v for k, v in r.items() if k.startswith("mix_")} for r in rows])
    weights = [v for row in logged[0] for k, v in row.items() if k.startswith("mix_weight/")]
    assert max(abs(w - 1 / 3) for w in weights) > 0.02  # the policy moved the weights
    for a, b in zip(*logged, strict=True):
        assert b == pytest.approx(a, rel=1e-5)
