"""What the commands write and read: mtl-export never writes over what it did not make, replaces
an earlier export whole or not at all; loading a model imports only mtl's own code unless told
to trust it; mtl-predict reads training's formats; bad input is one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from datasets import Dataset
from omegaconf import OmegaConf

import mtl
from mtl.artifacts import RunLayout
from mtl.cli.export import main as export_main
from mtl.cli.predict import main as predict_main
from mtl.data.bundled import bundled_rows
from mtl.errors import MtlError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, compose_cfg) -> Path:
    """A tiny run of synthetic_cls with its saved config and end-of-run export."""
    from mtl.cli.job import train as run

    out = tmp_path_factory.mktemp("artifacts") / "run"
    cfg = compose_cfg("debug=fast", "task=[synthetic_cls]", f"output_dir={out}")
    run(cfg)
    (out / ".hydra").mkdir()
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")
    return out


def listing(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its content (None for folders)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


def predict_args(model: Path, folder: Path, text: str = "a cat") -> list[str]:
    """`mtl-predict`'s arguments for one row of synthetic_cls written in `folder`, its output
    `folder/o.jsonl`."""
    rows = folder / "in.jsonl"
    rows.write_text(json.dumps({"text": text}) + "\n")
    return [f"model={model}", "task=synthetic_cls", f"input={rows}", f"output={folder / 'o.jsonl'}"]


def one_line_error(capsys, call) -> str:
    with pytest.raises(SystemExit) as stop:
        call()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("mtl: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


# -- mtl-export onto what exists ------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, expected",
    [
        ("notes", "exists; give overwrite=true"),  # a folder of the user's
        ("notes/notes.txt", "is a file"),
        (".", "is the current folder"),
        ("run", "(the folder being read)"),
        ("..", "is the current folder or holds it"),
        ("run/checkpoints/step_0000004/export", "inside"),  # inside the checkpoint read
        ("nowhere/export", "no folder"),
    ],
)
def test_export_onto_what_exists_is_refused_and_changes_nothing(
    run_dir, tmp_path, monkeypatch, capsys, target, expected
):
    work = tmp_path / "work"
    shutil.copytree(run_dir, work / "run", symlinks=True)
    (work / "notes").mkdir()
    (work / "notes" / "notes.txt").write_text("my notes\n")
    monkeypatch.chdir(work / "notes" if target in (".", "..") else work)
    source = RunLayout(work / "run").step(4) if "step_" in target else work / "run"
    before = listing(tmp_path)
    err = one_line_error(capsys, lambda: export_main([str(source), target]))
    assert expected in err
    assert listing(tmp_path) == before


def test_overwrite_true_replaces_a_folder_and_a_file_stays_refused(run_dir, tmp_path, capsys):
    """overwrite=true replaces an empty folder or an export; a folder of the user's (its
    notes.txt) is refused with what it holds, and left as it was."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    err = one_line_error(
        capsys, lambda: export_main([str(run_dir), str(tmp_path / "out"), "overwrite=true"])
    )
    assert "is a folder mtl did not write (it holds notes.txt)" in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]
    (tmp_path / "out" / "notes.txt").unlink()
    for _ in range(2):  # the empty folder, then the export written there
        export_main([str(run_dir), str(tmp_path / "out"), "overwrite=true"])
        assert (tmp_path / "out" / "mtl_tasks.json").is_file()
    (tmp_path / "file").write_text("keep")
    capsys.readouterr()
    one_line_error(
        capsys, lambda: export_main([str(run_dir), str(tmp_path / "file"), "overwrite=true"])
    )
    assert (tmp_path / "file").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "out"]


def test_a_failed_export_leaves_the_earlier_one_whole(run_dir, tmp_path, monkeypatch, capsys):
    import mtl.inference.export

    out = tmp_path / "export"
    export_main([str(run_dir), str(out)])
    (out / "stale.txt").write_text("from the earlier export")
    before = listing(tmp_path)
    written = mtl.inference.export._write_multitask

    def fail_half_way(*args):
        written(*args)
        raise OSError("disk full")

    monkeypatch.setattr(mtl.inference.export, "_write_multitask", fail_half_way)
    with pytest.raises(OSError, match="disk full"):
        export_main([str(run_dir), str(out)])
    assert listing(tmp_path) == before  # nothing left beside it either
    monkeypatch.undo()
    export_main([str(run_dir), str(out)])  # an earlier export: replaced without overwrite
    assert not (out / "stale.txt").exists() and (out / "heads.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


@pytest.mark.slow  # a process killed with SIGKILL
def test_an_export_killed_while_writing_leaves_the_earlier_one(run_dir, tmp_path):
    out = tmp_path / "export"
    export_main([str(run_dir), str(out)])
    before = listing(out)
    script = textwrap.dedent(
        f"""
        import os, signal
        import mtl.cli.export, mtl.inference.export
        written = mtl.inference.export._write_multitask
        def killed(*args):
            written(*args)
            os.kill(os.getpid(), signal.SIGKILL)
        mtl.inference.export._write_multitask = killed
        mtl.cli.export.main([{str(run_dir)!r}, {str(out)!r}, "overwrite=true"])
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert listing(out) == before
    mtl.load_model(out)
    left = [p.name for p in tmp_path.iterdir() if p.name != "export"]
    assert len(left) == 1 and left[0].startswith(".export.tmp-")  # the killed write's
    export_main([str(run_dir), str(out)])  # the next export of it deletes that
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["missing_run"], "no such folder"),
        (["run", "out", "overwrite=maybe"], "overwrite=maybe must be true or false"),
        (["run", "out", "standard=1"], "standard=1 must be true or false"),
        (["run", "out", "colour=red"], "unknown option 'colour=red'"),
        (["run", "a", "b"], "give a run folder and an optional out folder"),
        (["no_weights"], "no saved model"),
        (["notes"], "not an mtl run or export folder"),
    ],
)
def test_export_bad_arguments_are_one_line(run_dir, tmp_path, monkeypatch, capsys, args, expected):
    shutil.copytree(run_dir / ".hydra", tmp_path / "no_weights" / ".hydra")
    (tmp_path / "notes").mkdir()
    monkeypatch.chdir(tmp_path)
    args = [str(run_dir) if a == "run" else a for a in args]
    before = listing(tmp_path)
    assert expected in one_line_error(capsys, lambda: export_main(args))
    assert listing(tmp_path) == before


# -- loading runs only mtl's own code -------------------------------------------------------------


def edited_export(run_dir: Path, out: Path, edit) -> Path:
    shutil.copytree(run_dir / "export", out)
    meta = json.loads((out / "mtl_tasks.json").read_text())
    edit(meta["tasks"]["synthetic_cls"])
    (out / "mtl_tasks.json").write_text(json.dumps(meta))
    return out


def _head(target):
    def edit(task):
        task["config"]["head"] = {"_target_": target}
        task["head"]["class"] = target

    return edit


def _nested(task):
    head = "mtl.models.heads.SequenceClassificationHead"
    task["config"]["head"] = {"_target_": head, "pooling": {"_target_": "{module}.boom"}}


EDITS = {
    "own head": _head("{module}.UserHead"),
    "os.system": _head("os.system"),
    "builtins.eval": _head("builtins.eval"),
    "subprocess.run": _head("subprocess.run"),
    "a lookalike module": _head("mtl.evil.UserHead"),
    "a lookalike class": _head("mtl.models.heads.SequenceClassificationHeadX"),
    "nested _target_": _nested,
    "head class only": lambda task: task["head"].update({"class": "{module}.UserHead"}),
    "task type": lambda task: task["config"].update({"type": "{module}.UserType"}),
    "metric": lambda task: task["config"].update({"metrics": ["{module}.boom"]}),
}


def _formatted(edit, module: str):
    def apply(task):
        edit(task)
        text = json.dumps(task).replace("{module}", module)
        task.clear()
        task.update(json.loads(text))

    return apply


@pytest.mark.parametrize("case", list(EDITS))
def test_load_model_refuses_code_that_is_not_mtls(run_dir, tmp_path, user_module, case):
    module, marker = user_module
    export = edited_export(run_dir, tmp_path / "export", _formatted(EDITS[case], module))
    with pytest.raises(MtlError) as err:
        mtl.load_model(export)
    message = str(err.value)
    assert "trust_custom_code=true" in message and "\n" not in message
    assert "synthetic_cls" in message
    assert not marker.exists() and module not in sys.modules


def test_mtl_predict_refuses_it_and_runs_it_when_trusted(run_dir, tmp_path, user_module, capsys):
    module, marker = user_module
    export = edited_export(run_dir, tmp_path / "export", _formatted(EDITS["own head"], module))
    args = predict_args(export, tmp_path, "a cat and a dog")
    err = one_line_error(capsys, lambda: predict_main(args))
    assert f"head '{module}.UserHead' is not one of mtl's own" in err
    assert not marker.exists() and module not in sys.modules
    assert not (tmp_path / "o.jsonl").exists()
    predict_main([*args, "trust_custom_code=true"])
    assert marker.read_text() == "built"
    trusted = mtl.load_model(export, trust_custom_code=True)
    assert type(trusted.model.heads["synthetic_cls"]).__name__ == "UserHead"
    assert json.loads((tmp_path / "o.jsonl").read_text())["prediction"]


# -- mtl-predict reads what training reads --------------------------------------------------------


@pytest.fixture(scope="module")
def jsonl_predictions(run_dir, tmp_path_factory) -> tuple[list[dict], list[dict]]:
    folder = tmp_path_factory.mktemp("formats")
    _, _, _, dev = bundled_rows("synthetic_cls", size=200)
    rows = [{"text": r["text"], "id": i} for i, r in enumerate(dev[:7])]
    src = folder / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = folder / "out.jsonl"
    predict_main(
        [f"model={run_dir / 'export'}", "task=synthetic_cls", f"input={src}", f"output={out}"]
    )
    return rows, [json.loads(line) for line in out.read_text().splitlines()]


def test_predict_reads_tsv_and_writes_tsv(run_dir, tmp_path, jsonl_predictions):
    rows, expected = jsonl_predictions
    src = tmp_path / "in.tsv"
    src.write_text("id\ttext\n" + "".join(f"{r['id']}\t{r['text']}\n" for r in rows))
    out = tmp_path / "out.tsv"
    predict_main(
        [f"model={run_dir / 'export'}", "task=synthetic_cls", f"input={src}", f"output={out}"]
    )
    lines = out.read_text().splitlines()
    assert lines[0].split("\t") == ["id", "text", "prediction", "score"]
    got = [line.split("\t") for line in lines[1:]]
    assert [g[2] for g in got] == [e["prediction"] for e in expected]
    assert [g[1] for g in got] == [r["text"] for r in rows]


def test_predict_reads_parquet(run_dir, tmp_path, jsonl_predictions):
    rows, expected = jsonl_predictions
    src = tmp_path / "in.parquet"
    Dataset.from_list(rows).to_parquet(str(src))
    out = tmp_path / "out.jsonl"
    predict_main(
        [f"model={run_dir / 'export'}", "task=synthetic_cls", f"input={src}", f"output={out}"]
    )
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected


# -- load report and bad input ---------------------------------------------------------------


def test_load_model_prints_no_load_report_when_complete(run_dir, capfd, caplog):
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_warning()
    hf_logging.enable_progress_bar()
    loaded = mtl.load_model(run_dir / "export")
    assert set(loaded.tasks) == {"synthetic_cls"}
    seen = "".join(capfd.readouterr()) + caplog.text
    for word in ("MISSING", "newly initialized", "LOAD REPORT", "Loading weights"):
        assert word not in seen


def test_an_export_missing_encoder_weights_fails_in_one_line(run_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    export = shutil.copytree(run_dir / "export", tmp_path / "export")
    weights = load_file(export / "model.safetensors")
    dropped = sorted(k for k in weights if "layer.0." in k)
    save_file({k: v for k, v in weights.items() if k not in dropped}, export / "model.safetensors")
    with pytest.raises(MtlError, match="model.safetensors is not the file the export wrote"):
        mtl.load_model(export)
    meta = json.loads((export / "mtl_tasks.json").read_text())
    del meta["digests"]  # as an export of mtl 0.2 and earlier: the weights themselves say it
    meta["format"] = 1
    (export / "mtl_tasks.json").write_text(json.dumps(meta))
    with pytest.raises(MtlError, match="encoder's weights are incomplete") as err:
        mtl.load_model(export)
    assert "\n" not in str(err.value)


def _predict_case(tmp: Path, case: str) -> tuple[list[str], str]:
    """The arguments of one bad mtl-predict call (files made in `tmp`) and what the error says."""
    src = tmp / "in.jsonl"
    src.write_text(json.dumps({"text": "a cat"}) + "\n")
    out = f"output={tmp / 'out.jsonl'}"
    cases = {
        "empty input": ("empty.jsonl", "", "has no rows"),
        "not utf-8": ("latin.jsonl", b"\xff\xfe{", "cannot read it (UnicodeDecodeError)"),
        "no text column": ("other.jsonl", '{"words": "a cat"}\n', "has no column 'text'"),
        "input is a folder": ("folder.jsonl/", None, "cannot read it"),
        "unknown input type": ("in.xlsx", "x", "unknown file type '.xlsx'"),
        "broken parquet": ("bad.parquet", "not parquet", "cannot read it as parquet"),
    }
    if case in cases:
        name, content, expected = cases[case]
        path = tmp / name.rstrip("/")
        if content is None:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return ["task=synthetic_cls", f"input={path}", out], expected
    (tmp / "taken.jsonl").write_text("mine\n")
    others = {
        "unknown task": (["task=nope", f"input={src}", out], "not trained on it"),
        "bad overwrite": (
            ["task=synthetic_cls", f"input={src}", out, "overwrite=yes"],
            "true or false",
        ),
        "bad trust": (
            [f"input={src}", out, "task=synthetic_cls", "trust_custom_code=1"],
            "true or false",
        ),
        "no parent": (
            ["task=synthetic_cls", f"input={src}", f"output={tmp}/no/o.jsonl"],
            "no folder",
        ),
        "output is input": (
            ["task=synthetic_cls", f"input={src}", f"output={src}", "overwrite=true"],
            "is the input",
        ),
        "output exists": (
            ["task=synthetic_cls", f"input={src}", f"output={tmp / 'taken.jsonl'}"],
            "exists",
        ),
        "output parquet": (
            ["task=synthetic_cls", f"input={src}", f"output={tmp}/o.parquet"],
            "write .jsonl",
        ),
        "output is cwd": (
            ["task=synthetic_cls", f"input={src}", "output=.", "overwrite=true"],
            "current folder",
        ),
        "missing model": (["task=synthetic_cls", f"input={src}", out], "no such folder"),
    }
    return others[case]


PREDICT_CASES = [
    "empty input",
    "not utf-8",
    "no text column",
    "input is a folder",
    "unknown input type",
    "broken parquet",
    "unknown task",
    "bad overwrite",
    "bad trust",
    "no parent",
    "output is input",
    "output exists",
    "output parquet",
    "output is cwd",
    "missing model",
]


@pytest.mark.parametrize("case", PREDICT_CASES)
def test_predict_bad_input_is_one_line_and_writes_nothing(
    run_dir, tmp_path, monkeypatch, capsys, case
):
    monkeypatch.chdir(tmp_path)
    args, expected = _predict_case(tmp_path, case)
    model = tmp_path / "gone" if case == "missing model" else run_dir / "export"
    before = listing(tmp_path)
    assert expected in one_line_error(capsys, lambda: predict_main([f"model={model}", *args]))
    assert listing(tmp_path) == before


def test_predict_output_inside_the_model_is_refused(run_dir, tmp_path, capsys):
    export = shutil.copytree(run_dir / "export", tmp_path / "export")
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "a cat"}) + "\n")
    before = listing(tmp_path)
    args = [f"model={export}", "task=synthetic_cls", f"input={src}", f"output={export}/p.jsonl"]
    assert "a model folder; give a path outside it" in one_line_error(
        capsys, lambda: predict_main(args)
    )
    assert listing(tmp_path) == before


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing", "no such folder"),
        ("tasks file broken", "mtl_tasks.json is unreadable"),
        ("no encoder", "config.json is missing; export the run again"),
        ("not a model", "not an mtl run or export folder"),
        ("unknown config key", "task 'synthetic_cls' in mtl_tasks.json is malformed"),
    ],
)
def test_load_model_bad_folders_are_one_line(run_dir, tmp_path, case, expected):
    export = shutil.copytree(run_dir / "export", tmp_path / "export")
    if case == "tasks file broken":
        (export / "mtl_tasks.json").write_text("{not json")
    if case == "unknown config key":
        meta = json.loads((export / "mtl_tasks.json").read_text())
        meta["tasks"]["synthetic_cls"]["config"]["colour"] = "red"
        (export / "mtl_tasks.json").write_text(json.dumps(meta))
    if case == "no encoder":
        (export / "model.safetensors").unlink()
        (export / "config.json").unlink()
    path = {"missing": tmp_path / "gone", "not a model": tmp_path}.get(case, export)
    with pytest.raises(MtlError, match=expected) as err:
        mtl.load_model(path)
    assert "\n" not in str(err.value)


def test_mtl_export_of_a_run_naming_a_users_head_needs_trust(
    run_dir, tmp_path, user_module, capsys
):
    module, marker = user_module
    run = shutil.copytree(run_dir, tmp_path / "run", ignore=shutil.ignore_patterns("export"))
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    cfg.task.synthetic_cls.head = {"_target_": f"{module}.UserHead"}
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    before = listing(tmp_path)
    err = one_line_error(capsys, lambda: export_main([str(run), str(tmp_path / "out")]))
    assert f"head '{module}.UserHead'" in err and "trust_custom_code=true" in err
    assert listing(tmp_path) == before and module not in sys.modules
    export_main([str(run), str(tmp_path / "out"), "trust_custom_code=true"])
    assert marker.read_text() == "built"
    meta = json.loads((tmp_path / "out" / "mtl_tasks.json").read_text())
    assert meta["tasks"]["synthetic_cls"]["head"]["class"] == f"{module}.UserHead"


def test_init_from_reads_only_the_weights_of_an_export(run_dir, tmp_path, user_module, compose_cfg):
    from mtl.builders.model import build_model
    from mtl.builders.tasks import build_tasks
    from mtl.config import validate

    module, marker = user_module
    export = edited_export(run_dir, tmp_path / "export", _formatted(EDITS["own head"], module))
    cfg = compose_cfg("debug=fast", "task=[synthetic_cls]", f"model.init_from={export}")
    settings = validate(cfg)
    tasks, _ = build_tasks(settings, 0)
    model = build_model(settings, tasks)
    assert type(model.heads["synthetic_cls"]).__name__ == "SequenceClassificationHead"
    assert not marker.exists() and module not in sys.modules
