"""`trainer.resume=<run>` continues the run in its own folder: the command a user types after a
preemption, with no other flag, gives one run folder and one metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtl.cli.argv import continue_in_place
from mtl.errors import MtlError


def make_run(folder: Path) -> Path:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (folder / "checkpoints" / "step_0000002").mkdir(parents=True)
    return folder


def test_a_run_its_checkpoints_and_one_checkpoint_all_continue_in_the_run_folder(tmp_path):
    run = make_run(tmp_path / "run")
    for given in (run, run / "checkpoints", run / "checkpoints" / "step_0000002"):
        argv = ["task=[a]", f"trainer.resume={given}"]
        assert continue_in_place(argv) == [*argv, f"hydra.run.dir={run}"]


@pytest.mark.parametrize(
    "named",
    [["output_dir=/elsewhere"], ["hydra.run.dir=/elsewhere"], ["-m"], ["--multirun"]],
)
def test_a_command_that_names_the_folder_or_sweeps_is_left_as_it_is(tmp_path, named):
    run = make_run(tmp_path / "run")
    argv = [f"trainer.resume={run}", *named]
    assert continue_in_place(argv) == argv


def test_a_folder_that_is_not_a_run_is_left_to_the_resume_check(tmp_path):
    argv = [f"trainer.resume={tmp_path}"]
    assert continue_in_place(argv) == argv
    assert continue_in_place(["task=[a]"]) == ["task=[a]"]


def test_resume_as_typed_continues_the_same_run_folder(tmp_path, train_here, monkeypatch):
    """`mtl-train` in-process, from the user's folder, into the default run folder."""
    common = ["model=tiny", "debug=fast", "task=[synthetic_cls]", "trainer.progress_bar=false"]
    monkeypatch.chdir(tmp_path)

    def train(*args: str) -> str:
        code, err = train_here(*common, *args)
        assert code == 0, err[-2000:]
        return err

    train("trainer.max_steps=2", "seed=3")
    (run,) = (tmp_path / "outputs" / "runs").glob("*/*")
    config = (run / ".hydra" / "config.yaml").read_text()
    resumed = train(f"trainer.resume={run}", "trainer.max_steps=4")  # seed=3 not typed again
    assert f"run folder {run} (resuming at step 2)" in resumed
    assert list((tmp_path / "outputs" / "runs").glob("*/*")) == [run]  # no second folder
    # the record is the run's config, now with the steps it trains for
    assert (run / ".hydra" / "config.yaml").read_text() == config.replace(
        "max_steps: 2", "max_steps: 4"
    ).replace("resume: null", f"resume: {run}")
    overrides = (run / ".hydra" / "overrides.yaml").read_text()
    assert "seed=3" in overrides and "max_steps=4" in overrides
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert [row["step"] for row in rows if "loss" in row] == [1, 2, 3, 4]


def test_a_sweep_jobs_folder_is_read_and_given_back_quoted(tmp_path):
    run = make_run(tmp_path / "0_seed=0,task=[a]")
    argv = [f"trainer.resume='{run}'"]
    assert continue_in_place(argv) == [*argv, f"hydra.run.dir='{run}'"]


def test_the_runs_own_overrides_come_first_and_the_commands_win(tmp_path):
    """`trainer.resume=<run>` alone is the run's whole command again; an override the command
    gives itself replaces the run's (Hydra would refuse a key given twice)."""
    run = make_run(tmp_path / "run")
    recorded = ["task=[a,b]", "+debug=fast", "trainer.epochs=2", f"output_dir={run}", "seed=7"]
    (run / ".hydra" / "overrides.yaml").write_text(json.dumps(recorded))
    argv = [f"trainer.resume={run}", "trainer.epochs=4", "debug=fast"]
    assert continue_in_place(argv) == [
        "task=[a,b]",
        "seed=7",
        *argv,
        f"hydra.run.dir={run}",
    ]
    (run / ".hydra" / "overrides.yaml").write_text("{not: a list}")
    with pytest.raises(MtlError, match="overrides.yaml cannot be read"):
        continue_in_place(argv)
