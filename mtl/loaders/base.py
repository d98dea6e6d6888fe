"""Shared machinery of the composite (multi-task) loaders: validation, schedule, resume.

A composite loader wraps one loader per task (a `DataLoader` with a sized batch sampler) and
yields one batch per step. Which task(s) feed step `i` of epoch `e` is fixed in advance by
`schedule(e)`, a pure function of (seed, epoch, the task sizes `n_t = len(loader_t)`, options)
drawn from its own `np.random.default_rng([seed, epoch])`: every process computes the same
schedule, `len()` is exact, and resuming only needs (epoch, step).

Tasks and passes. Each task has a cursor (pass, position): the index of its current pass over
its loader and the batches taken from that pass. A task whose pass is used up (or never started)
starts the next pass when it is next scheduled: its pass index goes up by one, and
`set_epoch(pass)` is called on its `batch_sampler` and `sampler` where they have one, so every
pass is a fresh shuffle. Batches are never cached or cycled. The pass counter persists across
epochs; with `exhaust` policies every task starts a new pass at the start of each epoch, with
`steps_per_epoch` tasks continue where they stopped.

Resume. `state_dict()` holds (epoch, step, every cursor at the start of the epoch).
`load_state_dict` counts each task's batches in `schedule(epoch)[:step]` to place its cursor,
then opens the task at (pass, position): through `batch_sampler.set_start(position)` when the
sampler has it (no data loaded), otherwise by drawing and discarding `position` batches.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from mtl.errors import MtlError, did_you_mean
from mtl.values import is_int

EXHAUST_POLICIES = ("each_once", "first", "cycle_to_longest")

Cursor = tuple[int, int]  # (pass index, batches taken from that pass); pass -1: not started


def advance(cursor: Cursor, count: int, size: int) -> Cursor:
    """The cursor after taking `count` more batches from a task of `size` batches per pass."""
    pass_index, position = cursor
    left_in_pass = size - position if pass_index >= 0 else 0
    if count <= left_in_pass:
        return pass_index, position + count
    new_passes = math.ceil((count - left_in_pass) / size)
    return pass_index + new_passes, count - left_in_pass - (new_passes - 1) * size


class TaskStream:
    """One task's loader, read through its cursor; opens a fresh iterator for every pass."""

    __slots__ = ("name", "loader", "size", "pass_index", "position", "_iterator")

    def __init__(self, name: str, loader: Iterable, size: int) -> None:
        self.name = name
        self.loader = loader
        self.size = size
        self.pass_index = -1
        self.position = 0
        self._iterator: Iterator | None = None

    @property
    def cursor(self) -> Cursor:
        return self.pass_index, self.position

    def place(self, cursor: Cursor) -> None:
        """Move to `cursor`; the iterator is opened there on the next `next_batch`."""
        self.pass_index, self.position = cursor
        self._iterator = None

    def next_batch(self) -> Any:
        iterator = self._iterator
        if iterator is None or self.position >= self.size:
            iterator = self._start()
        try:
            batch = next(iterator)
        except StopIteration:
            raise RuntimeError(
                f"task {self.name!r}: its loader stopped after {self.position} batches of pass "
                f"{self.pass_index}, but len() promised {self.size}"
            ) from None
        self.position += 1
        return batch

    def _start(self) -> Iterator:
        """Open the iterator at the cursor; a pass used up (or never started) starts the next."""
        if self.pass_index < 0 or self.position >= self.size:
            self.pass_index, self.position = self.pass_index + 1, 0
        self._iterator = self._open()
        return self._iterator

    def _open(self) -> Iterator:
        batch_sampler = getattr(self.loader, "batch_sampler", None)
        sampler = getattr(self.loader, "sampler", None)
        for s in (batch_sampler, sampler):
            if hasattr(s, "set_epoch"):
                s.set_epoch(self.pass_index)
        skip = self.position
        if skip and hasattr(batch_sampler, "set_start"):
            batch_sampler.set_start(skip)
            skip = 0
        iterator = iter(self.loader)
        for _ in range(skip):
            next(iterator)
        return iterator


class CompositeLoader:
    """Base class: one batch per step from a fixed, seeded schedule over several task loaders.

    A subclass implements `build_schedule(epoch)`: a 1-D array of task indices (one task per
    step), or a 2-D array [step, task], bool or counts of batches (several tasks per step,
    merged by `combine`, which such a subclass implements). It may set `exhaust_choices` (the
    first is the default) and extend `options()`. Everything else comes from here: exact
    `len()`, `state_dict`/resume, per-task passes with a fresh shuffle each and
    `target_shares()`.

    - `loaders`: task name -> loader with `len()` (batches per pass) > 0, in a fixed order.
    - `seed`: seeds every random choice, together with the epoch (never the global RNG).
    - `exhaust`: what one epoch is (see each loader); `None` takes the loader's default.
    - `steps_per_epoch`: instead of `exhaust`, exactly this many steps per epoch; tasks restart a
      pass whenever they run out and continue across epochs.

    One iteration is one epoch. A completed iteration moves to the next epoch; an iteration
    left unfinished does not, and the next one starts that epoch again (after
    `load_state_dict`, the next iteration starts at the saved step instead).
    """

    exhaust_choices: tuple[str, ...] = EXHAUST_POLICIES

    def __init__(
        self,
        loaders: Mapping[str, Iterable],
        *,
        seed: int = 0,
        exhaust: str | None = None,
        steps_per_epoch: int | None = None,
    ) -> None:
        if not isinstance(loaders, Mapping) or not loaders:
            raise MtlError("loaders: give a non-empty mapping of task name -> DataLoader")
        sizes = []
        for name, loader in loaders.items():
            if not isinstance(name, str):
                raise MtlError(f"loaders: task name {name!r} is not a string")
            try:
                size = len(loader)
            except TypeError:
                raise MtlError(
                    f"task {name!r}: its loader has no len(); use a DataLoader with a sized "
                    "batch sampler"
                ) from None
            if size < 1:
                raise MtlError(f"task {name!r}: its loader yields no batches (len 0); check data")
            sizes.append(size)
        if not is_int(seed) or seed < 0:
            raise MtlError(f"seed: got {seed!r}; use an integer >= 0")
        if steps_per_epoch is not None:
            if exhaust is not None:
                raise MtlError(
                    f"exhaust={exhaust!r} and steps_per_epoch={steps_per_epoch!r}: set only one "
                    "(exhaust: null when steps_per_epoch is used)"
                )
            if not is_int(steps_per_epoch) or steps_per_epoch < 1:
                raise MtlError(f"steps_per_epoch: got {steps_per_epoch!r}; use an integer >= 1")
            steps_per_epoch = int(steps_per_epoch)
        else:
            exhaust = self.exhaust_choices[0] if exhaust is None else exhaust
            if exhaust not in self.exhaust_choices:
                hint = did_you_mean(str(exhaust), self.exhaust_choices)
                raise MtlError(
                    f"exhaust: got {exhaust!r}; {hint}{type(self).__name__} accepts "
                    f"{', '.join(self.exhaust_choices)} (or steps_per_epoch)"
                )
        self.names = list(loaders)
        self.sizes = np.array(sizes, dtype=np.int64)
        self.seed = int(seed)
        self.exhaust = exhaust
        self.steps_per_epoch = steps_per_epoch
        self._streams = [
            TaskStream(n, loaders[n], s) for n, s in zip(self.names, sizes, strict=True)
        ]
        self._epoch, self._replans = 0, 0  # _replans: schedules changed mid-epoch (`replan`)
        self._carry: list[Cursor] = [(-1, 0)] * len(self.names)  # cursors at the epoch's start
        self._step = 0  # batches yielded in this epoch
        self._resume_step = 0  # where the next iteration starts (set by load_state_dict)
        self._schedules: dict[int, np.ndarray] = {}

    # -- what a subclass implements ---------------------------------------------------------------

    def build_schedule(self, epoch: int) -> np.ndarray:
        """The tasks of every step of `epoch`: task indices (1-D), or a bool [step, task] array
        for steps that take several tasks. A pure function of the seed (`self.rng(epoch)`),
        the epoch, `self.sizes` (batches per pass of each task) and the options."""
        raise NotImplementedError

    def combine(self, epoch: int, step: int, batches: list[tuple[int, Any]]) -> Any:
        """For 2-D schedules: the batch of one step from its (task index, batch) pairs."""
        raise NotImplementedError(f"{type(self).__name__} has a 2-D schedule: define combine()")

    def options(self) -> dict[str, Any]:
        """Everything the schedule depends on besides the task sizes (checked on resume)."""
        return {
            "loader": type(self).__name__,
            "seed": self.seed,
            "exhaust": self.exhaust,
            "steps_per_epoch": self.steps_per_epoch,
        }

    # -- derived from the schedule ----------------------------------------------------------------

    def task_counts(self, rows: np.ndarray) -> np.ndarray:
        """Batches each task supplies over these schedule rows."""
        if rows.ndim == 2:
            return rows.sum(axis=0)
        return np.bincount(rows, minlength=len(self.names))

    def tasks_at(self, epoch: int, step: int) -> list[str]:
        """The task(s) step `step` of `epoch` reads."""
        row = self.schedule(epoch)[step]
        return [self.names[t] for t in (np.flatnonzero(row) if np.ndim(row) else [row])]

    def epoch_length(self, epoch: int) -> int:
        """Steps of `epoch` (`len()` of that epoch)."""
        return len(self.schedule(epoch))

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, batches yielded in it) of the current or next iteration."""
        return self._epoch, self._step

    def rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch])

    def schedule(self, epoch: int) -> np.ndarray:
        """The epoch's schedule (cached; a pure function of seed, epoch, sizes and options)."""
        if epoch not in self._schedules:
            if len(self._schedules) >= 2:
                self._schedules.pop(next(iter(self._schedules)))
            self._schedules[epoch] = self.build_schedule(epoch)
        return self._schedules[epoch]

    def replan(self, epoch: int) -> None:
        """Forget `epoch`'s schedule: it is built again when next read, and an iteration under
        way reads it again from its next step (a plan that changes mid-epoch: `loader.online`)."""
        self._schedules.pop(epoch, None)
        self._replans += 1

    # -- public API -------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next iteration yields."""
        return self._epoch

    def __len__(self) -> int:
        """Steps (yielded batches) of the current epoch, counting any already yielded."""
        return len(self.schedule(self._epoch))

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration yields. Setting the current epoch changes nothing
        (a resume position from `load_state_dict` is kept); another epoch starts at its step 0.
        Task pass counters are not reset: they persist over the whole run."""
        if not is_int(epoch) or epoch < 0:
            raise MtlError(f"epoch: got {epoch!r}; use an integer >= 0")
        if epoch != self._epoch:
            self._epoch, self._step, self._resume_step = int(epoch), 0, 0

    def target_shares(self) -> dict[str, float]:
        """Share of this epoch's batches each task is scheduled to supply."""
        counts = self.task_counts(self.schedule(self._epoch)).astype(float)
        return {n: float(c / counts.sum()) for n, c in zip(self.names, counts, strict=True)}

    def mix_weights(self) -> dict[str, float]:
        """The task weights the loader mixes with at its current position (logged as
        `mix_weight/<task>`); a loader without weights: its planned shares of this epoch."""
        return self.target_shares()

    def _start_cursors(self, carry: list[Cursor]) -> list[Cursor]:
        """Cursors when the epoch begins: with `exhaust`, every task starts a new pass."""
        if self.steps_per_epoch is not None:
            return list(carry)
        return [(p, int(s)) for (p, _), s in zip(carry, self.sizes, strict=True)]

    def _cursors_at(self, epoch_carry: list[Cursor], rows: np.ndarray) -> list[Cursor]:
        counts = self.task_counts(rows)
        starts = self._start_cursors(epoch_carry)
        return [
            advance(c, int(k), int(s)) for c, k, s in zip(starts, counts, self.sizes, strict=True)
        ]

    def __iter__(self) -> Iterator[Any]:
        epoch, start = self._epoch, self._resume_step
        self._resume_step = 0
        schedule = self.schedule(epoch)
        cursors = self._cursors_at(self._carry, schedule[:start])
        for stream, cursor in zip(self._streams, cursors, strict=True):
            stream.place(cursor)
        self._step = start
        # The hot loop: plain ints and lists, no per-step numpy scalars or dict updates.
        taken = [stream.next_batch for stream in self._streams]
        flat = schedule.ndim == 1  # one task's batch per step; else several, merged by combine
        step = start
        while step < len(schedule):
            replans = self._replans
            rows = schedule[step:].tolist() if flat else _step_tasks(schedule[step:])
            for tasks in rows:
                if flat:
                    batch = taken[tasks]()
                else:
                    batch = self.combine(epoch, step, [(t, taken[t]()) for t in tasks])
                step += 1
                self._step = step
                yield batch
                if self._replans != replans:  # the rest of the epoch was drawn again
                    schedule = self.schedule(epoch)
                    break
        self._carry = [stream.cursor for stream in self._streams]
        self._epoch, self._step = epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """Resume point as plain Python types (json-able): epoch, step, cursors, options.

        `step` is the number of batches the latest iteration has yielded in this epoch. Taken
        after the last batch of an epoch (step = len), the resumed loader's next iteration yields
        nothing and completes that epoch, so a loop counting epochs by completed iterations stays
        in step; the iteration after it is the next epoch."""
        return {
            "options": self.options(),
            "epoch": self._epoch,
            "step": self._step,
            "tasks": {
                name: {"batches_per_pass": int(size), "pass": int(p), "position": int(pos)}
                for name, size, (p, pos) in zip(self.names, self.sizes, self._carry, strict=True)
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state`: the next iteration yields the rest of the saved epoch."""
        if dict(state["options"]) != self.options():
            raise MtlError(
                f"loader state: saved with options {dict(state['options'])} but this loader has "
                f"{self.options()}; build it the same way or drop the loader state"
            )
        tasks = state["tasks"]
        if list(tasks) != self.names:
            raise MtlError(
                f"loader state: saved for tasks {list(tasks)} but this loader has {self.names}"
            )
        for name, size in zip(self.names, self.sizes, strict=True):
            if tasks[name]["batches_per_pass"] != size:
                raise MtlError(
                    f"task {name!r}: saved with {tasks[name]['batches_per_pass']} batches per "
                    f"pass, now {size}; the data or batch size changed, so resume is not exact"
                )
        epoch, step = int(state["epoch"]), int(state["step"])
        if not 0 <= step <= len(self.schedule(epoch)):
            raise MtlError(f"loader state: step {step} is outside epoch {epoch}")
        self._epoch, self._step, self._resume_step = epoch, step, step
        self._carry = [(int(t["pass"]), int(t["position"])) for t in tasks.values()]


def _step_tasks(rows: np.ndarray) -> list[list[int]]:
    """Per step of a 2-D schedule: its task indices, a task given n batches n times (computed
    once per distinct row)."""
    if len(rows) == 0:
        return []
    kinds, which = np.unique(rows, axis=0, return_inverse=True)  # few distinct rows
    numbers = np.arange(rows.shape[1])
    tasks = [np.repeat(numbers, kind.astype(np.int64)).tolist() for kind in kinds]
    return [tasks[k] for k in which.reshape(-1).tolist()]
