"""Extractive QA: context windows and their labels, logits back to answer text, SQuAD metrics,
the head's loss (also with labels padded by mixup), training end to end, and bad input."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from mtl.builders.loaders import build_train_loaders
from mtl.builders.tasks import build_tasks
from mtl.config import validate
from mtl.data import build_task_from_config, load_tokenizer
from mtl.errors import MtlError
from mtl.loaders import MixupLoader
from mtl.models.heads import QuestionAnsweringHead
from mtl.task_types import task_config
from mtl.training.loop import run

QUESTION = "Which animal is named first?"
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
LONG_CONTEXT = " ".join(WORDS[i % len(WORDS)] + str(i) for i in range(40)) + " the dog sat"


def qa_row(context: str, answer: str | None = None, question: str = QUESTION) -> dict:
    if answer is None:
        return {
            "question": question,
            "context": context,
            "answers": {"text": [], "answer_start": []},
        }
    start = context.index(answer)
    return {
        "question": question,
        "context": context,
        "answers": {"text": [answer], "answer_start": [start]},
    }


def read_metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def qa_task(tmp_path, train, dev=None, **options):
    source = {
        "train": write_jsonl(tmp_path / "train.jsonl", train),
        "dev": write_jsonl(tmp_path / "dev.jsonl", dev or train),
    }
    options = {"max_length": 32, "stride": 8, **options}
    config = task_config(dict(type="question_answering", source=source, **options))
    return build_task_from_config("qa", config, load_tokenizer())


def windows_of(split, example: int) -> list[int]:
    return [i for i, e in enumerate(split["example_id"]) if e == example]


def context_spans(row: dict) -> list[tuple[int, int]]:
    return [(a, b) for a, b in zip(row["offset_start"], row["offset_end"], strict=True) if a >= 0]


# -- windows and labels --------------------------------------------------------------------------


def test_a_long_context_gives_overlapping_windows_that_cover_it(tmp_path):
    answer = "golf19"
    rows = [qa_row("a short one with a dog", "dog"), qa_row(LONG_CONTEXT, answer)]
    task = qa_task(tmp_path, rows)
    train = task.train
    assert windows_of(train, 0) == [0]
    windows = windows_of(train, 1)
    assert len(windows) >= 4 and windows == list(range(1, 1 + len(windows)))
    all_tokens = load_tokenizer()(LONG_CONTEXT, return_offsets_mapping=True)["offset_mapping"]
    all_tokens = [tuple(span) for span in all_tokens if span != (0, 0)]
    covered, labelled = [], 0
    for k, i in enumerate(windows):
        row = train[i]
        assert len(row["input_ids"]) == row["length"] <= 32
        assert row["context"] == LONG_CONTEXT and json.loads(row["answer_texts"]) == [answer]
        spans = context_spans(row)
        if k:  # consecutive windows share `stride` context tokens
            assert spans[:8] == covered[-8:]
            covered += spans[8:]
        else:
            covered = spans
        start, end = row["labels"]
        if (start, end) != (0, 0):
            labelled += 1
            text = LONG_CONTEXT[row["offset_start"][start] : row["offset_end"][end]]
            assert text == answer
        else:  # the answer is not wholly inside this window
            starts = [a for a, _ in spans]
            ends = [b for _, b in spans]
            answer_start = LONG_CONTEXT.index(answer)
            assert not (starts[0] <= answer_start and answer_start + len(answer) <= ends[-1])
    assert covered == all_tokens  # every context token, in order, once
    assert 1 <= labelled < len(windows)
    short = train[0]
    assert short["context"][short["offset_start"][short["labels"][0]] :].startswith("dog")


def test_unanswerable_rows_point_every_window_at_cls(tmp_path):
    task = qa_task(tmp_path, [qa_row(LONG_CONTEXT), qa_row("the dog sat", "dog")])
    labels = task.train["labels"]
    windows = windows_of(task.train, 0)
    assert len(windows) > 1 and all(labels[i] == [0, 0] for i in windows)
    assert json.loads(task.train["answer_texts"][0]) == []
    assert task.task_type.references(task.dev, None) == [[], ["dog"]]


def test_example_ids_stay_source_rows_across_encoding_batches():
    """More source rows than one `Dataset.map` batch (1000): ids go on counting."""
    config = task_config(
        dict(
            type="question_answering",
            source={"bundled": "synthetic_qa", "size": 1500},
            max_length=24,
            stride=4,
        )
    )
    task = build_task_from_config("qa", config, load_tokenizer())
    ids = np.asarray(task.train["example_id"])
    assert len(ids) > len(np.unique(ids))  # some contexts took several windows
    assert np.array_equal(np.unique(ids), np.arange(ids.max() + 1)) and np.all(np.diff(ids) >= 0)
    assert ids.max() + 1 > 1000
    first = np.unique(ids, return_index=True)[1]
    from mtl.data.sources import read_source

    raw = read_source("qa", {"bundled": "synthetic_qa", "size": 1500}, seed=0, dev_fraction=0.1)
    assert [task.train["context"][i] for i in first] == raw.splits["train"]["context"]


def test_a_first_encoding_batch_without_answers_types_the_columns(tmp_path):
    """The first `Dataset.map` batch (1000 rows) has no answer; a later one has."""
    rows = [qa_row(f"the cat {i}") for i in range(1000)] + [qa_row("the dog sat", "dog")]
    task = qa_task(tmp_path, rows, dev=rows[-2:])
    assert task.task_type.references(task.train, None)[-2:] == [[], ["dog"]]
    assert task.task_type.references(task.dev, None) == [[], ["dog"]]


def test_batches_carry_start_end_labels(tmp_path):
    task = qa_task(tmp_path, [qa_row(LONG_CONTEXT, "golf19"), qa_row("the dog sat", "dog")])
    dataset, collate = task.task_type.dataset(task.train), task.collator()
    rows = list(range(len(dataset)))
    batch = collate(dataset.__getitems__(rows))
    assert batch["labels"].dtype == torch.long
    assert batch["labels"].tolist() == task.train["labels"]
    assert batch["example_ids"].tolist() == task.train["example_id"]
    from_items = collate([dataset[i] for i in rows])  # the per-example path gives the same
    assert torch.equal(from_items["labels"], batch["labels"])
    assert torch.equal(from_items["input_ids"], batch["input_ids"])


# -- logits back to text ------------------------------------------------------------------------


def logits_for(split, spans: dict, null: dict | None = None, rest: float = -10.0):
    """Per row: logits `rest`, but score/2 at the start and at the end token of spans[row]
    (start, end, score) and null[row]/2 at [CLS] (default -50)."""
    out = []
    for row, n in enumerate(split["length"]):
        start, end = np.full(n, rest, np.float32), np.full(n, rest, np.float32)
        if row in spans:
            s, e, score = spans[row]
            start[s], end[e] = score / 2, score / 2
        start[0] = end[0] = (null or {}).get(row, -50.0) / 2
        out.append((start, end))
    return out


def token_of(row: dict, text: str, which: str = "start") -> int:
    """The context token where `text` (found once in the context) starts, or ends."""
    where = row["context"].index(text)
    if which == "start":
        return row["offset_start"].index(where)
    return row["offset_end"].index(where + len(text))


def test_hand_made_logits_give_the_best_valid_span_over_windows(tmp_path):
    task = qa_task(tmp_path, [qa_row("the dog sat", "dog"), qa_row(LONG_CONTEXT, "the dog")])
    dev, qa = task.dev, task.task_type
    windows = windows_of(dev, 1)
    second, last = dev[windows[1]], dev[windows[-1]]
    k = [i for i, a in enumerate(second["offset_start"]) if a >= 0][2]
    spans = {
        0: (token_of(dev[0], "dog"), token_of(dev[0], "dog", "end"), 1.0),
        windows[1]: (k, k, 4.0),
        windows[-1]: (token_of(last, "the"), token_of(last, "dog", "end"), 6.0),
    }
    predictions = logits_for(dev, spans)
    assert qa.answers(predictions, dev) == ["dog", "the dog"]
    spans[windows[1]] = (k, k, 8.0)  # now the second window's span scores best
    word = LONG_CONTEXT[second["offset_start"][k] : second["offset_end"][k]]
    assert qa.answers(logits_for(dev, spans), dev) == ["dog", word]
    # Higher logits on a question token, or an end before the start, are not answers.
    start, end = predictions[windows[-1]]
    start[2] = end[2] = 50  # inside the question
    first_context = last["offset_start"].index(min(a for a in last["offset_start"] if a >= 0))
    end[first_context] = start[token_of(last, "sat")] = 15  # 30 as a span, but end < start
    assert qa.answers(predictions, dev) == ["dog", "the dog"]
    # A span longer than max_answer_length is not an answer either.
    qa.max_answer_length = 1
    try:
        assert qa.answers(predictions, dev)[1] not in ("", "the dog")
    finally:
        del qa.max_answer_length


def test_no_answer_when_the_null_score_beats_the_best_span(tmp_path):
    rows = [qa_row("the dog sat", "dog"), qa_row(LONG_CONTEXT)]
    task = qa_task(tmp_path, rows)
    dev, qa = task.dev, task.task_type
    windows = windows_of(dev, 1)
    row = dev[windows[-1]]
    span = (token_of(row, "dog"), token_of(row, "dog", "end"), 4.0)
    dog = (token_of(dev[0], "dog"), token_of(dev[0], "dog", "end"), 3.0)
    # The null score of a question is its lowest [CLS] score over its windows (as run_qa).
    null = {0: 1.0, **{w: 10.0 for w in windows}}
    predictions = logits_for(dev, {0: dog, windows[-1]: span}, null)
    assert qa.answers(predictions, dev, no_answer=True) == ["dog", ""]
    assert qa.answers(predictions, dev, no_answer=False) == ["dog", "dog"]
    null[windows[0]] = 2.0  # one window where [CLS] scores below the span: answer the span
    predictions = logits_for(dev, {0: dog, windows[-1]: span}, null)
    assert qa.answers(predictions, dev, no_answer=True) == ["dog", "dog"]
    # score() allows "" as the split has an unanswerable question: ["dog", ""] is all right.
    predictions = logits_for(dev, {0: dog, windows[-1]: span}, {**null, windows[0]: 5.0})
    assert qa.score(predictions, dev, None) == {"exact_match": 1.0, "f1": 1.0}


def test_score_is_squad_exact_match_and_f1_per_question(tmp_path):
    context = "the big dog sat on the red mat"
    rows = [qa_row(context, "big dog"), qa_row(context, "red mat"), qa_row(LONG_CONTEXT, "the dog")]
    task = qa_task(tmp_path, rows)
    dev, qa = task.dev, task.task_type
    assert qa.main_metric == "exact_match" and list(qa.metrics) == ["exact_match", "f1"]
    last = dev[windows_of(dev, 2)[-1]]
    spans = {
        0: (token_of(dev[0], "big"), token_of(dev[0], "dog", "end"), 5.0),  # exact
        1: (token_of(dev[1], "the red"), token_of(dev[1], "red", "end"), 5.0),  # "the red"
        windows_of(dev, 2)[-1]: (token_of(last, "sat"), token_of(last, "sat", "end"), 5.0),
    }
    predictions = logits_for(dev, spans)
    assert qa.answers(predictions, dev) == ["big dog", "the red", "sat"]
    # "the red" vs "red mat": normalised "red" vs "red mat": P 1, R 1/2, F1 2/3; "sat" vs "dog": 0
    scores = qa.score(predictions, dev, None)
    assert scores["exact_match"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)


def test_predict_gives_each_rows_logits_trimmed_to_its_length():
    qa_type = build_qa_type()
    logits = torch.arange(2 * 5 * 2, dtype=torch.float16).reshape(2, 5, 2)
    batch = {"attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])}
    (s0, e0), (s1, e1) = qa_type.predict(logits, batch)
    assert s0.tolist() == [0, 2, 4] and e0.tolist() == [1, 3, 5]
    assert s1.tolist() == [10, 12, 14, 16, 18] and e1.dtype == np.float32


def build_qa_type(**options):
    from mtl.task_types import QuestionAnswering

    config = QuestionAnswering.Options(type="question_answering", source={}, **options)
    return QuestionAnswering("qa", config)


# -- head and mixup -----------------------------------------------------------------------------


def test_head_loss_is_mean_start_end_cross_entropy_and_ignores_padding():
    torch.manual_seed(0)
    head = QuestionAnsweringHead(8, dropout=0.0)
    hidden = torch.randn(3, 6, 8)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 3 + [0] * 3])
    logits = head(hidden, mask)
    assert logits.shape == (3, 6, 2)
    assert torch.all(logits[1, 4:] == torch.finfo(logits.dtype).min)
    labels = torch.tensor([[2, 4], [0, 0], [1, 2]])
    raw = head.out(hidden)
    expected = (
        sum(
            (
                F.cross_entropy(raw[i, : int(mask[i].sum()), 0][None], labels[i, :1])
                + F.cross_entropy(raw[i, : int(mask[i].sum()), 1][None], labels[i, 1:])
            )
            / 2
            for i in range(3)
        )
        / 3
    )
    assert head.loss(logits, labels).item() == pytest.approx(expected.item(), rel=1e-5)
    padded = F.pad(labels, (0, 4), value=-100)  # what mixup makes of [B, 2] labels
    assert head.loss(logits, padded).item() == pytest.approx(expected.item(), rel=1e-5)


def test_mixup_keeps_the_pairs_in_columns_0_and_1(tmp_path):
    task = qa_task(tmp_path, [qa_row(LONG_CONTEXT, "golf19"), qa_row("the dog sat", "dog")])
    dataset, collate = task.task_type.dataset(task.train), task.collator()
    qa_batch = collate(dataset.__getitems__(list(range(len(dataset)))))
    other = {
        "input_ids": torch.ones(2, 40, dtype=torch.long),
        "attention_mask": torch.ones(2, 40, dtype=torch.long),
        "labels": torch.tensor([0, 1]),
    }
    loader = MixupLoader({"qa": [qa_batch], "cls": [other]}, seed=0)
    merged = loader.combine(0, 0, [(0, qa_batch), (1, other)])
    labels = merged["labels"]["qa"]  # not token labels: mixup leaves them as they are
    assert labels.shape == (len(dataset), 2)
    assert torch.equal(labels, qa_batch["labels"])


# -- end to end ---------------------------------------------------------------------------------


def test_synthetic_qa_trains_alone(make_cfg, tmp_path):
    final = run(make_cfg("task=[synthetic_qa]")).dev
    assert set(final) == {"eval/synthetic_qa/exact_match", "eval/synthetic_qa/f1", "eval/mean"}
    assert final["eval/mean"] == final["eval/synthetic_qa/exact_match"]
    assert 0 <= final["eval/synthetic_qa/exact_match"] <= final["eval/synthetic_qa/f1"] <= 1
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    losses = [row["loss/synthetic_qa"] for row in rows if "loss/synthetic_qa" in row]
    assert len(losses) == 4 and all(np.isfinite(losses)) and min(losses) > 0


@pytest.mark.parametrize("loader", ["mixup", "random"])
def test_synthetic_qa_trains_with_another_task(make_cfg, tmp_path, loader):
    final = run(make_cfg("task=[synthetic_qa,synthetic_cls]", f"loader={loader}")).dev
    assert "eval/synthetic_qa/exact_match" in final and "eval/synthetic_cls/accuracy" in final
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    steps = [row for row in rows if "loss" in row]
    assert len(steps) == 4 and any("loss/synthetic_qa" in row for row in steps)
    if loader == "mixup":  # both tasks in every step
        assert all("loss/synthetic_qa" in row and "loss/synthetic_cls" in row for row in steps)


@pytest.mark.parametrize("name", ["pydoc_qa", "pydoc_qa_v2"])
def test_pydoc_qa_composes_and_its_first_batch_collates(make_cfg, name):
    settings = validate(make_cfg(f"task=[{name}]"))
    tasks, _ = build_tasks(settings, seed=0)
    task = tasks[name]
    cfg = make_cfg(f"task=[{name}]")
    loader = build_train_loaders(tasks, settings, cfg.sampler, seed=0)[name]
    batch = next(iter(loader))
    assert batch["labels"].shape == (batch["input_ids"].shape[0], 2)
    assert batch["input_ids"].shape[1] <= 384 and batch["task"] == name
    assert task.train["length"] == [len(ids) for ids in task.train["input_ids"]]
    if name == "pydoc_qa_v2":
        refs = task.task_type.references(task.train, None)
        assert any(not golds for golds in refs) and any(refs)


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"text": ["dog"], "answer_start": [5]}, "answer 'dog' is not at answer_start=5"),
        ({"text": ["dog"], "answer_start": [-1]}, "answer 'dog' is not at answer_start=-1"),
        ("dog", "is not in the SQuAD form"),
        ({"text": ["dog"], "answer_start": []}, "is not in the SQuAD form"),
    ],
)
def test_bad_answers_give_one_line_naming_the_task_and_fix(tmp_path, answers, message):
    row = {"question": QUESTION, "context": "the dog sat", "answers": answers}
    with pytest.raises(MtlError, match=re.escape(message)) as err:
        qa_task(tmp_path, [row])
    text = str(err.value)
    assert "\n" not in text and text.startswith("task 'qa', train split")
    assert "fix answer_start" in text or "give {'text'" in text


def test_windows_too_small_for_the_stride_give_one_line(tmp_path):
    long_question = " ".join(["word"] * 20) + "?"
    with pytest.raises(MtlError, match=r"task 'qa', train split: a question of 21 tokens"):
        qa_task(tmp_path, [qa_row("the dog sat", "dog", question=long_question)])
    with pytest.raises(MtlError, match=r"task.qa.stride=32 must be >= 0 and below max_length"):
        qa_task(tmp_path, [qa_row("the dog sat", "dog")], stride=32)


def test_an_unset_stride_is_a_quarter_of_max_length(tmp_path):
    context = " ".join(WORDS[i % len(WORDS)] + str(i) for i in range(120)) + " the dog sat"
    task = qa_task(tmp_path, [qa_row(context, "dog")], max_length=64, stride=None)
    assert task.task_type.stride == 16
    windows = windows_of(task.train, 0)
    assert len(windows) >= 3
    for first, second in zip(windows, windows[1:], strict=False):
        previous, spans = context_spans(task.train[first]), context_spans(task.train[second])
        assert spans[:16] == previous[-16:] and spans[16] not in previous
