"""The training entry point: what `mtl-train` / `train.py` run for each job (Hydra's task
function calls `main` with the composed config).

`main(cfg)` tunes the process (`trainer.keep_freed_memory`: glibc keeps freed host memory for
the next step), trains (`mtl.training.loop.run`), then writes the run's outputs from its best
weights, on rank 0: predictions of the test splits without labels
(`<run>/predictions/<task>.<split>.jsonl`) and `<run>/export` (`trainer.export`). It returns the
best value of `trainer.monitor` (what Hydra sweepers such as Optuna optimise; NaN for a run
stopped by a signal, which has a checkpoint to resume and no results yet). Bad input ends the
run with one line `mtl: error: ...` on stderr and status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig

from mtl.artifacts import RunLayout
from mtl.cli.host_memory import keep_freed_memory
from mtl.cli.script import one_line_errors
from mtl.config import validate
from mtl.inference.export import write_export
from mtl.inference.predict import predict_unlabeled
from mtl.reporting.sweep import in_multirun
from mtl.training.loop import run
from mtl.training.state import RunResults, StopReason


@one_line_errors
def main(cfg: DictConfig, hooks: Iterable = ()) -> float:
    """Train as `cfg` says (with `hooks`) and return the best value of `trainer.monitor`; exit
    with status 2 and one line on stderr for bad input (an error every rank raised alike: once,
    by rank 0), and with 128 + the signal's number for a run a signal stopped (`exit_status`:
    130 for Ctrl-C, 143 for SIGTERM), so that `mtl-train ... && mtl-export ...` goes on only
    after a run that ended."""
    results = train(cfg, hooks)
    if results.exit_status and not in_multirun():  # a sweep's summary lists the job STOPPED
        sys.exit(results.exit_status)
    return results.best_value


def train(cfg: DictConfig, hooks: Iterable = ()) -> RunResults:
    """What `main` does, raising MtlError: tune host memory, run (with `hooks`), write the
    run's outputs; the run's results."""
    settings = validate(cfg)
    if settings.trainer.keep_freed_memory:
        keep_freed_memory()
    results = run(settings, hooks)
    if results.stop is not StopReason.SIGNAL:
        predictions = write_outputs(results)
        if results.accelerator.is_main_process:
            print(where_outputs_went(results, predictions), file=sys.stderr)
    return results


def write_outputs(results: RunResults) -> list[Path]:
    """With the best weights (`results.model`): predictions of test splits without labels, and
    `<run>/export` (`trainer.export`). Rank 0 writes them, the others wait; the prediction
    files written."""
    settings, tasks, accelerator = results.settings, results.tasks, results.accelerator
    if not settings.trainer.export and not any(task.inputs for task in tasks.values()):
        return []
    predictions = []
    if accelerator.is_main_process:
        model, tokenizer = results.model, results.tokenizer
        predictions = predict_unlabeled(model, tokenizer, tasks, results.run_dir)
        if settings.trainer.export:
            write_export(model, tokenizer, tasks, settings, RunLayout(results.run_dir).export)
    accelerator.wait_for_everyone()
    return predictions


def where_outputs_went(results: RunResults, predictions: list[Path]) -> str:
    """The line a finished run ends with: its folder, export and predictions."""
    line = f"mtl: run folder {results.run_dir.resolve()}: results.json"
    if results.settings.trainer.export:
        line += f", export in {(results.run_dir / 'export').resolve()}"
    if predictions:
        line += ", predictions in " + ", ".join(str(p.resolve()) for p in predictions)
    return line
