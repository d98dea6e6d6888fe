"""Gradient aggregation: torchjd through mtl equals torchjd called directly; PCGrad's projection."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchjd.aggregation import PCGrad, UPGrad

from mtl.balancers import Aggregate
from mtl.errors import MtlError
from tests.balancers.toy import Toy, gradients

TASKS = ["a", "b", "c"]


def test_upgrad_through_mtl_equals_torchjd_on_the_same_task_gradients():
    model, x = Toy(TASKS), torch.randn(12, 4)
    shared = list(model.encoder.parameters())
    rows, head_grads = [], {}
    for t, loss in model.task_losses(x).items():
        params = [*shared, *model.heads[t].parameters()]
        grads = torch.autograd.grad(loss, params, retain_graph=True)
        rows.append(torch.cat([g.reshape(-1) for g in grads[: len(shared)]]))
        head_grads[t] = grads[len(shared) :]
    expected = UPGrad()(torch.stack(rows))

    balancer = Aggregate(TASKS, aggregator="torchjd.aggregation.UPGrad")
    path = gradients(model, balancer)
    path.backward(model.task_losses(x), group=1)
    path.step()
    got = torch.cat([p.grad.reshape(-1) for p in shared])
    torch.testing.assert_close(got, expected)
    for t in TASKS:  # each head keeps its own task's gradient
        for param, grad in zip(model.heads[t].parameters(), head_grads[t], strict=True):
            torch.testing.assert_close(param.grad, grad)
    assert sorted(balancer.weights()) == TASKS


def test_a_group_of_one_task_passes_its_gradient_through():
    model, x = Toy(TASKS), torch.randn(12, 4)
    loss = model.task_losses(x)["b"]
    expected = torch.autograd.grad(loss, list(model.encoder.parameters()))
    path = gradients(model, Aggregate(TASKS))
    path.backward({"b": model.task_losses(x)["b"] * 2}, group=2)  # mean of 2 micro-steps
    path.step()
    for param, grad in zip(model.encoder.parameters(), expected, strict=True):
        torch.testing.assert_close(param.grad, grad)


vectors = st.lists(st.floats(-10, 10, allow_nan=False), min_size=3, max_size=3)


@settings(max_examples=60, deadline=None)
@given(vectors, vectors)
def test_pcgrad_removes_the_conflicting_component(g1, g2):
    a, b = torch.tensor(g1, dtype=torch.float64), torch.tensor(g2, dtype=torch.float64)
    if a.norm() < 1e-3 or b.norm() < 1e-3:
        return
    balancer = Aggregate(["a", "b"], aggregator="torchjd.aggregation.PCGrad")
    out = balancer.aggregate(torch.stack([a, b]), ["a", "b"])
    if a @ b < 0:  # each gradient loses its component along the other one
        pa, pb = a - (a @ b) / (b @ b) * b, b - (b @ a) / (a @ a) * a
        assert abs(float(pa @ b)) <= 1e-6 * float(a.norm() * b.norm()) + 1e-9
        torch.testing.assert_close(out, pa + pb, rtol=1e-6, atol=1e-6)
    else:  # no conflict: the plain sum
        torch.testing.assert_close(out, a + b, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out, PCGrad()(torch.stack([a, b])))


def test_any_torchjd_aggregator_by_its_path_and_options():
    balancer = Aggregate(
        TASKS, aggregator="torchjd.aggregation.Constant", options={"weights": [1.0, 2.0, 3.0]}
    )
    matrix = torch.eye(3)
    assert balancer.aggregate(matrix, TASKS).tolist() == [1.0, 2.0, 3.0]
    assert balancer.weights() == {"a": 1.0, "b": 2.0, "c": 3.0}


@pytest.mark.parametrize(
    ("path", "match"),
    [
        ("torchjd.aggregation.NoSuch", "torchjd.aggregation has no 'NoSuch'"),
        ("torchjd.aggregation.CAGrad", "bad options"),
    ],
)
def test_a_bad_aggregator_is_one_line(path, match):
    with pytest.raises(MtlError, match=match):
        Aggregate(TASKS, aggregator=path)
