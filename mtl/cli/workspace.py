"""`mtl-workspace entity=E project=P run=<run or sweep folder> | tasks=[a,b] [key=value ...]`:
a W&B workspace for mtl runs, one section per concern (`mtl.reporting.workspace`)."""

from __future__ import annotations

import json
import sys

from mtl.cli.script import REQUIRED, Command, Option, flag, names, one_line_errors

COMMAND = Command(
    prog="mtl-workspace",
    summary="A W&B workspace for mtl runs (task shares, losses, dev metrics, throughput, task "
    "interaction, sweep comparison), saved as a new view of the project; give run= or tasks=.",
    options=(
        Option("entity", "<entity>", "the W&B entity (user or team)", REQUIRED),
        Option("project", "<project>", "the W&B project", REQUIRED),
        Option(
            "run",
            "<folder>",
            "a run or sweep folder: its tasks, metrics and swept parameters (reads .hydra/)",
        ),
        Option("tasks", "<[a,b]>", "the task names alone, instead of run=", None, names),
        Option(
            "params",
            "<[a.b,c]>",
            "the swept config keys (default: those of the sweep, "
            "else loader._target_, sampler._target_, trainer.lr)",
            None,
            names,
        ),
        Option(
            "monitor",
            "<key>",
            "the key sweeps optimize, e.g. eval/<task>/<metric> "
            "(default: the run's results.json, else each task's main metric)",
        ),
        Option("name", "mtl", "the workspace's name", "mtl"),
        Option("dry_run", "false", "print the spec as JSON; touches no network", False, flag),
    ),
)


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    args = COMMAND.parse(sys.argv[1:] if argv is None else argv)
    # Imported once the arguments are read: `--help` and argument errors need none of it, and
    # it takes seconds to import (torch, transformers).
    from mtl.reporting.workspace import folder_spec, save_workspace

    keys = ("entity", "project", "run", "tasks", "params", "monitor", "name")
    spec = folder_spec(**{key: args[key] for key in keys})
    print(json.dumps(spec, indent=2) if args["dry_run"] else save_workspace(spec))


if __name__ == "__main__":
    main()
