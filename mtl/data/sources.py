"""Reading a task's `source` into datasets: a bundled task, local files or a hub dataset.

`read_source(name, source, seed=, dev_fraction=)` returns a `Source`: splits "train", "dev" and
"test" when the source has one. Files and hub datasets go through `datasets.load_dataset`
builders (cached under HF_DATASETS_CACHE). The forms of `source`:

  {bundled: pydoc_topic, ...options}   rows of `mtl.data.bundled.bundled_rows(name, **options)`,
      with their own split and label names.
  {path: data/x.jsonl, dev_path: ...}   one file, a glob or a list of either; without dev_path a
      seeded `dev_fraction` of the rows becomes dev.
  {train: ..., dev: ..., test: ...}     each a file, a glob or a list; dev and test optional
      (no dev: cut from train as above).
  {hub: glue, name: mrpc, revision:, data_dir:, data_files:,
   splits: {train: train, dev: validation, test: test}}   `load_dataset(hub, name, ...)`; the
      default splits are train/validation; `splits` without dev cuts dev from train. The older
      keys config, train_split and dev_split still work.

Extra dev splits: hub `splits` and the train/dev/test form also take keys `dev_<suffix>`
(`splits: {train: train, dev: validation_matched, dev_mismatched: validation_mismatched}`);
they are kept as splits of their own, and evaluation scores each one as `<task>_<suffix>`.
`list_columns: {choices: [ending0, ending1, ending2, ending3]}` (hub and file sources) adds a
column holding, per row, the list of the named columns' values: for a task type that reads a
list (multiple choice) from data that stores one column per item.

File formats follow the extension (all files of one source share one): csv, tsv, json, jsonl,
parquet, txt (one row per line, column "text"), optionally compressed (.gz, .bz2, .xz, .zst).
Files and hub sources take `options: {...}`, keyword arguments of the builder (delimiter,
column_names, ...). Relative paths resolve against the current working directory.
"""

from __future__ import annotations

import bz2
import csv
import glob
import gzip
import inspect
import lzma
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, load_dataset
from datasets.exceptions import DatasetGenerationError

from mtl.data.bundled import bundled_rows
from mtl.errors import MtlError
from mtl.quiet import quiet_libraries

FORMATS = {  # extension -> (builder, its default options)
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"delimiter": "\t"}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
    ".parquet": ("parquet", {}),
    ".txt": ("text", {}),
}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
SPLITS = ("train", "dev", "test")
EXTRA_DEV = re.compile(r"dev_\w+")  # extra dev splits: dev_mismatched, ...
HUB_KEYS = {"hub", "name", "revision", "data_dir", "data_files", "splits", "options"}
HUB_OLD_KEYS = {"config", "train_split", "dev_split"}  # older spellings of name and splits


@dataclass
class Source:
    """The rows of a task's source, before any checks, label mapping or tokenization."""

    splits: dict[str, Dataset]  # "train", "dev", "test" and "dev_<suffix>" where given
    label_names: list[str] | None  # bundled tasks' label names; None otherwise


def read_source(
    name: str, source: Mapping[str, Any], *, seed: int = 0, dev_fraction: float = 0.1
) -> Source:
    """The splits of task `name`'s `source` (forms in the module docstring).

    Where dev is cut from train, it is `train_test_split(test_size=dev_fraction, seed=seed)`.
    Raises MtlError for a source that cannot be read or has a split with 0 rows.
    """
    source = _plain(source)
    forms = [key for key in ("bundled", "path", "train", "hub") if key in source]
    if len(forms) != 1:
        raise MtlError(
            f"task {name!r}: source needs exactly one of the keys 'bundled', 'path', 'train' or "
            f"'hub', got {source}"
        )
    with quiet_libraries():
        if forms[0] == "bundled":
            result = _read_bundled(name, source, seed)
        elif forms[0] == "hub":
            result = _read_hub(name, source)
        else:
            result = _read_files(name, source)
        if "list_columns" in source:
            result.splits = _list_columns(name, result.splits, source["list_columns"])
        if "dev" not in result.splits:
            result.splits = _cut_dev(name, result.splits, dev_fraction, seed)
    for split, ds in result.splits.items():
        if len(ds) == 0:
            raise MtlError(f"task {name!r}: the {split} split has 0 rows; give it some rows")
    return result


def _read_bundled(name: str, source: dict[str, Any], seed: int) -> Source:
    options = {k: v for k, v in source.items() if k != "bundled"}
    allowed = set(inspect.signature(bundled_rows).parameters) - {"name", "seed"}
    _check_keys(name, options, allowed, "a bundled")
    _, label_names, train, dev = bundled_rows(source["bundled"], seed=seed, **options)
    splits = {"train": Dataset.from_list(train), "dev": Dataset.from_list(dev)}
    return Source(splits, list(label_names) if label_names is not None else None)


def _read_hub(name: str, source: dict[str, Any]) -> Source:
    _check_keys(name, source, HUB_KEYS | HUB_OLD_KEYS | {"list_columns"}, "a hub")
    for new, old in (("name", ["config"]), ("splits", ["train_split", "dev_split"])):
        if new in source and set(old) & set(source):
            raise MtlError(f"task {name!r}: give either {new} or {'/'.join(old)}, not both")
    config = source.get("name", source.get("config"))
    if "splits" in source:
        splits = _split_map(name, source["splits"])
    else:
        splits = {"train": source.get("train_split", "train")}
        splits["dev"] = source.get("dev_split", "validation")
    try:
        loaded = load_dataset(
            source["hub"],
            config,
            revision=source.get("revision"),
            data_dir=source.get("data_dir"),
            data_files=source.get("data_files"),
            split=list(splits.values()),
            **_options(name, source),
        )
    except Exception as err:  # network, unknown dataset, config or split: many types
        raise MtlError(
            f"task {name!r}: cannot load hub dataset {source['hub']!r} ({_first_line(err)}); "
            "check hub, name, revision and splits (and the network)"
        ) from err
    return Source(dict(zip(splits, loaded, strict=True)), None)


def _read_files(name: str, source: dict[str, Any]) -> Source:
    if "path" in source:
        _check_keys(name, source, {"path", "dev_path", "options", "list_columns"}, "a path")
        given = {"train": source["path"], "dev": source.get("dev_path")}
    else:
        extra = {key for key in source if EXTRA_DEV.fullmatch(key)}
        allowed = {*SPLITS, *extra, "options", "list_columns"}
        _check_keys(name, source, allowed, "a train/dev/test (or dev_<suffix>)")
        given = {split: source.get(split) for split in [*SPLITS, *sorted(extra)]}
    files = {split: _resolve(name, spec) for split, spec in given.items() if spec is not None}
    builder, options = _format(name, [f for split_files in files.values() for f in split_files])
    given_options = _options(name, source)
    options.update(given_options)
    if builder == "csv" and "sep" in given_options:
        options.pop("delimiter", None)  # the csv builder lets delimiter override sep
    if builder == "csv" and not {"column_names", "names", "header"} & set(given_options):
        for split_files in files.values():
            for path in split_files:
                _check_header(name, path, options.get("sep") or options.get("delimiter") or ",")
    # The test split is read on its own: its columns need not match (no labels, an id column).
    test = {"test": files.pop("test")} if "test" in files else {}
    try:
        loaded = dict(load_dataset(builder, data_files=files, **options))
        if test:
            loaded["test"] = load_dataset(builder, data_files=test, split="test", **options)
    except Exception as err:  # datasets raises many types for malformed files and bad options
        empty = re.search(r'Instruction "(\w+)" corresponds to no data', str(err))
        if empty:  # a csv with only a header, say
            raise MtlError(
                f"task {name!r}: the {empty[1]} split has 0 rows; give it some rows"
            ) from err
        raise MtlError(
            f"task {name!r}: cannot read {_describe(files | test)} as {builder} "
            f"({_first_line(err)}); fix the file or the source options"
        ) from err
    return Source(loaded, None)


def _check_header(name: str, path: str, delimiter: str) -> None:
    """A csv/tsv header that names a column twice is refused: the reader would rename the
    second (`label.1`) and the task would silently read the first."""
    suffix = Path(path).suffix.lower()
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(suffix, open)
    if suffix == ".zst":
        return  # read by datasets' own decompressor; not checked here
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as f:
            header = next(csv.reader(f, delimiter=delimiter), [])
    except (OSError, UnicodeDecodeError, csv.Error, EOFError):
        return  # the builder reports what is wrong with the file
    seen: dict[str, int] = {}
    for number, column in enumerate(header, 1):
        if column in seen:
            raise MtlError(
                f"task {name!r}: {path}: the header names column {column!r} twice (columns "
                f"{seen[column]} and {number}); rename or remove one"
            )
        seen[column] = number


def _resolve(name: str, spec: Any) -> list[str]:
    """Absolute paths of one split's files: a path or glob, or a list of them; checked."""
    patterns = [spec] if isinstance(spec, str | Path) else spec
    if not isinstance(patterns, list) or not patterns:
        raise MtlError(f"task {name!r}: {spec!r} is not a file, a glob or a list of them")
    files = []
    for pattern in patterns:
        pattern = Path(pattern).expanduser()
        pattern = str(pattern if pattern.is_absolute() else Path.cwd() / pattern)
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else []
        if glob.has_magic(pattern) and not matches:
            raise MtlError(f"task {name!r}: no file matches {pattern}; check the glob")
        for path in matches or [pattern]:
            if not Path(path).exists():
                raise MtlError(f"task {name!r}: data file {path} does not exist; check the path")
            if not Path(path).is_file():
                raise MtlError(
                    f"task {name!r}: {path} is not a file; give a file or a glob like dir/*.jsonl"
                )
            if Path(path).stat().st_size == 0:
                raise MtlError(f"task {name!r}: data file {path} is empty; give it some rows")
            files.append(path)
    return files


def _format(name: str, files: list[str]) -> tuple[str, dict[str, Any]]:
    """(builder, default options) of a source's files, which must share one format."""
    extensions = set()
    for path in files:
        suffixes = [s.lower() for s in Path(path).suffixes]
        if suffixes and suffixes[-1] in COMPRESSIONS:
            suffixes.pop()
        extension = suffixes[-1] if suffixes else ""
        if extension not in FORMATS:
            raise MtlError(
                f"task {name!r}: cannot read {path}: use {', '.join(FORMATS)} files "
                "(optionally compressed)"
            )
        extensions.add(extension)
    if len(extensions) > 1:
        raise MtlError(
            f"task {name!r}: the source mixes {', '.join(sorted(extensions))} files; "
            "give all its files in one format"
        )
    builder, options = FORMATS[extensions.pop()]
    return builder, dict(options)


def _cut_dev(
    name: str, splits: dict[str, Dataset], dev_fraction: float, seed: int
) -> dict[str, Dataset]:
    train = splits["train"]
    if len(train) < 2:
        raise MtlError(
            f"task {name!r}: the train split has {len(train)} rows; cutting a dev split from it "
            "needs at least 2 (or give a dev split)"
        )
    cut = train.train_test_split(test_size=dev_fraction, seed=seed)
    return {**splits, "train": cut["train"], "dev": cut["test"]}


def _split_map(name: str, splits: Any) -> dict[str, str]:
    if (
        not isinstance(splits, dict)
        or "train" not in splits
        or any(key not in SPLITS and not EXTRA_DEV.fullmatch(key) for key in splits)
    ):
        raise MtlError(
            f"task {name!r}: source splits must map train (and optionally dev, test, "
            f"dev_<suffix>) to hub split names, got {splits!r}"
        )
    extra = sorted(key for key in splits if key not in SPLITS)
    return {split: str(splits[split]) for split in [*SPLITS, *extra] if split in splits}


def _list_columns(name: str, splits: dict[str, Dataset], spec: Any) -> dict[str, Dataset]:
    """Each split with a column `new` = [row[c] for c in columns] for each `new: columns`."""
    if not isinstance(spec, dict) or not all(
        isinstance(cols, list) and cols and all(isinstance(c, str) for c in cols)
        for cols in spec.values()
    ):
        raise MtlError(
            f"task {name!r}: source list_columns must map a new column to a list of column "
            f"names, e.g. {{choices: [ending0, ending1]}}; got {spec!r}"
        )
    out = {}
    for split, ds in splits.items():
        for new, cols in spec.items():
            missing = [c for c in cols if c not in ds.column_names]
            if missing:
                raise MtlError(
                    f"task {name!r}: list_columns.{new} names {missing}, not in the {split} "
                    f"split (columns: {ds.column_names}); fix the column names"
                )

        def gather(rows: dict[str, list]) -> dict[str, list]:
            return {
                new: [list(values) for values in zip(*(rows[c] for c in cols), strict=True)]
                for new, cols in spec.items()
            }

        out[split] = ds.map(gather, batched=True)
    return out


def _options(name: str, source: dict[str, Any]) -> dict[str, Any]:
    options = source.get("options", {})
    if not isinstance(options, dict):
        raise MtlError(
            f"task {name!r}: source options must be a mapping of builder arguments, got {options!r}"
        )
    return options


def _check_keys(name: str, source: Mapping[str, Any], allowed: set[str], form: str) -> None:
    unknown = sorted(set(source) - allowed)
    if unknown:
        raise MtlError(
            f"task {name!r}: unknown source keys {unknown} for {form} source; use {sorted(allowed)}"
        )


def _plain(value: Any) -> Any:
    """Plain dicts and lists (a Hydra DictConfig/ListConfig holds the same)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value


def _describe(files: dict[str, list[str]]) -> str:
    paths = [path for split_files in files.values() for path in split_files]
    return paths[0] if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more files)"


def _first_line(err: Exception) -> str:
    if isinstance(err, DatasetGenerationError) and err.__cause__ is not None:
        err = err.__cause__  # says only "An error occurred while generating the dataset"
    text = str(err).strip()
    return f"{err.__class__.__name__}: {text.splitlines()[0]}" if text else err.__class__.__name__
