"""Sweeps: the Optuna preset optimizes the monitored value; the summary callback writes one row per
job of a multirun (a failed job included, with its error), with the figures of each job's
results.json and metrics.jsonl; the progress bar's task labels are distinct."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from mtl.reporting.sweep import summary_rows, write_summary
from mtl.training.tracking.window import mix_text, short_names

ROOT = Path(__file__).resolve().parents[2]
DEBUG = ["debug=fast", "task=[synthetic_cls]"]


def job_dirs(sweep: Path) -> list[Path]:
    return sorted(
        (p.parent.parent for p in sweep.glob("*/.hydra/overrides.yaml")),
        key=lambda p: int(p.name.split("_")[0]),
    )


def monitored(results: dict) -> float:
    """The job's monitored value as results.json states it: at the best evaluation when the file
    has one, else eval/mean (the mean of each task's main metric) of the last evaluation."""
    if isinstance(results.get("best"), dict):
        return results["best"][results["monitor"]]
    metrics = [v for k, v in results.items() if k.startswith("eval/") and k != "eval/mean"]
    return results.get("eval/mean", statistics.fmean(metrics))


def figures_of(results: dict) -> dict:
    return results["best"] if isinstance(results.get("best"), dict) else results


def read_csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


# --- Optuna ----------------------------------------------------------------------------------


def test_optuna_sweep_of_two_trials_writes_its_best_value(tmp_path, train_here):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "sweep"
    code, err = train_here(
        "hparams_search=mixing", *DEBUG, "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep}"
    )
    assert code == 0, err[-3000:]
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    jobs = job_dirs(sweep)
    assert len(jobs) == 2
    values = []
    for job in jobs:
        config = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
        searched = dict(o.split("=", 1) for o in overrides if "=" in o)
        assert config["loader"]["weighting"] == "temperature"
        assert 1.0 <= config["loader"]["temperature"] <= 5.0
        assert config["loader"]["temperature"] == float(searched["loader.temperature"])
        assert config["sampler"]["sort_bs_num"] in (10, 50, 200)
        assert 1e-5 <= config["trainer"]["lr"] <= 1e-3
        values.append(monitored(json.loads((job / "results.json").read_text())))
    assert best["best_value"] == pytest.approx(max(values))
    assert set(best["best_params"]) == {"loader.temperature", "sampler.sort_bs_num", "trainer.lr"}
    rows = read_csv(sweep / "summary.csv")
    assert [float(r["monitor"]) for r in rows] == pytest.approx(values)
    assert [r["best"] for r in rows].count("True") == 1


# --- the summary of a multirun ---------------------------------------------------------------


def test_a_multirun_with_a_failing_job_summarizes_every_job(tmp_path, train_here):
    sweep = tmp_path / "sweep"
    code, err = train_here(
        "-m", *DEBUG, "task.synthetic_cls.batch_size=0,8", f"hydra.sweep.dir={sweep}"
    )
    error = "task.synthetic_cls.batch_size=0 must be >= 1"
    assert code == 2, err[-3000:]
    assert err.strip().splitlines()[-1] == f"mtl: error: {error}"
    failed, done = job_dirs(sweep)
    assert not (failed / "results.json").exists()
    assert (done / "results.json").is_file()  # the failed first job did not stop the sweep

    rows = read_csv(sweep / "summary.csv")
    assert [r["job"] for r in rows] == ["0", "1"]
    assert rows[0]["status"] == "FAILED" and rows[0]["error"] == error
    assert rows[0]["monitor"] == rows[0]["steps"] == "" and rows[0]["best"] == "False"
    assert "task.synthetic_cls.batch_size=0" in rows[0]["overrides"].split()
    row = rows[1]
    assert row["status"] == "COMPLETED" and row["error"] == "" and row["best"] == "True"
    assert row["overrides"].split() == ["debug=fast", "task=[synthetic_cls]"] + [
        "task.synthetic_cls.batch_size=8"
    ]
    results = json.loads((done / "results.json").read_text())
    windows = [
        w for w in map(json.loads, (done / "metrics.jsonl").read_text().splitlines()) if "loss" in w
    ]
    assert len(windows) == 4
    assert int(row["steps"]) == results["step"] == 4
    assert float(row["monitor"]) == monitored(results)
    accuracy = figures_of(results)["eval/synthetic_cls/accuracy"]
    assert float(row["synthetic_cls/accuracy"]) == accuracy
    assert float(row["padding_efficiency"]) == statistics.fmean(
        w["padding_efficiency"] for w in windows
    )
    assert float(row["tokens_per_s"]) == statistics.median(w["tokens_per_s"] for w in windows)
    assert float(row["wall_s"]) > 0

    table = (sweep / "summary.md").read_text()
    assert "Every job: `debug=fast task=[synthetic_cls]`" in table
    failed_line = next(line for line in table.splitlines() if line.startswith("| 0 |"))
    assert "FAILED" in failed_line and error in failed_line
    best_line = next(line for line in table.splitlines() if line.startswith("| 1 |"))
    assert "**best**" in best_line and f"{accuracy:.4f}" in best_line


@pytest.mark.slow  # SIGTERM to a sweep's process, then a resume as a shell types it
def test_a_job_stopped_by_a_signal_is_listed_as_stopped_with_how_to_resume(
    tmp_path, monkeypatch, train_here
):
    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true"}
    long_run = ["trainer.max_steps=null", "trainer.epochs=100000", "trainer.eval_every=null"]
    args = ["-m", *DEBUG, *long_run, "seed=0", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 300
    while not list(sweep.glob("0_*/metrics.jsonl")) and time.time() < deadline:
        time.sleep(0.5)  # the first job has logged a window: it is training
    proc.send_signal(signal.SIGTERM)  # stops the first job, as a scheduler's preemption would
    _, stderr = proc.communicate(timeout=600)
    assert "mtl: received SIGTERM" in stderr, stderr[-3000:]
    rows = read_csv(sweep / "summary.csv")
    stopped = job_dirs(sweep)[0]
    assert rows[0]["status"] == "STOPPED"
    assert rows[0]["error"] == f"stopped by a signal; resume with trainer.resume={stopped}"
    assert re.fullmatch(r"0_[A-Za-z0-9._-]{1,64}", stopped.name)  # short and shell-safe
    assert rows[0]["monitor"] == "" and not (stopped / "results.json").exists()
    assert list((stopped / "checkpoints").glob("step_*"))

    # Resumed as the row says (a few steps more), the job goes on in its folder and its row with it.
    # The hint as a shell reads it (shlex: POSIX shell words), in this process: the process is
    # not what is tested here.
    hint = shlex.split(rows[0]["error"].split("resume with ", 1)[1])
    more = f"trainer.max_steps={stopped_step(stopped) + 2}"
    monkeypatch.chdir(tmp_path)
    code, stderr = train_here(*DEBUG, *long_run, "seed=0", *hint, more)
    assert code == 0, stderr[-3000:]
    assert job_dirs(sweep)[0] == stopped and not (tmp_path / "outputs").exists()
    again = read_csv(sweep / "summary.csv")
    assert len(again) == len(rows) and again[0]["status"] == "COMPLETED"
    results = json.loads((stopped / "results.json").read_text())
    assert float(again[0]["monitor"]) == monitored(results)
    assert float(again[0]["wall_s"]) > float(rows[0]["wall_s"])


def stopped_step(job: Path) -> int:
    return max(int(p.name.split("_")[1]) for p in (job / "checkpoints").glob("step_*"))


def fake_job(sweep: Path, num: int, results: dict | None, status: str | None = "COMPLETED"):
    job = sweep / f"{num}_lr={num}"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"trainer.lr={num}"]))
    config = {"task": {"a": {"metrics": ["f1", "accuracy"]}, "b": {"metrics": None}}}
    config["loader"] = {"_target_": "mtl.loaders.RandomLoader", "weighting": "temperature",
                        "temperature": 1.0, "temperature_end": 3.0, "shape": "cosine",
                        "max_passes": 2}  # fmt: skip
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (job / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"job": {"num": num}}}))
    if results is not None:
        (job / "results.json").write_text(json.dumps(results))
    if status is not None:
        record = {"job": num, "overrides": [f"trainer.lr={num}"], "status": status}
        (job / "sweep_job.json").write_text(json.dumps({**record, "wall_s": 1.5}))
    return job


def eval_figures(f1: float, accuracy: float, pearson: float) -> dict:
    return {
        "eval/a/accuracy": accuracy,
        "eval/a/f1": f1,
        "eval/b/pearson": pearson,
        "eval/b/mse": 1.0,
    }


def test_the_summary_takes_the_best_evaluation_and_the_monitor_mode_of_results_json(tmp_path):
    """results.json with a best evaluation: the row's figures are the best step's, the best row
    is the lowest value under monitor_mode min; a job that never ended is listed as STARTED."""

    def results(loss: float, f1: float) -> dict:
        return {
            "step": 10,
            "monitor": "eval/b/mse",
            "monitor_mode": "min",
            "best_step": 5,
            "best": {**eval_figures(f1, 0.5, 0.25), "eval/b/mse": loss},
            **eval_figures(0.0, 0.0, 0.0),
        }

    fake_job(tmp_path, 0, results(0.5, 0.9))
    fake_job(tmp_path, 1, results(0.2, 0.7))
    fake_job(tmp_path, 2, None, status=None)
    write_summary(tmp_path)
    rows = read_csv(tmp_path / "summary.csv")
    assert [(r["job"], r["status"], r["best"]) for r in rows] == [
        ("0", "COMPLETED", "False"),
        ("1", "COMPLETED", "True"),
        ("2", "STARTED", "False"),
    ]
    assert [r["monitor"] for r in rows] == ["0.5", "0.2", ""]
    assert [r["a/f1"] for r in rows] == ["0.9", "0.7", ""]  # the first listed metric
    assert [r["b/pearson"] for r in rows] == ["0.25", "0.25", ""]  # the first eval key
    assert rows[2]["overrides"] == "trainer.lr=2"
    assert rows[0]["mixture"] == "random temperature T=1.0->3.0 cosine max_passes=2"


def test_without_a_best_evaluation_the_monitor_is_the_mean_of_the_main_metrics(tmp_path):
    fake_job(tmp_path, 0, {"step": 4, **eval_figures(0.75, 0.5, 0.25)})
    fake_job(tmp_path, 1, {"step": 4, **eval_figures(0.25, 1.0, 0.5)})
    fake_job(tmp_path, 2, None, status="FAILED")
    rows = summary_rows(tmp_path)
    assert [r["monitor"] for r in rows] == [0.5, 0.375, None]
    assert [r["best"] for r in rows] == [True, False, False]
    assert rows[2]["status"] == "FAILED"


# --- presets ---------------------------------------------------------------------------------


@pytest.fixture
def compose_hydra(compose_cfg):
    return lambda *overrides: compose_cfg(
        *DEBUG, "output_dir=unused", *overrides, hydra_config=True
    )


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


def test_the_mixing_search_preset(compose_hydra):
    needs("hydra_plugins.hydra_optuna_sweeper")
    cfg = compose_hydra("hparams_search=mixing")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper")
    assert sweeper.direction == "maximize" and sweeper.sampler.seed == 0
    assert dict(sweeper.params) == {
        "loader.temperature": "interval(1.0, 5.0)",
        "sampler.sort_bs_num": "choice(10, 50, 200)",
        "trainer.lr": "tag(log, interval(1e-5, 1e-3))",
    }
    assert cfg.loader._target_ == "mtl.loaders.RandomLoader"
    assert cfg.loader.weighting == "temperature"
    assert cfg.hydra.mode.name == "MULTIRUN"


@pytest.mark.parametrize(
    ("option", "module", "target", "settings"),
    [
        ("local", "hydra_plugins.hydra_joblib_launcher", "JoblibLauncher", {"n_jobs": 2}),
        (
            "slurm",
            "hydra_plugins.hydra_submitit_launcher",
            "SlurmLauncher",
            {"gpus_per_node": 4, "tasks_per_node": 4, "nodes": 1},
        ),
    ],
)
def test_the_launcher_presets(option, module, target, settings, compose_hydra):
    needs(module)
    launcher = compose_hydra(f"hydra/launcher={option}").hydra.launcher
    assert launcher._target_.endswith(target)
    assert {key: launcher[key] for key in settings} == settings


def test_the_summary_callback_is_on_by_default(compose_hydra):
    cfg = compose_hydra()
    assert cfg.hydra.callbacks.sweep_summary._target_ == "mtl.reporting.sweep.SweepSummary"


# --- progress bar ----------------------------------------------------------------------------


def test_mix_text_names_tasks_that_share_a_prefix_apart():
    names = ["pydoc_topic", "pydoc_code", "pydoc_code_share", "cls"]
    figures = {"share/pydoc_topic": 0.5, "share/pydoc_code": 0.25, "share/pydoc_code_share": 0.2}
    assert mix_text(figures, names) == "pydoc_to…=0.50 pydoc_code=0.25 pydoc_code_…=0.20 cls=0.00"
    assert short_names(["synthetic_cls", "synthetic_reg"]) == {
        "synthetic_cls": "synthetic_c…",
        "synthetic_reg": "synthetic_r…",
    }
    assert short_names(["abcdefghi", "abcdefghij"]) == {  # no shorter with the ellipsis
        "abcdefghi": "abcdefghi",
        "abcdefghij": "abcdefghij",
    }


@given(st.lists(st.text("ab_", min_size=1, max_size=14), min_size=1, max_size=6, unique=True))
def test_short_names_are_distinct_and_name_their_task(names):
    labels = short_names(names)
    assert len(set(labels.values())) == len(names)
    for name, label in labels.items():
        if label.endswith("…"):
            prefix = label[:-1]
            assert len(prefix) >= 8 and len(prefix) < len(name) - 1
            assert [n for n in names if n.startswith(prefix)] == [name]
        else:
            assert label == name  # short, or no prefix shorter by two tells it apart
            others = [n for n in names if n != name]
            assert len(name) <= 9 or any(o.startswith(name[:-2]) for o in others)


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ("seed=0,task=[a]", "seed-0_task-a"),
        ("loader=mixup,sampler=random", "loader-mixup_sampler-random"),
        ("loader.weighting={a: 1, b: 3}", "loader.weighting-a-1_b-3"),
        ("task=[glue/sst2,glue/mnli]", "task-glue-sst2_glue-mnli"),
        ("", "job"),
    ],
)
def test_a_sweep_jobs_folder_name_is_short_and_shell_safe(overrides, name):
    from mtl.artifacts import job_folder_name

    assert job_folder_name(overrides) == name
    long = job_folder_name("trainer.lr=0.001," * 10)
    assert len(long) == 64 and re.fullmatch(r"[A-Za-z0-9._-]+-[0-9a-f]{8}", long)
    assert long != job_folder_name("trainer.lr=0.001," * 11)  # the digest tells them apart
