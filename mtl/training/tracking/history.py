"""A resumed training logs each row once, to the same W&B run.

- `wandb_run_id` keeps the W&B run id in `<run>/wandb_run_id`, written once at the first start:
  every later start in that folder continues that W&B run (`resume="allow"`).
- `rewind_metrics` cuts `<run>/metrics.jsonl` back to the rows written before the checkpoint
  being resumed was saved (atomically), so the steps run again are not logged twice.
- `wandb_seen_step` reads back the `.wandb` files of the run: the last step W&B already holds,
  which the resumed run does not send again.
- `make_logger` puts these together for the training loop.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from omegaconf import OmegaConf

from mtl.artifacts import write_file
from mtl.config import Settings
from mtl.errors import MtlError
from mtl.training.tracking.logger import RunLogger, run_group, run_name
from mtl.training.tracking.wandb_file import read_history

RUN_ID_FILE = "wandb_run_id"
METRICS = "metrics.jsonl"


def wandb_run_id(run_dir: Path) -> str:
    """The run's W&B id: read from `<run>/wandb_run_id`, or made and written there once."""
    path = Path(run_dir) / RUN_ID_FILE
    if path.is_file():
        run_id = path.read_text().strip()
        if run_id.isalnum():
            return run_id
        raise MtlError(
            f"{path} holds {run_id[:40]!r}, not a W&B run id; restore it or delete it "
            "(the run then continues as a new W&B run)"
        )
    run_id = secrets.token_hex(4)
    write_file(path, run_id + "\n", overwrite=True)
    return run_id


def read_rows(run_dir: Path) -> list[str]:
    path = Path(run_dir) / METRICS
    return path.read_text().splitlines() if path.is_file() else []


def rewind_metrics(run_dir: Path, rows: int | None, step: int) -> list[dict]:
    """Keep the first `rows` lines of metrics.jsonl (those written before the checkpoint; with
    `rows=None`, from a checkpoint that did not count them, those of steps <= `step`), written
    beside and renamed into place. Returns the rows kept."""
    lines = [line for line in read_rows(run_dir) if line.strip()]
    kept, parsed = [], []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            break  # a line cut short by the kill: it and what follows are rewritten
        if (rows is not None and i >= rows) or (rows is None and row.get("step", 0) > step):
            break
        kept.append(line)
        parsed.append(row)
    if len(kept) != len(lines):
        write_file(Path(run_dir) / METRICS, "".join(line + "\n" for line in kept), overwrite=True)
    return parsed


def wandb_seen_step(run_dir: Path, run_id: str) -> int:
    """The highest step in the `.wandb` files of W&B run `run_id` in the run folder (0: none)."""
    seen = 0
    for path in sorted((Path(run_dir) / "wandb").glob(f"*run-*-{run_id}/run-{run_id}.wandb")):
        try:
            rows = read_history(path)
        except (ValueError, OSError):
            continue
        steps = [row.get("step", row.get("_step", 0)) for row in rows]
        seen = max([seen, *(int(s) for s in steps if isinstance(s, int | float))])
    return seen


def make_logger(settings: Settings, accelerator, rewind: tuple | None) -> RunLogger:
    """The run's logger. Resuming in its own folder (`rewind`: the checkpoint's metrics rows
    and step), the same run continues: metrics.jsonl cut back to the checkpoint, the same W&B
    run (its id is kept in the run folder)."""
    run_dir, history, run_id, seen = settings.run_dir, [], None, 0
    if accelerator.is_main_process:
        if rewind is not None:
            history = rewind_metrics(run_dir, *rewind)
        if settings.logger.backend == "wandb" and settings.logger.mode != "disabled":
            run_dir.mkdir(parents=True, exist_ok=True)
            run_id = wandb_run_id(run_dir)
            seen = wandb_seen_step(run_dir, run_id)
    return RunLogger(
        accelerator,
        settings.logger,
        run_dir,
        name=run_name(settings.config),
        group=run_group(),
        config=OmegaConf.to_container(settings.config, resolve=True),
        run_id=run_id,
        history=history,
        seen=seen,
    )
