"""The balancer contract: what the training loop asks of a balancer, and when."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import torch
from torch import nn

Value = TypeVar("Value", torch.Tensor, float)


class Balancer(nn.Module):
    """How the tasks' losses of a step become one update of the shared encoder.

    Built once per run as `cls(tasks, loss_weights=..., regression=..., **options)` (each given
    argument only where the constructor names it): `tasks`, the task names in config order;
    `loss_weights`, `{task: model.loss_weights weight}` (1.0 unless set); `regression`, the
    tasks whose head is a regression (their loss a squared error).

    The model returns each task's loss (the mean over that task's rows); the balancer alone
    turns them into the update. `terms(task_losses)` gives each task's term (its loss unless a
    weighting's formula says otherwise); `weighted(task_losses)` multiplies each term by its
    task's loss weight, the one place `loss_weights` is applied (`weigh`).

    A loss weighting (`aggregates` false) backpropagates `loss(task_losses)`, the sum of the
    weighted terms, once per micro-step. A gradient aggregation (`aggregates` true) takes one
    gradient per task of each weighted term on the shared encoder's parameters, and is asked
    once per optimizer step, when the step holds several tasks, for `aggregate(matrix, tasks)`:
    one row per task (summed over the step's micro-steps, averaged over the processes that held
    the task); it returns the vector the encoder's gradient becomes. Each head keeps its own
    task's gradient. A step with one task passes through unchanged.

    A balancer is maths only: the training step (`mtl.training.step`) takes the gradients,
    synchronises them over the processes and calls it.

    `weights()` gives `{task: weight}` of the last step (logged as `task_weight/<task>`): the
    loss weight times `task_factors()`, unless overridden; `after_step(sum_over_processes)` is
    called after every optimizer step, with a function that sums a tensor over the processes. A
    balancer's parameters are trained by the run's optimizer; its parameters and buffers are
    saved with each checkpoint.
    """

    aggregates: bool = False

    def __init__(self, tasks: Sequence[str], loss_weights: Mapping[str, float] | None = None):
        super().__init__()
        self.tasks = list(tasks)
        self.loss_weights = {name: float((loss_weights or {}).get(name, 1.0)) for name in tasks}

    def weigh(self, values: Mapping[str, Value]) -> dict[str, Value]:
        """Each task's value times its loss weight (a weight of 1 multiplies nothing: on a
        device, a kernel and an autograd node a task fewer)."""
        weights = self.loss_weights
        return {n: v if weights[n] == 1.0 else weights[n] * v for n, v in values.items()}

    def terms(self, task_losses: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each task's term of the micro-step, before its loss weight: its loss (weightings with
        a formula of their own override this)."""
        return dict(task_losses)

    def weighted(self, task_losses: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each task's term times its loss weight."""
        return self.weigh(self.terms(task_losses))

    def loss(self, task_losses: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The loss to backpropagate for one micro-step's task losses (loss weightings): the sum
        of the weighted terms, in the order of `task_losses`."""
        return functools.reduce(operator.add, self.weighted(task_losses).values())

    def aggregate(self, matrix: torch.Tensor, tasks: Sequence[str]) -> torch.Tensor:
        """The update of the shared parameters from per-task gradients `matrix` [tasks, P]."""
        raise NotImplementedError(f"{type(self).__name__} weighs losses; it aggregates nothing")

    def task_factors(self) -> dict[str, float]:
        """`{task: factor}` the last step gave each task's loss, before its loss weight."""
        return dict.fromkeys(self.tasks, 1.0)

    def weights(self) -> dict[str, float]:
        """`{task: weight}` the last step gave each task."""
        return self.weigh(self.task_factors())

    def after_step(self, sum_over_processes: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Called after every optimizer step (a balancer with a schedule of its own uses it);
        `sum_over_processes(t)` is `t` summed over the run's processes."""
