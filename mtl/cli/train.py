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
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from mtl.artifacts import check_writable, config_dir, write_file
from mtl.cli import job
from mtl.cli.argv import continue_in_place, started_in
from mtl.cli.composition import composition_error
from mtl.cli.script import one_line_errors
from mtl.config import register_configs
from mtl.config.checks import check_sweeper
from mtl.errors import MtlError
from mtl.reporting.sweep import JobFailed, in_multirun
from mtl.training.checkpoints import runlock
from mtl.training.launch.distributed import launch_barrier, start_launch

PREFLIGHT = "mtl_preflight"  # what `Preflight` found, under hydra.runtime: the job reads it
HYDRA_FILES = {"config.yaml", "hydra.yaml", "overrides.yaml"}  # what Hydra writes to .hydra/


class JobError(Exception):
    """A Hydra or OmegaConf error that the training job raised (not one of composing its
    config): `train` raises the original, traceback and all."""


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _train(cfg: DictConfig) -> float | None:
    runtime = HydraConfig.get().runtime
    found = runtime.get(PREFLIGHT) or {}  # none in a multirun: Preflight looks at runs only
    hooks = [] if found.get("record") is None else [RunRecord(cfg, Path(found["record"]))]
    try:
        return job.main(cfg, hooks)
    except (HydraException, OmegaConfBaseException) as err:
        raise JobError() from err
    except SystemExit as stop:  # bad input: in a multirun, this job fails and the others run
        if stop.code and in_multirun():
            raise JobFailed.from_exit(stop) from None
        if stop.code == 2:  # on every rank of a launch: see Preflight
            run_dir = Path(runtime.output_dir)
            if found.get("made_from") is not None:
                remove_unused_run_folder(run_dir, Path(found["made_from"]))
            elif found.get("logs_before") is not None:
                remove_new_logs(run_dir, set(found["logs_before"]))
        raise


@one_line_errors
def train() -> None:
    """`mtl-train [overrides]`: start the launch, then Hydra; a config that does not compose is
    reported in one line (status 2), as is the end of a multirun with a failed job."""
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
        return
    except JobError as err:
        failed = err.__cause__
    except (HydraException, OmegaConfBaseException) as err:
        raise MtlError(composition_error(err)) from None
    raise failed  # outside the handler: the job's own error, as it was raised


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
    out finds only Hydra's start files, whichever process wrote them).

    What it found goes to the job in the config Hydra hands on (`hydra.runtime.mtl_preflight`):
    `made_from` (the first folder of the run folder's path this command makes), or for a run
    folder that exists `record` (its `.hydra/`, which mtl writes) and `logs_before` (its logs
    at start)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir"))).absolute()
        with one_line_errors:  # Hydra turns a callback's exceptions into warnings
            existing = check_run_folder_writable(run_dir)
        subdir = config.hydra.output_subdir
        found: dict[str, Any] = {}
        if existing == run_dir:  # before Hydra's logging opens its log there
            found["logs_before"] = sorted(p.name for p in run_dir.glob("*.log"))
        if existing == run_dir and subdir is not None:
            found["record"] = str(run_dir / str(subdir))
            with read_write(config.hydra):  # the object Hydra's run_job reads next
                config.hydra.output_subdir = None
        if existing != run_dir:  # the first folder of the path this command makes
            found["made_from"] = str(existing / run_dir.relative_to(existing).parts[0])
        with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
            config.hydra.runtime[PREFLIGHT] = found
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
        with read_write(hydra_cfg.hydra), open_dict(hydra_cfg.hydra.runtime):
            hydra_cfg.hydra.output_subdir = self.folder.name
            hydra_cfg.hydra.runtime.pop(PREFLIGHT, None)  # this command's, not the run's
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


if __name__ == "__main__":
    train()
