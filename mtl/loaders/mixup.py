"""MixupLoader: one batch of every task per step, merged into one shuffled batch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mtl.errors import MtlError
from mtl.loaders.base import CompositeLoader


def _pad_to(x: torch.Tensor, length: int, value: int) -> torch.Tensor:
    """Right-pad the last dimension of a 2-D tensor to `length`."""
    return F.pad(x, (0, length - x.shape[1]), value=value)


class MixupLoader(CompositeLoader):
    """Each step takes one batch of every active task and merges them into one batch.

    Merging: every task batch is right-padded to the longest sequence of the step
    (`input_ids` with `pad_token_id`, `attention_mask` and `token_type_ids` with 0, 2-D labels
    with -100), the rows are concatenated and then shuffled. The merged batch is::

        {"input_ids": Long[N, L], "attention_mask": Long[N, L],
         "token_type_ids": Long[N, L] (only if some task has it; 0 where a task has none),
         "task_ids": Long[N] (index into "tasks"), "tasks": [all task names, given order],
         "labels": {task: its rows' labels, in the order those rows appear in the batch},
         "example_ids": Long[N] (only if every task batch has it)}

    N is the sum of the active tasks' batch sizes. Other keys of the task batches are dropped.

    One epoch (`n_t` = `len()` of task t's loader, T tasks):

    - `exhaust="cycle_to_longest"` (default): `len() = max(n_t)` steps, every task in every
      step; a task that runs out starts a new pass (fresh shuffle from its sampler).
    - `exhaust="each_once"`: `len() = max(n_t)`; a task that runs out leaves the remaining steps,
      so batches shrink, and every batch of every task is used exactly once.
    - `exhaust="first"`: `len() = min(n_t)`, every task in every step.
    - `steps_per_epoch=N`: N steps, every task in every step; tasks restart a pass whenever they
      run out and continue across epochs.

    Random: only the row shuffle, from `np.random.default_rng([seed, epoch, step])`, the same on
    every process and on resume. Batch order within a task comes from its sampler, which gets
    `set_epoch(pass)` for every new pass. `target_shares()` are shares of rows, estimated from
    each task's mean batch size `len(dataset) / len(loader)` (1 where a loader has no dataset).
    """

    exhaust_choices = ("cycle_to_longest", "each_once", "first")

    def __init__(
        self,
        loaders: Mapping[str, Iterable],
        *,
        seed: int = 0,
        exhaust: str | None = None,
        steps_per_epoch: int | None = None,
        pad_token_id: int = 0,
    ) -> None:
        super().__init__(loaders, seed=seed, exhaust=exhaust, steps_per_epoch=steps_per_epoch)
        if not isinstance(pad_token_id, (int, np.integer)) or isinstance(pad_token_id, bool):
            raise MtlError(f"pad_token_id: got {pad_token_id!r}; use an integer token id")
        self.pad_token_id = int(pad_token_id)

    def _options(self) -> dict[str, Any]:
        return {**super()._options(), "pad_token_id": self.pad_token_id}

    def _build_schedule(self, epoch: int) -> np.ndarray:
        """Bool [step, task]: which tasks give a batch at each step."""
        if self.steps_per_epoch is not None:
            steps = self.steps_per_epoch
        else:
            steps = self.sizes.min() if self.exhaust == "first" else self.sizes.max()
        if self.exhaust == "each_once":
            return np.arange(steps)[:, None] < self.sizes[None, :]
        return np.ones((steps, len(self.names)), dtype=bool)

    def _counts(self, rows: np.ndarray) -> np.ndarray:
        return rows.sum(axis=0)

    def _tasks_at(self, row: np.ndarray) -> list[int]:
        return np.flatnonzero(row).tolist()

    def target_shares(self) -> dict[str, float]:
        rows = self._counts(self.schedule(self.epoch)).astype(float)
        for t, stream in enumerate(self._streams):
            dataset = getattr(stream.loader, "dataset", None)
            if hasattr(dataset, "__len__"):
                rows[t] *= len(dataset) / stream.size
        return {n: float(r / rows.sum()) for n, r in zip(self.names, rows, strict=True)}

    def _combine(self, epoch: int, step: int, batches: list[tuple[int, Any]]) -> dict[str, Any]:
        for t, batch in batches:
            if not isinstance(batch, Mapping) or not {"input_ids", "labels"} <= batch.keys():
                raise MtlError(
                    f"task {self.names[t]!r}: mixup needs dict batches with 'input_ids', "
                    "'attention_mask' and 'labels'"
                )
        length = max(batch["input_ids"].shape[1] for _, batch in batches)
        n_rows = sum(batch["input_ids"].shape[0] for _, batch in batches)
        perm = torch.from_numpy(np.random.default_rng([self.seed, epoch, step]).permutation(n_rows))

        def merged(key: str, pad: int) -> torch.Tensor:
            parts = []
            for _, batch in batches:
                x = batch.get(key)
                if x is None:
                    x = torch.zeros_like(batch["input_ids"])
                parts.append(_pad_to(x, length, pad))
            return torch.cat(parts)[perm]

        task_ids = torch.cat(
            [torch.full((b["input_ids"].shape[0],), t, dtype=torch.long) for t, b in batches]
        )
        out: dict[str, Any] = {
            "input_ids": merged("input_ids", self.pad_token_id),
            "attention_mask": merged("attention_mask", 0),
        }
        if any("token_type_ids" in batch for _, batch in batches):
            out["token_type_ids"] = merged("token_type_ids", 0)
        out["task_ids"] = task_ids[perm]
        out["tasks"] = list(self.names)
        # Row j of the output is concatenated row perm[j]; a task's rows, in output order, are
        # perm[task_ids_out == t] minus the task's offset in the concatenation.
        out["labels"] = {}
        offset = 0
        for t, batch in batches:
            labels = batch["labels"]
            if labels.ndim == 2:
                labels = _pad_to(labels, length, -100)
            out["labels"][self.names[t]] = labels[perm[out["task_ids"] == t] - offset]
            offset += batch["input_ids"].shape[0]
        if all("example_ids" in batch for _, batch in batches):
            out["example_ids"] = torch.cat([batch["example_ids"] for _, batch in batches])[perm]
        return out
