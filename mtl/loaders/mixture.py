"""Mixtures: the task weights at every point of a run, and the exact batch counts they give.

A `Mixture` is a pure function of the task sizes (`n_t`, batches per pass) and its options, so a
loader built on it keeps an exact `len()` and resumes from (epoch, step) with no state of its own.

Weightings (`p_t`, normalised over the tasks):

- `proportional`: `p_t ~ n_t`; `uniform`: equal;
- `temperature`: `p_t ~ min(n_t, size_cap) ** (1 / T)`; with `temperature_end`, T moves from
  `temperature` at the first epoch to `temperature_end` at the last (`shape`: linear or cosine);
- `annealed` (Stickland & Murray 2019): `p_t ~ n_t ** a`, `a = 1 - 0.8 e / (E - 1)` at epoch e of
  E (0-based): proportional at the first epoch, towards uniform at the last;
- a mapping `{task: weight}` (weights >= 0, not all 0).

Schedules by epoch need the run's epochs (`epochs`, given by the trainer). `stages` is a list of
`{until: <step or fraction of the run>, weighting: ..., temperature: ...}`: each stage's mixture
holds for the loader steps (batches: optimizer steps x `trainer.grad_accum`) before its
`until` (a float in (0, 1] is that fraction of the run's steps), the last stage (no `until`) to
the end. Caps: `max_passes` (a number, or one per task) bounds the passes a task makes over its
data in one epoch; once a task reaches it, its mass goes to the others.

`counts(length, epoch)` turns an epoch of fixed length into exact batch counts per stretch of
steps with one mixture: each stretch's steps split by the weights (largest remainders), so the
planned shares equal the weights within the rounding of one epoch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mtl.errors import MtlError, did_you_mean
from mtl.values import is_int, is_number

WEIGHTINGS = ("proportional", "uniform", "temperature", "annealed")
SHAPES = ("linear", "cosine")


def _temperature(value: Any, key: str) -> float:
    if not is_number(value) or not 0 < value < math.inf:
        raise MtlError(f"{key}: got {value!r}; use a number > 0")
    return float(value)


@dataclass(frozen=True)
class MixtureOptions:
    """A mixture's options (`loader.<key>`, see above): the same for every loader that mixes by
    weights (`WeightedLoader`'s `**mixture`). What needs no task is checked here, once for
    every such loader; the weights and caps of each task by `Mixture`."""

    weighting: str | Mapping[str, float] = "proportional"
    temperature: float = 2.0
    temperature_end: float | None = None
    shape: str = "linear"
    size_cap: int | None = None
    stages: list | None = None
    max_passes: float | Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise MtlError(
                f"shape: got {self.shape!r}; {did_you_mean(str(self.shape), SHAPES)}use one of "
                f"{', '.join(SHAPES)}"
            )
        if self.temperature_end is not None:
            _temperature(self.temperature_end, "temperature_end")
        cap = self.size_cap
        if cap is not None and (not is_int(cap) or cap < 1):
            raise MtlError(f"size_cap: got {cap!r}; use an integer >= 1 or null (no cap)")


class Mixture:
    """The task weights of a run over tasks `names` of `sizes` batches per pass (see above)."""

    def __init__(
        self,
        names: Sequence[str],
        sizes: np.ndarray,
        options: MixtureOptions | None = None,
        *,
        epochs: int | None = None,
    ) -> None:
        options = options or MixtureOptions()
        self.names, self.sizes = list(names), np.asarray(sizes, dtype=np.int64)
        self.size_cap = None if options.size_cap is None else int(options.size_cap)
        self.shape = options.shape
        self.epochs = epochs
        self.base = self._stage(
            {"weighting": options.weighting, "temperature": options.temperature}, ""
        )
        end = options.temperature_end
        self.temperature_end = None if end is None else float(end)
        self.stages = [self._stage(s, f"stages[{i}].") for i, s in enumerate(options.stages or [])]
        tempered = [s for s in (self.base, *self.stages) if s["weighting"] == "temperature"]
        if end is not None and not tempered:
            raise MtlError(
                f"temperature_end={end} moves the temperature of weighting="
                "temperature, which this mixture does not use; give weighting=temperature, or "
                "drop temperature_end"
            )
        self.caps = self._caps(options.max_passes)
        if self.moves and not epochs:
            raise MtlError(
                "weighting=annealed, temperature_end and stages change over the run: the loader "
                "needs the run's epochs (epochs=E; training gives trainer.epochs)"
            )

    # -- options ------------------------------------------------------------------------------

    @property
    def moves(self) -> bool:
        """Whether the weights change over the run."""
        annealed = self.base["weighting"] == "annealed"
        return annealed or self.temperature_end is not None or bool(self.stages)

    def _stage(self, stage: Mapping[str, Any], where: str) -> dict[str, Any]:
        if not isinstance(stage, Mapping):
            raise MtlError(
                f"{where or 'stages'}: got {stage!r}; give {{until: ..., weighting: ...}}"
            )
        unknown = set(stage) - {"until", "weighting", "temperature"}
        if unknown:
            raise MtlError(
                f"{where}{sorted(unknown)[0]}: unknown key; a stage has until, weighting and "
                "temperature"
            )
        weighting = stage.get("weighting", "proportional")
        if isinstance(weighting, str):
            if weighting not in WEIGHTINGS:
                raise MtlError(
                    f"{where}weighting: got {weighting!r}; {did_you_mean(weighting, WEIGHTINGS)}"
                    f"use one of {', '.join(WEIGHTINGS)} "
                    "or a mapping of task -> weight"
                )
        elif isinstance(weighting, Mapping):
            weighting = self._weights(weighting, f"{where}weighting")
        else:
            raise MtlError(
                f"{where}weighting: got {weighting!r}; use a name or a task -> weight mapping"
            )
        temperature = _temperature(stage.get("temperature", 2.0), f"{where}temperature")
        return {"until": stage.get("until"), "weighting": weighting, "temperature": temperature}

    def _weights(self, weights: Mapping[str, float], key: str) -> dict[str, float]:
        for name in weights:
            if name not in self.names:
                raise MtlError(f"{key}: unknown task {name!r}; tasks are {self.names}")
        checked = {}
        for name in self.names:
            if name not in weights:
                raise MtlError(f"{key}: no weight for task {name!r}; give one for every task")
            w = weights[name]
            if not is_number(w) or not 0 <= w < math.inf:
                raise MtlError(f"{key}: task {name!r} has weight {w!r}; use a number >= 0")
            checked[name] = float(w)
        if not any(checked.values()):
            raise MtlError(f"{key}: all weights are 0; give at least one task a weight > 0")
        return checked

    def _caps(self, max_passes: Any) -> np.ndarray | None:
        if max_passes is None:
            return None
        given = (
            max_passes if isinstance(max_passes, Mapping) else dict.fromkeys(self.names, max_passes)
        )
        for name, value in given.items():
            if name not in self.names:
                raise MtlError(f"max_passes: unknown task {name!r}; tasks are {self.names}")
            if not is_number(value) or not 0 < value:
                raise MtlError(
                    f"max_passes: task {name!r} has {value!r}; use a number of passes > 0 "
                    "(null: no cap)"
                )
        caps = [
            math.floor(given[n] * s) if n in given else math.inf
            for n, s in zip(self.names, self.sizes, strict=True)
        ]
        if min(caps) < 1:
            raise MtlError("max_passes: a cap below one batch leaves that task no step; raise it")
        return np.array(caps, dtype=float)

    def options(self) -> dict[str, Any]:
        """Everything the weights depend on besides the sizes (for the loader's resume check)."""
        options = {
            "weighting": self.base["weighting"],
            "temperature": self.base["temperature"],
            "temperature_end": self.temperature_end,
            "shape": self.shape,
            "size_cap": self.size_cap,
            "stages": [dict(s) for s in self.stages] or None,
            "max_passes": None if self.caps is None else self.caps.tolist(),
        }
        if self.moves:
            options["epochs"] = self.epochs
        return options

    # -- weights ------------------------------------------------------------------------------

    def progress(self, epoch: int) -> float:
        """Where epoch `epoch` is in the run: 0 at the first epoch, 1 at the last."""
        if not self.epochs or self.epochs < 2:
            return 0.0
        return min(epoch, self.epochs - 1) / (self.epochs - 1)

    def temperature_at(self, epoch: int, start: float) -> float:
        if self.temperature_end is None:
            return start
        x = self.progress(epoch)
        if self.shape == "cosine":
            x = (1 - math.cos(math.pi * x)) / 2
        return start + (self.temperature_end - start) * x

    def stage_weights(self, stage: dict[str, Any], epoch: int) -> np.ndarray:
        """Unnormalised weights of `stage` (or the base mixture) at `epoch`."""
        sizes, weighting = self.sizes.astype(float), stage["weighting"]
        if weighting == "proportional":
            return sizes
        if weighting == "uniform":
            return np.ones_like(sizes)
        if weighting == "annealed":
            return sizes ** (1.0 - 0.8 * self.progress(epoch))
        if weighting == "temperature":  # scaled to the largest first: 1/T may be huge
            capped = sizes if self.size_cap is None else np.minimum(sizes, self.size_cap)
            return (capped / capped.max()) ** (
                1.0 / self.temperature_at(epoch, stage["temperature"])
            )
        return np.array([weighting[n] for n in self.names])

    def in_play(self) -> np.ndarray:
        """Tasks with a weight > 0 at some point of the run."""
        playing = self.stage_weights(self.base, 0) > 0
        for stage in self.stages:
            playing |= self.stage_weights(stage, 0) > 0
        return playing

    def weights(self, epoch: int, step: int = 0, length: int | None = None) -> np.ndarray:
        """The normalised weights at `step` of `epoch` (epochs of `length` steps, for stages)."""
        stage = self.base
        if self.stages:
            stage = self.stages[self._stage_index(epoch * (length or 0) + step, length or 0)]
        w = self.stage_weights(stage, epoch)
        w = w / w.max()  # weights near the float maximum: their sum would overflow
        return w / w.sum()

    def boundaries(self, length: int) -> list[int]:
        """The global steps where each stage ends (the last: none), in epochs of `length`
        steps (stages need a fixed length: `WeightedLoader.mix` says so)."""
        if not self.stages:
            return []
        total = length * self.epochs
        ends = []
        typed = []  # each end as the user wrote it: a step, or a fraction (and its step)
        for i, stage in enumerate(self.stages[:-1]):
            until = stage["until"]
            shown = f"{until} (step {round(until * total)})" if isinstance(until, float) else until
            if isinstance(until, float) and 0 < until <= 1:
                until = round(until * total)
            elif not is_int(until) or until < 1:
                raise MtlError(
                    f"stages[{i}].until: got {until!r}; give a loader step >= 1 or a fraction "
                    "of the run in (0, 1]"
                )
            if ends and until <= ends[-1]:
                raise MtlError(f"stages[{i}].until: {shown} does not come after {typed[-1]}")
            if until >= total:
                raise MtlError(
                    f"stages[{i}].until: {shown} is at or past the run's end ({total} loader "
                    "steps); the stages after it would never run"
                )
            ends.append(int(until))
            typed.append(shown)
        if self.stages[-1]["until"] is not None:
            raise MtlError("stages: the last stage runs to the end; give it no until")
        return ends

    def _stage_index(self, global_step: int, length: int) -> int:
        return int(np.searchsorted(self.boundaries(length), global_step, side="right"))

    # -- counts -------------------------------------------------------------------------------

    def counts(
        self, length: int, epoch: int, per_step: int = 1, slots: int | None = None
    ) -> list[np.ndarray]:
        """Batch counts per task for each stretch of epoch `epoch` (of `length` steps) that has
        one mixture, in order: the stretch's batches (`per_step` a step; `slots` in the epoch,
        the last step holding what is left) split by its weights, each task within its cap
        for the epoch (the mass of a capped task goes to the others)."""
        ends = self.boundaries(length)
        start, stop = epoch * length, (epoch + 1) * length
        cuts = [start, *(e for e in ends if start < e < stop), stop]
        slots = length * per_step if slots is None else slots
        left = np.full(len(self.names), np.inf) if self.caps is None else self.caps.copy()
        stretches = []
        for a, b in zip(cuts, cuts[1:], strict=False):
            p = self.weights(epoch, a - start, length)
            size = min((b - start) * per_step, slots) - (a - start) * per_step
            counts = fill(size, p, left, epoch)
            left -= counts
            stretches.append(counts)
        return stretches


def fill(length: int, p: np.ndarray, room: np.ndarray, epoch: int) -> np.ndarray:
    """`length` steps split by weights `p` (largest remainders), no task above its `room`."""
    counts = np.zeros(len(p), dtype=np.int64)
    active = (p > 0) & (room > 0)
    left = length
    while left > 0:
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            raise MtlError(
                f"max_passes: at epoch {epoch} every task in play has reached its cap with "
                f"{left} steps of the epoch left; raise the caps or shorten the epoch"
            )
        share = p[idx] / p[idx].sum() * left
        full = share >= room[idx] - counts[idx]
        if full.any():  # these reach their cap: give them that, the rest is shared again
            capped = idx[full]
            take = (room[capped] - counts[capped]).astype(np.int64)
            counts[capped] += take
            left -= int(take.sum())
            active[capped] = False
            continue
        base = np.floor(share).astype(np.int64)
        extra = left - int(base.sum())
        order = np.argsort(-(share - base), kind="stable")[:extra]
        base[order] += 1
        counts[idx] += base
        left = 0
    return counts
