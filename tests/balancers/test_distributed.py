"""Two CPU processes (torchrun, gloo) aggregating with UPGrad: every task's gradient averaged over
the processes before aggregation gives the update of one process with the same global batch, for
the whole model and for LoRA (model.peft: one adapter shared, or one per task)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mtl.builders.weights import trained_weights
from mtl.training.loop import run
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[2]
# Losses that are means over rows: a token-level loss is a mean over each process's own tokens,
# which averaged over processes is not the mean over all tokens (under any balancer, sum too).
TASKS = ["synthetic_cls", "synthetic_pair", "synthetic_reg"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
# No dropout (each rank draws its own), two steps, every task in every (mixup) step.
COMMON = [
    "debug=fast", f"task=[{','.join(TASKS)}]", "loader=mixup", "sampler=random",
    "balancer=upgrad", "trainer.max_steps=2", "trainer.export=false", "trainer.diagnose_every=0",
    "model.head_dropout=0", "+model.config.hidden_dropout_prob=0",
    "+model.config.attention_probs_dropout_prob=0",
]  # fmt: skip

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def batch_size(n: int) -> list[str]:
    return [f"task.{t}.batch_size={n}" for t in TASKS]


def losses(run_dir: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        r["step"]: {k: v for k, v in r.items() if k.startswith("loss/")}
        for r in rows
        if "loss" in r
    }


# The whole model; one LoRA adapter on it (the per-task gradients are the adapter's); one adapter
# per task (a task's gradient reaches its own adapter and head only). LoRA without its dropout.
PEFT = ["null", "{dropout:0}", "{dropout:0,per_task:true}"]


def test_two_processes_give_the_update_of_one_with_the_same_global_batch(tmp_path):
    """The whole model and the two ways of LoRA (PEFT), one `-m` launch of the three."""
    sweep = tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [*TORCHRUN, str(ROOT / "train.py"), "-m", *COMMON, *batch_size(8), "trainer.trace=true",
         "trainer.dist_timeout_s=30", f"model.peft={','.join(PEFT)}", f"hydra.sweep.dir={sweep}",
         "hydra.sweep.subdir=${hydra.job.num}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for job, peft in enumerate(PEFT):
        two = sweep / str(job)
        for rank in (0, 1):  # it ran as one run of 2 processes
            header = json.loads((two / f"trace_rank{rank}.jsonl").open().readline())
            assert header["world"] == 2 and header["rank"] == rank
        one_dir = tmp_path / f"one-{job}"
        run(compose_config(*COMMON, *batch_size(16), f"model.peft={peft}", f"output_dir={one_dir}"))
        step = "checkpoints/step_0000002"
        one, _ = trained_weights(str(one_dir / step))
        both, _ = trained_weights(str(two / step))
        assert one.keys() == both.keys()
        assert any(".lora_" in key for key in one) == (peft != "null")
        for key in one:  # AdamW's first steps are ±lr where a gradient is nearly 0: lr the scale
            torch.testing.assert_close(both[key], one[key], rtol=0, atol=2e-5, msg=key)
        one_losses, two_losses = losses(one_dir), losses(two)
        assert sorted(one_losses) == sorted(two_losses) == [1, 2]
        for step_losses in one_losses:
            assert two_losses[step_losses] == pytest.approx(one_losses[step_losses], rel=1e-4)
