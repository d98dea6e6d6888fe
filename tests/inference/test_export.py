"""The end-of-run export: per-task standard transformers models (logits and pipelines against
mtl's own), init_from an export folder, predictions of a test split without labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from omegaconf import OmegaConf
from transformers import (
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    pipeline,
)

import mtl
from mtl.config import validate
from mtl.data.bundled import bundled_rows
from mtl.inference.predict import predict_rows

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = [
    "synthetic_cls",
    "synthetic_pair",
    "synthetic_reg",
    "synthetic_tag",
    "synthetic_choice",
    "synthetic_qa",
]
TASKS = [*SYNTHETIC, "topics", "reviews"]  # topics: multi-label; reviews: unlabeled test split
AUTO = {
    "synthetic_cls": AutoModelForSequenceClassification,
    "synthetic_pair": AutoModelForSequenceClassification,
    "synthetic_reg": AutoModelForSequenceClassification,
    "topics": AutoModelForSequenceClassification,
    "reviews": AutoModelForSequenceClassification,
    "synthetic_tag": AutoModelForTokenClassification,
    "synthetic_choice": AutoModelForMultipleChoice,
    "synthetic_qa": AutoModelForQuestionAnswering,
}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def task_files(folder: Path) -> Path:
    """Task configs (in `<folder>/conf`): `topics` (multi-label), `reviews` (its test file has
    no label column, and an `id` column the training files lack), and two heads without a
    transformers class: `mean_cls` (mean pooling) and `own_reg` (another type's head)."""
    _, _, train, dev = bundled_rows("synthetic_cls", size=200)

    def topics(row):  # the theme, plus "long" for long texts
        return {"text": row["text"], "label": [row["label"]] + ["long"] * (len(row["text"]) > 60)}

    write_jsonl(folder / "topics_train.jsonl", [topics(r) for r in train])
    write_jsonl(folder / "topics_dev.jsonl", [topics(r) for r in dev])
    write_jsonl(folder / "reviews_train.jsonl", train)
    write_jsonl(
        folder / "reviews_test.jsonl",
        [{"id": i, "text": r["text"]} for i, r in enumerate(dev[:13])],
    )
    conf = folder / "conf" / "task"
    conf.mkdir(parents=True)
    (conf / "topics.yaml").write_text(
        "# @package task.topics\ntype: multi_label_classification\n"
        f"source: {{train: {folder}/topics_train.jsonl, dev: {folder}/topics_dev.jsonl}}\n"
        "batch_size: 16\nmax_length: 64\n"
    )
    (conf / "reviews.yaml").write_text(
        "# @package task.reviews\ntype: sequence_classification\n"
        f"source: {{train: {folder}/reviews_train.jsonl, test: {folder}/reviews_test.jsonl}}\n"
        "label_column: label\nbatch_size: 16\nmax_length: 48\n"
    )
    (conf / "mean_cls.yaml").write_text(
        "# @package task.mean_cls\ntype: sequence_classification\n"
        "source: {bundled: synthetic_cls, size: 100}\nmax_length: 32\n"
        "head: {_target_: mtl.models.heads.SequenceClassificationHead, pooling: mean}\n"
    )
    (conf / "own_reg.yaml").write_text(
        "# @package task.own_reg\ntype: regression\n"
        "source: {bundled: synthetic_reg, size: 100}\nmax_length: 32\n"
        "head: {_target_: mtl.models.heads.MultiLabelHead}\n"
    )
    return folder


@pytest.fixture(scope="module")
def make_cfg(compose_cfg):
    """`make_cfg(files, out, *overrides)`: the real config with the task files' folder."""

    def make(files: Path, out: Path, *overrides: str):
        return compose_cfg(
            "debug=fast", f"hydra.searchpath=[file://{files / 'conf'}]", f"output_dir={out}",
            *overrides,
        )  # fmt: skip

    return make


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    return task_files(tmp_path_factory.mktemp("files"))


@pytest.fixture(scope="module")
def default_export(files, tmp_path_factory, make_cfg) -> tuple[Path, dict[str, int]]:
    """A run of 4 steps on every task type with the default trainer settings (export on), and
    its end-of-run export's files and sizes before the standard export below replaces it."""
    from mtl.cli.job import train as run

    out = tmp_path_factory.mktemp("export") / "run"
    cfg = make_cfg(files, out, f"task=[{','.join(TASKS)}]")
    run(cfg)
    (out / ".hydra").mkdir()  # what Hydra saves beside a run launched by train.py
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")
    export = out / "export"
    sizes = {p.relative_to(export).as_posix(): p.stat().st_size for p in export.rglob("*")}
    return out, sizes


@pytest.fixture(scope="module")
def run_dir(default_export) -> Path:
    """That run, exported again with the per-task standard models, over its own export."""
    from mtl.cli.export import main as export_main

    out, _ = default_export
    export_main([str(out), str(out / "export"), "standard=true"])
    return out


@pytest.fixture(scope="module")
def loaded(run_dir):
    return mtl.load_model(run_dir / "export")


def input_rows(name: str, n: int = 6) -> list[dict]:
    """Rows without labels (what prediction reads), from the task's dev data."""
    source = "synthetic_cls" if name in ("topics", "reviews") else name
    _, _, _, dev = bundled_rows(source, size=400)
    drop = {"label", "answers"}
    return [{k: v for k, v in row.items() if k not in drop} for row in dev[:n]]


def mtl_batch(loaded, name: str, rows: list[dict]) -> dict:
    """The rows encoded and padded as mtl-predict batches them."""
    info = loaded.tasks[name]
    tt = info.task_type
    columns = {c: [r[c] for r in rows] for c in tt.input_columns()}
    enc = tt.encode_inputs(columns, loaded.tokenizer, info.label_names, "test")
    enc.setdefault("example_id", list(range(len(enc["input_ids"]))))
    data = tt.dataset(Dataset.from_dict(enc))
    batch = tt.collator(loaded.tokenizer.pad_token_id)(data.__getitems__(list(range(len(data)))))
    batch["task"] = name
    return batch


def hf_logits(model, name: str, batch: dict) -> torch.Tensor:
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    if name == "synthetic_choice":  # rows b * C + j are example b's choices
        inputs = {k: v.reshape(len(batch["labels"]), -1, v.shape[-1]) for k, v in inputs.items()}
    out = model(**inputs)
    if name == "synthetic_qa":
        return torch.stack([out.start_logits, out.end_logits], -1)
    return out.logits


def test_end_of_run_export_holds_the_encoder_once(default_export):
    _, sizes = default_export
    assert {"mtl_tasks.json", "heads.safetensors", "model.safetensors"} <= set(sizes)
    assert not any("/" in name for name in sizes)  # no per-task folders unless asked for
    assert not any(name.split("/")[0] in TASKS for name in sizes)


def test_standard_export_has_every_task_folder(run_dir):
    export = run_dir / "export"
    meta = json.loads((export / "mtl_tasks.json").read_text())
    assert set(meta["tasks"]) == set(TASKS)
    assert sorted(p.name for p in run_dir.iterdir() if "export" in p.name) == ["export"]
    for name in TASKS:
        assert (export / name / "config.json").is_file()
        tokenizer = AutoTokenizer.from_pretrained(export / name)
        assert tokenizer.model_max_length == meta["tasks"][name]["config"]["max_length"]
    config = json.loads((export / "synthetic_cls" / "config.json").read_text())
    assert config["id2label"] == {"0": "animals", "1": "food", "2": "vehicles"}
    assert json.loads((export / "topics" / "config.json").read_text())["problem_type"] == (
        "multi_label_classification"
    )
    assert json.loads((export / "synthetic_reg" / "config.json").read_text())["problem_type"] == (
        "regression"
    )


@pytest.mark.parametrize("name", TASKS)
def test_standard_model_gives_mtl_logits(name, run_dir, loaded):
    model = AUTO[name].from_pretrained(run_dir / "export" / name).eval()
    batch = mtl_batch(loaded, name, input_rows(name))
    with torch.no_grad():
        ours = loaded.model.logits(batch)[name]
        theirs = hf_logits(model, name, batch).reshape(ours.shape)
    kept = ours != torch.finfo(ours.dtype).min  # QA: padding positions the head masks
    assert kept.float().mean() > 0.5
    torch.testing.assert_close(theirs[kept], ours[kept], rtol=0, atol=1e-4)
    assert ours.abs().max() > 1e-3  # not trivially equal


@pytest.mark.parametrize("name", ["synthetic_cls", "synthetic_pair", "reviews"])
def test_text_classification_pipeline_predicts_as_mtl(name, run_dir, loaded):
    rows = input_rows(name)
    classify = pipeline("text-classification", model=str(run_dir / "export" / name))
    if name == "synthetic_pair":
        inputs = [{"text": r["text"], "text_pair": r["text_pair"]} for r in rows]
    else:
        inputs = [r["text"] for r in rows]
    got = classify(inputs, truncation=True)
    want = predict_rows(loaded, [name], rows)
    assert [g["label"] for g in got] == [w["prediction"] for w in want]
    assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], abs=1e-4)


def test_regression_pipeline_scores_as_mtl(run_dir, loaded):
    rows = input_rows("synthetic_reg")
    got = pipeline("text-classification", model=str(run_dir / "export" / "synthetic_reg"))(
        [r["text"] for r in rows], truncation=True
    )
    want = predict_rows(loaded, ["synthetic_reg"], rows)
    assert [g["score"] for g in got] == pytest.approx([w["prediction"] for w in want], abs=1e-4)
    assert len({round(g["score"], 6) for g in got}) > 1


def test_multi_label_pipeline_with_sigmoid_predicts_as_mtl(run_dir, loaded):
    rows = input_rows("topics", 12)
    classify = pipeline("text-classification", model=str(run_dir / "export" / "topics"))
    got = classify([r["text"] for r in rows], top_k=None, function_to_apply="sigmoid")
    want = predict_rows(loaded, ["topics"], rows)
    for labels, result in zip(got, want, strict=True):
        chosen = {g["label"]: g["score"] for g in labels if g["score"] > 0.5}
        assert sorted(chosen) == sorted(result["prediction"])
        assert [chosen[k] for k in result["prediction"]] == pytest.approx(result["score"], abs=1e-4)
    assert len(got[0]) == len(loaded.tasks["topics"].label_names)


def test_token_classification_pipeline_tags_as_mtl(run_dir, loaded):
    rows = input_rows("synthetic_tag")
    folder = run_dir / "export" / "synthetic_tag"
    tag = pipeline("token-classification", model=str(folder), ignore_labels=[])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    want = predict_rows(loaded, ["synthetic_tag"], rows)
    for row, result in zip(rows, want, strict=True):
        by_token = {entity["index"]: entity["entity"] for entity in tag(" ".join(row["text"]))}
        word_ids = tokenizer(row["text"], is_split_into_words=True).word_ids()
        firsts = [i for i, w in enumerate(word_ids) if w is not None and w != word_ids[i - 1]]
        assert [by_token[i] for i in firsts] == result["prediction"]
        assert len(firsts) == len(row["text"])


def test_question_answering_model_answers_as_mtl(run_dir, loaded):
    """The answer from AutoModelForQuestionAnswering's logits == mtl-predict's. transformers 5
    removed the question-answering pipeline; where it exists, it is checked too."""
    from transformers.pipelines import SUPPORTED_TASKS

    folder = run_dir / "export" / "synthetic_qa"
    model = AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = input_rows("synthetic_qa", 8)
    want = [r["prediction"] for r in predict_rows(loaded, ["synthetic_qa"], rows)]
    got = []
    for row in rows:
        enc = tokenizer(row["question"], row["context"], return_offsets_mapping=True)
        with torch.no_grad():
            out = model(**{k: torch.tensor([v]) for k, v in enc.items() if k != "offset_mapping"})
        in_context = torch.tensor([s == 1 for s in enc.sequence_ids()])
        start = out.start_logits[0].masked_fill(~in_context, -1e9)
        end = out.end_logits[0].masked_fill(~in_context, -1e9)
        scores = start[:, None] + end[None, :]
        n = len(start)
        allowed = torch.ones(n, n).triu().tril(29).bool()  # start <= end, at most 30 tokens
        best = int(scores.masked_fill(~allowed, -1e18).argmax())
        s, e = divmod(best, n)
        got.append(row["context"][enc["offset_mapping"][s][0] : enc["offset_mapping"][e][1]])
    assert got == want
    assert all(want)
    if "question-answering" in SUPPORTED_TASKS:  # transformers < 5
        answer = pipeline("question-answering", model=str(folder))
        for row, text in zip(rows, want, strict=True):
            result = answer(question=row["question"], context=row["context"], max_answer_len=30)
            assert result["answer"] == text


def test_unlabeled_test_split_is_predicted_not_scored(run_dir, loaded, files):
    results = json.loads((run_dir / "results.json").read_text())
    assert not any(key.startswith("test/reviews") for key in results)
    rows = [json.loads(line) for line in (files / "reviews_test.jsonl").read_text().splitlines()]
    path = run_dir / "predictions" / "reviews.test.jsonl"
    got = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(got) == len(rows) == 13
    assert [{k: g[k] for k in ("id", "text")} for g in got] == rows
    assert set(got[0]) == {"id", "text", "prediction", "score"}
    want = predict_rows(loaded, ["reviews"], rows)  # the exported best model, as mtl-predict
    assert [g["prediction"] for g in got] == [w["prediction"] for w in want]
    assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], abs=1e-5)
    assert sorted(p.name for p in (run_dir / "predictions").iterdir()) == ["reviews.test.jsonl"]


def test_init_from_an_export_folder_gives_its_logits(
    run_dir, loaded, files, tmp_path, capsys, make_cfg
):
    from mtl.builders.model import build_model
    from mtl.builders.tasks import build_tasks

    cfg = make_cfg(
        files, tmp_path / "next", "task=[synthetic_cls]", f"model.init_from={run_dir / 'export'}"
    )
    settings = validate(cfg)
    tasks, _ = build_tasks(settings, 0)
    model = build_model(settings, tasks).eval()
    assert "initialised from" in capsys.readouterr().err
    batch = mtl_batch(loaded, "synthetic_cls", input_rows("synthetic_cls"))
    with torch.no_grad():
        ours = model.logits(batch)["synthetic_cls"]
        theirs = loaded.model.logits(batch)["synthetic_cls"]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)


def test_heads_without_a_transformers_class_are_skipped_with_one_line(
    files, tmp_path, capsys, make_cfg
):
    from mtl.builders.model import build_model
    from mtl.builders.tasks import build_tasks
    from mtl.inference.export import write_export

    cfg = make_cfg(
        files,
        tmp_path / "run",
        "task=[mean_cls,own_reg,synthetic_tag]",
    )
    settings = validate(cfg)
    tasks, tokenizer = build_tasks(settings, 0)
    model = build_model(settings, tasks)
    capsys.readouterr()
    out = write_export(model, tokenizer, tasks, settings, tmp_path / "export", standard=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "mtl: export: task 'mean_cls': head pools by mean; no standard transformers class "
        "does that: use mtl.load_model / mtl-predict, or pooling cls",
        "mtl: export: task 'own_reg': its head is MultiLabelHead, not the type's own "
        "RegressionHead; no standard transformers class computes it: use mtl.load_model / "
        "mtl-predict",
    ]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["synthetic_tag"]
    assert set(mtl.load_model(out).tasks) == {"mean_cls", "own_reg", "synthetic_tag"}


def test_export_off_and_signal_stop_write_no_export(files, tmp_path, monkeypatch, make_cfg):
    from mtl.cli.job import train as run
    from mtl.training.checkpoints.signals import Boundary
    from mtl.training.loop import StopSignal

    run(make_cfg(files, tmp_path / "off", "task=[synthetic_cls]", "trainer.export=false"))
    assert (tmp_path / "off" / "results.json").is_file()
    assert not (tmp_path / "off" / "export").exists()
    monkeypatch.setattr(StopSignal, "agree", lambda self, *_, **__: Boundary(True, False))
    run(make_cfg(files, tmp_path / "stopped", "task=[synthetic_cls]"))
    assert (tmp_path / "stopped" / "checkpoints").is_dir()
    assert not (tmp_path / "stopped" / "results.json").exists()
    assert not any("export" in p.name for p in (tmp_path / "stopped").iterdir())
