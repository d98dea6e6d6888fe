"""`mtl-predict model=<run or export folder> task=<name or [a,b]> input=<file or -> output=<file
or -> [key=value ...]`: a trained model's predictions for the rows of a file
(`mtl.inference.predict.predict_file`)."""

from __future__ import annotations

import os
import sys

from mtl.cli.script import (
    REQUIRED,
    TRUST,
    Command,
    Option,
    count,
    flag,
    names,
    one_line_errors,
)
from mtl.quiet import quiet_libraries

COMMAND = Command(
    prog="mtl-predict",
    summary="A trained model's predictions for the rows of a file: each input row plus "
    "prediction and score (<task>.prediction, <task>.score with several tasks).",
    options=(
        Option(
            "model",
            "<run or export folder>",
            "the trained model: an export, a run folder or one of its checkpoints",
            REQUIRED,
        ),
        Option("task", "<name or [a,b]>", "the tasks to predict", REQUIRED, names),
        Option(
            "input",
            "<file or ->",
            "the rows: jsonl, json, csv, tsv, parquet or txt "
            "(optionally compressed); - reads jsonl from stdin",
            REQUIRED,
        ),
        Option(
            "output",
            "<file or ->",
            "where the rows go: .jsonl/.json, .csv or .tsv; - writes jsonl to stdout",
            REQUIRED,
        ),
        Option("batch_size", "32", "rows per forward call", 32, count),
        Option("overwrite", "false", "replace an existing output file", False, flag),
        Option(
            "max_new_tokens",
            "<the task's>",
            "tokens a generation task writes at most per row",
            None,
            count,
        ),
        TRUST,
    ),
    notes="The output is written whole or not at all; bad input writes nothing.",
)


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    args = COMMAND.parse(sys.argv[1:] if argv is None else argv)
    # Imported once the arguments are read: `--help` and argument errors need none of it, and
    # it takes seconds to import (torch, transformers).
    from mtl.inference.predict import predict_file

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    quiet_libraries()
    predict_file(
        args["model"],
        args["task"],
        args["input"],
        args["output"],
        batch_size=args["batch_size"],
        overwrite=args["overwrite"],
        trust_custom_code=args["trust_custom_code"],
        max_new_tokens=args["max_new_tokens"],
    )


if __name__ == "__main__":
    main()
