"""`mtl-report <run folder | sweep folder>`: PNG figures from `metrics.jsonl`, no W&B needed
(`mtl.reporting.figures`); prints the paths of the figures written, one per line."""

from __future__ import annotations

import sys

from mtl.cli.script import Command, Positional, one_line_errors

COMMAND = Command(
    prog="mtl-report",
    summary="PNG figures of a run (task shares, losses, dev metrics, throughput, task "
    "interaction) or a sweep (the monitored value and every dev metric per job), drawn into "
    "the folder from its metrics.jsonl.",
    positionals=(
        Positional("folder", "a run folder (with metrics.jsonl) or a sweep folder (job folders)"),
    ),
    arguments="a run folder or a sweep folder",
)


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    args = COMMAND.parse(sys.argv[1:] if argv is None else argv)
    # Imported once the arguments are read: `--help` and argument errors need none of it, and
    # it takes seconds to import (torch, transformers).
    from mtl.reporting.figures import report

    for path in report(args["folder"]):
        print(path)


if __name__ == "__main__":
    main()
