"""multi_label_classification: list-valued labels as multi-hot rows, a BCE head, indicator
predictions scored against scikit-learn, and end-to-end training (mixup included)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score

from mtl.data import build_task_from_config, load_tokenizer, task_dataset, task_loader
from mtl.errors import MtlError
from mtl.loaders import MixupLoader
from mtl.models.heads import MultiLabelHead
from mtl.samplers import RandomBatchSampler
from mtl.task_types import MultiLabelClassification, builtin_types, task_config
from mtl.training.loop import run

TOPICS = ["arts", "politics", "sports", "tech"]
WORDS = {
    "arts": "painting opera",
    "politics": "senate vote",
    "sports": "goal match",
    "tech": "laptop code",
}


def rows(n: int, seed: int, ids: bool = False) -> list[dict]:
    """Texts naming 0-3 topics by keywords; label: the topics' names (or ids into TOPICS)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topics = sorted(rng.sample(TOPICS, rng.randint(0, 3)))
        words = " ".join(WORDS[t] for t in topics) or "nothing here"
        label = [TOPICS.index(t) for t in topics] if ids else topics
        out.append({"text": f"{words} {i}", "other": f"row {i}", "label": label})
    return out


def write_jsonl(path: Path, data: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(row) for row in data) + "\n")
    return path


@pytest.fixture
def files(tmp_path):
    return {
        "train": str(write_jsonl(tmp_path / "train.jsonl", rows(60, seed=0))),
        "dev": str(write_jsonl(tmp_path / "dev.jsonl", rows(20, seed=1))),
    }


def build(source, **options):
    config = task_config(dict(type="multi_label_classification", source=source, **options))
    return build_task_from_config("topics", config, load_tokenizer())


def test_is_a_builtin_type():
    assert builtin_types()["multi_label_classification"] is MultiLabelClassification


def test_labels_are_multi_hot_rows_and_batches_hold_float_b_by_k(files):
    task = build(files)
    assert task.label_names == TOPICS  # sorted distinct train names
    assert task.num_labels == 4
    source = rows(60, seed=0)
    for row, hot in zip(source, task.train["labels"], strict=True):
        assert hot == [1.0 if t in row["label"] else 0.0 for t in TOPICS]
    loader = task_loader(task, RandomBatchSampler(task.train["length"], 8, seed=0))
    seen = 0
    for batch in loader:
        labels = batch["labels"]
        assert labels.dtype == torch.float32 and labels.shape == (len(batch["example_ids"]), 4)
        for example, hot in zip(batch["example_ids"].tolist(), labels.tolist(), strict=True):
            assert hot == task.train["labels"][example]
        seen += len(labels)
    assert seen == 60
    # Per-example dicts (not packed rows) give the same batch.
    dataset = task_dataset(task)
    examples = [dataset[i] for i in (3, 0, 7)]
    batch = task.collator()(examples)
    assert batch["labels"].tolist() == [task.train["labels"][i] for i in (3, 0, 7)]


def test_integer_ids_give_names_0_to_max_and_a_text_pair_is_encoded(tmp_path):
    source = {
        "train": str(write_jsonl(tmp_path / "t.jsonl", rows(30, seed=0, ids=True))),
        "dev": str(write_jsonl(tmp_path / "d.jsonl", rows(10, seed=1, ids=True))),
    }
    task = build(source, text_pair_column="other")
    assert task.label_names == ["0", "1", "2", "3"]
    assert "token_type_ids" in task.train.column_names
    assert max(max(t) for t in task.train["token_type_ids"]) == 1
    first = rows(30, seed=0, ids=True)[0]["label"]
    assert [i for i, v in enumerate(task.train["labels"][0]) if v] == first


def test_label_names_from_the_config_set_the_columns(files):
    task = build(files, label_names=["tech", "sports", "politics", "arts", "unused"])
    assert task.num_labels == 5
    first = rows(60, seed=0)[0]["label"]
    names = ["tech", "sports", "politics", "arts", "unused"]
    assert task.train["labels"][0] == [1.0 if n in first else 0.0 for n in names]


@pytest.mark.parametrize(
    ("label", "message"),
    [
        (["sports", "cooking"], "label 'cooking' is not one of"),
        ("sports", "holds 'sports', not a list"),
    ],
)
def test_bad_labels_give_one_line(tmp_path, label, message):
    data = rows(20, seed=0)
    data[5]["label"] = label
    source = {"train": str(write_jsonl(tmp_path / "t.jsonl", data))}
    with pytest.raises(MtlError) as err:
        build(source, label_names=TOPICS)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "topics" in str(err.value)


def test_a_cell_that_is_not_a_list_is_refused_when_names_are_inferred(tmp_path):
    data = rows(20, seed=0)
    data[2]["label"] = 3
    with pytest.raises(MtlError, match="holds 3, not a list"):
        build({"train": str(write_jsonl(tmp_path / "t.jsonl", data))})


def test_head_loss_is_bce_and_reads_only_its_k_columns():
    torch.manual_seed(0)
    head = MultiLabelHead(8, 3, dropout=0.0)
    logits = torch.randn(4, 3)
    labels = torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.float32)
    p = torch.sigmoid(logits)
    expected = -(labels * p.log() + (1 - labels) * (1 - p).log()).mean()
    assert head.loss(logits, labels).item() == pytest.approx(expected.item(), rel=1e-5)
    padded = torch.cat([labels, torch.full((4, 5), -100.0)], dim=1)
    assert head.loss(logits, padded).item() == pytest.approx(expected.item(), rel=1e-5)
    hidden = torch.randn(4, 6, 8)
    assert head(hidden, torch.ones(4, 6, dtype=torch.long)).shape == (4, 3)


def test_predictions_threshold_the_sigmoid_and_scores_match_sklearn(files):
    task = build(files)
    tt = task.task_type
    assert tt.main_metric == "micro_f1"
    logits = torch.tensor([[2.0, -1.0, 0.1, -0.1], [-3.0, -3.0, -3.0, 4.0]])
    assert tt.predict(logits, {}) == [[1, 0, 1, 0], [0, 0, 0, 1]]
    rng = np.random.default_rng(0)
    refs = np.array(task.dev["labels"], dtype=int)
    preds = np.where(rng.random(refs.shape) < 0.2, 1 - refs, refs).tolist()
    scores = tt.score(preds, task.dev, task.label_names)
    assert list(scores) == ["micro_f1", "macro_f1", "subset_accuracy"]
    assert scores["micro_f1"] == pytest.approx(f1_score(refs, preds, average="micro"))
    assert scores["macro_f1"] == pytest.approx(
        f1_score(refs, preds, average="macro", zero_division=0)
    )
    assert scores["subset_accuracy"] == pytest.approx(accuracy_score(refs, preds))


def test_metric_names_are_resolved_for_the_type(files):
    task = build(files, metrics=["subset_accuracy", "macro_f1"])
    assert list(task.task_type.metrics) == ["subset_accuracy", "macro_f1"]
    with pytest.raises(MtlError, match="unknown metric 'accuracy'"):
        build(files, metrics=["accuracy"])


def mixup_with_tagging(tmp_path, k: int, texts: list[str]):
    """A MixupLoader over a k-label task (texts as given) and the bundled tagging task."""
    names = [f"l{i}" for i in range(k)]
    data = [{"text": t, "label": [names[i % k], names[(3 * i) % k]]} for i, t in enumerate(texts)]
    path = str(write_jsonl(tmp_path / "t.jsonl", data))
    multi = build({"train": path, "dev": path}, label_names=names)
    tag = build_task_from_config(
        "tag",
        task_config(
            dict(type="token_classification", source={"bundled": "synthetic_tag", "size": 40})
        ),
        load_tokenizer(),
    )
    loaders = {
        t.name: task_loader(t, RandomBatchSampler(t.train["length"], 6, seed=0))
        for t in (multi, tag)
    }
    return multi, MixupLoader(loaders, seed=0)


def task_rows(batch, task: str) -> list[int]:
    return batch["example_ids"][batch["task_ids"] == batch["tasks"].index(task)].tolist()


# 3 to 6 words: 5 to 8 tokens with [CLS] and [SEP], so never exactly 3 or 40 wide.
@pytest.mark.parametrize("k", [3, 40])  # fewer and more labels than tokens in a batch
def test_mixup_keeps_multi_hot_labels_next_to_padded_token_labels(tmp_path, k):
    texts = [" ".join("abcdef"[: 3 + i % 4]) for i in range(24)]
    multi, mixup = mixup_with_tagging(tmp_path, k, texts)
    for batch in mixup:
        labels = batch["labels"]["topics"]
        assert labels.shape == (6, k) and labels.dtype == torch.float32
        expected = [multi.train["labels"][i] for i in task_rows(batch, "topics")]
        assert labels.tolist() == expected
        tag = batch["labels"]["tag"]
        assert tag.shape[1] == batch["input_ids"].shape[1]
        assert (tag != -100).any(dim=1).all()


def test_multi_hot_labels_as_wide_as_their_batch_are_padded_and_the_head_ignores_it(tmp_path):
    # Every text is 2 words = 4 tokens, and k = 4: mixup cannot tell these labels from token
    # labels, pads them with -100 to the merged length, and the head reads the first 4 columns.
    multi, mixup = mixup_with_tagging(tmp_path, 4, ["a b"] * 24)
    head = MultiLabelHead(8, 4, dropout=0.0)
    logits = torch.randn(6, 4)
    for batch in mixup:
        labels = batch["labels"]["topics"]
        expected = torch.tensor([multi.train["labels"][i] for i in task_rows(batch, "topics")])
        assert labels.shape[1] == batch["input_ids"].shape[1]
        assert torch.equal(labels[:, :4], expected)
        assert head.loss(logits, labels).item() == pytest.approx(head.loss(logits, expected).item())


TASK_YAML = """# @package task.topics
type: multi_label_classification
source: {{train: {train}, dev: {dev}}}
text_column: text
label_column: label
batch_size: 8
max_length: 32
"""


@pytest.mark.parametrize("loader", ["mixup", "random"])
def test_trains_end_to_end_with_other_tasks(make_cfg, tmp_path, files, loader):
    conf = tmp_path / "conf"
    (conf / "task").mkdir(parents=True)
    (conf / "task" / "topics.yaml").write_text(TASK_YAML.format(**files))
    cfg = make_cfg(
        f"hydra.searchpath=[file://{conf}]",
        "task=[topics,synthetic_tag,synthetic_cls]",
        f"loader={loader}",
    )
    final = run(cfg).dev
    for metric in ("micro_f1", "macro_f1", "subset_accuracy"):
        assert 0.0 <= final[f"eval/topics/{metric}"] <= 1.0
    assert "eval/synthetic_tag/f1" in final
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [row["loss/topics"] for row in lines if "loss/topics" in row]
    assert losses and all(np.isfinite(loss) and 0 < loss < 2 for loss in losses)
