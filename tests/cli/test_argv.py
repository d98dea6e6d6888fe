"""`trainer.resume=<run>` continues the run in its own folder: the command a user types after a
preemption, with no other flag, gives one run folder and one metrics.jsonl."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from mtl.artifacts import RunLayout
from mtl.cli.argv import continue_in_place
from mtl.errors import MtlError
from mtl.training.setup import run as setup_run
from tests.cli.test_run_folder import SignalAt  # Ctrl-C at the end of a step


def make_run(folder: Path) -> Path:
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (RunLayout(folder).step(2)).mkdir(parents=True)
    return folder


def test_a_run_its_checkpoints_and_one_checkpoint_all_continue_in_the_run_folder(tmp_path):
    run = make_run(tmp_path / "run")
    for given in (run, run / "checkpoints", RunLayout(run).step(2)):
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


@pytest.mark.parametrize(
    "recorded",
    [
        "+hydra.callbacks.evil._target_=os.system",
        "+hydra.callbacks.evil={_target_: os.system, command: touch}",
        "hydra.job_logging.handlers.x={_target_: os.system}",
    ],
)
def test_a_record_naming_code_hydra_would_run_is_refused(tmp_path, recorded):
    """Hydra calls its callbacks itself, before mtl can check their kind: a run's record that
    names one (a run folder from elsewhere) is refused before Hydra reads it."""
    run = make_run(tmp_path / "run")
    (run / ".hydra" / "overrides.yaml").write_text(json.dumps(["seed=1", recorded]))
    with pytest.raises(MtlError) as err:
        continue_in_place([f"trainer.resume={run}"])
    assert str(err.value).startswith(f"{run / '.hydra' / 'overrides.yaml'} records {recorded!r}")
    assert "give it on the command line yourself if you trust it" in str(err.value)


def test_a_resume_calls_no_function_its_record_names(tmp_path, train_here, monkeypatch):
    """A run folder from elsewhere whose record sets the online policy to `os.system`: the
    resume resolves the policy to a class before calling anything, and refuses a function."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    code, err = train_here("debug=fast", "task=[synthetic_cls]", f"hydra.run.dir={run}")
    assert code == 0, err
    from omegaconf import OmegaConf

    overrides = run / ".hydra" / "overrides.yaml"
    policy = "loader.online={policy: os.system, update_every: 2, options: {command: 'touch ran'}}"
    overrides.write_text(json.dumps([*OmegaConf.load(overrides), policy]))
    config = OmegaConf.load(run / ".hydra" / "config.yaml")  # its record says so too
    online = {"policy": "os.system", "update_every": 2, "options": {"command": "touch ran"}}
    config.loader.online = online
    OmegaConf.save(config, run / ".hydra" / "config.yaml")
    code, err = train_here(f"trainer.resume={run}")
    assert code == 2 and err.count("\n") == 1, err
    assert "loader.online.policy='os.system' is a function, not a subclass" in err
    assert not (tmp_path / "ran").exists() and not (run / "ran").exists()


OWN_TASK = (
    "# @package task.{name}\ntype: sequence_classification\nsource: {{path: data/rows.csv}}\n"
    "label_names: [neg, pos]\nbatch_size: 8\nmax_length: 16\n"
)


@pytest.mark.parametrize(
    "typed",
    [
        [],  # as the stop line prints it
        ["--config-dir", "conf"],  # as Hydra users type it, before ...
        ["-cd", "conf", "trainer.max_steps=4"],
        ["trainer.max_steps=4", "--config-dir", "conf"],  # ... or after the overrides
    ],
    ids=["as printed", "--config-dir before", "-cd before", "--config-dir after"],
)
def test_a_run_of_ones_own_tasks_resumes_as_the_stop_line_says(
    tmp_path, train_here, monkeypatch, typed
):
    """Tasks of one's own in `conf/task/` of one's own folder (`--config-dir conf`): the run's
    record holds its config folders and the folder it started in, so `trainer.resume=<run>` as
    the stop line prints it continues the run, typed in that folder or in another one."""
    project = tmp_path / "project"
    (project / "conf" / "task").mkdir(parents=True)
    (project / "data").mkdir()
    rows = [f"{'good fine' if i % 2 else 'bad poor'} row {i},{i % 2}" for i in range(48)]
    (project / "data" / "rows.csv").write_text("\n".join(["text,label", *rows]) + "\n")
    for name in ("my_reviews", "my_tags"):
        (project / "conf" / "task" / f"{name}.yaml").write_text(OWN_TASK.format(name=name))
    monkeypatch.chdir(project)
    run = project / "outputs" / "mine"
    args = ["--config-dir", "conf", "debug=fast", "task=[my_reviews,my_tags]"]
    configured = setup_run.configured_hooks
    with monkeypatch.context() as patch:  # Ctrl-C at step 2 of 4
        patch.setattr(setup_run, "configured_hooks", lambda *a: [*configured(*a), SignalAt(2)])
        code, err = train_here(*args, f"hydra.run.dir={run}")
    assert code == 130, err
    pasted = shlex.split(re.search(r"resume with (.+)$", err, re.M).group(1))
    assert pasted == [f"trainer.resume={run}"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, err = train_here(*typed, *pasted)
    assert code == 0, err
    assert f"mtl: resuming in {project}, the folder the run was started in" in err
    assert "(resuming at step 2)" in err
    steps = [json.loads(line).get("step") for line in (run / "metrics.jsonl").open()]
    assert max(s for s in steps if s is not None) == 4
    assert not (elsewhere / "outputs").exists()
