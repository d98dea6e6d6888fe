"""Contract checks for batch samplers and composite loaders, yours and mtl's own.

`check_sampler(make)` and `check_loader(make)` build the object over small generated inputs
(seeded loops, so a failure repeats exactly) and raise `AssertionError` naming the first promise
broken. They need neither pytest nor hypothesis; call them from a test or a script::

    from mtl.testing import check_loader, check_sampler
    check_sampler(MyBatchSampler)                 # or functools.partial(MyBatchSampler, k=1)
    check_loader(functools.partial(MyLoader, block=2))

`make` is called the way training calls it: a sampler as
`make(lengths, batch_size, seed=, num_replicas=, rank=)`, a loader as
`make(loaders, seed=)` (plus `pad_token_id=0` when its signature has that parameter).
"""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from mtl.samplers import RandomBatchSampler

# -- batch samplers ---------------------------------------------------------------------------


def sampler_cases(batch_size: int, trials: int, seed: int) -> list[np.ndarray]:
    """Lengths to check on: the edge sizes (1, batch_size, batch_size + 1), then random ones."""
    cases = [np.full(n, 5) for n in (1, batch_size, batch_size + 1)]
    for trial in range(trials):
        rng = np.random.default_rng([seed, trial])
        n = int(rng.integers(2, 12 * batch_size))
        cases.append(rng.integers(1, int(rng.integers(2, 400)), n))
    return cases


def check_sampler(
    make: Callable[..., Any],
    *,
    batch_size: int | None = 8,
    lengths: Sequence[Sequence[int]] | None = None,
    every_example: bool | None = None,
    fixed_batch_size: bool = True,
    num_replicas: Sequence[int] = (2, 3),
    epochs: int = 3,
    trials: int = 10,
    seed: int = 0,
) -> None:
    """Check the batch-sampler contract of `make` on `lengths` (default: generated cases).

    Per epoch: `len()` batches, each a non-empty list of valid indices, no index twice;
    `every_example` (default: unless the sampler's `drop_last` is set): every index once;
    `fixed_batch_size`: every batch holds `batch_size`
    examples but at most one shorter. The same (seed, epoch) gives the same batches, in a twin
    and when iterated again. Sharded over each of `num_replicas`: every rank yields the same
    number of batches, together the epoch's batches plus the first ones repeated as padding.
    Resume (when it has `set_start`): `set_start(k)` yields the epoch from batch k, once,
    also when an iterator made before was never read (a DataLoader with workers does that)."""
    cases = sampler_cases(batch_size or 8, trials, seed) if lengths is None else lengths
    for case in cases:
        case = np.asarray(case)
        where = f"{len(case)} examples, batch_size {batch_size}"

        def build(replicas: int = 1, rank: int = 0, case: np.ndarray = case) -> Any:
            return make(case, batch_size, seed=seed, num_replicas=replicas, rank=rank)

        sampler = build()
        every = not getattr(sampler, "drop_last", False) if every_example is None else every_example
        for epoch in range(epochs):
            batches = _epoch(sampler, epoch)
            _check_epoch(batches, len(sampler), len(case), where, epoch, every)
            if fixed_batch_size:
                short = [b for b in batches if len(b) != batch_size]
                fits = all(batch_size is not None and len(b) < batch_size for b in short)
                assert len(short) <= 1 and fits, (
                    f"{where}, epoch {epoch}: batch sizes {sorted(map(len, batches))}"
                )
            assert _epoch(build(), epoch) == batches, f"{where}, epoch {epoch}: a twin differs"
            assert _epoch(sampler, epoch) == batches, f"{where}, epoch {epoch}: a rerun differs"
        for replicas in num_replicas:
            check_sharding(build, replicas, epoch=1, where=where)
        if hasattr(sampler, "set_start"):
            check_resume(build(2, 1), epoch=2, where=where)


def _epoch(sampler: Any, epoch: int) -> list[list[int]]:
    sampler.set_epoch(epoch)
    return [[int(i) for i in batch] for batch in sampler]


def _check_epoch(
    batches: list[list[int]], length: int, n: int, where: str, epoch: int, every: bool
) -> None:
    assert len(batches) == length, f"{where}, epoch {epoch}: len() {length}, yielded {len(batches)}"
    flat = [i for b in batches for i in b]
    assert all(batches), f"{where}, epoch {epoch}: an empty batch"
    assert all(0 <= i < n for i in flat), f"{where}, epoch {epoch}: an index outside [0, {n})"
    assert len(set(flat)) == len(flat), f"{where}, epoch {epoch}: an example twice in one epoch"
    if every:
        assert len(flat) == n, f"{where}, epoch {epoch}: {n - len(flat)} examples left out"


def check_sharding(
    build: Callable[[int, int], Any], replicas: int, *, epoch: int, where: str
) -> None:
    """`build(num_replicas, rank)`: equal `len()` on every rank, and the ranks' batches together
    are the single-process epoch padded by repeating its first batches (the only duplicates)."""
    plain = _epoch(build(1, 0), epoch)
    ranks = [build(replicas, rank) for rank in range(replicas)]
    yielded = [_epoch(s, epoch) for s in ranks]
    sizes = [len(b) for b in yielded]
    assert sizes == [len(s) for s in ranks] == [sizes[0]] * replicas, (
        f"{where}, {replicas} ranks: batches per rank {sizes}"
    )
    padded = plain + [plain[i % len(plain)] for i in range(-len(plain) % replicas)]
    assert Counter(map(tuple, sum(yielded, []))) == Counter(map(tuple, padded)), (
        f"{where}, {replicas} ranks: the shards are not the epoch plus padding from its start"
    )


def check_resume(sampler: Any, *, epoch: int, where: str) -> None:
    """`set_start(k)` for every k: that iteration yields the epoch from batch k, the next all;
    an iterator made and never read in between (as torch's multiprocess DataLoader iterator does
    on every `iter(loader)`) does not take the start."""
    full = _epoch(sampler, epoch)
    for k in range(len(full) + 1):
        sampler.set_start(k)
        assert _epoch(sampler, epoch) == full[k:], f"{where}: set_start({k}) is not the rest"
        assert _epoch(sampler, epoch) == full, f"{where}: set_start({k}) was not one-shot"
    k = min(1, len(full))
    sampler.set_start(k)
    iter(sampler)  # made, never read
    assert _epoch(sampler, epoch) == full[k:], (
        f"{where}: set_start({k}) was taken by an iterator that yielded nothing; take the start "
        "at the first batch (write __iter__ as a generator)"
    )


# -- composite loaders ------------------------------------------------------------------------

LOADER_CASES = ({"a": 7, "b": 3, "c": 5}, {"a": 2, "b": 9}, {"x": 1, "y": 1, "z": 4}, {"a": 5})


class _Sampler:
    """A batch sampler without `set_start`: the loader must skip batches itself to resume."""

    def __init__(self, n: int, batch_size: int, seed: int) -> None:
        self.inner = RandomBatchSampler([1] * n, batch_size, seed=seed)

    @property
    def epoch(self) -> int:
        return self.inner.epoch

    def set_epoch(self, epoch: int) -> None:
        self.inner.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.inner)


class ToyTask:
    """A task's loader for the checks: dict batches of example ids (`offset + index`), whose
    every batch handed out is recorded in `log` as (task, pass, example ids)."""

    def __init__(self, name: str, n: int, offset: int, log: list, resumable: bool) -> None:
        seed = 7 + offset
        self.batch_sampler = (
            RandomBatchSampler([1] * n, 2, seed=seed) if resumable else _Sampler(n, 2, seed)
        )
        self.reference = RandomBatchSampler([1] * n, 2, seed=seed)
        self.name, self.offset, self.log = name, offset, log

    def batch(self, pass_index: int, position: int) -> tuple[int, ...]:
        """The example ids of batch `position` of pass `pass_index` (its sampler's epoch)."""
        return tuple((self.reference.epoch_batches(pass_index)[position] + self.offset).tolist())

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[dict]:
        for indices in self.batch_sampler:
            ids = torch.tensor(indices) + self.offset
            self.log.append((self.name, self.batch_sampler.epoch, tuple(ids.tolist())))
            width = 1 + int(ids.sum()) % 3
            yield {
                "input_ids": (ids[:, None] + 1).repeat(1, width),
                "attention_mask": torch.ones(len(ids), width, dtype=torch.long),
                "labels": ids % 2,
                "example_ids": ids,
            }


def toy_tasks(sizes: dict[str, int], log: list, resumable: bool) -> dict[str, ToyTask]:
    """One `ToyTask` per entry (task name -> examples), 2 examples a batch."""
    return {
        name: ToyTask(name, n, 1_000_000 * i, log, resumable)
        for i, (name, n) in enumerate(sizes.items())
    }


Step = tuple[tuple[str, int, tuple[int, ...]], ...]  # per task read: (task, pass, example ids)


def check_loader(
    make: Callable[..., Any],
    *,
    sizes: Sequence[dict[str, int]] = LOADER_CASES,
    epochs: int = 2,
    seed: int = 0,
) -> None:
    """Check the composite-loader contract of `make` over toy tasks of `sizes` (task name ->
    examples, 2 a batch), with samplers that have `set_start` and without.

    Per epoch: `len()` and `epoch_length(epoch)` steps are yielded. Each task's batches come in
    passes, in the order its sampler gives for that pass (`set_epoch(pass)`), none twice and none
    skipped; a task starts its next pass only when the last is used up, or at an epoch's start.
    Where an epoch is as long as one pass of every task (`exhaust="each_once"`), the tasks in it
    give that many batches in all, each task the batches its schedule plans (with weights that
    set the shares, a task may give more or fewer than its pass), and a task planned for exactly
    its size gives one whole pass. The same seed gives the same steps and batches. Resume: the
    `state_dict()` (json-able) taken after any step, loaded into a fresh loader, yields the rest
    of that epoch and then the next epoch exactly as the uninterrupted loader does."""
    for case in sizes:
        for resumable in (True, False):
            where = f"tasks {case} ({'with' if resumable else 'without'} set_start)"
            runs = _check_epochs(make, case, seed, resumable, epochs + 1, where)
            for epoch in range(epochs):
                for k in range(len(runs[epoch]) + 1):
                    resumed = _resume(make, case, seed, resumable, epoch, k)
                    assert resumed == [runs[epoch][k:], runs[epoch + 1]], (
                        f"{where}: resumed after step {k} of epoch {epoch}, the steps differ"
                    )


def _build(
    make: Callable[..., Any], case: dict[str, int], seed: int, resumable: bool
) -> tuple[Any, dict[str, ToyTask], list]:
    log: list = []
    tasks = toy_tasks(case, log, resumable)
    extra = {"pad_token_id": 0} if "pad_token_id" in inspect.signature(make).parameters else {}
    return make(tasks, seed=seed, **extra), tasks, log


def _steps(loader: Any, log: list, limit: int | None = None) -> list[tuple[Step, Any]]:
    """Iterate (up to `limit` steps): per step, what each task gave and the yielded batch."""
    steps: list[tuple[Step, Any]] = []
    if limit == 0:
        return steps
    mark = len(log)
    for batch in loader:
        taken: dict[str, list] = {}
        for entry in log[mark:]:
            taken.setdefault(entry[0], []).append(entry)
        mark = len(log)
        # Per task, the batches the step takes (the last ones: those before were skipped).
        counts = _step_counts(loader)
        read = [e for name, entries in taken.items() for e in entries[-counts.get(name, 1) :]]
        steps.append((tuple(read), batch))
        if len(steps) == limit:
            break
    return steps


def _step_counts(loader: Any) -> dict[str, int]:
    """Task -> batches the step just yielded takes, where a 2-D schedule gives counts (a
    weighted mixup); otherwise one a task."""
    schedule, (epoch, step) = getattr(loader, "schedule", None), loader.position
    if schedule is None or step == 0:
        return {}
    row = schedule(epoch)[step - 1]
    if np.ndim(row) == 0 or row.dtype == bool:
        return {}
    return {name: int(n) for name, n in zip(loader.names, row, strict=True) if n}


def _check_epochs(
    make: Callable[..., Any],
    case: dict[str, int],
    seed: int,
    resumable: bool,
    epochs: int,
    where: str,
) -> list[list[Step]]:
    loader, tasks, log = _build(make, case, seed, resumable)
    twin, _, twin_log = _build(make, case, seed, resumable)
    cursors: dict[str, tuple[int, int]] = {}
    runs = []
    for epoch in range(epochs):
        length = len(loader)
        assert loader.epoch_length(epoch) == length, f"{where}: epoch_length({epoch}) != len()"
        assert length > 0, f"{where}, epoch {epoch}: an epoch of no steps"
        steps = _steps(loader, log)
        assert len(steps) == length, f"{where}, epoch {epoch}: len() {length}, got {len(steps)}"
        twin_steps = _steps(twin, twin_log)
        assert [k for k, _ in twin_steps] == [k for k, _ in steps] and all(
            _same(a, b) for (_, a), (_, b) in zip(twin_steps, steps, strict=True)
        ), f"{where}, epoch {epoch}: the same seed gave other steps"
        keys = [key for key, _ in steps]
        _check_passes(keys, tasks, cursors, f"{where}, epoch {epoch}")
        if getattr(loader, "exhaust", None) == "each_once" and loader.steps_per_epoch is None:
            counts = loader.task_counts(loader.schedule(epoch))
            planned = dict(zip(loader.names, counts, strict=True))
            whole = sum(len(task) for name, task in tasks.items() if planned[name] > 0)
            assert counts.sum() == whole, (
                f"{where}, epoch {epoch}: {counts.sum()} task batches planned, not the {whole} "
                "of one pass of each task"
            )
            for name, task in tasks.items():
                given = [(p, ids) for key in keys for t, p, ids in key if t == name]
                assert len(given) == planned[name], (
                    f"{where}, epoch {epoch}: task {name} gave {len(given)} batches, not the "
                    f"{planned[name]} planned"
                )
                if planned[name] == len(task):  # its share is its size: its whole pass, once
                    assert len({p for p, _ in given}) == 1, f"{where}: task {name} split a pass"
        runs.append(keys)
    return runs


def _check_passes(keys: list[Step], tasks: dict[str, ToyTask], cursors: dict, where: str) -> None:
    """Each task's batches: its passes in order, each in its sampler's order, none twice."""
    seen = set()
    for step, key in enumerate(keys):
        for name, p, ids in key:
            last, position = cursors.get(name, (-1, 0))
            size = len(tasks[name])
            if p != last:
                assert p == last + 1, f"{where}, step {step}: task {name} pass {p} after {last}"
                assert name not in seen or position == size, (
                    f"{where}, step {step}: task {name} left pass {last} at {position}/{size}"
                )
                position = 0
            assert position < size, f"{where}, step {step}: task {name} read past its pass"
            assert ids == tasks[name].batch(p, position), (
                f"{where}, step {step}: task {name} gave a batch out of its sampler's order"
            )
            cursors[name] = (p, position + 1)
            seen.add(name)


def _resume(
    make: Callable[..., Any],
    case: dict[str, int],
    seed: int,
    resumable: bool,
    epoch: int,
    k: int,
) -> list[list[Step]]:
    """Steps after a resume from the state after step k of `epoch`: that epoch's, the next's."""
    loader, _, log = _build(make, case, seed, resumable)
    for _ in range(epoch):
        _steps(loader, log)
    _steps(loader, log, limit=k)
    state = json.loads(json.dumps(loader.state_dict()))
    resumed, _, log = _build(make, case, seed, resumable)
    resumed.load_state_dict(state)
    return [[key for key, _ in _steps(resumed, log)] for _ in range(2)]


def _same(a: Any, b: Any) -> bool:
    """Equal batches: tensors equal in shape, dtype and values; containers item by item."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and (bool(torch.equal(a, b)))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return a == b
