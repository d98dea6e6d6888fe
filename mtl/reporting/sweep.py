"""Sweep summaries: `<sweep dir>/summary.csv` and `summary.md`, one row per job of a multirun.

`SweepSummary` is a Hydra callback, on in `conf/hydra/default.yaml`. When a job ends it writes
`sweep_job.json` into the job's folder (status, the error's first line, wall time, the value the
job returned) and rewrites the summary from every job folder of the sweep; the end of the multirun
writes it once more. The table is built from the folders, not from memory, so it is the same with
every launcher (the basic one runs jobs in this process, joblib in worker processes, submitit on
other machines), and it is there when a failed job makes Hydra end the multirun with an error.

A row: the job's number, its task mixture (`mixture`: loader, weighting, schedule), status
(`COMPLETED`, `FAILED`, `STOPPED`: a signal stopped it after a
checkpoint, to resume; or `STARTED`: began and never reported an end, so still running or killed),
the error's first line (for `STOPPED`, how to resume), the monitored value (`trainer.monitor` at
its best evaluation, from `results.json`), each task's main dev metric at that evaluation (the
first of the task's `metrics` in the job's `.hydra/config.yaml`, else its first `eval/<task>/`
key), steps, wall time, tokens/s (median over the log windows of `metrics.jsonl`, so a slow first
window does not weigh), padding efficiency (mean over the windows) and the job's overrides. The
best row by `monitor_mode` (max unless `results.json` says min) is marked.

A job that ends with `sys.exit` (mtl's bad input: one line on stderr, status 2) would end the whole
multirun, as Hydra records only exceptions as failed jobs: `mtl.cli.train` turns it into `JobFailed`
inside a multirun, so the other jobs run on and the row carries the error.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import os
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from mtl.artifacts import resume_override, write_file
from mtl.errors import MtlError, env_rank
from mtl.training.launch.distributed import LAUNCH_TIME_ENV, launch_time
from mtl.values import is_number

log = logging.getLogger(__name__)

RECORD = "sweep_job.json"
DEFAULT_MONITOR = "eval/mean"
HEADERS = {  # summary.md's names for summary.csv's columns
    "wall_s": "wall s",
    "tokens_per_s": "tokens/s",
    "examples_per_s": "examples/s",
    "padding_efficiency": "padding eff.",
}


class JobFailed(MtlError):
    """A multirun job that ended with `sys.exit(code)`: Hydra records it as this job's failure
    and runs the other jobs. Its message is the bad-input error the job printed, when known."""

    @classmethod
    def from_exit(cls, stop: SystemExit) -> JobFailed:
        cause = stop.__context__  # mtl.cli.job.main exits while handling the MtlError
        if isinstance(cause, MtlError):
            return cls(first_line(cause))
        return cls(f"the job exited with status {stop.code}")


def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class SweepSummary(Callback):
    """Writes `summary.csv` and `summary.md` into the sweep folder (see the module docstring)."""

    def __init__(self, filename: str = "summary") -> None:
        self.filename = filename
        self._started = 0.0

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Worker processes (joblib) resolve the sweep folder with this process's launch time.
        os.environ.setdefault(LAUNCH_TIME_ENV, launch_time().isoformat())

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._started = time.time()

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if env_rank() != 0:  # under torchrun, rank 0 writes for the job
            return
        job_dir = Path(config.hydra.runtime.output_dir)  # absolute, whatever the job's cwd
        earlier = _read_json(job_dir / RECORD)
        if not in_multirun() and earlier is None:  # a single run, not one of a sweep's jobs
            return
        outcome = self._outcome(job_return, job_dir)
        if in_multirun():
            depth = len(Path(str(config.hydra.sweep.subdir)).parts)  # `task=[glue/mnli]`: 2
            sweep_dir = job_dir.parents[depth - 1]
            record = {
                "job": int(config.hydra.job.num),
                "overrides": list(job_return.overrides or []),
                "sweep_dir": str(sweep_dir),
                **outcome,
            }
        else:  # a sweep's job resumed in its own folder (`trainer.resume=<job>`): its row goes on
            sweep_dir = Path(earlier.get("sweep_dir") or job_dir.parent)
            wall = (earlier.get("wall_s") or 0.0) + (outcome["wall_s"] or 0.0)
            record = {**earlier, **outcome, "wall_s": wall}
        (job_dir / RECORD).write_text(json.dumps(record, indent=2))
        write_summary(sweep_dir, self.filename)

    def _outcome(self, job_return: JobReturn, job_dir: Path) -> dict[str, Any]:
        """Status, error, returned value and wall time of the job that just ended."""
        outcome = {
            "status": job_return.status.name,
            "error": None,
            "returned": None,
            "wall_s": time.time() - self._started if self._started else None,
        }
        if job_return.status == JobStatus.FAILED:
            outcome["error"] = first_line(_job_error(job_return))
        else:
            value = job_return.return_value
            if is_number(value):
                outcome["returned"] = float(value)
        if job_return.status == JobStatus.COMPLETED and not (job_dir / "results.json").is_file():
            # mtl stopped by SIGTERM/SIGUSR1 returns normally, with a checkpoint and no results
            outcome["status"], outcome["returned"] = "STOPPED", None
            outcome["error"] = f"stopped by a signal; resume with {resume_override(job_dir)}"
        return outcome

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir).absolute()
        if sweep_dir.is_dir() and env_rank() == 0:
            path = write_summary(sweep_dir, self.filename)
            log.info(f"Sweep summary: {path}")


def _job_error(job_return: JobReturn) -> BaseException:
    """A failed job's exception: `JobReturn.return_value` raises it (after a line on stderr that
    Hydra prints again at the end of the multirun, so not here)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            job_return.return_value  # noqa: B018 (the property raises)
    except Exception as err:  # the job's own exception, whatever its type
        return err
    raise AssertionError("a FAILED job without an exception")


def first_line(err: BaseException | object) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def write_summary(sweep_dir: Path, filename: str = "summary") -> Path:
    """Rewrite `<sweep_dir>/<filename>.csv` and `.md` from the job folders; returns the .md path.
    A lock file keeps jobs that end together (parallel launchers) from writing at once."""
    import fcntl

    with (sweep_dir / f".{filename}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = summary_rows(sweep_dir)
        columns = summary_columns(rows)
        csv_path = sweep_dir / f"{filename}.csv"
        table = io.StringIO()
        _write_csv(table, rows, columns)
        # summary.csv/.md are the sweep's own names: each job's end rewrites them, whole
        write_file(csv_path, table.getvalue(), overwrite=True)
        md_path = sweep_dir / f"{filename}.md"
        write_file(md_path, markdown(rows, columns), overwrite=True)
    return md_path


def summary_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    """One dict per job folder of the sweep, in job order, the best row with `best: True`."""
    folders = {p.parent for p in sweep_dir.rglob(RECORD)}
    folders |= {p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")}
    rows = [job_row(folder) for folder in folders]
    rows.sort(key=lambda r: (r["job"] is None, r["job"] if r["job"] is not None else 0))
    scored = [r for r in rows if _is_number(r["monitor"])]
    if scored:
        pick = min if scored[0]["monitor_mode"] == "min" else max
        pick(scored, key=lambda r: r["monitor"])["best"] = True
    return rows


def job_row(folder: Path) -> dict[str, Any]:
    record = _read_json(folder / RECORD) or {}
    results = _read_json(folder / "results.json") or {}
    config = _read_yaml(folder / ".hydra" / "config.yaml")
    overrides = record.get("overrides")
    if overrides is None:
        overrides = _read_yaml(folder / ".hydra" / "overrides.yaml") or []
    job = record.get("job")
    if job is None:
        job = (
            ((_read_yaml(folder / ".hydra" / "hydra.yaml") or {}).get("hydra") or {})
            .get("job", {})
            .get("num")
        )
    found = monitored(results, config, returned=record.get("returned"))
    windows = [w for w in _read_jsonl(folder / "metrics.jsonl") if "tokens_per_s" in w]
    return {
        "job": job,
        "status": record.get("status", "STARTED"),
        "best": False,
        "monitor": found.value,
        "monitor_name": found.name,
        "monitor_mode": found.mode,
        "mixture": mixture(config or {}),
        "metrics": task_metrics(config or {}, found.figures),
        "steps": results.get("step"),
        "wall_s": record.get("wall_s"),
        "tokens_per_s": _median(w["tokens_per_s"] for w in windows),
        "examples_per_s": _median(w["examples_per_s"] for w in windows if "examples_per_s" in w),
        "padding_efficiency": _mean(w["padding_efficiency"] for w in windows),
        "error": record.get("error"),
        "overrides": [str(o) for o in overrides],
        "folder": folder,
    }


@dataclass
class Monitored:
    """A job's monitored value: `value` (None: not known yet) of the metric `name`, better when
    higher under `mode` "max", lower under "min"; `what` says where it comes from and `figures`
    are the dev figures it belongs to (the best evaluation's, else the last one's)."""

    value: float | None
    name: str
    mode: str
    what: str
    figures: dict[str, Any]


def monitored(
    results: dict[str, Any], config: dict | None = None, *, returned: float | None = None
) -> Monitored:
    """The monitored value of a job from its `results.json` (for a job still running: the
    figures of its last evaluation) and its `.hydra/config.yaml`: `trainer.monitor` at the best
    evaluation; else the value the job returned; else the monitor at the last evaluation; else,
    for `eval/mean`, the mean of each task's main dev metric (`task_metrics`)."""
    trainer = (config or {}).get("trainer") or {}
    monitor = results.get("monitor")
    name = monitor if isinstance(monitor, str) else trainer.get("monitor") or DEFAULT_MONITOR
    mode = results.get("monitor_mode") or trainer.get("monitor_mode") or "max"
    best = results.get("best") if isinstance(results.get("best"), dict) else None
    figures = best if best is not None else results
    if best is not None and _is_number(best.get(name)):
        return Monitored(best[name], name, mode, f"{name} (best)", figures)
    if _is_number(returned):
        return Monitored(returned, name, mode, f"{name} (returned by the job)", figures)
    if _is_number(results.get(name)):
        return Monitored(results[name], name, mode, f"{name} (last evaluation)", figures)
    metrics = task_metrics(config or {}, figures)
    if name == DEFAULT_MONITOR and metrics and all(_is_number(v) for v in metrics.values()):
        value = sum(metrics.values()) / len(metrics)  # eval/mean: the mean of the main metrics
        return Monitored(value, name, mode, "mean of each task's main dev metric", figures)
    return Monitored(None, name, mode, "no evaluation yet", figures)


def task_metrics(config: dict, figures: dict) -> dict[str, float | None]:
    """`{"<task>/<metric>": value}` for each task of the job, its main metric: the first of the
    task's `metrics` in the config, else the first `eval/<task>/` key of the figures. Without a
    config, the tasks are those the figures name."""
    named = [k.split("/")[1] for k in figures if k.startswith("eval/") and k.count("/") == 2]
    tasks = config.get("task") or dict.fromkeys(named)
    out: dict[str, float | None] = {}
    for task, settings in tasks.items():
        listed = (settings or {}).get("metrics") or []
        metric = listed[0] if listed else None
        if metric is None:
            prefix = f"eval/{task}/"
            metric = next((k[len(prefix) :] for k in figures if k.startswith(prefix)), None)
        if metric is not None:
            out[f"{task}/{metric}"] = figures.get(f"eval/{task}/{metric}")
    return out


def mixture(config: dict) -> str:
    """The job's task mixture in a few words: its loader (`random`, `mixup`, ...) and, for a
    weighted one, the weighting and what moves it (a temperature schedule, stages, caps)."""
    loader = config.get("loader") or {}
    target = str(loader.get("_target_", "")).rsplit(".", 1)[-1].removesuffix("Loader")
    parts = [re.sub(r"(?<!^)(?=[A-Z])", "_", target).lower() or "?"]
    weighting = loader.get("weighting")
    if isinstance(weighting, dict):
        parts.append("weights " + ",".join(f"{task}={w}" for task, w in weighting.items()))
    elif weighting:
        parts.append(str(weighting))
    if weighting == "temperature":
        end = loader.get("temperature_end")
        moves = f"->{end} {loader.get('shape', 'linear')}" if end is not None else ""
        parts.append(f"T={loader.get('temperature')}{moves}")
    if loader.get("stages"):
        parts.append(f"{len(loader['stages'])} stages")
    if loader.get("max_passes") is not None:
        parts.append(f"max_passes={loader['max_passes']}")
    if loader.get("steps_per_epoch"):
        parts.append(f"{loader['steps_per_epoch']} steps/epoch")
    return " ".join(parts)


def summary_columns(rows: list[dict]) -> list[str]:
    metric_columns: list[str] = []
    for row in rows:
        metric_columns += [k for k in row["metrics"] if k not in metric_columns]
    columns = ["job", "status", "best", "mixture", "monitor", *metric_columns, "steps", "wall_s"]
    columns.append("tokens_per_s")
    if any(r["examples_per_s"] is not None for r in rows):
        columns.append("examples_per_s")
    return [*columns, "padding_efficiency", "error", "overrides"]


def _cell(row: dict, column: str) -> Any:
    if column in row["metrics"]:
        return row["metrics"][column]
    if column == "overrides":
        return " ".join(row["overrides"])
    return row.get(column)


def _write_csv(f, rows: list[dict], columns: list[str]) -> None:  # noqa: ANN001
    writer = csv.writer(f)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if _cell(row, c) is None else _cell(row, c) for c in columns])


def markdown(rows: list[dict], columns: list[str]) -> str:
    """The table for reading: overrides that every job shares stated once above it."""
    common = [
        o for o in (rows[0]["overrides"] if rows else []) if all(o in r["overrides"] for r in rows)
    ]
    named = {r["monitor_name"] for r in rows} or {DEFAULT_MONITOR}
    modes = {r["monitor_mode"] for r in rows} or {"max"}
    lines = [
        f"# Sweep: {len(rows)} jobs, monitor {', '.join(sorted(named))} ({'/'.join(sorted(modes))})"
    ]
    if common:
        lines.append(f"\nEvery job: `{' '.join(common)}`")
    header = [HEADERS.get(c, c) for c in columns]
    lines += ["", "| " + " | ".join(header) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        cells = []
        for column in columns:
            value = _cell(row, column)
            if column == "overrides":
                value = " ".join(o for o in row["overrides"] if o not in common)
            cells.append(_md(column, value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _md(column: str, value: Any) -> str:
    if value is None or value is False:
        return ""
    if value is True:
        return "**best**"
    if isinstance(value, float):
        if column == "wall_s":
            return f"{value:.1f}"
        if column in ("tokens_per_s", "examples_per_s"):
            return f"{value:.0f}"
        return f"{value:.4f}"
    return str(value).replace("|", "\\|")


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_jsonl(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return out


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def _is_number(value: Any) -> bool:
    return is_number(value) and math.isfinite(value)


def _median(values) -> float | None:  # noqa: ANN001
    values = [float(v) for v in values if _is_number(v)]
    return statistics.median(values) if values else None


def _mean(values) -> float | None:  # noqa: ANN001
    values = [float(v) for v in values if _is_number(v)]
    return statistics.fmean(values) if values else None
