"""Gradient aggregation through torchjd: per-task gradients of the shared encoder -> one update."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from mtl.balancers.base import Balancer
from mtl.errors import MtlError, import_target


class Aggregate(Balancer):
    """A torchjd aggregator applied to the step's per-task gradients of the shared encoder.

    `aggregator` is the import path of any `torchjd.aggregation.Aggregator` (UPGrad, MGDA,
    PCGrad, CAGrad, IMTLG, AlignedMTL, NashMTL, DualProj, GradDrop, ...); `options` its
    constructor's arguments (a list becomes a tensor, e.g. `pref_vector`; NashMTL's `n_tasks`
    is the number of tasks unless given). The encoder's gradient becomes the aggregator's output
    on the matrix with one row per task of the step (each the gradient of the task's loss times
    its loss weight); `weights()` are the weights the aggregator's weighting gave the rows,
    where it has one (GradDrop has none), kept on the device until they are logged.

    On a GPU most of torchjd's aggregators wait for the device once a step: UPGrad and DualProj
    solve their projection on the host (the tasks' Gramian is read), MGDA iterates to a
    tolerance checked on the host; mtl's own step reads nothing
    (tests/training/test_host_reads.py names these).
    """

    aggregates = True

    def __init__(
        self,
        tasks: Sequence[str],
        loss_weights: Mapping[str, float] | None = None,
        aggregator: str = "torchjd.aggregation.UPGrad",
        options: dict[str, Any] | None = None,
    ):
        super().__init__(tasks, loss_weights)
        cls = import_target(aggregator, "balancer.aggregator", object)  # a class
        kwargs = {
            k: torch.tensor(v) if isinstance(v, list) else v for k, v in dict(options or {}).items()
        }
        if "n_tasks" in inspect.signature(cls).parameters:
            kwargs.setdefault("n_tasks", len(self.tasks))
        try:
            self.aggregator = cls(**kwargs)
        except ImportError as err:
            raise MtlError(
                f"aggregator={aggregator} needs packages that are not installed ({err}); "
                "install them with: pip install 'torchjd[full]'"
            ) from None
        except (TypeError, ValueError) as err:
            raise MtlError(f"aggregator={aggregator}: bad options {kwargs}: {err}") from None
        self.last: tuple[list[str], torch.Tensor] | None = None  # the last step's weights

    def aggregate(self, matrix: torch.Tensor, tasks: Sequence[str]) -> torch.Tensor:
        weighting = getattr(self.aggregator, "weighting", None)
        if weighting is None:
            self.last = None
            return self.aggregator(matrix)
        weights = weighting(matrix)
        self.last = (list(tasks), weights.detach())  # read when logged, not at every step
        return weights @ matrix

    def weights(self) -> dict[str, float]:
        if self.last is None:
            return {}
        tasks, weights = self.last
        return dict(zip(tasks, weights.tolist(), strict=True))
