"""dry_run: print what one epoch of a composite loader does, from the task sizes alone.

`mtl-dry-run` is its command (`mtl.cli.dry_run`):

    mtl-dry-run random topic=49 code=49 tiny=5 loader.weighting=uniform
    mtl-dry-run mixup topic=49 tiny=5 epochs=2

Sizes are batches per pass of each task (examples / batch size, rounded up).
"""

from __future__ import annotations

from typing import Any

import yaml

from mtl.artifacts import config_dir
from mtl.errors import MtlError, did_you_mean, import_target
from mtl.loaders.base import CompositeLoader
from mtl.values import is_int


def loader_class(name: str) -> type:
    """The class `loader=<name>` selects: the `_target_` of mtl's `conf/loader/<name>.yaml`
    (the group's folder listing is the list of names)."""
    folder = config_dir() / "loader"
    names = sorted(path.stem for path in folder.glob("*.yaml"))
    if name not in names:
        hint = did_you_mean(name, names)
        raise MtlError(f"loader: unknown name {name!r}; {hint}use one of {', '.join(names)}")
    with open(folder / f"{name}.yaml") as file:
        target = yaml.safe_load(file)["_target_"]
    return import_target(target, f"conf/loader/{name}.yaml's _target_", CompositeLoader)


def dry_run(name: str, sizes: dict[str, int], *, epoch: int = 0, **options: Any) -> str:
    """A printable table of one epoch of loader `name` over tasks of `sizes` batches per pass.

    Builds the real loader over `range(n)` stand-ins (no data is loaded), so the numbers are the
    loader's own schedule: steps, then per task its batches, share of batches and passes over
    its data (batches / batches per pass; above 1 means it restarts with a fresh shuffle).
    """
    for task, n in sizes.items():
        if not is_int(n) or n < 0:
            raise MtlError(f"task {task!r}: size {n!r}; give its number of batches as an int")
    loader = loader_class(name)({task: range(n) for task, n in sizes.items()}, **options)
    loader.set_epoch(epoch)
    counts = loader.task_counts(loader.schedule(epoch))
    total = int(counts.sum())
    policy = (
        f"steps_per_epoch={loader.steps_per_epoch}"
        if loader.steps_per_epoch is not None
        else f"exhaust={loader.exhaust}"
    )
    width = max(len("task"), *(len(task) for task in sizes))
    lines = [
        f"{type(loader).__name__} ({policy}, seed={loader.seed}), epoch {epoch}: "
        f"{len(loader)} steps, {total} task batches",
        f"{'task':<{width}}  {'per pass':>9}  {'batches':>9}  {'share':>6}  {'passes':>7}",
    ]
    for task, n, count in zip(loader.names, loader.sizes, counts, strict=True):
        lines.append(
            f"{task:<{width}}  {n:>9}  {count:>9}  {count / total:>6.1%}  {count / n:>7.2f}"
        )
    online = getattr(loader, "online", None)
    if online is not None:
        lines.append(
            f"(loader.online: the plan the run starts from; every {online.update_every} "
            "optimizer steps the policy's weights redraw the rest of the epoch)"
        )
    return "\n".join(lines)
