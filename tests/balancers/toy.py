"""A toy multi-task model, and the training step's gradient path for it on a real one-process
accelerator, for the balancer tests."""

from __future__ import annotations

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from torch import nn

from mtl.models.multitask import ParameterGroups
from mtl.training.step import Step


class Toy(ParameterGroups, nn.Module):
    """A shared encoder (two layers) and one head per task, grouped as MultiTaskModel groups
    its parameters; task i reads every len(tasks)-th row from row i."""

    def __init__(self, tasks: list[str]):
        super().__init__()
        torch.manual_seed(0)
        self.tasks = list(tasks)
        self.encoder = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 5))
        self.heads = nn.ModuleDict({t: nn.Linear(5, 1) for t in self.tasks})

    def task_losses(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden, n = self.encoder(x), len(self.tasks)
        return {t: (self.heads[t](hidden[i::n]) ** 2).mean() for i, t in enumerate(self.tasks)}


def gradients(model: nn.Module, balancer):
    """The gradient path (`backward(task_losses, group)`, `step()`) the training step takes for
    `balancer`, on accelerate's one-process CPU accelerator."""
    AcceleratorState._reset_state(reset_partial_state=True)  # a fresh one-process state
    return Step(model, balancer, None, None, Accelerator(cpu=True)).gradients
