"""`mtl-train` (the same as `python train.py`): Hydra composes the config, `mtl.cli.job` trains.

`mtl-train` composes mtl's own configs (`conf/`, shipped with the package) with the user's:
`--config-dir conf` or `hydra.searchpath=[file://conf]` (on the command line or in a primary
config of your own) adds a folder whose options sit beside mtl's (`conf/task/my_task.yaml` is
`task=[my_task]`, `conf/task/glue/mnli.yaml` is `task=[glue/mnli]`), so it runs from any folder.
A file with the same path as one of mtl's would be hidden by mtl's (Hydra searches mtl's folder
first), so a run that chooses it is refused: give yours a name of its own. Relative paths in a
config (data files) and the run folder (`outputs/`) are relative to the folder the command runs
in (`hydra.job.chdir` is false), and modules in that folder can be named by `_target_` (it is
on `sys.path`, as with `python -m`).

Hydra looks up every option itself (user folders, search paths, plugins such as
`hydra/launcher=joblib`); a config it cannot compose (unknown option, wrong type, unknown key)
ends the command with one line `mtl: error: ...` on stderr and status 2, as bad input does.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from mtl.artifacts import check_writable, config_dir, write_file
from mtl.cli import job
from mtl.cli.argv import continue_in_place, started_in
from mtl.cli.script import one_line_errors
from mtl.config import register_configs
from mtl.config.checks import check_sweeper, unknown_argument
from mtl.errors import MtlError, did_you_mean, import_target
from mtl.reporting.sweep import JobFailed, in_multirun
from mtl.training.checkpoints import runlock
from mtl.training.launch.distributed import launch_barrier, start_launch

_in_job = False  # True while the task function runs: its errors are not composition errors
_made_from: Path | None = None  # the first folder of the run folder's path this command made
_record: Path | None = None  # `.hydra/` of a run folder that existed: mtl writes it (see Preflight)
_logs_before: set[str] | None = None  # the logs a run folder that existed held at start
HYDRA_FILES = {"config.yaml", "hydra.yaml", "overrides.yaml"}  # what Hydra writes to .hydra/
# Options that Hydra plugins add (`hydra/launcher=slurm` builds on submitit_slurm): their package.
PLUGINS = {
    "hydra/launcher/submitit": "hydra-submitit-launcher",
    "hydra/launcher/joblib": "hydra-joblib-launcher",
    "hydra/launcher/ray": "hydra-ray-launcher",
    "hydra/launcher/rq": "hydra-rq-launcher",
    "hydra/sweeper/optuna": "hydra-optuna-sweeper",
    "hydra/sweeper/ax": "hydra-ax-sweeper",
    "hydra/sweeper/nevergrad": "hydra-nevergrad-sweeper",
}


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _train(cfg: DictConfig) -> float | None:
    global _in_job
    _in_job = True  # stays set if main raises: a job's error keeps its traceback
    hooks = [] if _record is None else [RunRecord(cfg, _record)]
    try:
        result = job.main(cfg, hooks)
    except SystemExit as stop:  # bad input: in a multirun, this job fails and the others run
        if stop.code and in_multirun():
            raise JobFailed.from_exit(stop) from None
        if stop.code == 2:  # on every rank of a launch: see Preflight
            run_dir = Path(HydraConfig.get().runtime.output_dir)
            if _made_from is not None:
                remove_unused_run_folder(run_dir, _made_from)
            elif _logs_before is not None:
                remove_new_logs(run_dir, _logs_before)
        raise
    _in_job = False  # the next job of a sweep composes again
    return result


@one_line_errors
def train() -> None:
    """`mtl-train [overrides]`: start the launch, then Hydra; a config that does not compose is
    reported in one line (status 2), as is the end of a multirun with a failed job."""
    global _in_job
    _in_job = False  # a call after one whose job failed (in-process use) composes afresh
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # Hydra raises; we report (below)
    started = started_in(sys.argv[1:])
    if started is not None and started != Path.cwd():  # a resume typed in another folder
        print(f"mtl: resuming in {started}, the folder the run was started in", file=sys.stderr)
        os.chdir(started)
    if os.getcwd() not in sys.path:  # `_target_: my_project.x` from the folder it runs in
        sys.path.insert(0, os.getcwd())
    register_configs()
    sys.argv[1:] = continue_in_place(sys.argv[1:])
    try:
        start_launch()
        _train()
    except (HydraException, OmegaConfBaseException) as err:
        if _in_job:
            raise
        raise MtlError(composition_error(err)) from None


class Preflight(Callback):
    """Hydra callback (`conf/hydra/default.yaml`): before a run, note which folders of the run
    folder's path do not exist yet (a run refused for bad input removes what it made there);
    before a sweep, check the sweeper's settings.

    Hydra writes the run's record (`.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml`) before
    the job starts. Into a run folder that exists already (a training's, to resume or refuse, or
    a folder of the user's) it writes nothing: mtl writes the record once the run is accepted
    (`RunRecord`), and a refused command removes the empty log Hydra's logging opened there if
    it is new, so the folder is left as it was.

    Under a launcher every process looks before any makes the folder (a barrier), so all agree
    on what the launch made; each refused process then removes what is left of it (the last one
    out finds only Hydra's start files, whichever process wrote them)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _made_from, _record, _logs_before
        _made_from, _record, _logs_before = None, None, None
        run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir"))).absolute()
        with one_line_errors:  # Hydra turns a callback's exceptions into warnings
            existing = check_run_folder_writable(run_dir)
        subdir = config.hydra.output_subdir
        if existing == run_dir:  # before Hydra's logging opens its log there
            _logs_before = {p.name for p in run_dir.glob("*.log")}
        if existing == run_dir and subdir is not None:
            _record = run_dir / str(subdir)
            with read_write(config.hydra):  # the object Hydra's run_job reads next
                config.hydra.output_subdir = None
        if existing != run_dir:  # the first folder of the path this command makes
            _made_from = existing / run_dir.relative_to(existing).parts[0]
        launch_barrier()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        with one_line_errors:  # Hydra turns a callback's exceptions into warnings
            check_sweeper(config.hydra.sweeper)


def check_run_folder_writable(run_dir: Path) -> Path:
    """The run folder, or the nearest folder of its path that exists (where this command makes
    the rest); one line (every rank alike) when this process cannot write there: before Hydra
    makes the folder or opens its log file."""
    folder = run_dir
    try:
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        check_writable(folder, f"run folder {run_dir}")
        return folder
    except MtlError as err:
        raise MtlError(
            f"{err}, with hydra.run.dir= (or from a folder you can write, for the default "
            "outputs/)",
            all_ranks=True,
        ) from None
    except OSError as err:  # a folder on the way that this user cannot enter
        raise MtlError(
            f"run folder {run_dir}: cannot reach {folder} ({os.strerror(err.errno or 0).lower()}); "
            "give a folder you can write with hydra.run.dir=",
            all_ranks=True,
        ) from None


class RunRecord:
    """A training hook: once the run is set up (accepted), rank 0 writes the record Hydra would
    have written into `folder` (`.hydra/`): the job's config, Hydra's config and the command's
    overrides, each file whole or not at all."""

    def __init__(self, cfg: DictConfig, folder: Path):
        self.cfg, self.folder = cfg, folder

    def on_train_start(self, run: Any, progress: Any) -> None:
        if not run.accelerator.is_main_process:
            return
        hydra_cfg = copy.deepcopy(HydraConfig.instance().cfg)
        with read_write(hydra_cfg.hydra):
            hydra_cfg.hydra.output_subdir = self.folder.name
        self.folder.mkdir(parents=True, exist_ok=True)
        files = {
            "config.yaml": self.cfg,
            "hydra.yaml": hydra_cfg,
            "overrides.yaml": hydra_cfg.hydra.overrides.task,
        }
        for name, node in files.items():
            write_file(self.folder / name, OmegaConf.to_yaml(node), overwrite=True)


def remove_unused_run_folder(run_dir: Path, made_from: Path) -> None:
    """Remove `run_dir` if it holds only what Hydra wrote at start (`.hydra/`, an empty log),
    and the folders above it up to `made_from` (the first one this command made) if empty.
    Another process of the same launch may be removing the same files: what is gone is skipped."""
    if made_from != run_dir and made_from not in run_dir.parents:
        return
    try:
        entries = list(run_dir.iterdir())
        if not all(_start_file(entry) for entry in entries):
            return  # something else is there: keep it all
    except FileNotFoundError:
        entries = []
    for entry in entries:
        if entry.is_dir():
            for file in _listing(entry):
                file.unlink(missing_ok=True)
            _rmdir(entry)
        else:
            entry.unlink(missing_ok=True)
    folder = run_dir
    while _rmdir(folder) and folder != made_from:
        folder = folder.parent


def remove_new_logs(run_dir: Path, before: set[str]) -> None:
    """Remove the empty logs of `run_dir` (a folder that existed) not in `before`: the ones
    Hydra's logging opened at this command's start."""
    for log in run_dir.glob("*.log"):
        with contextlib.suppress(OSError):  # another process of the launch removed it first
            if log.name not in before and log.stat().st_size == 0:
                log.unlink()


def _start_file(entry: Path) -> bool:
    """Whether `entry` of a run folder is one Hydra or mtl wrote at start (or is gone)."""
    try:
        if entry.name == ".hydra" and entry.is_dir():
            return {p.name for p in entry.iterdir()} <= HYDRA_FILES
        if entry.suffix == ".log" and entry.is_file():
            return entry.stat().st_size == 0
    except FileNotFoundError:
        return True
    return entry.name == runlock.GUARD or not entry.exists()  # the lock's guard this run made


def _listing(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except FileNotFoundError:
        return []


def _rmdir(folder: Path) -> bool:
    """Remove an empty `folder`; True when it is gone (also if another process removed it)."""
    try:
        folder.rmdir()
    except FileNotFoundError:
        return True
    except OSError:  # not empty: something else lives there
        return False
    return True


def composition_error(err: Exception) -> str:
    """One line naming what Hydra could not compose and how to fix it."""
    if isinstance(err, MissingConfigException):
        return _missing_option(err)
    if isinstance(err, OverrideParseException):
        return f"cannot read the override {err.override!r}: {_first_line(err)}"
    cause = err if isinstance(err, OmegaConfBaseException) else err.__cause__ or err.__context__
    where = re.match(r"In '([^']+)'", str(err))
    in_file = f" (in {where.group(1)}.yaml)" if where else ""
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        key = cause.full_key
        if where and where.group(1).startswith("task/") and key.count(".") == 1:
            name = where.group(1).rsplit("/", 1)[-1]  # a task file without its @package line
            return (
                f"{where.group(1)}.yaml puts its keys at task.* ({key}); make its first line "
                f"'# @package task.{name}' (a task's package is its file name)"
            )
        if isinstance(cause, ConfigKeyError) or "not in" in _first_line(cause):
            return f"unknown key {key}{in_file}; {_known_keys(cause, key, str(err))}"
        if isinstance(cause, ValidationError):
            return f"bad value for {key}{in_file}: {_first_line(cause)}"
        return f"bad config at {key}{in_file}: {_first_line(cause)}"
    text = _first_line(err)
    if cause is not None and str(cause).strip():
        text = f"{text}: {_first_line(cause)}"
    return text


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _missing_option(err: MissingConfigException) -> str:
    missing = err.missing_cfg_file or ""
    text = str(err)
    if text.startswith("Cannot find primary config"):
        return (
            f"no primary config '{missing}' in the config search path; check --config-name "
            "and --config-dir"
        )
    # The folders Hydra searched, user folders and hydra.searchpath included.
    sources = re.findall(r"provider=(.+?), path=(\S+)", text)
    if not sources or "/" not in missing:
        return _first_line(err)
    plugin = next((pkg for path, pkg in PLUGINS.items() if missing.startswith(path)), None)
    if plugin:
        return f"{missing} comes with a Hydra plugin that is not installed; pip install {plugin}"
    folders = _searched_folders(sources)
    parts = missing.split("/")
    named = re.search(r"Available options in '([^']+)'", text)
    group = (
        named.group(1)
        if named
        else next(  # `task=[glue/mnli]`: the group is `task`, the option `glue/mnli`
            (
                "/".join(parts[:i])
                for i in range(1, len(parts))
                if any((folder / "/".join(parts[:i])).is_dir() for folder in folders)
            ),
            "/".join(parts[:-1]),
        )
    )
    options = _group_options(folders, group)
    named = [o for o in _named_options(group) if o not in options]
    unknown = named or [missing[len(group) + 1 :]]  # the command line's order: the first first
    option, listed = unknown[0], ", ".join(repr(o) for o in unknown)
    local = Path.cwd() / "conf"
    if (local / group / f"{option}.yaml").is_file() and local.resolve() not in folders:
        return (
            f"unknown {group} {listed}: conf/{group}/{option}.yaml is in this folder's conf/, "
            "which mtl does not search; add --config-dir conf to the command"
        )
    choices = f"choose from {', '.join(options)}, or " if options else ""
    hint = did_you_mean(option, options)
    return f"unknown {group} {listed}; {hint}{choices}add conf/{group}/{option}.yaml"


def _named_options(group: str) -> list[str]:
    """The options of `group` the command line names (`task=[a,b]`, `+task=a`), in its order."""
    try:
        overrides = OverridesParser.create().parse_overrides(sys.argv[1:])
    except HydraException:
        return []
    named: list[str] = []
    for override in overrides:
        if override.key_or_group == group and not override.is_sweep_override():
            value = override.value()
            named += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return named


def _searched_folders(sources: list[tuple[str, str]]) -> list[Path]:
    """mtl's own config folder and the `file://` folders of the search path Hydra reported
    (user folders: `--config-dir`, `hydra.searchpath`)."""
    folders = [config_dir()]
    folders += [
        Path(path.removeprefix("file://")) for _, path in sources if path.startswith("file://")
    ]
    return list(dict.fromkeys(folder.resolve() for folder in folders))


def _group_options(folders: list[Path], group: str) -> list[str]:
    """The options of a group in `folders`, those in its sub-folders as `sub/name`."""
    return sorted(
        {
            path.relative_to(folder / group).with_suffix("").as_posix()
            for folder in folders
            for path in (folder / group).rglob("*.yaml")
        }
    )


def _known_keys(cause: OmegaConfBaseException, key: str, hydra_message: str) -> str:
    """The fix for an unknown key: the keys its schema has (closest first), or Hydra's hint."""
    schema = getattr(cause, "object_type", None)
    if is_dataclass(schema):
        names = [f.name for f in fields(schema)]
        hint = did_you_mean(key.rpartition(".")[2], names)
        return f"{hint}{schema.__name__} has {', '.join(names)}"
    parent = getattr(cause, "parent_node", None)
    target = parent.get("_target_") if isinstance(parent, DictConfig) else None
    if target:  # a loader or sampler: the keys are its class's arguments
        try:
            obj = import_target(target, "_target_")
            fix = unknown_argument(key.rpartition(".")[2], obj, key.partition(".")[0])
        except MtlError:
            fix = None
        if fix:
            return fix
    hint = re.search(r"To append to your config use (\S+)", hydra_message)
    if hint:
        return f"to add it (if its class takes it) use {hint.group(1)}"
    return "remove it or check its spelling"


if __name__ == "__main__":
    train()
