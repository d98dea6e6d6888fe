"""`mtl-export <run folder | checkpoint folder> [out] [key=value ...]`: a run's export folder
(`mtl.inference.export`); the default `out` is `<run>/export`. Prints the folder written."""

from __future__ import annotations

import sys

from mtl.cli.script import TRUST, Command, Option, Positional, flag, one_line_errors
from mtl.quiet import quiet_libraries

COMMAND = Command(
    prog="mtl-export",
    summary="Export a trained run (its best model, else its latest complete checkpoint) or a "
    "checkpoint as a self-contained model folder for mtl.load_model and mtl-predict.",
    positionals=(
        Positional("run", "a run folder, or one of its checkpoint folders"),
        Positional("out", "the export folder to write (default: <run>/export)", required=False),
    ),
    arguments="a run folder and an optional out folder",
    options=(
        Option(
            "overwrite",
            "false",
            "replace an existing out that is not an earlier export",
            False,
            flag,
        ),
        Option(
            "standard",
            "false",
            "also write <out>/<task>/, a transformers model per task",
            False,
            flag,
        ),
        Option(
            "merge",
            "false",
            "model.peft runs: the shared adapter merged into the encoder, "
            "or with one per task <out>/<task>/ with its adapter merged",
            False,
            flag,
        ),
        TRUST,
    ),
)


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    args = COMMAND.parse(sys.argv[1:] if argv is None else argv)
    # Imported once the arguments are read: `--help` and argument errors need none of it, and
    # it takes seconds to import (torch, transformers).
    from mtl.inference.export import export_model, run_folder

    quiet_libraries()
    out = args["out"] or run_folder(args["run"]) / "export"
    flags = {key: args[key] for key in ("overwrite", "standard", "merge", "trust_custom_code")}
    export_model(args["run"], out, **flags)
    print(out)


if __name__ == "__main__":
    main()
