"""MixupLoader: one batch of every task per step, merged into one shuffled batch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mtl.errors import MtlError
from mtl.loaders.mixture import fill
from mtl.loaders.weighted import WeightedLoader
from mtl.values import is_int

# Options that only a weighted mixup has: any of them given makes a mixup weighted.
WEIGHTED_ONLY = ("temperature_end", "size_cap", "stages", "max_passes")


def _pad_to(x: torch.Tensor, length: int, value: int) -> torch.Tensor:
    """Right-pad the last dimension of a 2-D tensor to `length`."""
    return F.pad(x, (0, length - x.shape[1]), value=value)


class MixupLoader(WeightedLoader):
    """Each step takes one batch of every active task (or, given a `weighting`, task batches
    split by the weights) and merges them into one batch.

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
         "task_rows": {task: Long[its rows' indices]} (each task with rows, in "tasks" order),
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

    Weighted (`weighting`, as `RandomLoader`'s: proportional, uniform, temperature, annealed,
    `{task: weight}`, `temperature_end`, `stages` by loader step, `max_passes` caps, `online`;
    any of these options without a `weighting` weighs from proportional):
    each step takes `batches_per_step` task batches (default: one per task, so a step is as
    large as an unweighted one) and the weights split them. Each stretch of steps with one
    mixture has its batches counted by the weights (largest remainders, caps kept), and every
    full step holds each task's average per step rounded down or up (`arrange`), so a step's
    rows follow the weights to within one batch of each task. A task may give two batches to
    one step; they are joined into one task batch (padded to the longer). One epoch:
    `exhaust="each_once"` (default), `sum(n_t)` task batches (tasks whose weight is always 0
    left out; with proportional weights every batch of every task once) in
    `ceil(sum(n_t) / batches_per_step)` steps, the last holding what is left; or
    `steps_per_epoch=N` steps of `batches_per_step` each. Batches, not rows, are the unit: a
    sampler's batches (sorted by length, or by a token budget) are kept whole.

    Random: only the interleaving, from `np.random.default_rng([seed, epoch, step])`, the same on
    every process and on resume (weighted: the layout of each stretch too, from `rng([seed,
    epoch])`). Batch order within a task comes from its sampler, which gets `set_epoch(pass)`
    for every new pass. `target_shares()` are shares of rows, estimated from each task's mean
    batch size `len(dataset) / len(loader)` (1 where a loader has no dataset).
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
        weighting: str | Mapping[str, float] | None = None,
        batches_per_step: int | None = None,
        epochs: int | None = None,
        online: Mapping[str, Any] | None = None,
        **mixture: Any,
    ) -> None:
        weighted = [mixture.get(key) for key in WEIGHTED_ONLY]
        if weighting is None and any(v is not None for v in (batches_per_step, online, *weighted)):
            weighting = "proportional"  # an option of the weighted mixup: from proportional
        if weighting is not None and exhaust is None and steps_per_epoch is None:
            exhaust = "each_once"
        super().__init__(loaders, seed=seed, exhaust=exhaust, steps_per_epoch=steps_per_epoch)
        if not is_int(pad_token_id):
            raise MtlError(f"pad_token_id: got {pad_token_id!r}; use an integer token id")
        self.pad_token_id = int(pad_token_id)
        # The 2-D keys of a merged batch and their padding (token_type_ids where a task has them)
        self._padding = (
            ("input_ids", self.pad_token_id),
            ("attention_mask", 0),
            ("token_type_ids", 0),
        )
        self._layouts: dict[tuple[int, ...], tuple[np.ndarray, list]] = {}
        if weighting is not None:
            self._weigh(batches_per_step)
            self.mix({**mixture, "weighting": weighting}, online, epochs)

    def _weigh(self, per_step: Any) -> None:
        """A weighted mixup's epochs and `batches_per_step`."""
        if self.steps_per_epoch is None and self.exhaust != "each_once":
            raise MtlError(
                f"loader.exhaust={self.exhaust}: a weighted mixup has epochs of a fixed number "
                "of steps; use exhaust=each_once or steps_per_epoch"
            )
        per_step = len(self.names) if per_step is None else per_step
        if not is_int(per_step) or per_step < 1:
            raise MtlError(
                f"loader.batches_per_step: got {per_step!r}; give an integer >= 1 (null: one "
                "per task)"
            )
        self.per_step = int(per_step)

    @property
    def fixed_length(self) -> int | None:
        """Steps of every epoch of a weighted mixup (each_once: the batches in play shared out
        `batches_per_step` a step, the last step what is left; or steps_per_epoch); None
        unweighted."""
        if self.mixture is None:
            return None
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch
        return -(-self.slots // self.per_step)

    @property
    def slots(self) -> int:
        if self.steps_per_epoch is not None:
            return self.steps_per_epoch * self.per_step
        return int(self.sizes[self.mixture.in_play()].sum())

    def options(self) -> dict[str, Any]:
        options = {**super().options(), "pad_token_id": self.pad_token_id}
        if self.mixture is not None:
            options["batches_per_step"] = self.per_step
        return options

    def arrange(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Slots of `counts[t]` batches of each task t, `per_step` a step (the last step what
        is left), every task's batches in each full step the floor or the ceiling of its
        average per step: task t gives `C_t // n` to each of the n full steps, and its `C_t % n`
        remaining batches to steps spread over the stretch (one each, in a golden-ratio order of
        the steps from a random phase, the tasks in a random order: `rng`)."""
        k, total = self.per_step, int(counts.sum())
        n, tasks = total // k, np.arange(len(counts))
        last = fill(total - n * k, counts / max(total, 1), counts.astype(float), 0)
        full = counts - last  # n * k batches
        if n == 0:
            return np.repeat(tasks, last)
        each, extra = full // n, full % n
        grid = np.tile(each, (n, 1))
        order = rng.permutation(len(counts))
        picks = np.repeat(order, extra[order])  # (k - sum(each)) * n: one a task and step
        spread = np.argsort((np.arange(n) * 0.6180339887498949 + rng.random()) % 1.0)
        np.add.at(grid, (spread[np.arange(len(picks)) % n], picks), 1)
        rows = np.vstack([grid, last[None, :]]) if last.any() else grid
        return np.repeat(np.tile(tasks, len(rows)), rows.ravel())

    def by_step(self, slots: np.ndarray) -> np.ndarray:
        """Int [step, task]: the batches of each task at each step."""
        steps = np.zeros((-(-len(slots) // self.per_step), len(self.names)), dtype=np.int64)
        np.add.at(steps, (np.arange(len(slots)) // self.per_step, slots), 1)
        return steps

    def build_schedule(self, epoch: int) -> np.ndarray:
        """[step, task]: which tasks give a batch at each step (bool), or how many (int, with a
        weighting)."""
        if self.mixture is not None:
            return self.planned(epoch)
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
        if len({t for t, _ in batches}) < len(batches):  # a weighted step: a task's batches
            batches = self._joined(batches)
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
            key: merged(key, pad)
            for key, pad in self._padding
            if key != "token_type_ids" or any(key in batch for _, batch in batches)
        }
        task_numbers = np.array([t for t, _ in batches])
        task_ids = task_numbers[task_of_row]
        out["task_ids"] = torch.from_numpy(task_ids)
        out["task_rows"] = {  # each task's rows, in the tasks' order (`task_rows`)
            self.names[t]: torch.from_numpy(np.flatnonzero(task_ids == t))
            for t in sorted(task_numbers.tolist())
        }
        out["tasks"] = list(self.names)
        out["labels"] = {}
        for t, batch in batches:
            out["labels"][self.names[t]] = _labels(batch, length)
        if all("example_ids" in batch for _, batch in batches):
            example_ids = torch.cat([batch["example_ids"] for _, batch in batches])
            out["example_ids"] = _take(example_ids, perm)
        if all("num_tokens" in batch for _, batch in batches):
            out["num_tokens"] = sum(batch["num_tokens"] for _, batch in batches)
        return out

    def _joined(self, batches: list[tuple[int, Any]]) -> list[tuple[int, dict[str, Any]]]:
        """The batches of each task (in task order) joined into one: rows concatenated, the
        2-D keys and token labels right-padded to the longest of them."""
        by_task: dict[int, list] = {}
        for t, batch in batches:
            by_task.setdefault(t, []).append(batch)
        joined = []
        for t, parts in by_task.items():
            if len(parts) == 1:
                joined.append((t, parts[0]))
                continue
            length = max(part["input_ids"].shape[1] for part in parts)
            batch: dict[str, Any] = {}
            for key, pad in self._padding:
                if all(key in part for part in parts):
                    batch[key] = torch.cat([_pad_to(part[key], length, pad) for part in parts])
            batch["labels"] = torch.cat([_labels(part, length) for part in parts])
            if all("example_ids" in part for part in parts):
                batch["example_ids"] = torch.cat([part["example_ids"] for part in parts])
            if all("num_tokens" in part for part in parts):
                batch["num_tokens"] = sum(part["num_tokens"] for part in parts)
            joined.append((t, batch))
        return joined

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


def _labels(batch: Mapping[str, Any], length: int) -> torch.Tensor:
    """The batch's labels for rows `length` wide: token labels (one per position, as wide as
    its input_ids) right-padded with -100; other labels (multi-hot rows [B, K]) as they are."""
    labels = batch["labels"]
    if labels.ndim == 2 and labels.shape[1] == batch["input_ids"].shape[1]:
        return _pad_to(labels, length, -100)
    return labels


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
