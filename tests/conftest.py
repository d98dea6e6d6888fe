"""Shared fixtures: compose the real Hydra config with overrides, as `train.py` would, and run
`mtl-train` in this process."""

from __future__ import annotations

import copy
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
FAST = ("debug=fast", "task=[synthetic_cls,synthetic_tag,synthetic_reg]")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config) -> None:
    """Under pytest-xdist, each worker's torch gets its share of the cores (torch takes them
    all by default: two workers of two threads on two cores run the suite a third slower).
    Processes the tests start inherit it through OMP_NUM_THREADS."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch  # the import takes seconds: only in a worker of a parallel session

        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if hasattr(config.option, "loadscopereorder"):  # the files in the order given below
        config.option.loadscopereorder = False


# Rough seconds a test of each kind costs, to hand the workers the longest files first.
COST = {"distributed": 30, "slow": 8}


@pytest.hookimpl(trylast=True)  # after `-m` has deselected
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files from the costliest down, each file's tests in their own order. With `--dist
    loadfile` a worker takes a file at a time in this order; by default pytest-xdist orders the
    files by their number of tests, which left the few-test gloo launches to the end, on one
    worker while the other waited."""
    cost: dict[Path, int] = {}
    for item in items:
        marks = {mark.name for mark in item.iter_markers()}
        each = max((COST[m] for m in marks & COST.keys()), default=1)
        cost[item.path] = cost.get(item.path, 0) + each
    items.sort(key=lambda item: -cost[item.path])  # stable: a file's own order is kept


@contextmanager
def hydra_session() -> Iterator[None]:
    """Hydra initialized on mtl's `conf/` (cleared first, schemas registered), as `mtl-train`."""
    from mtl.config import register_configs  # mtl's imports take seconds: not in xdist's controller

    GlobalHydra.instance().clear()
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        yield


def compose_config(*overrides: str, hydra_config: bool = False) -> DictConfig:
    """The real config composed with exactly these overrides (no presets); with `hydra_config`,
    the `hydra` node too.

    Hydra takes about 0.25 s a composition, so the config of each list of overrides but
    `output_dir=` is composed once per test process and each call gets a copy, its `output_dir`
    set on it (interpolations are resolved later, so this is what the override would give)."""
    if hydra_config:
        with hydra_session():
            return compose("config", overrides=list(overrides), return_hydra_config=True)
    folders = [o.partition("=")[2] for o in overrides if o.startswith("output_dir=")]
    rest = tuple(o for o in overrides if not o.startswith("output_dir="))
    if rest not in _COMPOSED:
        with hydra_session():
            _COMPOSED[rest] = compose("config", overrides=list(rest))
    cfg = copy.deepcopy(_COMPOSED[rest])
    for folder in folders:
        cfg.output_dir = folder
    return cfg


_COMPOSED: dict[tuple[str, ...], DictConfig] = {}


@pytest.fixture(autouse=True)
def no_handler_on_a_closed_stream() -> Iterator[None]:
    """After each test, drop the log handlers that write to a stream closed since (pytest's
    capture of a test that is over: a library or a Hydra run made them while it ran); the next
    record through them would print a "Logging error" into another test's stderr."""
    yield
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in list(getattr(logger, "handlers", [])):
            if getattr(getattr(handler, "stream", None), "closed", False):
                logger.removeHandler(handler)


@pytest.fixture(scope="session")
def compose_cfg() -> Callable[..., DictConfig]:
    """`compose_cfg(*overrides, hydra_config=False)`: the real config, no presets (usable from
    module and session fixtures)."""
    return compose_config


@pytest.fixture
def make_cfg(tmp_path):
    """`make_cfg(*overrides)`: the composed config, run folder in tmp_path, fast smoke preset
    (`debug=fast`, three synthetic tasks; an override of `task=` replaces them)."""

    def make(*overrides: str, output_dir: Path | None = None):
        return compose_config(*FAST, f"output_dir={output_dir or tmp_path / 'run'}", *overrides)

    return make


@pytest.fixture
def train_here(monkeypatch, capsys):
    """`train_here(*args)`: `mtl-train *args` in this process (`mtl.cli.train` with `sys.argv`;
    Hydra and its HydraConfig cleared before and after; `sys.path` and the environment restored
    after, and accelerate's process-wide state: each run sets its own mixed precision); returns
    (exit status, stderr): 0 for a run that returns, the status of its `SystemExit` otherwise;
    its stdout is left for `capsys`.

    One process has one launch time (the default run folder's name): two runs into default
    folders from the same folder need `hydra.run.dir` or `output_dir` of their own."""

    from accelerate.state import AcceleratorState  # torch's import time: only where it runs

    from mtl.cli.train import train

    def call(*args: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["mtl-train", *args])
        monkeypatch.setattr(sys, "path", list(sys.path))  # train() adds the folder it runs in
        monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # what train() sets; restored after
        GlobalHydra.instance().clear()
        AcceleratorState._reset_state(reset_partial_state=True)  # each run its own precision
        capsys.readouterr()
        code = 0
        try:
            train()
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        finally:
            GlobalHydra.instance().clear()
            HydraConfig.instance().cfg = None  # a config composed by hand is not under Hydra
            AcceleratorState._reset_state(reset_partial_state=True)
        captured = capsys.readouterr()
        sys.stdout.write(captured.out)  # left for the test's own capsys.readouterr()
        return code, captured.err

    return call


def file_digests(folder: Path) -> dict[str, str]:
    """Every file under `folder` by its path, with its sha256: compare a folder before and after
    a command that must leave it as it was."""
    import hashlib

    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }


def resealed(checkpoint: Path) -> Path:
    """Rewrite a checkpoint's marker to its files as they are now (sizes and sha256), as one who
    changed a file and knew the format would: what mtl checks beyond the marker still holds."""
    import json

    from mtl.artifacts import file_digest
    from mtl.builders.weights import MARKER, SHA256

    marker = json.loads((checkpoint / MARKER).read_text())
    files = sorted(p for p in checkpoint.rglob("*") if p.is_file() and p.name != MARKER)
    names = {p.relative_to(checkpoint).as_posix(): p for p in files}
    marker["files"] = {name: p.stat().st_size for name, p in names.items()}
    marker[SHA256] = {name: file_digest(p) for name, p in names.items()}
    (checkpoint / MARKER).write_text(json.dumps(marker))
    return checkpoint
