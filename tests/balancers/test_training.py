"""Balancers in training: the real config composed with overrides, a few steps in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import mtl.training.loop
from mtl.artifacts import RunLayout
from mtl.training.loop import Training
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[2]
BASE = ["debug=fast", "task=[synthetic_cls,synthetic_tag,synthetic_reg]"]


class PlainBackward:
    """The reference backward path, independent of mtl.balancers: the model's task losses, each
    times its `model.loss_weights` weight, summed in the batch's task order and backpropagated
    with a plain `loss.backward()`."""

    ddp_syncs = True

    def __init__(self, loss_weights: dict[str, float]):
        self.loss_weights = loss_weights

    def backward(self, task_losses: dict[str, torch.Tensor], group: int) -> torch.Tensor:
        loss = sum(self.loss_weights.get(name, 1.0) * value for name, value in task_losses.items())
        (loss / group).backward()
        return loss.detach()

    def step(self) -> None:
        pass


class PlainLoop(Training):
    """The run's loop with the reference backward path in place of the step's."""

    def __init__(self, run, progress):
        super().__init__(run, progress)
        self.step.gradients = PlainBackward(dict(run.settings.model.loss_weights))


def train(cfg, loop: type[Training] = Training, hooks=()):
    """`mtl.training.loop.run(cfg, hooks)`, the run folder's lock included, with `loop` as the
    loop it builds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mtl.training.loop, "Training", loop)
        return mtl.training.loop.run(cfg, hooks)


def weights_of(results) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in results.model.state_dict().items()}


MIXUP = ["loader=mixup", "+model.loss_weights.synthetic_tag=2.0", "trainer.export=false"]
ROUND_ROBIN = ["loader=round_robin", "trainer.grad_accum=3", "trainer.export=false"]


@pytest.fixture(scope="module")
def summed(tmp_path_factory) -> dict[str, dict[str, torch.Tensor]]:
    """The parameters after `balancer=sum` (the default) runs, per loader."""
    folder = tmp_path_factory.mktemp("summed")
    diagnosed = ["trainer.diagnose_every=1"]  # after every step: they must not change a weight
    return {
        name: weights_of(train(compose(*loader, *diagnosed, output_dir=folder / name)))
        for name, loader in (("mixup", MIXUP), ("round_robin", ROUND_ROBIN))
    }


def compose(*overrides: str, output_dir: Path):
    return compose_config(*BASE, f"output_dir={output_dir}", *overrides)


def test_sum_gives_bit_identical_parameters_to_a_plain_backward(summed, tmp_path):
    """`balancer=sum` (a loss weight of 2 on one task: applied once) against the weighted task
    losses backpropagated by hand."""
    new = summed["mixup"]
    plain_cfg = compose(*MIXUP, "trainer.diagnose_every=0", output_dir=tmp_path / "plain")
    plain = weights_of(train(plain_cfg, PlainLoop))
    assert new.keys() == plain.keys()
    for key in new:
        assert torch.equal(new[key], plain[key]), key


class MicroLosses:
    def __init__(self):
        self.losses: list[torch.Tensor] = []

    def on_micro_step(self, run, progress, batch, loss) -> None:
        self.losses.append(loss)


@pytest.mark.parametrize("balancer", ["uncertainty", "dwa"])
def test_hooks_get_the_loss_that_was_backpropagated(tmp_path, monkeypatch, balancer):
    """Under a weighting with a formula of its own, `on_micro_step` gets the loss that autograd
    backpropagated (before: the model's weighted sum of the task losses)."""
    backpropagated, backward = [], torch.autograd.backward

    def spy(tensors, *args, **kwargs):
        backpropagated.append(tensors.detach().clone())
        return backward(tensors, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "backward", spy)
    hook = MicroLosses()
    steps = ["trainer.epochs=2", "trainer.max_steps=3"]
    if balancer == "dwa":  # windows of one step: its weights move from the third step on
        steps.append("balancer.window=1")
    cfg = compose(*MIXUP, f"balancer={balancer}", *steps, output_dir=tmp_path)
    assert cfg.trainer.grad_accum == 1  # the loss backpropagated is the loss / 1
    train(cfg, hooks=[hook])
    assert len(hook.losses) == len(backpropagated) == 3
    for got, expected in zip(hook.losses, backpropagated, strict=True):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("loader", ["mixup", "round_robin"])
def test_per_task_gradients_summed_give_the_sum_balancers_update(summed, tmp_path, loader):
    """torchjd's Sum aggregator over the kept per-task gradients: the same update as the
    plain backward, for one encoder call (mixup) and across micro-steps (round_robin)."""
    overrides = MIXUP if loader == "mixup" else ROUND_ROBIN
    kept = compose(
        *overrides, "balancer=upgrad", "balancer.aggregator=torchjd.aggregation.Sum",
        output_dir=tmp_path / "kept",
    )  # fmt: skip
    aggregated = weights_of(train(kept))
    for key, value in summed[loader].items():
        torch.testing.assert_close(aggregated[key], value, rtol=1e-5, atol=1e-6)


def losses_by_step(run_dir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        r["step"]: {k: v for k, v in r.items() if k.startswith("loss")} for r in rows if "loss" in r
    }


def test_resume_with_uncertainty_continues_exactly(tmp_path):
    common = ["balancer=uncertainty", "loader=mixup", "trainer.epochs=2", "trainer.max_steps=6"]
    common += ["trainer.export=false"]
    full = train(
        compose(
            *common,
            "trainer.checkpoint_every=3",
            "trainer.keep_last=null",
            output_dir=tmp_path / "full",
        )
    )
    checkpoint = RunLayout(tmp_path / "full").step(3)
    resumed = train(compose(*common, f"trainer.resume={checkpoint}", output_dir=tmp_path / "res"))
    expected, got = losses_by_step(tmp_path / "full"), losses_by_step(tmp_path / "res")
    assert sorted(got) == [4, 5, 6]
    for step in got:
        assert got[step] == pytest.approx(expected[step], rel=1e-6, abs=1e-7)
    full_weights, resumed_weights = weights_of(full), weights_of(resumed)
    for key in full_weights:  # the learned log-variances weighed the same losses
        torch.testing.assert_close(resumed_weights[key], full_weights[key], rtol=1e-6, atol=1e-7)
