"""WeightedLoader: what the loaders that mix by task weights share (`RandomLoader`,
`MixupLoader` given a weighting)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import numpy as np

from mtl.errors import MtlError
from mtl.loaders.base import CompositeLoader
from mtl.loaders.mixture import Mixture, MixtureOptions
from mtl.loaders.online import OnlineMixing


class WeightedLoader(CompositeLoader):
    """What a loader that mixes by task weights shares (`RandomLoader`, and `MixupLoader` given
    a weighting): its `mixture` (None: it mixes without weights), `loader.online`, their
    options, the logged weights and the state a resume needs. A subclass takes the mixture's
    options as `**mixture` (`mixture_options`' fields: the config's schema lists them) and
    calls `mix` once its epochs are known.

    Its epochs of a fixed number of steps (`fixed_length`) are planned in slots, `per_step`
    task batches a step (1 for a RandomLoader): each stretch of steps with one mixture has its
    slots split by the weights (`Mixture.counts`), laid out by `arrange` and read by step by
    `by_step`."""

    per_step = 1
    mixture: Mixture | None = None
    online: OnlineMixing | None = None
    mixture_options = MixtureOptions  # what `**mixture` takes

    def mix(self, mixture: Mapping[str, Any], online: Any, epochs: int | None) -> None:
        """This loader's `mixture` from its options, and `loader.online`; each rule that joins
        them to the loader's epochs here, once for every weighted loader."""
        try:
            options = self.mixture_options(**mixture)
        except TypeError as err:  # a key the options do not have
            names = ", ".join(f.name for f in fields(self.mixture_options))
            raise MtlError(f"loader: {err}; its options are {names}") from None
        self.mixture = Mixture(self.names, self.sizes, options, epochs=epochs)
        if options.stages and self.fixed_length is None:
            raise MtlError(
                f"loader.stages need epochs of a fixed number of steps (exhaust=each_once or "
                f"steps_per_epoch), not exhaust={self.exhaust}"
            )
        if options.max_passes is not None and self.exhaust == "first":
            raise MtlError(
                "loader.max_passes: under exhaust=first no task makes a second pass; use "
                "each_once, cycle_to_longest or steps_per_epoch"
            )
        if options.stages:
            self.mixture.boundaries(self.fixed_length)  # one line for a bad `until`
        self.online = None if online is None else OnlineMixing(self, online)

    @property
    def fixed_length(self) -> int | None:
        """Steps of every epoch where that is fixed, else None."""
        raise NotImplementedError

    @property
    def slots(self) -> int:
        """Task batches in an epoch of `fixed_length` steps."""
        return self.fixed_length * self.per_step

    def arrange(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Slots holding `counts[t]` batches of each task t, in the order they are taken."""
        return rng.permutation(np.repeat(np.arange(len(self.names)), counts))

    def by_step(self, slots: np.ndarray) -> np.ndarray:
        """The schedule of the slots (`per_step` a step)."""
        return slots

    def planned(self, epoch: int) -> np.ndarray:
        """The schedule of a fixed-length epoch: static, or from the online policy's plan."""
        if self.online is not None:
            return self.by_step(self.online.schedule(epoch))
        rng, length = self.rng(epoch), self.fixed_length
        counts = self.mixture.counts(length, epoch, self.per_step, self.slots)
        return self.by_step(np.concatenate([self.arrange(c, rng) for c in counts]))

    def options(self) -> dict[str, Any]:
        options = super().options()
        if self.mixture is not None:
            options.update(self.mixture.options())
        if self.online is not None:  # absent otherwise: older checkpoints resume as they were
            options["online"] = self.online.options()
        return options

    def mix_weights(self) -> dict[str, float]:
        """The weights of the step last drawn (of the first step before any); with
        `online`, the policy's latest weights (those the next steps are drawn from)."""
        if self.online is not None:
            return {n: float(w) for n, w in zip(self.names, self.online.weights, strict=True)}
        if self.mixture is None:
            return super().mix_weights()
        epoch, step = self.position
        if step == 0 and epoch > 0:  # an epoch just ended: its last step
            epoch, step = epoch - 1, self.epoch_length(epoch - 1)
        p = self.mixture.weights(epoch, max(step - 1, 0), self.fixed_length)
        return {n: float(w) for n, w in zip(self.names, p, strict=True)}

    def __iter__(self):
        if self.online is not None:
            self.online.begin(self._epoch)
        return super().__iter__()

    def update_mixture(self, figures: Mapping, step: int) -> None:
        """`loader.online`: the policy's next weights from `figures` (the same on every rank),
        and the rest of the epoch redrawn from them."""
        if self.online is None:
            raise MtlError("update_mixture: this loader has no loader.online policy")
        self.online.update(figures, step)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.online is not None:
            state["online"] = self.online.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.online is not None:
            if "online" not in state:
                raise MtlError("loader state: saved without loader.online; resume without it")
            self.online.load_state_dict(state["online"])
        super().load_state_dict(state)
