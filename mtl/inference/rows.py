"""Row files: the rows mtl-predict reads and the rows it writes.

Input is any file training reads (`mtl.data.sources.FORMATS`: jsonl, json, csv, tsv, parquet,
txt, optionally compressed): jsonl/json, csv and tsv by mtl's own readers (csv and tsv cells as
text, a cell holding a JSON list or object read as that value), the others by the `datasets`
builder training uses. Output is jsonl, csv or tsv, written whole (`mtl.artifacts`).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import datasets

from mtl.artifacts import write_file
from mtl.data.sources import COMPRESSIONS, FORMATS
from mtl.errors import MtlError
from mtl.quiet import quiet_libraries


def file_kind(path: str) -> str:
    """How mtl-predict reads (and writes) `path`: "jsonl", "csv", "tsv" (its own readers, cells
    as text) or a `datasets` builder of training's `FORMATS` (parquet, txt, compressed files)."""
    if path == "-":
        return "jsonl"
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        return "datasets"
    suffix = suffixes[-1] if suffixes else ""
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    if suffix in FORMATS:
        return "datasets"
    raise MtlError(f"{path}: unknown file type {suffix!r}; use {', '.join(FORMATS)} (or -)")


def output_kind(path: str) -> str:
    kind = file_kind(path)
    if kind == "datasets":
        raise MtlError(f"output={path}: write .jsonl, .json, .csv or .tsv (or - for stdout)")
    return kind


def read_rows(path: str) -> tuple[list[dict], bool]:
    """The rows of an input file or stdin, and whether their cells are text (csv, tsv)."""
    kind = file_kind(path)
    if path != "-" and not Path(path).is_file():
        raise MtlError(f"input={path}: cannot read it (no such file); give the file of rows")
    if kind == "datasets":
        return read_dataset(path), False
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise MtlError(
            f"input={path}: cannot read it ({type(err).__name__}); give a readable {kind} file"
        ) from None
    if kind in ("csv", "tsv"):
        try:
            rows = list(csv.DictReader(io.StringIO(text), delimiter="," if kind == "csv" else "\t"))
        except csv.Error as err:
            raise MtlError(f"input={path}: not valid {kind} ({err})") from None
        return rows, True
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise MtlError(
                f"input={path}: line {number} is not JSON; give one JSON object per line"
            ) from None
        if not isinstance(row, dict):
            raise MtlError(f"input={path}: line {number} is not a JSON object")
        rows.append(row)
    return rows, False


def read_dataset(path: str) -> list[dict]:
    """The rows of a file in one of training's `FORMATS`, read as training reads it."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    suffix = suffixes[-2] if suffixes[-1] in COMPRESSIONS and len(suffixes) > 1 else suffixes[-1]
    if suffix not in FORMATS:
        raise MtlError(f"input={path}: unknown file type; use {', '.join(FORMATS)}")
    builder, options = FORMATS[suffix]
    try:
        with quiet_libraries():  # no progress bars, no error log before mtl's one line
            data = datasets.load_dataset(builder, data_files=[path], split="train", **options)
    except Exception as err:  # datasets raises many types for malformed files
        detail = str(err.__cause__ or err).strip().splitlines()
        raise MtlError(
            f"input={path}: cannot read it as {builder} ({detail[0] if detail else ''}); "
            "fix the file"
        ) from None
    return data.to_list()


def cell(value: Any) -> Any:
    """A csv cell holding a JSON list or object (choices, answers) as that value."""
    if isinstance(value, str) and value[:1] in "[{" and value:
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def render(rows: list[dict], kind: str) -> str:
    if kind == "jsonl":
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    delimiter = "\t" if kind == "tsv" else ","
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n", delimiter=delimiter)
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {
                k: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v
                for k, v in row.items()
            }
        )
    return buffer.getvalue()


def write_output(path: str, text: str, overwrite: bool = False, protect=()) -> None:
    """Write whole or not at all; an existing file only with `overwrite` (`mtl.artifacts`)."""
    if path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_file(path, text, overwrite=overwrite, protect=protect)
