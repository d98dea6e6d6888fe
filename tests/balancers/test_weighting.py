"""The loss weightings against hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from mtl.balancers import DWA, Sum, Uncertainty
from mtl.errors import MtlError
from mtl.training.step import sum_over_processes

TASKS = ["a", "b", "c"]


def losses(a: float, b: float, c: float) -> dict[str, torch.Tensor]:
    return {"a": torch.tensor(a), "b": torch.tensor(b), "c": torch.tensor(c)}


def test_sum_weighs_each_loss_by_its_loss_weight():
    balancer = Sum(TASKS, loss_weights={"b": 2.0})
    assert balancer.loss(losses(1.0, 3.0, 0.5)).item() == pytest.approx(1.0 + 6.0 + 0.5)
    assert balancer.weights() == {"a": 1.0, "b": 2.0, "c": 1.0}
    assert list(balancer.parameters()) == [] and not balancer.state_dict()


def test_uncertainty_takes_the_regression_and_classification_forms():
    balancer = Uncertainty(TASKS, loss_weights={"c": 3.0}, regression=["b"])
    with torch.no_grad():
        balancer.log_variance.copy_(torch.tensor([0.0, math.log(4.0), -1.0]))
    total = balancer.loss(losses(2.0, 8.0, 1.0))
    # a: classification, s=0: 2 + 0; b: regression, sigma^2=4: 8 / (2*4) + log(2);
    # c: classification, s=-1, weight 3: 3 * (e * 1 - 0.5)
    expected = 2.0 + (1.0 + math.log(2.0)) + 3 * (math.e - 0.5)
    assert total.item() == pytest.approx(expected, rel=1e-6)
    weights = balancer.weights()
    assert weights["a"] == pytest.approx(1.0)
    assert weights["b"] == pytest.approx(1 / 8)
    assert weights["c"] == pytest.approx(3 * math.e, rel=1e-6)


def test_uncertainty_learns_a_larger_variance_for_a_larger_loss():
    balancer = Uncertainty(TASKS)
    balancer.loss(losses(0.1, 1.0, 10.0)).backward()
    # d/ds (exp(-s) L + s/2) at s=0 is 1/2 - L: the larger the loss, the more s grows
    assert balancer.log_variance.grad.tolist() == pytest.approx([0.4, -0.5, -9.5])


def test_dwa_weights_from_the_ratio_of_the_last_two_windows():
    balancer = DWA(TASKS, temperature=2.0, window=2)
    windows = [losses(1.0, 1.0, 1.0), losses(0.5, 1.0, 2.0)]
    for window in windows:
        for _ in range(2):
            total = balancer.loss(window)
            assert total.item() == pytest.approx(sum(v.item() for v in window.values()))
            balancer.after_step(sum_over_processes)
    ratios = torch.tensor([0.5, 1.0, 2.0])
    expected = 3 * torch.softmax(ratios / 2.0, dim=0)
    got = balancer.weights()
    assert [got[t] for t in TASKS] == pytest.approx(expected.tolist(), rel=1e-6)
    assert got["c"] > got["b"] > got["a"]  # the task whose loss falls slowest gets the most
    assert balancer.loss(losses(1.0, 1.0, 1.0)).item() == pytest.approx(3.0, rel=1e-6)


def test_dwa_state_round_trips_through_its_state_dict():
    balancer, copy = DWA(TASKS, window=1), DWA(TASKS, window=1)
    for window in (losses(1.0, 2.0, 3.0), losses(2.0, 2.0, 1.0)):
        balancer.loss(window)
        balancer.after_step(sum_over_processes)
    copy.load_state_dict(balancer.state_dict())
    assert copy.weights() == balancer.weights()


@pytest.mark.parametrize("bad", [{"temperature": 0.0}, {"window": 0}])
def test_dwa_refuses_bad_options(bad):
    with pytest.raises(MtlError, match="must be"):
        DWA(TASKS, **bad)


def test_dwa_resumed_mid_window_closes_the_window_at_the_same_step():
    """A copy loaded from a state saved mid-window counts on from there (its step count is kept
    on the host, so that a step reads no device value) and moves its weights when the original
    does."""
    balancer, copy = DWA(TASKS, window=3), DWA(TASKS, window=3)
    for window in (losses(1.0, 2.0, 3.0),) * 3 + (losses(2.0, 2.0, 1.0),):
        balancer.loss(window)
        balancer.after_step(sum_over_processes)
    copy.load_state_dict(balancer.state_dict())  # 4 steps: one into the second window
    for other in (balancer, copy):
        for _ in range(2):
            other.loss(losses(2.0, 2.0, 1.0))
            other.after_step(sum_over_processes)
    assert copy.weights() == balancer.weights() != dict.fromkeys(TASKS, 1.0)
