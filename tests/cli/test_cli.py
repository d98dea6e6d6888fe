"""`mtl-train` as a user runs it: from a folder of their own, with their own config folder; a
config Hydra cannot compose ends with one line `mtl: error: ...` and status 2.

Every run is in-process (`train_here`, from the user's folder); the console script's own
process is run from an installed wheel by tests/test_wheel.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
LOADERS = "mixup, random, round_robin, sequential"
TASKS = ", ".join(
    sorted(
        str(p.relative_to(ROOT / "conf" / "task").with_suffix(""))
        for p in (ROOT / "conf" / "task").rglob("*.yaml")
    )
)


@pytest.fixture
def mtl_train(train_here, monkeypatch):
    """`mtl_train(*args, cwd=folder)`: `mtl-train *args` in-process from `folder`; returns
    (exit status, stderr)."""

    def call(*args: str, cwd: Path) -> tuple[int, str]:
        monkeypatch.chdir(cwd)
        return train_here(*args)

    return call


def one_error_line(result: tuple[int, str]) -> str:
    code, err = result
    assert code == 2, err[-2000:]
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("mtl: error: ")
    return lines[0].removeprefix("mtl: error: ")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ["loader=mix"],
            f"unknown loader 'mix'; did you mean mixup? choose from {LOADERS}, "
            "or add conf/loader/mix.yaml",
        ),
        (
            ["task=[synthetic_cls,nope]"],
            f"unknown task 'nope'; choose from {TASKS}, or add conf/task/nope.yaml",
        ),
        (
            ["task=[glue/nope]"],
            f"unknown task 'glue/nope'; did you mean glue/rte? choose from {TASKS}, "
            "or add conf/task/glue/nope.yaml",
        ),
        (
            ["trainer.epochs=abc"],
            "bad value for trainer.epochs: Value 'abc' of type 'str' could not be converted "
            "to Integer",
        ),
        (["trainer.epoch=1"], "unknown key trainer.epoch; did you mean epochs? TrainerConfig has"),
        (["loader.nope=1"], "unknown key loader.nope; RandomLoaderOptions has _target_, exhaust"),
        (["loader.weightin=1"], "unknown key loader.weightin; did you mean weighting?"),
        (["task=[a"], "cannot read the override 'task=[a'"),
        (["--config-name", "nope"], "no primary config 'nope'"),
    ],
)
def test_a_config_that_does_not_compose_gives_one_line(
    tmp_path, monkeypatch, train_here, overrides, expected
):
    monkeypatch.chdir(tmp_path)
    result = train_here("task=[synthetic_cls]", "debug=fast", *overrides)
    assert one_error_line(result).startswith(expected)
    assert not (tmp_path / "outputs").exists()


def test_a_sweep_with_an_unknown_option_fails_before_any_job(tmp_path, mtl_train):
    sweep = tmp_path / "sweep"
    result = mtl_train(
        "-m",
        "task=[synthetic_cls]",
        "debug=fast",
        "loader=sequential,mix",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert one_error_line(result).startswith(
        "unknown loader 'mix'; did you mean mixup? choose from"
    )
    assert not [p for p in sweep.glob("*") if p.is_dir()]  # no job folder
    assert not list(tmp_path.rglob("metrics.jsonl"))


def test_plugin_options_are_found(tmp_path, mtl_train, capsys):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    code, err = mtl_train(
        "task=[synthetic_cls]", "hydra/launcher=joblib", "--cfg", "hydra", cwd=tmp_path
    )
    assert code == 0, err
    assert "JoblibLauncher" in capsys.readouterr().out


def write_csv(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [f"{'good fine nice' if i % 2 else 'bad poor sad'} row {i},{i % 2}" for i in range(80)]
    path.write_text("\n".join(["text,label", *rows]) + "\n")


def write_task(folder: Path, path: str, name: str) -> None:
    file = folder / "task" / f"{path}.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(
        f"# @package task.{name}\n"
        "type: sequence_classification\n"
        "source: {path: data/reviews.csv}   # relative to the folder mtl-train runs in\n"
        "label_names: [neg, pos]\nbatch_size: 8\nmax_length: 16\n"
    )


def the_run_folder(project: Path) -> Path:
    runs = [p for p in (project / "outputs" / "runs").glob("*/*") if p.is_dir()]
    assert len(runs) == 1
    return runs[0]


def test_a_user_project_folder_trains_its_own_task(tmp_path, mtl_train):
    write_csv(tmp_path / "data" / "reviews.csv")
    write_task(tmp_path / "conf", "my_task", "my_task")
    code, err = mtl_train(
        "--config-dir", "conf", "task=[my_task]", "debug=fast", "model=tiny", cwd=tmp_path
    )
    assert code == 0, err[-3000:]
    run = the_run_folder(tmp_path)  # under the project's outputs/, not the package's
    assert OmegaConf.load(run / ".hydra" / "hydra.yaml").hydra.job.chdir is False
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "my_task:" in config and "path: data/reviews.csv" in config
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("eval/my_task/") for row in steps for k in row)


def test_searchpath_in_a_user_config_and_a_nested_option(tmp_path, mtl_train):
    write_csv(tmp_path / "data" / "reviews.csv")
    extra = tmp_path / "shared_conf"
    write_task(extra, "glue/mini", "mini")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "my_run.yaml").write_text(
        f"defaults: [config, _self_]\nhydra:\n  searchpath: [file://{extra}]\nseed: 3\n"
    )
    code, err = mtl_train(
        "--config-dir", "conf", "--config-name", "my_run", "task=[glue/mini]", "debug=fast",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err[-3000:]
    run = the_run_folder(tmp_path)
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "seed: 3" in config and "  mini:" in config
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("eval/mini/") for row in steps for k in row)


def test_a_task_file_named_after_another_task_is_refused(tmp_path, mtl_train):
    write_task(tmp_path / "conf", "copy", "synthetic_cls")
    result = mtl_train(
        "--config-dir", "conf", "task=[synthetic_cls,copy]", "debug=fast", cwd=tmp_path
    )
    assert one_error_line(result) == (
        f"{tmp_path}/conf/task/copy.yaml has '# @package task.synthetic_cls'; make its first "
        "line '# @package task.copy' (a task's package is its file name)"
    )
