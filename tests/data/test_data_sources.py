"""`read_source`: every form of a task's source, read through `datasets.load_dataset` builders."""

import gzip
import json
from pathlib import Path

import datasets
import pandas as pd
import pytest
from datasets import Dataset
from omegaconf import OmegaConf

import mtl.data.sources as sources
from mtl.data.bundled import bundled_rows
from mtl.data.sources import Source, read_source
from mtl.errors import MtlError

ROWS = [{"text": f"sentence number {i}", "label": ["neg", "pos"][i % 2]} for i in range(20)]


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Builders cache under a tmp HF_DATASETS_CACHE, not the user's."""
    cache = tmp_path / "hf_cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


def write(path: Path, rows: list[dict], **csv_options) -> str:
    """`rows` in the format of `path`'s extension (.gz: gzipped)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix in (".csv", ".tsv"):
        sep = "\t" if path.suffix == ".tsv" else ","
        pd.DataFrame(rows).to_csv(path, index=False, sep=sep, **csv_options)
    elif path.suffix == ".parquet":
        pd.DataFrame(rows).to_parquet(path)
    else:
        path.write_text("".join(row["text"] + "\n" for row in rows))
    return str(path)


def as_set(ds: Dataset) -> set[tuple]:
    return {tuple(sorted(row.items())) for row in ds}


def error(source, name="t", **kwargs) -> str:
    """The message of the MtlError that reading `source` raises; checks it is one line."""
    with pytest.raises(MtlError) as info:
        read_source(name, source, **kwargs)
    message = str(info.value)
    assert "\n" not in message and f"task {name!r}" in message
    return message


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".json", ".jsonl", ".parquet", ".jsonl.gz"])
def test_each_format_reads_every_row_and_cuts_a_seeded_dev(tmp_path, suffix):
    path = write(tmp_path / f"data{suffix}", ROWS)
    src = read_source("t", {"path": path}, seed=3, dev_fraction=0.25)
    assert isinstance(src, Source) and src.label_names is None
    assert set(src.splits) == {"train", "dev"}
    assert (len(src.splits["train"]), len(src.splits["dev"])) == (15, 5)
    assert src.splits["train"].column_names == ["text", "label"]
    assert as_set(src.splits["train"]) | as_set(src.splits["dev"]) == as_set(
        Dataset.from_list(ROWS)
    )
    reference = Dataset.from_list(ROWS).train_test_split(test_size=0.25, seed=3)
    assert src.splits["dev"]["text"] == reference["test"]["text"]
    other = read_source("t", {"path": path}, seed=4, dev_fraction=0.25)
    assert other.splits["dev"]["text"] != src.splits["dev"]["text"]


def test_txt_gives_one_text_row_per_line(tmp_path):
    path = write(tmp_path / "lines.txt", ROWS)
    src = read_source("t", {"train": path, "dev": path})
    assert src.splits["dev"].column_names == ["text"]
    assert src.splits["dev"]["text"] == [row["text"] for row in ROWS]


def test_explicit_splits_globs_and_lists_of_files(tmp_path):
    write(tmp_path / "train" / "part-0.jsonl", ROWS[:8])
    write(tmp_path / "train" / "sub" / "part-1.jsonl", ROWS[8:12])
    dev = [
        write(tmp_path / "dev-a.jsonl", ROWS[12:14]),
        write(tmp_path / "dev-b.jsonl", ROWS[14:16]),
    ]
    test = write(tmp_path / "test.jsonl", ROWS[16:])
    src = read_source(
        "t", {"train": str(tmp_path / "train" / "**" / "*.jsonl"), "dev": dev, "test": test}
    )
    assert set(src.splits) == {"train", "dev", "test"}
    assert src.splits["train"]["text"] == [row["text"] for row in ROWS[:12]]  # no dev cut
    assert src.splits["dev"]["text"] == [row["text"] for row in ROWS[12:16]]
    assert src.splits["test"]["text"] == [row["text"] for row in ROWS[16:]]


def test_explicit_splits_without_dev_cut_it_from_train_and_keep_test(tmp_path):
    train, test = write(tmp_path / "a.csv", ROWS), write(tmp_path / "b.csv", ROWS[:3])
    src = read_source("t", {"train": train, "test": test}, dev_fraction=0.5)
    assert [len(src.splits[s]) for s in ("train", "dev", "test")] == [10, 10, 3]


def test_old_dev_path_and_a_list_for_path(tmp_path):
    parts = [write(tmp_path / "p0.parquet", ROWS[:10]), write(tmp_path / "p1.parquet", ROWS[10:])]
    dev = write(tmp_path / "dev.parquet", ROWS[:2])
    src = read_source("t", {"path": parts, "dev_path": dev})
    assert src.splits["train"]["text"] == [row["text"] for row in ROWS]
    assert src.splits["dev"]["text"] == [row["text"] for row in ROWS[:2]]


def test_relative_paths_resolve_against_cwd_and_nothing_is_written_there(
    tmp_path, monkeypatch, hf_cache
):
    work = tmp_path / "work"
    write(work / "data" / "x.jsonl", ROWS)
    monkeypatch.chdir(work)
    src = read_source("t", {"path": "data/x.jsonl", "dev_path": "data/*.jsonl"})
    assert len(src.splits["dev"]) == 20
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*")) == ["data", "data/x.jsonl"]
    cached = [f["filename"] for f in src.splits["dev"].cache_files]
    assert cached and all(Path(f).is_relative_to(hf_cache) for f in cached)


def test_options_go_to_the_builder(tmp_path):
    semi = tmp_path / "semi.csv"
    semi.write_text("".join(f"{r['text']};{r['label']}\n" for r in ROWS))
    options = {"delimiter": ";", "column_names": ["sentence", "tag"]}
    src = read_source("t", {"train": str(semi), "dev": str(semi), "options": options})
    assert src.splits["dev"].column_names == ["sentence", "tag"]
    assert src.splits["dev"]["tag"] == [row["label"] for row in ROWS]
    tsv = write(tmp_path / "x.tsv", ROWS, header=False)
    src = read_source("t", {"path": tsv, "dev_path": tsv, "options": {"column_names": ["a", "b"]}})
    assert src.splits["dev"]["a"] == [row["text"] for row in ROWS]  # still tab-separated
    with_commas = tmp_path / "commas.tsv"
    with_commas.write_text("text,label\na,1\nb,0\n")
    src = read_source(
        "t", {"path": str(with_commas), "dev_path": str(with_commas), "options": {"sep": ","}}
    )
    assert src.splits["dev"]["label"] == [1, 0]


def test_a_hydra_dictconfig_source_reads_the_same(tmp_path):
    parts = [write(tmp_path / "p0.jsonl", ROWS[:10]), write(tmp_path / "p1.jsonl", ROWS[10:])]
    cfg = OmegaConf.create({"train": parts, "dev": parts[0], "options": {"encoding": "utf-8"}})
    assert len(read_source("t", cfg).splits["train"]) == 20


def test_bundled_rows_keep_their_columns_split_and_label_names():
    src = read_source("t", {"bundled": "synthetic_cls", "size": 50, "dev_fraction": 0.4}, seed=2)
    _, label_names, train, dev = bundled_rows("synthetic_cls", seed=2, size=50, dev_fraction=0.4)
    assert src.label_names == label_names and label_names
    assert src.splits["train"].to_list() == train and src.splits["dev"].to_list() == dev
    assert set(src.splits) == {"train", "dev"} and len(dev) == 20
    assert "size" in error({"bundled": "synthetic_cls", "sizes": 50})


class FakeHub:
    """Stands in for `datasets.load_dataset`: records the call, returns a dataset per split."""

    def __init__(self):
        self.calls = []

    def __call__(self, path, name=None, **kwargs):
        self.calls.append((path, name, kwargs))
        return [
            Dataset.from_list([{"text": f"{split} {i}", "label": i} for i in range(10)])
            for split in kwargs["split"]
        ]


@pytest.fixture
def hub(monkeypatch):
    fake = FakeHub()
    monkeypatch.setattr(sources, "load_dataset", fake)
    return fake


def test_hub_passes_every_key_to_load_dataset(hub):
    source = {
        "hub": "glue",
        "name": "mrpc",
        "revision": "abc123",
        "data_dir": "sub",
        "data_files": {"train": "t.csv"},
        "splits": {"train": "train", "dev": "validation[:50%]", "test": "test"},
        "options": {"delimiter": ";"},
    }
    src = read_source("t", source)
    assert hub.calls == [
        (
            "glue",
            "mrpc",
            {
                "revision": "abc123",
                "data_dir": "sub",
                "data_files": {"train": "t.csv"},
                "split": ["train", "validation[:50%]", "test"],
                "delimiter": ";",
            },
        )
    ]
    assert {s: ds[0]["text"] for s, ds in src.splits.items()} == {
        "train": "train 0",
        "dev": "validation[:50%] 0",
        "test": "test 0",
    }
    assert src.label_names is None


def test_hub_old_keys_and_defaults(hub):
    read_source("t", {"hub": "glue", "config": "sst2", "train_split": "tr", "dev_split": "va"})
    read_source("t", {"hub": "imdb"})
    assert [(path, name, kw["split"]) for path, name, kw in hub.calls] == [
        ("glue", "sst2", ["tr", "va"]),
        ("imdb", None, ["train", "validation"]),
    ]
    assert hub.calls[1][2]["revision"] is None and hub.calls[1][2]["data_files"] is None


def test_hub_splits_without_dev_cut_it_from_train(hub):
    src = read_source(
        "t", {"hub": "imdb", "splits": {"train": "train", "test": "test"}}, dev_fraction=0.3
    )
    assert hub.calls[0][2]["split"] == ["train", "test"]
    assert [len(src.splits[s]) for s in ("train", "dev", "test")] == [7, 3, 10]


def test_hub_errors_name_the_task_and_dataset(hub, monkeypatch):
    def fail(*args, **kwargs):
        raise ValueError('Unknown split "validation".\nShould be one of [train].')

    monkeypatch.setattr(sources, "load_dataset", fail)
    assert "'imdb'" in error({"hub": "imdb"}) and "Unknown split" in error({"hub": "imdb"})
    assert "'splitz'" in error({"hub": "glue", "splitz": {}})
    assert "splits" in error({"hub": "glue", "splits": {"dev": "validation"}})
    assert "either name or config" in error({"hub": "glue", "name": "a", "config": "b"})


def test_a_hub_split_with_zero_rows_is_an_error(monkeypatch):
    def load(path, name=None, *, split, **kwargs):
        return [Dataset.from_list([{"text": "a"}] * (s == "train")) for s in split]

    monkeypatch.setattr(sources, "load_dataset", load)
    assert "the dev split has 0 rows" in error({"hub": "glue"})


def test_file_errors_are_one_line_naming_task_and_fix(tmp_path):
    good = write(tmp_path / "good.jsonl", ROWS)
    assert "does not exist" in error({"path": str(tmp_path / "missing.jsonl")})
    assert "no file matches" in error({"train": str(tmp_path / "nope" / "*.csv")})
    (tmp_path / "empty.csv").write_text("")
    assert "empty.csv is empty" in error({"path": good, "dev_path": str(tmp_path / "empty.csv")})
    (tmp_path / "x.xml").write_text("<rows/>")
    assert "x.xml" in error({"path": str(tmp_path / "x.xml")})
    csv = write(tmp_path / "good.csv", ROWS)
    assert "mixes .csv, .jsonl" in error({"train": good, "dev": csv})
    assert "not a file" in error({"path": str(tmp_path)})
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": 1}\n{"text": "b", "label":\n')
    assert "JSON parse error" in error({"path": str(tmp_path / "bad.jsonl")})
    assert "'dev_paths'" in error({"path": good, "dev_paths": good})
    assert "'path'" in error({"train": good, "path": good})  # two forms at once
    assert "exactly one" in error({"url": "x"})
    assert "options" in error({"path": good, "options": ["sep"]})
    one = write(tmp_path / "one.jsonl", ROWS[:1])
    assert "train split has 1 rows" in error({"path": one})


def test_a_split_with_zero_rows_is_an_error(tmp_path):
    good, header_only = write(tmp_path / "a.csv", ROWS), tmp_path / "h.csv"
    header_only.write_text("text,label\n")
    assert "dev split has 0 rows" in error({"train": good, "dev": str(header_only)})
    assert "test split has 0 rows" in error({"train": good, "dev": good, "test": str(header_only)})


def test_builders_print_no_progress_bars_or_logs(tmp_path, capfd, caplog):
    good = write(tmp_path / "good.jsonl", ROWS)
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"text":\n')
    was_disabled = datasets.utils.are_progress_bars_disabled()
    datasets.utils.enable_progress_bars()
    try:
        read_source("t", {"path": good})
        with pytest.raises(MtlError):
            read_source("t", {"path": str(tmp_path / "bad.jsonl")})
        assert not datasets.utils.are_progress_bars_disabled()  # restored afterwards
    finally:
        if was_disabled:
            datasets.utils.disable_progress_bars()
    assert capfd.readouterr().err == ""
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("datasets")]
