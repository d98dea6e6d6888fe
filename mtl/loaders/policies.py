"""The built-in online mixing policies (`loader.online.policy`; the protocol a policy of one's
own follows is in `mtl.loaders.online`).

The run starts from the configured mixture (`loader.weighting`, its weights `p`), and each
built-in policy keeps it as its prior, so that equal figures give the configured weights back
(a uniform `p` gives each policy's textbook form):

- `exp3` (online data mixing, Albalak et al. 2023): an EXP3 bandit whose reward is each task's
  training loss. Per update t (1, 2, ...): for each task i with a loss, `R_i <- smoothing * R_i +
  (1 - smoothing) * loss_i / w_i` (importance-weighted by the weight it was drawn with); then
  `eps = exploration` (or `min(1/K, sqrt(ln K / (K t)))` when not given) and
  `w_i = (1 - K eps) * p_i exp(eps R_i) / sum_j p_j exp(eps R_j) + K eps p_i`: exploration mixes
  toward the configured weights.
- `loss_softmax`: `w_i ~ p_i exp(loss_i / temperature)` over each task's latest training loss.
- `dev_gap`: `w_i ~ p_i (max(target_i - dev_i, 0) + floor)`, with `target` per task or, where
  none is given, the task's best dev figure so far; no weight moves before the first evaluation.

Losses of different task types differ in scale (a regression's squared error against a
cross-entropy, a generation task's per-token cross-entropy over a vocabulary against a
classification's over a few labels): as they are, exp3 and loss_softmax reward the larger one.
`normalize="first"` (their option) gives each task's loss over its first window's (the loss of
the first update at which the task had rows): every task starts at 1 and is rewarded by how
little it has come down since, whatever its scale. `dev_gap` compares dev figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mtl.errors import MtlError
from mtl.loaders.online_state import finite_figures, state_count
from mtl.values import is_number

Figures = Mapping[str, Mapping[str, float]]


def _positive(value: Any, key: str, *, zero: bool = False) -> float:
    ok = is_number(value) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero):
        need = ">= 0" if zero else "> 0"
        raise MtlError(f"loader.online.{key}: got {value!r}; give a number {need}")
    return float(value)


def softmax(scores: np.ndarray, prior: np.ndarray | None = None) -> np.ndarray:
    """`prior_i exp(scores_i)`, normalised (a uniform prior without one)."""
    soft = np.exp(scores - scores.max())
    if prior is not None:
        soft = soft * prior
    return soft / soft.sum()


class Prior:
    """The configured mixture a built-in policy keeps as its prior (`use_prior`): uniform until
    it is given."""

    prior: dict[str, float] | None = None

    def use_prior(self, prior: Mapping[str, float]) -> None:
        self.prior = {str(n): float(w) for n, w in prior.items()}

    def prior_of(self, names: Sequence[str]) -> np.ndarray:
        """The prior of `names`, normalised (uniform without one)."""
        if self.prior is None:
            return np.full(len(names), 1 / len(names))
        p = np.array([self.prior.get(n, 0.0) for n in names])
        return p / p.sum()


NORMALIZE = ("none", "first")


class LossScale:
    """Each task's training loss as a policy reads it: as it is (`normalize="none"`), or over
    the task's first window's loss (`"first"`; kept in the checkpoint)."""

    def __init__(self, normalize: str):
        if normalize not in NORMALIZE:
            raise MtlError(
                f"loader.online.normalize={normalize!r}; use one of {', '.join(NORMALIZE)}"
            )
        self.normalize = normalize
        self.first: dict[str, float] = {}

    def __call__(self, name: str, loss: float) -> float:
        if self.normalize == "none":
            return float(loss)
        first = self.first.setdefault(name, float(loss))
        return float(loss) / first if first > 0 else float(loss)

    def state_dict(self) -> dict[str, Any]:
        return {"first": dict(self.first)} if self.normalize != "none" else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.normalize != "none":
            self.first = finite_figures(state, "first")


class Exp3(Prior):
    """EXP3 over the tasks, rewarded by their training losses (see the module docstring)."""

    def __init__(
        self, exploration: float | None = None, smoothing: float = 0.9, normalize: str = "none"
    ):
        if exploration is not None:
            exploration = _positive(exploration, "exploration", zero=True)
        smoothing = _positive(smoothing, "smoothing", zero=True)
        if smoothing >= 1:
            raise MtlError(f"loader.online.smoothing: got {smoothing}; give a number in [0, 1)")
        self.exploration, self.smoothing = exploration, smoothing
        self.scale = LossScale(normalize)
        self.rewards: dict[str, float] = {}
        self.updates = 0

    def check_tasks(self, names: Sequence[str]) -> None:
        k = len(names)
        if self.exploration is not None and self.exploration * k > 1:
            raise MtlError(
                f"loader.online.exploration: got {self.exploration}; with {k} tasks give a "
                f"number in [0, 1/{k}]"
            )

    def update(self, figures: Figures, weights: Mapping[str, float]) -> dict[str, float]:
        names = list(weights)
        k = len(names)
        for name in names:
            loss = figures.get(name, {}).get("loss")
            if loss is not None and weights[name] > 0:
                old = self.rewards.get(name, 0.0)
                new = self.scale(name, loss) / weights[name]
                self.rewards[name] = self.smoothing * old + (1 - self.smoothing) * new
        self.updates += 1
        eps = self.exploration
        if eps is None:
            eps = min(1 / k, math.sqrt(math.log(k) / (k * self.updates))) if k > 1 else 0.0
        if eps * k > 1:
            raise MtlError(
                f"loader.online.exploration: got {eps}; with {k} tasks give at most 1/{k}"
            )
        p = self.prior_of(names)
        soft = softmax(np.array([eps * self.rewards.get(n, 0.0) for n in names]), p)
        w = (1 - k * eps) * soft + k * eps * p
        return {n: float(v) for n, v in zip(names, w, strict=True)}

    def shown(self) -> dict[str, float]:
        """Logged as `mix_policy/<task>`: each task's smoothed reward."""
        return dict(self.rewards)

    def state_dict(self) -> dict[str, Any]:
        return {"rewards": dict(self.rewards), "updates": self.updates, **self.scale.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rewards = finite_figures(state, "rewards")
        self.updates = state_count(state, "updates")
        self.scale.load_state_dict(state)


class LossSoftmax(Prior):
    """`w_i ~ p_i exp(loss_i / temperature)` over each task's latest training loss."""

    def __init__(self, temperature: float = 1.0, normalize: str = "none"):
        self.temperature = _positive(temperature, "temperature")
        self.scale = LossScale(normalize)
        self.losses: dict[str, float] = {}

    def update(self, figures: Figures, weights: Mapping[str, float]) -> dict[str, float]:
        for name in weights:
            loss = figures.get(name, {}).get("loss")
            if loss is not None:
                self.losses[name] = self.scale(name, loss)
        if not self.losses:
            return dict(weights)
        fill = float(np.mean(list(self.losses.values())))  # a task not seen yet: the mean
        scores = np.array([self.losses.get(n, fill) / self.temperature for n in weights])
        soft = softmax(scores, self.prior_of(list(weights)))
        return {n: float(s) for n, s in zip(weights, soft, strict=True)}

    def shown(self) -> dict[str, float]:
        """Logged as `mix_policy/<task>`: each task's latest training loss."""
        return dict(self.losses)

    def state_dict(self) -> dict[str, Any]:
        return {"losses": dict(self.losses), **self.scale.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.losses = finite_figures(state, "losses")
        self.scale.load_state_dict(state)


class DevGap(Prior):
    """`w_i ~ p_i (max(target_i - dev_i, 0) + floor)` (target: given, or the task's best so
    far)."""

    reads_dev = True  # the run must evaluate during training (trainer.eval_every)

    def __init__(self, target: Mapping[str, float] | None = None, floor: float = 0.05):
        self.target = {str(n): float(v) for n, v in (target or {}).items()}
        self.floor = _positive(floor, "floor")
        self.best: dict[str, float] = {}
        self.gaps: dict[str, float] = {}

    def check_tasks(self, names: Sequence[str]) -> None:
        unknown = sorted(set(self.target) - set(names))
        if unknown:
            raise MtlError(
                f"loader.online.target names {', '.join(map(repr, unknown))}, not a task of this "
                f"run ({', '.join(names)})"
            )

    def update(self, figures: Figures, weights: Mapping[str, float]) -> dict[str, float]:
        devs = {n: figures[n]["dev"] for n in weights if "dev" in figures.get(n, {})}
        if not devs:
            return dict(weights)
        for name, dev in devs.items():
            self.best[name] = max(self.best.get(name, dev), dev)
        gaps = {}
        for name in weights:
            if name not in devs:
                gaps[name] = 0.0
                continue
            target = self.target.get(name, self.best[name])
            gaps[name] = max(target - devs[name], 0.0)
        self.gaps = gaps
        p = dict(zip(gaps, self.prior_of(list(gaps)), strict=True))
        total = sum(p[n] * (g + self.floor) for n, g in gaps.items())
        return {n: p[n] * (g + self.floor) / total for n, g in gaps.items()}

    def shown(self) -> dict[str, float]:
        """Logged as `mix_policy/<task>`: each task's gap at the latest update."""
        return dict(self.gaps)

    def state_dict(self) -> dict[str, Any]:
        return {"best": dict(self.best), "gaps": dict(self.gaps)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best = finite_figures(state, "best")
        self.gaps = finite_figures({"gaps": {}, **state}, "gaps")  # logged only


POLICIES = {"exp3": Exp3, "loss_softmax": LossSoftmax, "dev_gap": DevGap}
