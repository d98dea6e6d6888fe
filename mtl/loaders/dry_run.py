"""dry_run: print what one epoch of a composite loader does, from the task sizes alone.

`mtl-dry-run` is its command (`main`):

    mtl-dry-run random topic=49 code=49 tiny=5 --option weighting=uniform
    mtl-dry-run mixup topic=49 tiny=5 --epochs 2

Sizes are batches per pass of each task (examples / batch size, rounded up).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml
from hydra.utils import get_class

from mtl.artifacts import config_dir
from mtl.errors import MtlError


def _loader_class(name: str) -> type:
    """The class `loader=<name>` selects: the `_target_` of mtl's `conf/loader/<name>.yaml`
    (the group's folder listing is the list of names)."""
    folder = config_dir() / "loader"
    names = sorted(path.stem for path in folder.glob("*.yaml"))
    if name not in names:
        raise MtlError(f"loader: unknown name {name!r}; use one of {', '.join(names)}")
    with open(folder / f"{name}.yaml") as file:
        return get_class(yaml.safe_load(file)["_target_"])


def dry_run(name: str, sizes: dict[str, int], *, epoch: int = 0, **options: Any) -> str:
    """A printable table of one epoch of loader `name` over tasks of `sizes` batches per pass.

    Builds the real loader over `range(n)` stand-ins (no data is loaded), so the numbers are the
    loader's own schedule: steps, then per task its batches, share of batches and passes over
    its data (batches / batches per pass; above 1 means it restarts with a fresh shuffle).
    """
    for task, n in sizes.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise MtlError(f"task {task!r}: size {n!r}; give its number of batches as an int")
    loader = _loader_class(name)({task: range(n) for task, n in sizes.items()}, **options)
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
    return "\n".join(lines)


def pairs(items: list[str], what: str) -> dict[str, str]:
    """`key=value` command-line items as a dict; `what` names them in the error."""
    if bad := [item for item in items if "=" not in item]:
        raise MtlError(f"{what}: {bad[0]!r} has no '='; write key=value, e.g. topic=49")
    return dict(item.split("=", 1) for item in items)


def main(argv: list[str] | None = None) -> None:
    """`mtl-dry-run LOADER TASK=BATCHES... [--option KEY=VALUE] [--epochs N]`: print each epoch's
    summary; bad input ends with one line `mtl: error: ...` and status 2."""
    parser = argparse.ArgumentParser(
        prog="mtl-dry-run",
        description="Print what one epoch of a loader does from the task sizes alone (no data).",
        epilog="Sizes are batches per pass of each task (examples / batch size, rounded up).",
    )
    parser.add_argument("loader", help="sequential | round_robin | random | mixup | your own")
    parser.add_argument("sizes", nargs="+", help="task=batches, e.g. topic=49")
    parser.add_argument("--option", action="append", default=[], help="key=value loader option")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        sizes = {}
        for task, n in pairs(args.sizes, "sizes").items():
            if not n.isdigit():
                raise MtlError(f"task {task!r}: size {n!r}; give its number of batches (an int)")
            sizes[task] = int(n)
        options = {k: yaml.safe_load(v) for k, v in pairs(args.option, "--option").items()}
        for epoch in range(args.epochs):
            try:
                print(dry_run(args.loader, sizes, epoch=epoch, **options))
            except TypeError as err:  # an option the loader's constructor does not take
                raise MtlError(f"loader {args.loader!r}: {err}; check the --option names") from None
    except MtlError as err:
        print(f"mtl: error: {err}", file=sys.stderr)
        sys.exit(2)
