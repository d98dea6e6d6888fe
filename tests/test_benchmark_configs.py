"""The benchmark task configs (GLUE, SQuAD, SQuAD 2.0, SWAG, CoNLL-2003): their hub sources,
columns and paper metrics, trained end to end on tiny local files with the hub's columns."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from accelerate import Accelerator
from omegaconf import OmegaConf
from torch import nn

from mtl.config import validate
from mtl.data import build_task_from_config, load_tokenizer
from mtl.data.sources import read_source
from mtl.errors import MtlError
from mtl.task_types import BUILTIN, task_config
from mtl.training.evaluate import evaluate
from mtl.training.loop import run

CONF = Path(__file__).resolve().parents[1] / "conf"
WORDS = "the a cat dog sat ran on under mat hill red blue quickly slowly".split()

# The columns of each hub dataset, as its dataset card lists them (what the fixtures hold).
GLUE_COLUMNS = {
    "cola": ["sentence", "label", "idx"],
    "sst2": ["sentence", "label", "idx"],
    "mrpc": ["sentence1", "sentence2", "label", "idx"],
    "stsb": ["sentence1", "sentence2", "label", "idx"],
    "qqp": ["question1", "question2", "label", "idx"],
    "mnli": ["premise", "hypothesis", "label", "idx"],
    "qnli": ["question", "sentence", "label", "idx"],
    "rte": ["sentence1", "sentence2", "label", "idx"],
    "wnli": ["sentence1", "sentence2", "label", "idx"],
}
SQUAD_COLUMNS = ["id", "title", "context", "question", "answers"]
SWAG_COLUMNS = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source"]
SWAG_COLUMNS += ["ending0", "ending1", "ending2", "ending3", "label"]
CONLL_COLUMNS = ["id", "tokens", "pos_tags", "chunk_tags", "ner_tags"]

# config path -> (task name, hub, hub config name, hub splits, metrics reported in papers)
DEV = {"train": "train", "dev": "validation"}
BENCHMARKS = {
    "glue/cola": ("cola", "nyu-mll/glue", "cola", DEV, ["mcc"]),
    "glue/sst2": ("sst2", "nyu-mll/glue", "sst2", DEV, ["accuracy"]),
    "glue/mrpc": ("mrpc", "nyu-mll/glue", "mrpc", DEV, ["f1", "accuracy"]),
    "glue/stsb": ("stsb", "nyu-mll/glue", "stsb", DEV, ["pearson", "spearman"]),
    "glue/qqp": ("qqp", "nyu-mll/glue", "qqp", DEV, ["f1", "accuracy"]),
    "glue/mnli": (
        "mnli",
        "nyu-mll/glue",
        "mnli",
        {"train": "train", "dev": "validation_matched", "dev_mismatched": "validation_mismatched"},
        ["accuracy"],
    ),
    "glue/qnli": ("qnli", "nyu-mll/glue", "qnli", DEV, ["accuracy"]),
    "glue/rte": ("rte", "nyu-mll/glue", "rte", DEV, ["accuracy"]),
    "glue/wnli": ("wnli", "nyu-mll/glue", "wnli", DEV, ["accuracy"]),
    "squad": ("squad", "rajpurkar/squad", None, DEV, ["exact_match", "f1"]),
    "squad_v2": ("squad_v2", "rajpurkar/squad_v2", None, DEV, ["exact_match", "f1"]),
    "swag": ("swag", "allenai/swag", "regular", DEV, ["accuracy"]),
    "conll2003": (
        "conll2003",
        "eriktks/conll2003",
        None,
        {"train": "train", "dev": "validation", "test": "test"},
        ["f1", "precision", "recall", "accuracy"],
    ),
}


def sentence(rng: random.Random, n: int = 6) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, n)))


def hub_rows(path: str, n: int, seed: int) -> list[dict]:
    """n rows with exactly the hub dataset's columns and value types."""
    rng = random.Random(seed)
    name = BENCHMARKS[path][0]
    rows = []
    for i in range(n):
        if name in GLUE_COLUMNS:
            row = {c: sentence(rng) for c in GLUE_COLUMNS[name][:-2]}
            classes = 3 if name == "mnli" else 2
            label = round(rng.uniform(0, 5), 2) if name == "stsb" else rng.randrange(classes)
            row.update(label=label, idx=i)
        elif name in ("squad", "squad_v2"):
            context = sentence(rng, 12) + " paris " + sentence(rng, 12)
            unanswerable = name == "squad_v2" and i % 3 == 0
            answers = {"text": ["paris"], "answer_start": [context.index(" paris") + 1]}
            row = {
                "id": f"q{i}",
                "title": "t",
                "context": context,
                "question": "where " + sentence(rng) + "?",
                "answers": {"text": [], "answer_start": []} if unanswerable else answers,
            }
        elif name == "swag":
            row = {"video-id": f"v{i}", "fold-ind": str(i), "gold-source": "gold"}
            row.update(sent1=sentence(rng), sent2=sentence(rng, 3))
            row["startphrase"] = f"{row['sent1']} {row['sent2']}"
            row.update({f"ending{k}": sentence(rng) for k in range(4)})
            row["label"] = rng.randrange(4)
        else:  # conll2003: BIO tags as ClassLabel ids
            words = sentence(rng, 8).split()
            row = {"id": str(i), "tokens": words}
            row["pos_tags"] = [rng.randrange(47) for _ in words]
            row["chunk_tags"] = [rng.randrange(23) for _ in words]
            row["ner_tags"] = [rng.choice([0, 0, 1, 2, 3, 5, 7]) for _ in words]
        rows.append(row)
    return rows


def write_split(folder: Path, path: str, split: str, n: int, seed: int) -> str:
    file = folder / f"{path.replace('/', '_')}_{split}.jsonl"
    file.write_text("\n".join(json.dumps(r) for r in hub_rows(path, n, seed)) + "\n")
    return str(file)


def task_file(path: str) -> dict:
    return yaml.safe_load((CONF / "task" / f"{path}.yaml").read_text())


def local_source(path: str, folder: Path) -> tuple[list[str], dict[str, str]]:
    """Overrides that swap the config's hub source for local files of each of its splits (the
    source's other keys, such as list_columns, kept), and the files."""
    name, _, _, splits, _ = BENCHMARKS[path]
    source = task_file(path)["source"]
    files = {
        split: write_split(folder, path, split, 48 if split == "train" else 16, seed)
        for seed, split in enumerate(splits)
    }
    hub_keys = ("hub", "name", "revision", "splits")
    overrides = [f"~task.{name}.source.{key}" for key in hub_keys if key in source]
    overrides += [f"+task.{name}.source.{split}={file}" for split, file in files.items()]
    return overrides, files


@pytest.mark.parametrize("path", BENCHMARKS)
def test_config_names_its_hub_source_columns_and_paper_metrics(path):
    name, hub, hub_name, splits, metrics = BENCHMARKS[path]
    conf = task_file(path)
    first_line = (CONF / "task" / f"{path}.yaml").read_text().splitlines()[0]
    assert first_line == f"# @package task.{name}"
    assert conf["source"]["hub"] == hub
    assert conf["source"].get("name") == hub_name
    assert conf["source"]["splits"] == splits
    assert conf["metrics"] == metrics
    columns = {k: v for k, v in conf.items() if k.endswith("_column")}
    hub_columns = set(hub_rows(path, 1, 0)[0]) | set(conf["source"].get("list_columns", {}))
    assert set(columns.values()) <= hub_columns, (columns, hub_columns)


def test_all_benchmarks_compose_together(compose_cfg):
    """Composed together, each task keeps what its own file says (no task's keys land in
    another's), and all validate."""
    cfg = compose_cfg(f"task=[{','.join(BENCHMARKS)}]", "output_dir=unused")
    assert sorted(cfg.task) == sorted(name for name, *_ in BENCHMARKS.values())
    for path, (name, *_) in BENCHMARKS.items():
        own = {k: v for k, v in task_file(path).items() if k != "defaults"}
        composed = OmegaConf.to_container(cfg.task[name])
        assert {k: composed[k] for k in own} == own, path
    assert set(validate(cfg).tasks) == set(cfg.task)
    assert {task_file(path)["type"] for path in BENCHMARKS} <= set(BUILTIN)


def test_swag_endings_become_a_list_of_choices(tmp_path, compose_cfg):
    overrides, files = local_source("swag", tmp_path)
    cfg = compose_cfg("task=[swag]", "output_dir=unused", *overrides)
    source = read_source("swag", cfg.task.swag.source)
    rows = hub_rows("swag", 16, seed=1)
    dev = source.splits["dev"]
    assert dev["choices"] == [[r[f"ending{k}"] for k in range(4)] for r in rows]
    assert dev["label"] == [r["label"] for r in rows]


@pytest.mark.parametrize("path", BENCHMARKS)
def test_trains_on_local_files_with_the_hub_columns(make_cfg, tmp_path, path):
    name, _, _, splits, metrics = BENCHMARKS[path]
    overrides, _ = local_source(path, tmp_path)
    final = run(make_cfg(f"task=[{path}]", "model=tiny", *overrides)).dev
    expected = {f"eval/{name}/{m}" for m in metrics}
    if "dev_mismatched" in splits:
        expected |= {f"eval/{name}_mismatched/{m}" for m in metrics}
    assert {k for k in final if k.startswith("eval/")} == expected | {"eval/mean"}
    assert all(np.isfinite(final[k]) for k in expected)


class ConstantModel(nn.Module):
    """Predicts class 0 for every row."""

    def __init__(self, task: str, classes: int) -> None:
        super().__init__()
        self.task, self.classes = task, classes
        self.weight = nn.Parameter(torch.zeros(1))

    def logits(self, batch):
        logits = torch.zeros(len(batch["input_ids"]), self.classes)
        logits[:, 0] = 1.0
        return {self.task: logits}


def test_extra_dev_splits_are_scored_on_their_own_rows(tmp_path):
    rows = hub_rows("glue/mnli", 30, seed=0)
    matched = [{**r, "label": 0} for r in rows[:10]]  # class 0 everywhere: all right
    mismatched = [{**r, "label": 0 if i < 5 else 2} for i, r in enumerate(rows[:10])]  # half
    files = {}
    for split, data in (("train", rows), ("dev", matched), ("dev_mismatched", mismatched)):
        files[split] = str(tmp_path / f"{split}.jsonl")
        Path(files[split]).write_text("\n".join(json.dumps(r) for r in data))
    conf = task_file("glue/mnli")
    options = {k: v for k, v in conf.items() if k not in ("type", "source", "defaults")}
    config = task_config(dict(type=conf["type"], source=files, **options))
    task = build_task_from_config("mnli", config, load_tokenizer())
    assert sorted(task.splits) == ["dev", "dev_mismatched", "train"]
    results = evaluate(ConstantModel("mnli", 3), {"mnli": task}, Accelerator(cpu=True), 4)
    assert results == {"eval/mnli/accuracy": 1.0, "eval/mnli_mismatched/accuracy": 0.5}


def test_source_errors_name_the_extra_dev_keys_and_list_columns(tmp_path):
    file = write_split(tmp_path, "glue/rte", "train", 8, 0)
    with pytest.raises(MtlError, match=r"dev_<suffix>\) to hub split names"):
        read_source("t", {"hub": "x", "splits": {"train": "train", "devx": "v"}})
    with pytest.raises(MtlError, match=r"unknown source keys \['devx'\]"):
        read_source("t", {"train": file, "devx": file})
    with pytest.raises(MtlError, match=r"list_columns.pair names \['nope'\], not in the train"):
        read_source("t", {"train": file, "list_columns": {"pair": ["sentence1", "nope"]}})
    with pytest.raises(MtlError, match="list_columns must map a new column to a list"):
        read_source("t", {"train": file, "list_columns": {"pair": "sentence1"}})
    source = read_source("t", {"train": file, "dev": file, "dev_other": file})
    assert sorted(source.splits) == ["dev", "dev_other", "train"]
