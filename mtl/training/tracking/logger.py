"""Run logging: every figure goes to `metrics.jsonl` in the run folder, and to W&B if chosen.

Only the main process writes. W&B runs through accelerate's tracker (`init_trackers`/`log`),
offline by default so no account or network is needed; `logger=none` turns the tracker off.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mtl.config import LoggerConfig
from mtl.task_types import metric_directions


class RunLogger:
    """Writes `{"step": s, ...figures}` lines to `<run_dir>/metrics.jsonl` and to the tracker.

    W&B: the jobs of a Hydra multirun share a `group` (the sweep folder's name) and have
    `job_type` "sweep" ("train" for a single run). Every key is plotted against `step` (the
    optimizer step, logged with it), so dev figures line up with the training curves; its run
    summary holds the best value and the last (`summary_of`).

    A resumed run continues its W&B run: `run_id` (kept in the run folder) with `resume="allow"`.
    `history` is the rows metrics.jsonl kept up to the checkpoint (see
    `mtl.training.tracking.history.rewind_metrics`); W&B is sent those of them after `seen`
    (the last step it holds, `mtl.training.tracking.history.wandb_seen_step`), and of the rows
    logged from now on only those after `seen`, said once: W&B holds every step once. `rows`
    counts the lines of metrics.jsonl.
    """

    def __init__(
        self,
        accelerator,
        settings: LoggerConfig,
        run_dir: Path,
        *,
        name: str,
        group: str | None,
        config: dict[str, Any],
        run_id: str | None = None,
        history: list[dict] = (),
        seen: int = 0,
    ):
        self.accelerator = accelerator
        self.use_tracker = settings.backend == "wandb" and settings.mode != "disabled"
        self.path = Path(run_dir) / "metrics.jsonl"
        self.defined: set[str] = set()  # keys given to W&B's define_metric
        self.higher_is_better = metric_directions(config.get("task") or {})  # eval/<task>/<m>
        self.rows = len(history)
        self.seen, self.said = seen, False
        if not accelerator.is_main_process:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.use_tracker:
            os.environ.setdefault("WANDB_SILENT", "true")
            init = {
                "name": name,
                "group": group,
                "mode": settings.mode,
                "dir": str(run_dir),
                "tags": list(settings.tags),
                "job_type": "sweep" if group else "train",
            }
            if settings.entity:
                init["entity"] = settings.entity
            if run_id:
                init |= {"id": run_id, "resume": "allow"}
            accelerator.init_trackers(settings.project, config=config, init_kwargs={"wandb": init})
            self.run = accelerator.get_tracker("wandb", unwrap=True)
            self.run.define_metric("step", hidden=True)
            if getattr(self.run, "resumed", False):  # online: the server knows its last step
                self.seen = max(self.seen, int(self.run.step) - 1)
            for row in history:  # W&B lost these: the attempt was killed before it got them
                if row["step"] > self.seen:
                    self.send({k: v for k, v in row.items() if k != "step"}, row["step"])

    def log(self, figures: dict[str, float], step: int) -> None:
        if not self.accelerator.is_main_process:
            return
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **figures}) + "\n")
        self.rows += 1
        self.send(figures, step)

    def send(self, figures: dict[str, float], step: int) -> None:
        """To W&B, unless it holds `step` already (from an attempt killed after that step)."""
        if not self.use_tracker:
            return
        if step <= self.seen:
            if not self.said:
                print(
                    f"mtl: W&B run {self.run.id} already holds steps up to {self.seen} (logged "
                    f"before the run was stopped); sending it the steps after {self.seen}",
                    file=sys.stderr,
                )
                self.said = True
            return
        for key in figures.keys() - self.defined:
            summary = summary_of(key, self.higher_is_better)
            self.run.define_metric(key, step_metric="step", summary=summary)
            self.defined.add(key)
        self.accelerator.log({"step": step, **figures}, step=step)

    def close(self) -> None:
        if self.use_tracker:
            self.accelerator.end_training()


def summary_of(key: str, higher_is_better: dict[str, bool] | None = None) -> str:
    """W&B summary of a logged key: the best value (and the last) for losses and dev metrics,
    the last value for everything else (shares, throughput, learning rate). A dev metric's best
    is its maximum unless `higher_is_better[key]` (its metric's own direction) is False."""
    if key == "loss" or key.startswith("loss/"):
        return "min,last"
    if key.startswith("eval/"):
        return "max,last" if (higher_is_better or {}).get(key, True) else "min,last"
    return "last"


def run_name(cfg: DictConfig) -> str:
    choices = hydra_choices()
    parts = ["+".join(cfg.task.keys()), choices.get("loader", ""), choices.get("sampler", "")]
    return "-".join(p for p in parts if p)


def run_group() -> str | None:
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        return Path(hc.sweep.dir).name if hc.mode.name == "MULTIRUN" else None
    except ValueError:
        return None


def hydra_choices() -> dict:
    try:
        from hydra.core.hydra_config import HydraConfig

        return dict(HydraConfig.get().runtime.choices)
    except ValueError:
        return {}


def print_summary(last: dict[str, float], tasks: dict, best: dict, best_step, step: int) -> None:
    """Each task's main dev metric at the best evaluation (`trainer.monitor`: the model the
    export, results.json and the sweep summary hold) and at the last, one line per task."""
    width = max(len("task"), *(len(name) for name in tasks))
    kind = max(len("type"), *(len(task.type) for task in tasks.values()))
    metric = max(len("metric"), *(len(task.task_type.main_metric) for task in tasks.values()))
    heads = f"best (step {best_step})", f"last (step {step})"
    print(f"\n{'task':<{width}}  {'type':<{kind}}  {'metric':<{metric}}  {heads[0]}  {heads[1]}")
    for name, task in tasks.items():
        key = f"eval/{name}/{task.task_type.main_metric}"
        values = [f"{figures.get(key, float('nan')):.4f}" for figures in (best, last)]
        print(
            f"{name:<{width}}  {task.type:<{kind}}  {task.task_type.main_metric:<{metric}}  "
            f"{values[0]:<{len(heads[0])}}  {values[1]}"
        )
