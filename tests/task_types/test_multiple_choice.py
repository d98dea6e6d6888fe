"""The multiple_choice task type: encoding, batches of choice rows, head loss, scoring, training."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from datasets import disable_progress_bars
from sklearn.metrics import accuracy_score

from mtl.builders.loaders import build_train_loaders
from mtl.builders.tasks import build_tasks
from mtl.config import validate
from mtl.data import build_task_from_config, load_tokenizer, task_dataset, task_loader
from mtl.errors import MtlError
from mtl.loaders import MixupLoader
from mtl.models import MultiTaskModel, load_encoder
from mtl.models.heads import MultipleChoiceHead
from mtl.samplers import RandomBatchSampler
from mtl.task_types import task_config
from mtl.training.loop import run

disable_progress_bars()

QUESTION = "Which one fits?"
ROWS = [
    {"ctx": "The cat sat on the mat.", "q": QUESTION, "options": ["a dog", "a cat"], "y": 1},
    {"ctx": "Bread is baked.", "q": QUESTION, "options": ["oven", "river", "sky", "car"], "y": 0},
    {"ctx": "A long day at sea.", "q": QUESTION, "options": ["boat", "ship", "tea"], "y": 2},
    {"ctx": "One choice only.", "q": QUESTION, "options": ["alone"], "y": 0},
]
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64}  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def build(tmp_path, tokenizer, rows=ROWS, dev=None, **options):
    source = {
        "train": write_jsonl(tmp_path / "train.jsonl", rows),
        "dev": write_jsonl(tmp_path / "dev.jsonl", dev or rows),
    }
    options = {"text_column": "ctx", "question_column": "q", "choices_column": "options",
               "label_column": "y", "max_length": 32, **options}  # fmt: skip
    config = task_config(dict(type="multiple_choice", source=source, **options))
    return build_task_from_config("mc", config, tokenizer)


def expected_ids(tokenizer, row, max_length, question=True):
    return [
        tokenizer(
            row["ctx"],
            f"{row['q']} {choice}" if question else choice,
            truncation="longest_first",
            max_length=max_length,
        )
        for choice in row["options"]
    ]


@pytest.mark.parametrize("question", [True, False])
def test_encode_and_collate_round_trip_with_different_choice_counts(tmp_path, tokenizer, question):
    long = {**ROWS[2], "ctx": " ".join(["waves"] * 40)}  # longer than max_length: truncated
    rows = [*ROWS, long]
    options = {} if question else {"question_column": None}
    task = build(tmp_path, tokenizer, rows, max_length=16, **options)
    encoded = task.train
    assert task.label_names is None and task.num_labels == 1
    assert list(encoded["labels"]) == [row["y"] for row in rows]
    choice_lengths = list(encoded["choice_lengths"])
    assert [len(c) for c in choice_lengths] == [len(row["options"]) for row in rows]
    assert list(encoded["length"]) == [len(c) * max(c) for c in choice_lengths]
    assert max(max(c) for c in choice_lengths) == 16

    dataset = task_dataset(task)
    indices = [4, 0, 3, 1, 2]
    batch = task.collator(pad_to_multiple_of=8)(dataset.__getitems__(indices))
    width = max(len(rows[i]["options"]) for i in indices)  # 4 choices per example
    assert batch["task"] == "mc"
    assert batch["input_ids"].shape == (len(indices) * width, 16)
    assert batch["labels"].tolist() == [rows[i]["y"] for i in indices]
    assert batch["example_ids"].tolist() == np.repeat(indices, width).tolist()
    tokens = 0
    for b, i in enumerate(indices):
        want = expected_ids(tokenizer, rows[i], 16, question)
        for j in range(width):
            r = b * width + j
            mask = batch["attention_mask"][r].bool()
            if j < len(want):
                assert batch["input_ids"][r][mask].tolist() == want[j]["input_ids"]
                assert batch["token_type_ids"][r][mask].tolist() == want[j]["token_type_ids"]
                assert batch["input_ids"][r][~mask].eq(tokenizer.pad_token_id).all()
                tokens += len(want[j]["input_ids"])
            else:  # filler rows of an example with fewer choices
                assert not mask.any()
                assert batch["input_ids"][r].eq(tokenizer.pad_token_id).all()
    assert batch["num_tokens"] == tokens == int(batch["attention_mask"].sum())

    # The per-item path (dataset[i]) collates to the same batch.
    again = task.collator(pad_to_multiple_of=8)([dataset[i] for i in indices])
    for key in ("input_ids", "attention_mask", "token_type_ids", "labels", "example_ids"):
        assert torch.equal(again[key], batch[key])


def test_a_batch_of_equal_choice_counts_has_no_filler_rows(tmp_path, tokenizer):
    task = build(tmp_path, tokenizer)
    batch = task.collator()(task_dataset(task).__getitems__([3, 3]))
    assert batch["input_ids"].shape[0] == 2
    assert batch["attention_mask"].sum(1).gt(0).all()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_loss_is_the_softmax_cross_entropy_over_each_examples_choices(pooling):
    torch.manual_seed(0)
    head = MultipleChoiceHead(8, dropout=0.0, pooling=pooling)
    hidden = torch.randn(9, 5, 8)
    counts = [3, 1, 2]  # 3 examples, 3 rows each: fillers after the real choices
    mask = torch.zeros(9, 5, dtype=torch.long)
    for b, n in enumerate(counts):
        for j in range(n):
            mask[b * 3 + j, : 2 + j] = 1
    labels = torch.tensor([2, 0, 1])
    scores = head(hidden, mask)
    assert scores.shape == (9,)
    filler = torch.tensor([j >= n for n in counts for j in range(3)])
    assert scores[filler].eq(torch.finfo(scores.dtype).min).all()
    w, bias = head.out.weight[0].detach(), float(head.out.bias.detach())
    expected = 0.0
    for b, n in enumerate(counts):
        s = []
        for j in range(n):
            row = hidden[b * 3 + j]
            if pooling == "mean":
                pooled = row[mask[b * 3 + j].bool()].mean(0)
            else:  # BERT's pooler: tanh(dense(first token))
                pooled = torch.tanh(
                    head.pooler.weight.detach() @ row[0] + head.pooler.bias.detach()
                )
            s.append(float(pooled @ w) + bias)
        assert scores[b * 3 : b * 3 + n].tolist() == pytest.approx(s, rel=1e-5)
        log_norm = math.log(sum(math.exp(x) for x in s))
        expected += (log_norm - s[labels[b]]) / len(counts)
    loss = head.loss(scores, labels)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert torch.isfinite(head.out.weight.grad).all() and head.out.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="cannot be split evenly"):
        head.loss(scores[:8], labels)


def test_predict_takes_each_examples_best_real_choice_and_scores_accuracy(tmp_path, tokenizer):
    task = build(tmp_path, tokenizer)
    batch = task.collator()(task_dataset(task, "dev").__getitems__([0, 1, 2, 3]))
    # Filler rows get the lowest score from the head, so a high raw value there never wins.
    raw = torch.tensor([0.1, 0.9, 5.0, 5.0, 0.0, 0.0, 0.3, 0.2, 1.0, 2.0, 3.0, 9.0, 7.0, 9, 9, 9])
    empty = batch["attention_mask"].sum(1) == 0
    logits = raw.masked_fill(empty, torch.finfo(raw.dtype).min)
    assert empty.tolist() == [False, False, True, True] + [False] * 4 + [False] * 3 + [True] + [
        False, True, True, True]  # fmt: skip
    predictions = task.task_type.predict(logits, batch)
    assert predictions == [1, 2, 2, 0]
    scores = task.task_type.score(predictions, task.dev, task.label_names)
    refs = [row["y"] for row in ROWS]
    assert scores == {"accuracy": pytest.approx(accuracy_score(refs, predictions))}
    assert scores["accuracy"] == pytest.approx(0.75)


def test_a_mixed_batch_gives_the_choice_head_its_rows_and_the_same_loss(tmp_path, tokenizer):
    task = build(tmp_path, tokenizer)
    cls_config = task_config(
        dict(type="sequence_classification", source={"bundled": "synthetic_cls", "size": 20})
    )
    cls = build_task_from_config("cls", cls_config, tokenizer)
    loaders = {
        "mc": task_loader(task, RandomBatchSampler(task.train["length"], 3, seed=1)),
        "cls": task_loader(cls, RandomBatchSampler(cls.train["length"], 5, seed=1)),
    }
    mixed = next(iter(MixupLoader(loaders, seed=4, pad_token_id=tokenizer.pad_token_id)))
    single = next(iter(loaders["mc"]))  # the same first batch of the task's sampler
    rows = mixed["task_ids"] == mixed["tasks"].index("mc")
    width = single["input_ids"].shape[1]
    assert torch.equal(mixed["input_ids"][rows][:, :width], single["input_ids"])
    assert torch.equal(mixed["attention_mask"][rows][:, :width], single["attention_mask"])
    assert torch.equal(mixed["labels"]["mc"], single["labels"])
    assert torch.equal(mixed["example_ids"][rows], single["example_ids"])

    torch.manual_seed(0)
    encoder = load_encoder(random_init=True, config=TINY)
    heads = {
        name: t.task_type.make_head(32, t.num_labels, 0.0)
        for name, t in [("mc", task), ("cls", cls)]
    }
    model = MultiTaskModel(encoder, heads).eval()
    with torch.no_grad():
        together = model(mixed)["task_losses"]["mc"]
        alone = model(single)["task_losses"]["mc"]
    assert float(together) == pytest.approx(float(alone), rel=1e-4)


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ({"options": "a dog"}, "give a list of strings"),
        ({"options": [1, 2]}, "give a list of strings"),
        ({"options": []}, "has no choices in 'options'; give at least one"),
        ({"y": 2}, "label 2, not a choice index in 0..1; give the index of the right choice"),
        ({"y": -1}, "label -1, not a choice index in 0..1"),
    ],
)
def test_bad_rows_are_one_line_errors_naming_the_task(tmp_path, tokenizer, source, problem):
    rows = [{**ROWS[0], **source}, {**ROWS[0], **source}]
    with pytest.raises(MtlError, match="task 'mc', train split: .*" + problem) as err:
        build(tmp_path, tokenizer, rows, dev=rows)
    assert "\n" not in str(err.value)


def test_a_task_without_choices_column_is_refused(tmp_path, tokenizer):
    with pytest.raises(MtlError, match="task 'mc': multiple_choice needs choices_column"):
        build(tmp_path, tokenizer, choices_column=None)


def read_metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_synthetic_choice_trains_alone(make_cfg, tmp_path):
    final = run(make_cfg("task=[synthetic_choice]")).dev
    assert 0.0 <= final["eval/synthetic_choice/accuracy"] <= 1.0
    losses = [r["loss/synthetic_choice"] for r in read_metrics(tmp_path / "run") if "loss" in r]
    assert len(losses) == 4 and all(0 < x < 10 for x in losses)


@pytest.mark.parametrize("loader", ["mixup", "random"])
def test_synthetic_choice_trains_with_other_tasks(make_cfg, tmp_path, loader):
    tasks = ["synthetic_choice", "synthetic_cls", "synthetic_tag"]
    final = run(make_cfg(f"task=[{','.join(tasks)}]", f"loader={loader}")).dev
    assert 0.0 <= final["eval/synthetic_choice/accuracy"] <= 1.0
    assert {f"eval/{t}/accuracy" for t in tasks} <= set(final)
    rows = [r for r in read_metrics(tmp_path / "run") if "loss" in r]
    assert len(rows) == 4
    if loader == "mixup":  # every task in every step
        assert all(r["loss/synthetic_choice"] > 0 for r in rows)


def test_pydoc_choice_composes_and_its_first_batch_collates(make_cfg):
    settings = validate(make_cfg("task=[pydoc_choice]"))
    tasks, tokenizer = build_tasks(settings, seed=0)
    task = tasks["pydoc_choice"]
    loaders = build_train_loaders(tasks, settings, make_cfg().sampler, seed=0)
    batch = next(iter(loaders["pydoc_choice"]))
    n = len(batch["labels"])
    assert n == settings.tasks["pydoc_choice"].batch_size
    assert batch["input_ids"].shape[0] == 4 * n
    assert batch["input_ids"].shape[1] <= 128
    assert batch["attention_mask"].sum(1).gt(0).all()  # four real choices each
    assert batch["labels"].max() < 4
    second = tokenizer.decode(batch["input_ids"][0][batch["token_type_ids"][0].bool()])
    assert second.startswith("which section of the python reference")
    assert task.dev.num_rows > 0
