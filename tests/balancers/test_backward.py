"""The one backward path: the balancer alone applies `model.loss_weights`, once, and returns the
loss it backpropagated (for an aggregation, the weighted sum the per-task gradients came from)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mtl.balancers import Aggregate, Sum, Uncertainty
from tests.balancers.toy import Toy, gradients

TASKS = ["a", "b"]


def grads_of(balancer, weight: float) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The model's gradients after one step of `balancer` on task b's loss alone, and the loss
    the backward path returned."""
    model, x = Toy(TASKS), torch.randn(8, 4)
    update = gradients(model, balancer(TASKS, loss_weights={"b": weight}))
    loss = update.backward({"b": model.task_losses(x)["b"]}, group=1)
    update.step()
    grads = [p.grad for p in [*model.encoder.parameters(), *model.heads["b"].parameters()]]
    return grads, loss


@pytest.mark.parametrize("balancer", [Sum, Aggregate], ids=["sum", "upgrad"])
def test_a_loss_weight_of_two_doubles_the_tasks_gradient_once(balancer):
    plain, plain_loss = grads_of(balancer, 1.0)
    doubled, loss = grads_of(balancer, 2.0)
    assert torch.equal(loss, 2 * plain_loss)
    for got, expected in zip(doubled, plain, strict=True):
        assert torch.equal(got, 2 * expected)  # x2 is exact: not x4, not x1


def test_an_aggregation_returns_the_weighted_sum_its_gradients_came_from():
    model, x = Toy(TASKS), torch.randn(8, 4)
    balancer = Aggregate(TASKS, loss_weights={"b": 3.0})
    update = gradients(model, balancer)
    losses = model.task_losses(x)
    loss = update.backward(losses, group=2)
    assert not loss.requires_grad
    assert torch.equal(loss, losses["a"].detach() + 3.0 * losses["b"].detach())


def test_uncertainty_weighs_its_whole_term_and_returns_what_it_backpropagated():
    model, x = Toy(TASKS), torch.randn(8, 4)
    balancer = Uncertainty(TASKS, loss_weights={"b": 2.0})
    losses = model.task_losses(x)
    loss = gradients(model, balancer).backward(losses, group=1)
    s = balancer.log_variance.detach()
    expected = (torch.exp(-s[0]) * losses["a"] + s[0] / 2) + 2.0 * (
        torch.exp(-s[1]) * losses["b"] + s[1] / 2
    )
    torch.testing.assert_close(loss, expected.detach())
    assert balancer.weights()["b"] == pytest.approx(2.0 * torch.exp(-s[1]).item())


def test_the_docs_balancer_runs_as_written():
    text = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    section = text[text.index("## A balancer") :]
    code = section[section.index("```python\n") + len("```python\n") : section.index("```\n")]
    namespace: dict = {}
    exec(compile(code, "docs/extending.md", "exec"), namespace)
    balancer = namespace["WorstTask"](TASKS, loss_weights={"b": 2.0}, scale=3.0)
    loss = balancer.loss({"a": torch.tensor(1.0), "b": torch.tensor(5.0)})
    assert loss.item() == 30.0  # the worst task's loss, times scale, times its loss weight
    assert balancer.weights() == {"a": 0.0, "b": 6.0}
