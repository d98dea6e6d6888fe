"""`mtl-dry-run`: an epoch summary from task sizes alone (its console script's function in this
process; one test runs the installed console script as its own process)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def console_script(name: str) -> list[str]:
    """What the installed console script `name` runs (its `[project.scripts]` entry)."""
    text = (ROOT / "pyproject.toml").read_text()
    module, function = re.search(rf'^{name} = "([\w.]+):(\w+)"$', text, re.M).groups()
    return [
        sys.executable,
        "-c",
        f"import sys; from {module} import {function}; sys.exit({function}())",
    ]


@pytest.fixture
def dry_run(capsys):
    """`dry_run(*args)`: `mtl-dry-run *args` in this process (its console script's function);
    its exit status and output as a finished process gives them."""
    from mtl.cli.dry_run import main

    def call(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        code = 0
        try:
            main(list(args))
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)

    return call


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtl: error: "), result.stderr
    return lines[0]


@pytest.mark.slow  # the installed console script, as its own process
def test_the_console_script_prints_the_summary():
    done = subprocess.run(
        [*console_script("mtl-dry-run"), "mixup", "big=12", "small=3"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "12 steps" in done.stdout


def test_summary_counts_steps_and_passes(dry_run):
    out = dry_run("mixup", "big=12", "small=3").stdout
    assert "12 steps" in out
    small = next(line for line in out.splitlines() if line.startswith("small"))
    assert small.split()[-1] == "4.00"  # 12 steps / 3 batches per pass


def test_options_and_epochs_reach_the_loader(dry_run):
    out = dry_run("random", "a=3", "b=5", "loader.weighting=uniform", "epochs=2").stdout
    assert out.count("RandomLoader") == 2 and "epoch 0" in out and "epoch 1" in out


def test_unknown_loader_is_one_line(dry_run):
    assert "round_robin" in one_error_line(dry_run("rr", "a=3"))


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["mixup", "a=three"], "'three'"),
        (["mixup", "a"], "key=value"),
        (["mixup", "a=3", "loader.nope=1"], "nope"),
    ],
)
def test_bad_sizes_and_options_are_one_line(dry_run, args, named):
    assert named in one_error_line(dry_run(*args))


def test_mtl_workspace_prints_the_spec(capsys):
    from mtl.cli.workspace import main

    capsys.readouterr()
    main(["entity=e", "project=p", "tasks=[a,b]", "dry_run=true"])
    out = capsys.readouterr().out
    assert '"project": "p"' in out and "eval/a/" in out


@pytest.mark.parametrize(
    ("options", "shares"),
    [
        # read as training reads them: 1e-9 a number (YAML would read a string); T -> 0 gives
        # the largest task every step, without an overflow blamed on caps never given
        (["loader.weighting=temperature", "loader.temperature=1e-9"], ["100.0%", "0.0%"]),
        (["loader.weighting={a: 1e308, b: 1e308}"], ["57.1%", "42.9%"]),  # each_once: sizes
        (["loader.weighting={a: 1e308, b: 1}"], ["100.0%", "0.0%"]),
    ],
)
def test_option_values_are_read_as_training_reads_them(dry_run, options, shares):
    result = dry_run("random", "a=4", "b=3", *options)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[-2:]]
    assert [row[3] for row in rows] == shares


def test_under_online_mixing_it_says_the_plan_moves(dry_run):
    result = dry_run("random", "a=4", "b=3", "loader.online={policy: exp3, update_every: 2}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "(loader.online: the plan the run starts from; every 2 optimizer steps the policy's "
        "weights redraw the rest of the epoch)"
    )


def test_over_a_task_set_it_reads_the_sizes_as_training_does(dry_run, tmp_path, monkeypatch):
    """`mtl-dry-run loader=random "task=[...]"`: the tasks' rows, dev split and batch size as a
    run composes them, not guessed by hand (75 rows: 8 go to dev, 67 to train, 9 batches of 8)."""
    project = tmp_path / "project"
    (project / "conf" / "task").mkdir(parents=True)
    rows = [f"{'good fine' if i % 2 else 'bad poor'} row {i},{i % 2}" for i in range(75)]
    (project / "rows.csv").write_text("\n".join(["text,label", *rows]) + "\n")
    (project / "conf" / "task" / "mine.yaml").write_text(
        "# @package task.mine\ntype: sequence_classification\nsource: {path: rows.csv}\n"
        "label_names: [neg, pos]\nbatch_size: 8\nmax_length: 16\n"
    )
    monkeypatch.chdir(project)
    search = f"hydra.searchpath=[file://{project / 'conf'}]"
    both = ["task=[mine,synthetic_cls]", "model=tiny", "sampler=random", search]
    result = dry_run("loader=random", *both)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "mine: 67 train rows, batch size 8, 9 batches per pass"
    assert lines[1].startswith("synthetic_cls: ")
    table = {line.split()[0]: line.split()[1:] for line in lines[4:]}
    assert table["mine"][:2] == ["9", "9"]
    result = dry_run("random", "task=[nope]", search)  # a bad option: one line, as training
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "nope" in result.stderr
