"""The console scripts' one argument style (`mtl.cli.script.Command`) and one error exit
(`one_line_errors`), in-process: `--help` lists every declared option, an unknown key is one line
with a did-you-mean, and every script's entry point lives in mtl.cli."""

from __future__ import annotations

import errno
import importlib
import re
from pathlib import Path

import pytest

from mtl.cli.script import REQUIRED, Command, Option, Positional, count, flag, one_line_errors
from mtl.errors import MtlError

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["mtl-export", "mtl-predict", "mtl-report", "mtl-workspace", "mtl-dry-run"]
# An unknown key for each script and what its one line must say.
UNKNOWN = {
    "mtl-export": (["run", "overwrit=true"], "option 'overwrit=true'; did you mean overwrite?"),
    "mtl-predict": (["modl=x", "task=a"], "unknown option 'modl=x'; did you mean model?"),
    "mtl-report": (["folder", "colour=red"], "unknown option 'colour=red'"),
    "mtl-workspace": (["entty=e"], "unknown option 'entty=e'; did you mean entity?"),
    "mtl-dry-run": (["random", "a=3", "loader.weightin=x"], "did you mean weighting?"),
}  # fmt: skip


def entry(script: str):
    """The module and function `[project.scripts]` names for `script`."""
    text = (ROOT / "pyproject.toml").read_text()
    module, function = re.search(rf'^{script} = "([\w.]+):(\w+)"$', text, re.M).groups()
    return importlib.import_module(module), function


def one_line(capsys, call) -> str:
    with pytest.raises(SystemExit) as stop:
        call()
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert captured.err.startswith("mtl: error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


@pytest.mark.parametrize("script", ["mtl-train", *SCRIPTS])
def test_every_console_script_lives_in_mtl_cli(script):
    module, function = entry(script)
    assert module.__name__.startswith("mtl.cli") and callable(getattr(module, function))


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("flag_", ["--help", "-h"])
def test_help_lists_every_option_and_argument(script, flag_, capsys):
    module, function = entry(script)
    with pytest.raises(SystemExit) as stop:
        getattr(module, function)([flag_])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {script} ")
    for option in module.COMMAND.options:
        row = next(line for line in out.splitlines() if line.strip().startswith(option.usage()))
        assert option.help.split()[0] in row, (option.name, out)
    for positional in module.COMMAND.positionals:
        assert f"<{positional.name}>" in out


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unknown_key_is_one_line_with_a_did_you_mean(script, capsys):
    module, function = entry(script)
    args, expected = UNKNOWN[script]
    assert expected in one_line(capsys, lambda: getattr(module, function)(args))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_dashed_option_is_one_line(script, capsys):
    module, function = entry(script)
    err = one_line(capsys, lambda: getattr(module, function)(["--entity", "e"]))
    assert "options are key=value" in err


# -- the parser ------------------------------------------------------------------------------------

COMMAND = Command(
    prog="mtl-x",
    summary="x",
    positionals=(Positional("run", "a run"), Positional("out", "out", required=False)),
    arguments="a run and an optional out",
    options=(
        Option("tasks", "<[a,b]>", "tasks", REQUIRED, lambda k, v: v.strip("[]").split(",")),
        Option("steps", "3", "steps", 3, count),
        Option("fast", "false", "fast", False, flag),
    ),
)


def test_options_positionals_and_defaults():
    args = COMMAND.parse(["r", "tasks=[a,b]", "steps=5"])
    assert args == {"run": "r", "out": None, "tasks": ["a", "b"], "steps": 5, "fast": False,
                    "free": {}}  # fmt: skip
    assert COMMAND.parse(["tasks=a", "r", "o", "fast=TRUE"])["out"] == "o"


def test_an_existing_path_with_an_equals_sign_is_a_positional(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr=0.1").mkdir()
    assert COMMAND.parse(["lr=0.1", "tasks=a"])["run"] == "lr=0.1"
    assert COMMAND.parse([f"{tmp_path}/x/lr=0.1", "tasks=a"])["run"].endswith("lr=0.1")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["r", "steps=0", "tasks=a"], "steps=0 must be an integer >= 1"),
        (["r", "fast=yes", "tasks=a"], "fast=yes must be true or false"),
        (["r"], "tasks= is missing; usage: mtl-x <run> [<out>] tasks=<[a,b]> [steps=3]"),
        (["tasks=a"], "give a run and an optional out"),
        (["r", "o", "p", "tasks=a"], "'p' is not key=value"),
        (["r", "tasks=a", "tasks=b"], "tasks= is given twice"),
        (["r", "tasks=a", "step=2"], "unknown option 'step=2'; did you mean steps?"),
        (["r", "tasks=a", "--fast"], "--fast: options are key=value; write fast=true"),
    ],
)
def test_bad_arguments_are_one_line(argv, expected):
    with pytest.raises(MtlError) as err:
        COMMAND.parse(argv)
    assert expected in str(err.value) and "\n" not in str(err.value)


# -- the one error exit ----------------------------------------------------------------------------


@one_line_errors
def body(error: Exception | None) -> str:
    if error is not None:
        raise error
    return "done"


def test_an_mtl_error_is_one_line_and_status_2(capsys):
    assert body(None) == "done"
    err = one_line(capsys, lambda: body(MtlError("task=x: no such task; give one of a, b")))
    assert err == "mtl: error: task=x: no such task; give one of a, b\n"


@pytest.mark.parametrize("rank, all_ranks, printed", [("0", True, True), ("1", True, False),
                                                       ("1", False, True)])  # fmt: skip
def test_an_error_of_every_rank_is_printed_once(monkeypatch, capsys, rank, all_ranks, printed):
    monkeypatch.setenv("RANK", rank)
    with pytest.raises(SystemExit) as stop:
        body(MtlError("bad", all_ranks=all_ranks))
    assert stop.value.code == 2
    assert isinstance(stop.value.__context__, MtlError)  # what a multirun's JobFailed reads
    assert capsys.readouterr().err == ("mtl: error: bad\n" if printed else "")


def test_the_error_exit_is_also_a_context_manager_and_passes_other_errors(capsys):
    with pytest.raises(SystemExit):
        with one_line_errors:
            raise MtlError("bad")
    assert capsys.readouterr().err == "mtl: error: bad\n"
    with pytest.raises(KeyError):
        body(KeyError("a bug keeps its traceback"))


def test_a_disk_that_fills_where_no_helper_writes_is_one_line(capsys):
    """metrics.jsonl's appends and the like: the OS's error, named with its file when known."""
    full = OSError(errno.ENOSPC, "No space left on device", "run/metrics.jsonl")
    err = one_line(capsys, lambda: body(full))
    assert err.startswith("mtl: error: run/metrics.jsonl: no space left on its disk; free some")
    assert "trainer.resume=<its run folder>" in err and err.count("\n") == 1
    with pytest.raises(PermissionError):  # any other OS error keeps its traceback
        body(PermissionError(errno.EACCES, "denied"))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["randon", "a=3", "b=4"], "unknown name 'randon'; did you mean random?"),
        (["random", "a=3", "weighting=temperature"], "written loader.weighting=temperature"),
    ],
)
def test_dry_run_points_to_the_name_or_option_meant(argv, expected, capsys):
    from mtl.cli.dry_run import main

    assert expected in one_line(capsys, lambda: main(argv))


@pytest.mark.slow  # the process's own stdout is what is tested
def test_help_into_a_pipe_closed_early_ends_quietly():
    """`mtl-train --help | head -1`: the reader leaves before the help is written; no
    BrokenPipeError traceback, status 0."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # as `head` does once it has its lines
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err, err[-2000:]


def test_mtl_workspace_without_wandb_credentials_is_one_line(capsys, monkeypatch, tmp_path):
    """As typed without `wandb login`: one line naming what to do (rc 2), not wandb's
    28-line traceback; dry_run=true still prints the spec."""
    from mtl.cli.workspace import main

    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no_netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    args = ["entity=me", "project=mtl", "tasks=[a,b]"]
    assert one_line(capsys, lambda: main(args)) == (
        "mtl: error: saving a workspace to W&B needs your W&B credentials: run `wandb login` "
        "(or set WANDB_API_KEY), or give dry_run=true to print the workspace's spec instead\n"
    )
    main([*args, "dry_run=true"])
    assert '"entity": "me"' in capsys.readouterr().out


def test_mtl_workspace_that_wandb_refuses_is_one_line(capsys, monkeypatch):
    from mtl.cli.workspace import main
    from mtl.reporting import workspace

    class Refused:
        def save(self):
            raise RuntimeError("api_key not configured (no-tty)\nmore lines of wandb's")

    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(workspace, "build_workspace", lambda spec: Refused())
    line = one_line(capsys, lambda: main(["entity=me", "project=mtl", "tasks=[a]"]))
    assert line.startswith("mtl: error: W&B refused to save the workspace of me/mtl (RuntimeError")
    assert line.endswith("check `wandb login`, the entity and the project, or give dry_run=true\n")


def test_mtl_train_help_lists_each_groups_options_without_the_training_stack(
    capsys, monkeypatch, tmp_path
):
    """`mtl-train --help` (and `python train.py --help`) answers from the config folders'
    listing, yours (`--config-dir`) too, without importing torch (it took 6 s through Hydra)."""
    import subprocess
    import sys

    from mtl.cli.entry import train

    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "my_reviews.yaml").write_text("type: regression\n")
    monkeypatch.setattr(sys, "argv", ["mtl-train", "--config-dir", str(tmp_path / "conf"), "-h"])
    train()
    out = capsys.readouterr().out
    assert out.startswith("usage: mtl-train [--config-dir DIR]")
    assert "  loader: mixup, random, round_robin, sequential\n" in out
    assert "my_reviews" in out and "glue/sst2" in out and "--cfg job" in out
    code = "import sys; from mtl.cli.entry import help_text; help_text([]); "
    code += "sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
