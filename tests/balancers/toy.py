"""A toy multi-task model and a one-process stand-in for the accelerator, for the balancer tests."""

from __future__ import annotations

import torch
from torch import nn


class Toy(nn.Module):
    """A shared encoder (two layers) and one head per task, named as MultiTaskModel names them;
    task i reads every len(tasks)-th row from row i."""

    def __init__(self, tasks: list[str]):
        super().__init__()
        torch.manual_seed(0)
        self.tasks = list(tasks)
        self.encoder = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 5))
        self.heads = nn.ModuleDict({t: nn.Linear(5, 1) for t in self.tasks})

    def task_losses(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden, n = self.encoder(x), len(self.tasks)
        return {t: (self.heads[t](hidden[i::n]) ** 2).mean() for i, t in enumerate(self.tasks)}


class OneProcess:
    """What the balancers ask of accelerate's `Accelerator`, for one process on the CPU."""

    device, num_processes = torch.device("cpu"), 1

    @staticmethod
    def unwrap_model(model):
        return model

    @staticmethod
    def backward(loss):
        loss.backward()
