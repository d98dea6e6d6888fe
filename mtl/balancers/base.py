"""The balancer contract: what the training loop asks of a balancer, and when."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn


class Balancer(nn.Module):
    """How the tasks' losses of a step become one update of the shared encoder.

    Built once per run as `cls(tasks, loss_weights=..., regression=..., **options)` (each given
    argument only where the constructor names it): `tasks`, the task names in config order;
    `loss_weights`, `{task: model.loss_weights weight}` (1.0 unless set); `regression`, the
    tasks whose head is a regression (their loss a squared error).

    A loss weighting (`aggregates` false) turns each micro-step's task losses (each the mean
    over that task's rows) into the one loss the loop backpropagates: `loss(task_losses)`.
    A gradient aggregation (`aggregates` true) is asked once per optimizer step, when the step
    holds several tasks, for `aggregate(matrix, tasks)`: one row per task, the gradient of that
    task's weighted loss on the shared encoder's parameters (summed over the step's
    micro-steps, averaged over processes); it returns the vector the encoder's gradient becomes.
    Each head keeps its own task's gradient. A step with one task passes through unchanged.

    `weights()` gives `{task: weight}` of the last step (logged as `task_weight/<task>`);
    `after_step()` is called after every optimizer step. A balancer's parameters are trained by
    the run's optimizer; its parameters and buffers are saved with each checkpoint.
    """

    aggregates: bool = False

    def __init__(self, tasks: Sequence[str], loss_weights: Mapping[str, float] | None = None):
        super().__init__()
        self.tasks = list(tasks)
        self.loss_weights = {name: float((loss_weights or {}).get(name, 1.0)) for name in tasks}
        self.last_weights: dict[str, float] = dict(self.loss_weights)

    def loss(self, task_losses: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The loss to backpropagate for one micro-step's task losses (loss weightings)."""
        raise NotImplementedError(f"{type(self).__name__} aggregates gradients; it has no loss")

    def aggregate(self, matrix: torch.Tensor, tasks: Sequence[str]) -> torch.Tensor:
        """The update of the shared parameters from per-task gradients `matrix` [tasks, P]."""
        raise NotImplementedError(f"{type(self).__name__} weighs losses; it aggregates nothing")

    def weights(self) -> dict[str, float]:
        """`{task: weight}` the last step gave each task."""
        return dict(self.last_weights)

    def after_step(self) -> None:
        """Called after every optimizer step (a balancer with a schedule of its own uses it)."""
