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
    (`input_ids` with `pad_token_id`, `attention_mask` and `token_type_ids` with 0, token
    labels, the 2-D labels as wide as their batch's `input_ids`, with -100; other labels, such
    as multi-hot rows [B, K], are kept as they are: a head whose 2-D labels are not per token
    reads their first K columns) and the tasks' rows are interleaved at random, each task's
    rows keeping their order (a task's rows, such as one example's choices, stay together in
    order when taken out by `task_ids`). It concatenates batches; it does not interpolate
    examples (the "mixup" of data augmentation). The merged batch is::

        {"input_ids": Long[N, L], "attention_mask": Long[N, L],
         "token_type_ids": Long[N, L] (only if some task has it; 0 where a task has none),
         "task_ids": Long[N] (index into "tasks"), "tasks": [all task names, given order],
         "labels": {task: its batch's labels, in its rows' order (as they appear in the batch)},
         "example_ids": Long[N] (only if every task batch has it),
         "num_tokens": int (the sum of the task batches' `num_tokens`, if every one has it)}

    N is the sum of the active tasks' batch sizes. Other keys of the task batches are dropped.
    (The model packs such a batch's rows for the encoder call, `mtl.models.packing`, so the
    padding to the longest row costs memory here, not compute there.)

    One epoch (`n_t` = `len()` of task t's loader, T tasks):

    - `exhaust="cycle_to_longest"` (default): `len() = max(n_t)` steps, every task in every
      step; a task that runs out starts a new pass (fresh shuffle from its sampler).
    - `exhaust="each_once"`: `len() = max(n_t)`; a task that runs out leaves the remaining steps,
      so batches shrink, and every batch of every task is used exactly once.
    - `exhaust="first"`: `len() = min(n_t)`, every task in every step.
    - `steps_per_epoch=N`: N steps, every task in every step; tasks restart a pass whenever they
      run out and continue across epochs.

    Random: only the interleaving, from `np.random.default_rng([seed, epoch, step])`, the same on
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
        self._layouts: dict[tuple[int, ...], tuple[np.ndarray, list]] = {}

    def options(self) -> dict[str, Any]:
        return {**super().options(), "pad_token_id": self.pad_token_id}

    def build_schedule(self, epoch: int) -> np.ndarray:
        """Bool [step, task]: which tasks give a batch at each step."""
        if self.steps_per_epoch is not None:
            steps = self.steps_per_epoch
        else:
            steps = self.sizes.min() if self.exhaust == "first" else self.sizes.max()
        if self.exhaust == "each_once":
            return np.arange(steps)[:, None] < self.sizes[None, :]
        return np.ones((steps, len(self.names)), dtype=bool)

    def target_shares(self) -> dict[str, float]:
        rows = self.task_counts(self.schedule(self.epoch)).astype(float)
        for t, stream in enumerate(self._streams):
            dataset = getattr(stream.loader, "dataset", None)
            if hasattr(dataset, "__len__"):
                rows[t] *= len(dataset) / stream.size
        return {n: float(r / rows.sum()) for n, r in zip(self.names, rows, strict=True)}

    def combine(self, epoch: int, step: int, batches: list[tuple[int, Any]]) -> dict[str, Any]:
        for t, batch in batches:
            if not (type(batch) is dict or isinstance(batch, Mapping)) or not (
                "input_ids" in batch and "labels" in batch
            ):
                raise MtlError(
                    f"task {self.names[t]!r}: mixup needs dict batches with 'input_ids', "
                    "'attention_mask' and 'labels'"
                )
        ids = [batch["input_ids"] for _, batch in batches]
        sizes = tuple(x.shape[0] for x in ids)
        length = max(x.shape[1] for x in ids)
        source, spans = self._layout(sizes)
        n_rows = len(source)
        # The tasks' rows are interleaved at random, each task's rows keeping their own order
        # (so rows that belong together, like an example's choices, stay in order): draw which
        # task fills each output row, then fill each task's rows in order.
        task_of_row = np.random.default_rng([self.seed, epoch, step]).permutation(source)
        perm = np.empty(n_rows, dtype=np.int64)  # output row j is concatenated row perm[j]
        perm[np.argsort(task_of_row, kind="stable")] = np.arange(n_rows)

        def merged(key: str, pad: int) -> torch.Tensor:
            parts = [batch.get(key) for _, batch in batches]
            return _merge_rows(parts, spans, n_rows, length, pad, perm)

        out: dict[str, Any] = {
            "input_ids": merged("input_ids", self.pad_token_id),
            "attention_mask": merged("attention_mask", 0),
        }
        if any("token_type_ids" in batch for _, batch in batches):
            out["token_type_ids"] = merged("token_type_ids", 0)
        task_numbers = np.array([t for t, _ in batches])
        out["task_ids"] = torch.from_numpy(task_numbers[task_of_row])
        out["tasks"] = list(self.names)
        out["labels"] = {}
        for t, batch in batches:
            labels = batch["labels"]
            # Token labels (one per position, as wide as the task's input_ids) are padded to
            # the merged length; other 2-D labels (multi-hot rows [B, K]) are kept as they are.
            if labels.ndim == 2 and labels.shape[1] == batch["input_ids"].shape[1]:
                labels = _pad_to(labels, length, -100)
            out["labels"][self.names[t]] = labels
        if all("example_ids" in batch for _, batch in batches):
            example_ids = torch.cat([batch["example_ids"] for _, batch in batches])
            out["example_ids"] = _take(example_ids, perm)
        if all("num_tokens" in batch for _, batch in batches):
            out["num_tokens"] = sum(batch["num_tokens"] for _, batch in batches)
        return out

    def _layout(self, sizes: tuple[int, ...]) -> tuple[np.ndarray, list]:
        """For batches of these sizes concatenated: each row's batch and the (start, end) rows
        of every batch. Cached: a run sees few distinct size tuples."""
        layout = self._layouts.get(sizes)
        if layout is None:
            ends = np.cumsum(sizes)
            starts = ends - sizes
            layout = (
                np.repeat(np.arange(len(sizes)), sizes),
                list(zip(starts.tolist(), ends.tolist(), strict=True)),
            )
            if len(self._layouts) >= 64:
                self._layouts.clear()
            self._layouts[sizes] = layout
        return layout


def _take(x: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """x[rows]; on CPU through numpy, whose gather is a few times cheaper for small tensors."""
    try:
        return torch.from_numpy(x.numpy()[rows])
    except (TypeError, RuntimeError):  # not on the CPU, or needs grad
        return x[torch.from_numpy(rows).to(x.device)]


def _merge_rows(
    parts: list[torch.Tensor | None],
    spans: list[tuple[int, int]],
    n_rows: int,
    length: int,
    pad: int,
    perm: np.ndarray,
) -> torch.Tensor:
    """Concatenate 2-D parts (rows spans[i] of the result), right-padded to `length` with `pad`
    (0 for a missing part), then reorder the rows by `perm`: one preallocated array, one gather.
    CPU tensors are written through numpy views (no per-part torch ops)."""
    present = [p for p in parts if p is not None]
    try:
        arrays = [None if p is None else p.numpy() for p in parts]
    except (TypeError, RuntimeError):  # not on the CPU, or needs grad: the same in torch
        padded = [
            torch.zeros(b - a, length, dtype=present[0].dtype, device=present[0].device)
            if part is None
            else _pad_to(part, length, pad)
            for part, (a, b) in zip(parts, spans, strict=True)
        ]
        return torch.cat(padded)[torch.from_numpy(perm).to(present[0].device)]
    first = next(x for x in arrays if x is not None)
    out = np.full((n_rows, length), pad, dtype=first.dtype)
    for x, (a, b) in zip(arrays, spans, strict=True):
        if x is None:
            out[a:b] = 0
        else:
            out[a:b, : x.shape[1]] = x
    return torch.from_numpy(out[perm])
