"""Export, mtl.load_model and mtl-predict on a run trained once (every task type)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from omegaconf import OmegaConf
from safetensors.torch import load_file

import mtl
from mtl.artifacts import RunLayout
from mtl.cli.predict import main
from mtl.config import validate
from mtl.data.bundled import bundled_rows
from mtl.inference.export import export_model
from mtl.inference.predict import predict_task

ROOT = Path(__file__).resolve().parents[2]
TASKS = [
    "synthetic_cls",
    "synthetic_reg",
    "synthetic_tag",
    "synthetic_choice",
    "synthetic_qa",
    "synthetic_pair",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, compose_cfg) -> Path:
    """A run trained 4 steps on every task type, with the config Hydra would have saved."""
    from mtl.training.loop import run

    out = tmp_path_factory.mktemp("predict") / "run"
    cfg = compose_cfg("debug=fast", f"task=[{','.join(TASKS)}]", f"output_dir={out}")
    run(cfg)
    (out / ".hydra").mkdir()
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")
    return out


@pytest.fixture(scope="module")
def export_dir(run_dir) -> Path:
    return export_model(run_dir, run_dir / "exported")


@pytest.fixture(scope="module")
def loaded(export_dir):
    return mtl.load_model(export_dir)


def dev_rows(name: str, n: int) -> list[dict]:
    _, _, _, dev = bundled_rows(name, size=400)
    return [dict(row) for row in dev[:n]]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_and_load_give_the_trained_logits(run_dir, export_dir, loaded):
    from mtl.builders.model import build_model
    from mtl.builders.tasks import build_tasks

    settings = validate(OmegaConf.load(run_dir / ".hydra" / "config.yaml"))
    tasks, _ = build_tasks(settings, 0)
    trained = build_model(settings, tasks)
    best = load_file(run_dir / "checkpoints" / "best" / "model.safetensors")
    trained.load_state_dict(best)
    trained.eval()
    from_run = mtl.load_model(run_dir)  # exported in memory
    assert set(loaded.tasks) == set(TASKS) == set(from_run.tasks)
    assert loaded.tasks["synthetic_cls"].label_names == tasks["synthetic_cls"].label_names
    assert not loaded.model.training
    for name, task in tasks.items():
        data, collate = task.task_type.dataset(task.dev), task.collator()
        batch = collate(data.__getitems__(list(range(8))))
        with torch.no_grad():
            want = trained.logits(batch)[name]
            for other in (loaded, from_run):
                got = other.model.logits(batch)[name]
                torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert (
        json.loads((export_dir / "mtl_tasks.json").read_text())["tasks"]["synthetic_qa"]["config"][
            "stride"
        ]
        == 16
    )


def single_row_expectation(loaded, name: str, row: dict):
    """The prediction of one row, from the loaded model's logits on that row alone."""
    info = loaded.tasks[name]
    tt = info.task_type
    enc = tt.encode_inputs(
        {c: [row[c]] for c in tt.input_columns()}, loaded.tokenizer, info.label_names, "t"
    )
    enc.setdefault("example_id", [0] * len(enc["input_ids"]))
    ds = Dataset.from_dict(enc)
    batch = tt.collator(loaded.tokenizer.pad_token_id)(
        tt.dataset(ds).__getitems__(list(range(len(ds))))
    )
    with torch.no_grad():
        logits = loaded.model.logits(batch)[name].float()
    if name == "synthetic_reg":
        return pytest.approx(logits.item(), abs=1e-4)
    if name == "synthetic_tag":
        words = row["text"].split() if isinstance(row["text"], str) else row["text"]
        word_ids = loaded.tokenizer(words, is_split_into_words=True).word_ids()
        firsts = [i for i, w in enumerate(word_ids) if w is not None and w != word_ids[i - 1]]
        return [info.label_names[k] for k in logits[0, firsts].argmax(-1).tolist()]
    if name == "synthetic_choice":
        k = int(logits.argmax())
        return {"index": k, "text": row["choices"][k]}
    if name == "synthetic_qa":
        return tt.answers(tt.predict(logits, batch), ds)[0]
    return info.label_names[int(logits[0].argmax())]


@pytest.mark.parametrize("name", TASKS)
def test_predict_jsonl_keeps_rows_and_matches_logits(name, export_dir, loaded, tmp_path):
    rows = dev_rows(name, 12)
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    main([f"model={export_dir}", f"task={name}", f"input={src}", f"output={out}"])
    got = read_jsonl(out)
    assert len(got) == len(rows)
    for row, result in zip(rows, got, strict=True):
        assert {k: result[k] for k in row} == json.loads(json.dumps(row))
        assert ("score" in result) == (name != "synthetic_reg")
    for row, result in list(zip(rows, got, strict=True))[:3]:
        assert result["prediction"] == single_row_expectation(loaded, name, row)
    if name == "synthetic_tag":
        assert all(len(r["prediction"]) == len(r["text"]) for r in got)
    if name in ("synthetic_cls", "synthetic_choice", "synthetic_pair"):
        assert all(0 < r["score"] <= 1 for r in got)


def test_length_sorted_batches_give_the_input_order_results(loaded):
    rows = dev_rows("synthetic_qa", 20)
    sorted_ = predict_task(loaded, "synthetic_qa", rows, batch_size=3, sort=True)
    plain = predict_task(loaded, "synthetic_qa", rows, batch_size=3, sort=False)
    assert [r["prediction"] for r in sorted_] == [r["prediction"] for r in plain]
    rows = dev_rows("synthetic_cls", 20)
    a = predict_task(loaded, "synthetic_cls", rows, batch_size=4, sort=True)
    b = predict_task(loaded, "synthetic_cls", rows, batch_size=20, sort=False)
    assert [r["prediction"] for r in a] == [r["prediction"] for r in b]


def test_predict_csv_in_and_out(export_dir, loaded, tmp_path):
    rows = dev_rows("synthetic_choice", 6)
    src = tmp_path / "in.csv"
    with open(src, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()}
            )
    out = tmp_path / "out.csv"
    main([f"model={export_dir}", "task=synthetic_choice", f"input={src}", f"output={out}"])
    got = list(csv.DictReader(open(out)))
    assert [r["context"] for r in got] == [r["context"] for r in rows]
    assert [json.loads(r["choices"]) for r in got] == [r["choices"] for r in rows]
    for row, result in zip(rows, got, strict=True):
        assert json.loads(result["prediction"]) == single_row_expectation(
            loaded, "synthetic_choice", row
        )


def test_two_tasks_and_stdout(export_dir, tmp_path, capsys, monkeypatch):
    import io

    rows = dev_rows("synthetic_cls", 5)
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(json.dumps(r) + "\n" for r in rows)))
    main([f"model={export_dir}", "task=[synthetic_cls,synthetic_reg]", "input=-", "output=-"])
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in got] == [r["text"] for r in rows]
    for r in got:
        assert isinstance(r["synthetic_cls.prediction"], str)
        assert isinstance(r["synthetic_reg.prediction"], float)
        assert "synthetic_reg.score" not in r and "prediction" not in r


def bad(capsys, args, tmp_path) -> str:
    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mtl: error: ") and "\n" not in err
    return err


def test_bad_inputs_are_one_line_and_write_nothing(export_dir, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", dev_rows("synthetic_cls", 3))
    out = tmp_path / "out.jsonl"
    base = [f"model={export_dir}", f"output={out}"]
    err = bad(capsys, [*base, "task=nope", f"input={src}"], tmp_path)
    assert "not trained on it" in err and "synthetic_cls" in err
    err = bad(capsys, [*base, "task=synthetic_pair", f"input={src}"], tmp_path)
    assert "'text_pair'" in err
    err = bad(
        capsys, [*base, "task=synthetic_cls", f"input={tmp_path / 'missing.jsonl'}"], tmp_path
    )
    assert "cannot read" in err
    (tmp_path / "broken.jsonl").write_text('{"text": "a"}\nnot json\n')
    err = bad(capsys, [*base, "task=synthetic_cls", f"input={tmp_path / 'broken.jsonl'}"], tmp_path)
    assert "line 2" in err
    err = bad(
        capsys,
        [f"model={tmp_path}", f"output={out}", "task=synthetic_cls", f"input={src}"],
        tmp_path,
    )
    assert "not an mtl run or export" in err
    assert not out.exists()
    out.write_text("keep\n")
    err = bad(capsys, [*base, "task=synthetic_cls", f"input={src}"], tmp_path)
    assert "exists" in err and out.read_text() == "keep\n"
    main([*base, "task=synthetic_cls", f"input={src}", "overwrite=true"])
    assert len(read_jsonl(out)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.jsonl", "in.jsonl", "out.jsonl"]


def test_export_cli_default_folder(run_dir, capsys):
    from mtl.cli.export import main as export_main

    export_main([str(RunLayout(run_dir).step(4))])
    assert Path(capsys.readouterr().out.strip()) == run_dir / "export"
    assert (run_dir / "export" / "heads.safetensors").is_file()
