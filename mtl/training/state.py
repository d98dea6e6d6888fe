"""Where a run stands: the counters saved with every checkpoint (`TrainState`), the rest of its
progress (`Progress`: evaluations so far, why it stops) and what it returns
(`RunResults`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import torch

from mtl.errors import BadState
from mtl.values import is_int, is_number


class TrainState:
    """Counters saved with each checkpoint (accelerate's `register_for_checkpointing`): steps,
    epochs, task shares, the rows of metrics.jsonl, the best evaluation so far
    (`trainer.monitor`: its step and figures, and evaluations since, for `trainer.patience`), so
    that a resumed run picks the same best model and stops early at the same step, and the
    logged window under way (`window`: its sums since the last row), so that the row whose
    window spans a stop is the uninterrupted run's."""

    def __init__(self, tasks: list[str]):
        self.step = 0  # optimizer steps done
        self.epoch = 0  # epochs completed
        self.share_totals = torch.zeros(len(tasks), dtype=torch.float64)  # rows per task so far
        self.planned = torch.zeros(len(tasks), dtype=torch.float64)  # ... as the loader planned
        self.metrics_rows: int | None = None  # rows in metrics.jsonl (None: not counted)
        self.best_step: int | None = None
        self.best: dict[str, float] = {}
        self.evals_since_best = 0
        self.evaluations = 0  # evaluations so far (a generation task generates every k-th)
        self.mixing: dict | None = None  # `loader.online`: the policy's window at the checkpoint
        self.window: dict | None = None  # the logged window at the checkpoint

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "epoch": self.epoch,
            "share_totals": self.share_totals.tolist(),
            "planned": self.planned.tolist(),
            "metrics_rows": self.metrics_rows,
            "best_step": self.best_step,
            "best": dict(self.best),
            "evals_since_best": self.evals_since_best,
            "evaluations": self.evaluations,
            "mixing": self.mixing,
            "window": self.window,
        }

    def load_state_dict(self, state: dict) -> None:
        """The counters `state_dict` saved, each checked for type and range first (`BadState`
        naming the counter)."""
        if not isinstance(state, dict):
            raise BadState(f"the run's counters are {type(state).__name__}, not a mapping")
        n = len(self.share_totals)
        for key in ("step", "epoch", "evals_since_best", "metrics_rows", "best_step"):
            value = state.get(key)
            if not (value is None and key in ("metrics_rows", "best_step")) and not _count(value):
                raise BadState(f"the run's {key} is {value!r}, not an integer >= 0")
        totals = state.get("share_totals")
        if not _numbers(totals, n):
            raise BadState(f"the run's share_totals are {totals!r}, not {n} numbers >= 0")
        planned = state.get("planned", [0.0] * n)  # absent in checkpoints of older runs
        if not _numbers(planned, n):
            raise BadState(f"the run's planned shares are {planned!r}, not {n} numbers >= 0")
        best = state.get("best")
        if not isinstance(best, dict) or not all(_number(v, _anything) for v in best.values()):
            raise BadState(f"the run's best figures are {best!r}, not {{name: number}}")
        mixing = state.get("mixing")  # absent before loader.online
        if mixing is not None:
            check_window(mixing, n)
        window = state.get("window")  # absent in checkpoints of older runs
        evaluations = state.get("evaluations", 0)  # absent in checkpoints of older runs
        if not _count(evaluations):
            raise BadState(f"the run's evaluations are {evaluations!r}, not an integer >= 0")
        if window is not None:
            check_window(window, n, "logged")
        self.step, self.epoch = state["step"], state["epoch"]
        self.share_totals = torch.tensor(totals, dtype=torch.float64)
        self.planned = torch.tensor(planned, dtype=torch.float64)
        self.metrics_rows = state["metrics_rows"]
        self.best_step = state["best_step"]
        self.best = dict(best)
        self.evals_since_best, self.evaluations = state["evals_since_best"], evaluations
        self.mixing, self.window = mixing, window


def check_window(window: Any, n: int, which: str = "online-mixing") -> None:
    """`BadState` unless `window` is a window `Window.state` saves for `n` tasks (`which`: the
    online-mixing or the logged one): each process's loss sums (n x [sum, count]) and counts (n
    tasks' rows, then sequences, real and padded tokens), finite and (counts) >= 0, and the step
    it began at."""
    if not isinstance(window, dict):
        raise BadState(f"the {which} window is {window!r}, not a mapping")
    sums, counts, first = window.get("loss_sums"), window.get("counts"), window.get("first_step")
    ok = isinstance(sums, list) and isinstance(counts, list) and len(sums) == len(counts) > 0
    ok = ok and all(_numbers(s, 2 * n, _anything) for s in sums)  # a NaN loss: the window says so
    if not (ok and all(_numbers(c, n + 3) for c in counts) and _count(first)):
        raise BadState(
            f"the {which} window is not one mtl saves for {n} tasks (loss_sums "
            f"{str(sums)[:60]}, counts {str(counts)[:60]}, first_step {first!r})"
        )


def _count(value: Any) -> bool:
    return is_int(value) and value >= 0


def _anything(value: float) -> bool:
    return True


def _counted(value: float) -> bool:
    return math.isfinite(value) and value >= 0


def _number(value: Any, ok=_counted) -> bool:
    """Whether `value` is a number (not a bool) for which `ok` holds (default: finite, >= 0)."""
    return is_number(value) and ok(value)


def _numbers(values: Any, n: int, ok=_counted) -> bool:
    """Whether `values` is a list of `n` numbers for which `ok` holds."""
    return isinstance(values, list) and len(values) == n and all(_number(v, ok) for v in values)


class StopReason(str, Enum):
    """Why a run stopped: its last step (`trainer.max_steps`, or the planned steps), its last
    epoch, early stopping (`trainer.patience`), or a stop signal (SIGTERM/SIGUSR1)."""

    MAX_STEPS = "max_steps"
    EPOCHS = "epochs"
    EARLY_STOP = "early_stop"
    SIGNAL = "signal"


@dataclass
class Progress:
    """What changes while a run trains. `state` holds the checkpointed counters (step, epoch,
    task shares, the best evaluation); the rest starts afresh on resume: the last evaluation and
    the step it was made at, and `stop`, None until the run has a reason to stop."""

    state: TrainState
    last_eval: dict[str, float] = field(default_factory=dict)
    evaluated_at: int = -1
    stop: StopReason | None = None


@dataclass(frozen=True)
class RunResults:
    """What a run returns. `dev`: the figures of its last evaluation; `best_step`/`best`: those
    of its best one by `monitor` (`monitor_mode`); `test`: the test splits scored with the best
    weights. After a stop signal there is no final evaluation or test, and `model` is None.

    For the run's outputs (on every rank): `model`, the unwrapped model holding the best
    weights when the run ended otherwise, its `tokenizer`, `tasks`, `settings`, `accelerator`."""

    run_dir: Path
    step: int
    stop: StopReason
    monitor: str
    monitor_mode: str
    dev: dict[str, float]
    best_step: int | None
    best: dict[str, float]
    test: dict[str, float]
    signal: int = 0  # the signal that stopped the run (0: none)
    model: Any = None
    tokenizer: Any = None
    tasks: dict = field(default_factory=dict)
    settings: Any = None
    accelerator: Any = None

    @property
    def exit_status(self) -> int:
        """The command's exit status: 0 for a run that ended (its steps or epochs done, early
        stopping), 128 + the signal's number for one a signal stopped with a checkpoint to
        resume (130 Ctrl-C, 143 SIGTERM, 138 SIGUSR1), as a shell reports a process it ended."""
        return 128 + self.signal if self.stop is StopReason.SIGNAL and self.signal else 0

    @property
    def best_value(self) -> float:
        """The best value of `monitor` (what sweepers optimise); NaN after a stop signal."""
        if self.stop is StopReason.SIGNAL:
            return float("nan")
        return float(self.best.get(self.monitor, float("nan")))

    def summary(self) -> dict:
        """results.json: the last step, the monitor, the best evaluation, the last dev and the
        test figures."""
        return {
            "step": self.step,
            "monitor": self.monitor,
            "monitor_mode": self.monitor_mode,
            "best_step": self.best_step,
            "best": self.best,
            **self.dev,
            **self.test,
        }
