"""Loss weightings: each task's term of the step (`terms`), times its loss weight (`Balancer`),
summed into the one loss backpropagated."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from mtl.balancers.base import Balancer
from mtl.errors import MtlError


class Sum(Balancer):
    """The sum of the task losses, each times its `model.loss_weights` weight (1.0 unless set):
    `Balancer`'s own terms and loss (the default)."""


class Uncertainty(Balancer):
    """Homoscedastic uncertainty weighting (Kendall, Gal and Cipolla, CVPR 2018).

    Each task has a learned log-variance `s` (`log_variance`, starting at `init_log_variance`),
    trained with the model. A task's term is `c * exp(-s) * L + s / 2`, times its loss weight
    `w` (the whole term: the weight survives the learned variance), with `c` 1/2 for a
    regression task (the Gaussian likelihood: L / 2σ² + log σ) and 1 for the others (the
    classification form: L / σ² + log σ). `weights()` gives `w * c * exp(-s)`.
    """

    def __init__(
        self,
        tasks: Sequence[str],
        loss_weights: Mapping[str, float] | None = None,
        regression: Sequence[str] = (),
        init_log_variance: float = 0.0,
    ):
        super().__init__(tasks, loss_weights)
        self.index = {name: i for i, name in enumerate(self.tasks)}
        self.log_variance = nn.Parameter(torch.full((len(self.tasks),), float(init_log_variance)))
        scale = [0.5 if name in set(regression) else 1.0 for name in self.tasks]
        self.register_buffer("scale", torch.tensor(scale))

    def terms(self, task_losses: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        terms = {}
        for name, value in task_losses.items():
            i = self.index[name]
            s = self.log_variance[i]
            terms[name] = self.scale[i] * torch.exp(-s) * value + 0.5 * s
        return terms

    def task_factors(self) -> dict[str, float]:
        factors = (self.scale * torch.exp(-self.log_variance.detach())).tolist()
        return dict(zip(self.tasks, factors, strict=True))


class DWA(Balancer):
    """Dynamic weight average (Liu, Johns and Davison, CVPR 2019).

    The run is cut into windows of `window` optimizer steps (the paper's epochs). A task's
    weight is `T * softmax(r / temperature)` over the T tasks, `r` the ratio of its mean loss
    in the last window to that in the window before (all processes' losses); weight 1 until two
    windows are done. A task with no loss in a window keeps its previous mean. Each term is
    also times the task's loss weight.
    """

    def __init__(
        self,
        tasks: Sequence[str],
        loss_weights: Mapping[str, float] | None = None,
        temperature: float = 2.0,
        window: int = 50,
    ):
        super().__init__(tasks, loss_weights)
        if temperature <= 0:
            raise MtlError(f"temperature={temperature} must be > 0 (the paper uses 2)")
        if window < 1:
            raise MtlError(f"window={window} must be >= 1 optimizer steps")
        self.temperature, self.window = float(temperature), int(window)
        self.index = {name: i for i, name in enumerate(self.tasks)}
        n = len(self.tasks)
        self.register_buffer("factors", torch.ones(n))
        self.register_buffer("sums", torch.zeros(n, dtype=torch.float64))
        self.register_buffer("counts", torch.zeros(n, dtype=torch.float64))
        self.register_buffer("last", torch.full((n,), float("nan"), dtype=torch.float64))
        self.register_buffer("before", torch.full((n,), float("nan"), dtype=torch.float64))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.host_steps = 0  # `steps` on the host, so that a step reads no device value
        self.register_load_state_dict_post_hook(_host_steps_loaded)

    def terms(self, task_losses: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        terms = {}
        for name, value in task_losses.items():
            i = self.index[name]
            self.sums[i] += value.detach().double()
            self.counts[i] += 1
            # the loss weight multiplies this product (`Balancer.weigh`): w * (f * L) rounds
            # as (w * f) * L did before only for a weight that is a power of two (1, 2, 0.5)
            terms[name] = self.factors[i] * value
        return terms

    def after_step(self, sum_over_processes: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.steps += 1
        self.host_steps += 1
        if self.host_steps % self.window:
            return
        sums, counts = sum_over_processes(self.sums), sum_over_processes(self.counts)
        means = torch.where(counts > 0, sums / counts.clamp(min=1), self.last)
        self.before.copy_(self.last)
        self.last.copy_(means)
        self.sums.zero_()
        self.counts.zero_()
        ratio = self.last / self.before
        n = len(self.tasks)
        moved = n * torch.softmax(ratio / self.temperature, dim=0).float()
        # kept until two windows are done (a NaN ratio), without reading the device
        self.factors.copy_(torch.where(torch.isfinite(ratio).all(), moved, self.factors))

    def task_factors(self) -> dict[str, float]:
        return dict(zip(self.tasks, self.factors.tolist(), strict=True))


def _host_steps_loaded(module: DWA, keys) -> None:
    """After a checkpoint's state is loaded: `host_steps` from the loaded `steps` (a read of
    the device at resume, not in a step)."""
    module.host_steps = int(module.steps)
