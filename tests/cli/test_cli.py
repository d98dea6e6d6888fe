"""`mtl-train` as a user runs it: from a folder of their own, with their own config folder; a
config Hydra cannot compose ends with one line `mtl: error: ...` and status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
# What the `mtl-train` console script runs, with this checkout's `mtl` on the path.
MTL_TRAIN = [sys.executable, "-c", "import sys; from mtl.cli import train; sys.exit(train())"]
LOADERS = "mixup, random, round_robin, sequential"
TASKS = ", ".join(
    sorted(
        str(p.relative_to(ROOT / "conf" / "task").with_suffix(""))
        for p in (ROOT / "conf" / "task").rglob("*.yaml")
    )
)


def mtl_train(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [*MTL_TRAIN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
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
        (["loader.nope=1"], "unknown key loader.nope; RandomLoaderOptions has _target_, weighting"),
        (["loader.weightin=1"], "unknown key loader.weightin; did you mean weighting?"),
        (["task=[a"], "cannot read the override 'task=[a'"),
        (["--config-name", "nope"], "no primary config 'nope'"),
    ],
)
def test_a_config_that_does_not_compose_gives_one_line(
    tmp_path, monkeypatch, train_here, overrides, expected
):
    """In-process (`train_here`); the console script's own process is run by the tests below."""
    monkeypatch.chdir(tmp_path)
    args = ["task=[synthetic_cls]", "debug=fast", *overrides]
    code, err = train_here(*args)
    assert one_error_line(subprocess.CompletedProcess(args, code, "", err)).startswith(expected)
    assert not (tmp_path / "outputs").exists()


def test_a_sweep_with_an_unknown_option_fails_before_any_job(tmp_path):
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


def test_plugin_options_are_found(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    result = mtl_train(
        "task=[synthetic_cls]", "hydra/launcher=joblib", "--cfg", "hydra", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "JoblibLauncher" in result.stdout


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


def test_a_user_project_folder_trains_its_own_task(tmp_path):
    write_csv(tmp_path / "data" / "reviews.csv")
    write_task(tmp_path / "conf", "my_task", "my_task")
    result = mtl_train(
        "--config-dir", "conf", "task=[my_task]", "debug=fast", "model=tiny", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = the_run_folder(tmp_path)  # under the project's outputs/, not the package's
    assert OmegaConf.load(run / ".hydra" / "hydra.yaml").hydra.job.chdir is False
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "my_task:" in config and "path: data/reviews.csv" in config
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("eval/my_task/") for row in steps for k in row)


def test_searchpath_in_a_user_config_and_a_nested_option(tmp_path):
    write_csv(tmp_path / "data" / "reviews.csv")
    extra = tmp_path / "shared_conf"
    write_task(extra, "glue/mini", "mini")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "my_run.yaml").write_text(
        f"defaults: [config, _self_]\nhydra:\n  searchpath: [file://{extra}]\nseed: 3\n"
    )
    result = mtl_train(
        "--config-dir", "conf", "--config-name", "my_run", "task=[glue/mini]", "debug=fast",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run = the_run_folder(tmp_path)
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "seed: 3" in config and "  mini:" in config
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("eval/mini/") for row in steps for k in row)


def test_a_task_file_named_after_another_task_is_refused(tmp_path):
    write_task(tmp_path / "conf", "copy", "synthetic_cls")
    result = mtl_train(
        "--config-dir", "conf", "task=[synthetic_cls,copy]", "debug=fast", cwd=tmp_path
    )
    assert one_error_line(result) == (
        f"{tmp_path}/conf/task/copy.yaml has '# @package task.synthetic_cls'; make its first "
        "line '# @package task.copy' (a task's package is its file name)"
    )
