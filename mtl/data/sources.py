"""Reading a task's rows from its `source`: a bundled task, local files or a hub dataset."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset

from mtl.data.bundled import bundled_rows
from mtl.errors import MtlError

FILE_LOADERS = {
    ".json": Dataset.from_json,
    ".jsonl": Dataset.from_json,
    ".csv": Dataset.from_csv,
    ".parquet": Dataset.from_parquet,
}


def read_source(
    name: str,
    type: str,
    source: dict[str, Any],
    text_column: str,
    label_column: str,
    label_names: Sequence[str] | None,
    dev_fraction: float,
    seed: int,
) -> tuple[Dataset, Dataset, list[str] | None]:
    """(train, dev, label_names) of a task's `source` (see `mtl.data.build_task`)."""
    label_names = list(label_names) if label_names is not None else None
    if "bundled" in source:
        options = {k: v for k, v in source.items() if k != "bundled"}
        bundled_type, bundled_labels, train, dev = bundled_rows(
            source["bundled"], seed=seed, **options
        )
        if bundled_type != type:
            raise MtlError(
                f"task {name!r}: bundled {source['bundled']!r} is {bundled_type}, not {type}; "
                f"set type: {bundled_type}"
            )
        rename = {"text": text_column, "label": label_column}
        train = [{rename[k]: v for k, v in row.items()} for row in train]
        dev = [{rename[k]: v for k, v in row.items()} for row in dev]
        return Dataset.from_list(train), Dataset.from_list(dev), label_names or bundled_labels
    if "path" in source:
        train = _read_file(name, source["path"])
        if source.get("dev_path"):
            return train, _read_file(name, source["dev_path"]), label_names
        if len(train) < 2:
            raise MtlError(
                f"task {name!r}: {source['path']} has {len(train)} rows; a train/dev split "
                "needs at least 2 (or give dev_path)"
            )
        split = train.train_test_split(test_size=dev_fraction, seed=seed)
        return split["train"], split["test"], label_names
    if "hub" in source:
        from datasets import load_dataset

        def load(split: str) -> Dataset:
            return load_dataset(source["hub"], source.get("config"), split=split)

        train = load(source.get("train_split", "train"))
        dev = load(source.get("dev_split", "validation"))
        return train, dev, label_names
    raise MtlError(
        f"task {name!r}: source needs one of the keys 'bundled', 'path' or 'hub', got {source}"
    )


def _read_file(name: str, path: str) -> Dataset:
    suffix = Path(path).suffix.lower()
    if suffix not in FILE_LOADERS:
        raise MtlError(
            f"task {name!r}: cannot read {path}: use one of {sorted(FILE_LOADERS)} files"
        )
    if not Path(path).is_file():
        raise MtlError(f"task {name!r}: data file {path} does not exist; check the path")
    if Path(path).stat().st_size == 0:
        raise MtlError(f"task {name!r}: data file {path} is empty; give it some rows")
    try:
        return FILE_LOADERS[suffix](str(path))
    except Exception as err:  # datasets raises many types for malformed files
        raise MtlError(
            f"task {name!r}: cannot read {path} as {suffix[1:]} ({err.__class__.__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}); fix the file"
        ) from err
