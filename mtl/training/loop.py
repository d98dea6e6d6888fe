"""The training loop, top to bottom: build, train with accelerate, evaluate, checkpoint, log.

`main(cfg)` is what `mtl-train` / `train.py` call with the composed Hydra config. `run()` builds
everything (`build_run`), then runs epochs (`train_epoch`), each batch a micro-step
(`micro_step`), every `grad_accum` of them an optimizer step (`optimizer_step`), after which
`after_step` logs a window (`log_window`), evaluates (`evaluate_now`) and checkpoints.

One epoch is one pass of the composite loader (its `exhaust` policy says what that is). The run
lasts `trainer.epochs` epochs, or `trainer.max_steps` optimizer steps if that comes first; the
LR schedule's horizon is that exact number of optimizer steps, summed over the epochs' own
lengths (`planned_steps`: the loader's schedules are pure functions of seed and epoch, so the
lengths are known up front). Evaluation runs after each epoch (and every `trainer.eval_every`
steps); a checkpoint is saved every `trainer.checkpoint_every` steps and at the end, and
`trainer.resume=<folder>` continues exactly where it stopped.

Several processes (DDP through accelerate): every rank takes the same task(s) at every step (the
loader's schedule is seeded, not drawn from the global RNG) from its own shard of each task, so the
heads used in a step are the same on all ranks and their gradients are all-reduced together. Ranks
that would disagree are refused at start (`mtl.training.distributed.check_same_run`). Losses are
summed on the device and read once per logged window: a NaN/inf loss is found there (all ranks at
once, through one all-gather) and ends the run on every rank with an error naming the task and rank.
A failing batch ends its rank with an error naming the task; the launcher then stops the others, and
any collective that waits longer than `trainer.dist_timeout_s` fails, not hangs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from mtl.config import Settings, validate
from mtl.data import load_tokenizer, task_dataset
from mtl.errors import MtlError
from mtl.inference.export import write_export
from mtl.inference.predict import predict_unlabeled
from mtl.training.build import build_composite_loader, build_model, build_tasks, build_train_loaders
from mtl.training.checkpoint import (
    StopSignal,
    TrainState,
    load_best,
    resolve_checkpoint,
    save_best,
    save_checkpoint,
)
from mtl.training.distributed import Tracer, check_same_run, env_rank, make_accelerator
from mtl.training.evaluate import evaluate, to_device
from mtl.training.host_memory import keep_freed_memory
from mtl.training.resume import (
    check_compatible,
    check_run_folder,
    describe,
    load_checkpoint,
    make_logger,
    run_of,
)
from mtl.training.runlock import RunFolder
from mtl.training.tracking import (
    RunLogger,
    ShareMeter,
    mix_text,
    print_summary,
    window_figures,
)


def main(cfg: DictConfig) -> float:
    """Entry point for `mtl-train`/`train.py`: the best value of `trainer.monitor` (what Hydra
    sweepers such as Optuna optimize). Bad input ends the run with one line on stderr, status 2."""
    try:
        run(cfg)
        path = Path(cfg.output_dir) / "results.json"
        if not path.is_file():  # stopped by a signal: a checkpoint to resume, no results yet
            return float("nan")
        results = json.loads(path.read_text())
        return float(results["best"][results["monitor"]])
    except MtlError as err:
        # An error every rank raised alike is printed once, by rank 0.
        if env_rank() == 0 or not getattr(err, "all_ranks", False):
            print(f"mtl: error: {err}", file=sys.stderr)
        sys.exit(2)


@dataclass
class Run:
    """What `build_run` makes; the loop's functions read it and update `state`/`window`."""

    cfg: DictConfig
    settings: Settings
    run_dir: Path
    accelerator: Any
    tasks: dict
    loader: Any
    model: Any
    optimizer: Any
    scheduler: Any
    logger: RunLogger
    state: TrainState
    total_steps: int
    window: Window
    tracer: Tracer | None = None
    progress: Any = None
    task_index: dict[str, int] = field(default_factory=dict)  # row of a task in loss_sums
    last_eval: dict[str, float] = field(default_factory=dict)
    evaluated_at: int = -1
    stop: StopSignal | None = None
    stopped: bool = False  # stop now: a signal arrived, or early stopping
    signalled: bool = False  # a stop signal: only a checkpoint, no final evaluation or test
    best: dict[str, Any] = field(default_factory=dict)  # {"step", "figures"} of the best eval
    evals_since_best: int = 0
    description: dict = field(default_factory=dict)  # tasks and model, saved with checkpoints
    predictions: list[Path] = field(default_factory=list)  # files save_outputs wrote


@dataclass
class Window:
    """The logged window in progress: per-task loss sums and counts (on the device, read once
    per window), its first step and start time."""

    loss_sums: torch.Tensor
    first_step: int
    started: float = field(default_factory=time.perf_counter)


def run(cfg: DictConfig) -> dict[str, float]:
    quiet_libraries()
    settings = validate(cfg)
    if settings.trainer.keep_freed_memory:
        keep_freed_memory()
    run_dir = Path(cfg.output_dir)
    accelerator = make_accelerator(
        settings.trainer, run_dir, log_with_wandb=settings.logger.backend == "wandb"
    )
    folder = RunFolder(run_dir, accelerator)
    folder.take()
    try:
        r = build_run(cfg, settings, accelerator)
        t = r.settings.trainer
        r.model.train()
        with StopSignal() as r.stop:
            while r.state.step < r.total_steps and r.state.epoch < t.epochs and not r.stopped:
                train_epoch(r)
        return finish(r)
    finally:
        folder.release()


def quiet_libraries() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.WARNING)


def build_run(cfg: DictConfig, settings: Settings, accelerator) -> Run:
    """Tasks, loaders, model, optimizer and schedule, trackers; the state of a resumed run."""
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    t = settings.trainer
    run_dir = Path(cfg.output_dir)
    checkpoint = resolve_checkpoint(t.resume) if t.resume else None
    same_run = checkpoint is not None and run_of(checkpoint) == run_dir.resolve()
    restart = check_run_folder(run_dir, same_run, t.resume)
    set_seed(cfg.seed, device_specific=True)
    tasks, tokenizer = build_tasks(settings, cfg.seed)
    loaders = build_train_loaders(
        tasks,
        settings,
        cfg.sampler,
        seed=cfg.seed,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )
    loader = build_composite_loader(
        cfg.loader, loaders, seed=cfg.seed, pad_token_id=tokenizer.pad_token_id
    )
    check_same_run(accelerator, OmegaConf.to_container(cfg, resolve=True), loader)
    model = build_model(settings, tasks)
    description = describe(settings, tasks, tokenizer)
    if checkpoint is not None:
        check_compatible(checkpoint, model, description, f"trainer.resume={t.resume}")
    optimizer = make_optimizer(param_groups(model, t.lr, t.head_lr, t.weight_decay))
    total_steps = planned_steps(loader, t.epochs, t.grad_accum, t.max_steps)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(t.warmup_ratio * total_steps), total_steps
    )
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    state = TrainState(ShareMeter(list(tasks)))
    accelerator.register_for_checkpointing(loader, state)
    if checkpoint is not None:
        load_checkpoint(accelerator, checkpoint, f"trainer.resume={t.resume}")
    rewind = (state.metrics_rows, state.step) if same_run else (0, 0) if restart else None
    logger = make_logger(cfg, settings, accelerator, rewind)
    loss_sums = torch.zeros(len(tasks), 2, dtype=torch.float32, device=accelerator.device)
    r = Run(
        cfg, settings, run_dir, accelerator, tasks, loader, model, optimizer, scheduler,
        logger, state, total_steps, Window(loss_sums, state.step + 1),
    )  # fmt: skip
    r.task_index = {name: i for i, name in enumerate(tasks)}
    r.description = description
    if t.trace:
        sizes = {name: len(task_dataset(task, "train")) for name, task in tasks.items()}
        r.tracer = Tracer(run_dir, accelerator, sizes)
    if accelerator.is_main_process:
        resumed = f" (resuming at step {state.step})" if checkpoint else ""
        print(f"mtl: run folder {run_dir.resolve()}{resumed}", file=sys.stderr)
    if t.progress_bar and accelerator.is_main_process:
        from tqdm.auto import tqdm

        r.progress = tqdm(total=total_steps, initial=state.step, desc="train", dynamic_ncols=True)
    return r


def planned_steps(loader, epochs: int, grad_accum: int, max_steps: int | None) -> int:
    """Optimizer steps of the whole run: each epoch's own length in accumulation groups (the
    last group of an epoch may be partial), summed, capped by `max_steps`."""
    steps = sum(math.ceil(loader.epoch_length(e) / grad_accum) for e in range(epochs))
    return min(steps, max_steps) if max_steps else steps


def train_epoch(r: Run) -> None:
    """One pass of the composite loader (the rest of it, on resume), or up to the last step."""
    loader, t = r.loader, r.settings.trainer
    epoch_len = len(loader)
    first = loader.position[1]  # > 0 when resuming mid-epoch
    for i, batch in enumerate(guarded(loader, r.accelerator.process_index), start=first):
        sync, group = accumulation(i, epoch_len, t.grad_accum)
        micro_step(r, batch, sync, group)
        if not sync:
            continue
        optimizer_step(r)
        after_step(r)
        if r.state.step >= r.total_steps or r.stopped:
            return
    r.state.epoch += 1
    evaluate_now(r)


def micro_step(r: Run, batch: dict, sync: bool, group: int) -> None:
    """Forward and backward of one batch; gradients are all-reduced only when `sync`."""
    mask = batch["attention_mask"]
    tokens = batch["num_tokens"] if "num_tokens" in batch else int(mask.sum())
    r.state.shares.update(task_counts(batch), tokens, mask.numel(), sequences=mask.shape[0])
    batch = to_device(batch, r.accelerator.device)
    # Under no_sync, DDP (find_unused_parameters) still all-reduces a head used only in an
    # earlier micro-batch of the step: tests/distributed checks grad_accum 2.
    with contextlib.nullcontext() if sync else r.accelerator.no_sync(r.model):
        out = r.model(batch)
        r.accelerator.backward(out["loss"] / group)
    for name, value in out["task_losses"].items():
        r.window.loss_sums[r.task_index[name], 0] += value.detach().float()
        r.window.loss_sums[r.task_index[name], 1] += 1
    if r.tracer is not None:
        r.tracer.add(batch, out["loss"].detach())


def optimizer_step(r: Run) -> None:
    max_norm = r.settings.trainer.max_grad_norm
    if max_norm:
        r.accelerator.clip_grad_norm_(r.model.parameters(), max_norm)
    r.optimizer.step()
    r.scheduler.step()
    r.optimizer.zero_grad()
    r.state.step += 1
    if r.tracer is not None:
        r.tracer.step(r.state.step, r.state.epoch, r.accelerator.unwrap_model(r.model))
    if r.progress is not None:
        r.progress.update(1)


def after_step(r: Run) -> None:
    """Log the window, evaluate and checkpoint when their intervals (or the last step) say so."""
    t, step = r.settings.trainer, r.state.step
    if step % t.log_every == 0 or step == r.total_steps:
        log_window(r)
    if t.eval_every and step % t.eval_every == 0:
        evaluate_now(r)
    if r.stop is not None and r.stop.should_stop(r.accelerator):
        r.accelerator.print(r.stop.message(step, r.run_dir), file=sys.stderr)
        r.stopped = r.signalled = True
    elif t.checkpoint_every and step % t.checkpoint_every == 0:
        checkpoint(r)


def checkpoint(r: Run) -> None:
    """Save the step's checkpoint, with the number of metrics.jsonl rows written so far."""
    r.state.metrics_rows = r.logger.rows
    save_checkpoint(
        r.accelerator, r.run_dir, r.state.step, r.settings.trainer.keep_last, r.description
    )


def log_window(r: Run) -> None:
    """Losses, shares, padding and throughput of the steps since the last window."""
    names, step = list(r.tasks), r.state.step
    steps = (r.window.first_step, step)
    figures = window_figures(
        r.accelerator, names, r.window.loss_sums, r.state.shares, r.loader, steps
    )
    seconds = time.perf_counter() - r.window.started
    figures["tokens_per_s"] = figures.pop("tokens") / max(seconds, 1e-9)
    # sequences the encoder reads: an example, or each choice or QA window of one
    figures["examples_per_s"] = figures.pop("sequences") / max(seconds, 1e-9)
    figures["lr"] = r.scheduler.get_last_lr()[0]
    figures["epoch"] = r.state.epoch
    r.logger.log(figures, step=step)
    if r.progress is not None:
        r.progress.set_postfix(loss=f"{figures['loss']:.3f}", mix=mix_text(figures, names))
    r.window.first_step, r.window.started = step + 1, time.perf_counter()


def evaluate_now(r: Run) -> None:
    """Dev figures of every task at the current step (and `eval/mean`, the mean of each task's
    main metric), logged; the best model so far is kept (`track_best`)."""
    t = r.settings.trainer
    figures = evaluate(r.model, r.tasks, r.accelerator, t.eval_batch_size)
    mains = [figures[f"eval/{name}/{task.task_type.main_metric}"] for name, task in r.tasks.items()]
    figures["eval/mean"] = sum(mains) / len(mains)
    r.last_eval = figures
    r.logger.log(figures, step=r.state.step)
    r.evaluated_at = r.state.step
    track_best(r)


def track_best(r: Run) -> None:
    """Save the model when `trainer.monitor` improves; after `trainer.patience` evaluations
    without improvement, stop (early stopping)."""
    t, figures = r.settings.trainer, r.last_eval
    if t.monitor not in figures:
        raise MtlError(
            f"trainer.monitor={t.monitor!r} is not an evaluation figure; choose one of "
            f"{', '.join(sorted(figures))}"
        )
    value, best = figures[t.monitor], r.best.get("figures", {}).get(t.monitor)
    better = best is None or (value > best if t.monitor_mode == "max" else value < best)
    if better:
        r.best = {"step": r.state.step, "figures": dict(figures)}
        r.evals_since_best = 0
        save_best(r.accelerator, r.model, r.run_dir, r.state.step, figures)
        return
    r.evals_since_best += 1
    if t.patience and r.evals_since_best >= t.patience:
        r.accelerator.print(
            f"mtl: {t.monitor} has not improved on step {r.best['step']}'s {best:.4f} for "
            f"{r.evals_since_best} evaluations: stopping early (trainer.patience={t.patience})",
            file=sys.stderr,
        )
        r.stopped = True


def finish(r: Run) -> dict[str, float]:
    """A final evaluation if the last one is older, the last checkpoint, the test splits scored
    with the best model (predicted where they have no labels), its export, results.json. After
    a stop signal: only the checkpoint (`trainer.resume=<run folder>` continues from it)."""
    t = r.settings.trainer
    checkpoint(r)  # before the final evaluation: a run killed after it resumes there
    if r.evaluated_at != r.state.step and not r.signalled:  # stopped by max_steps, or resumed
        evaluate_now(r)
    if not r.signalled:
        if t.export or any("test" in task.splits or task.inputs for task in r.tasks.values()):
            load_best(r.accelerator, r.model, r.run_dir)  # once, for the test split and outputs
        test = evaluate_test(r)
        save_outputs(r)
    if r.progress is not None:
        r.progress.close()
    if r.signalled:
        r.logger.close()
        if r.accelerator.is_main_process:
            print(f"mtl: run folder {r.run_dir.resolve()}", file=sys.stderr)
        return r.last_eval
    r.logger.close()
    if r.accelerator.is_main_process:
        print_summary(r.last_eval, r.tasks)
        results = {
            "step": r.state.step,
            "monitor": t.monitor,
            "monitor_mode": t.monitor_mode,
            "best_step": r.best.get("step"),
            "best": r.best.get("figures", {}),
            **r.last_eval,
            **test,
        }
        (r.run_dir / "results.json").write_text(json.dumps(results, indent=2))
        print(where_outputs_went(r), file=sys.stderr)
    r.accelerator.wait_for_everyone()
    return r.last_eval


def where_outputs_went(r: Run) -> str:
    """The line a finished run ends with: its folder, export and predictions."""
    line = f"mtl: run folder {r.run_dir.resolve()}: results.json"
    if r.settings.trainer.export:
        line += f", export in {(r.run_dir / 'export').resolve()}"
    if r.predictions:
        line += ", predictions in " + ", ".join(str(p.resolve()) for p in r.predictions)
    return line


def evaluate_test(r: Run) -> dict[str, float]:
    """`test/<task>/<metric>` of every task with a test split (the model holds the best
    weights: `finish` loaded them)."""
    with_test = {name: task for name, task in r.tasks.items() if "test" in task.splits}
    if not with_test:
        return {}
    figures = evaluate(
        r.model, with_test, r.accelerator, r.settings.trainer.eval_batch_size, "test", "test"
    )
    r.logger.log(figures, step=r.state.step)
    return figures


def save_outputs(r: Run) -> None:
    """With the best model's weights (`finish` loaded them): predictions of test splits
    without labels, and `<run>/export` (`trainer.export`). Rank 0 writes them; the others wait."""
    if not r.settings.trainer.export and not any(t.inputs for t in r.tasks.values()):
        return
    if r.accelerator.is_main_process:
        model, m = r.accelerator.unwrap_model(r.model), r.settings.model
        tokenizer = load_tokenizer(m.tokenizer or m.name_or_path)
        r.predictions = predict_unlabeled(model, tokenizer, r.tasks, r.run_dir)
        if r.settings.trainer.export:
            write_export(model, tokenizer, r.tasks, r.settings, r.run_dir / "export")
    r.accelerator.wait_for_everyone()


def accumulation(index: int, epoch_len: int, grad_accum: int) -> tuple[bool, int]:
    """For the `index`-th batch of an epoch: whether an optimizer step follows it, and how many
    batches that step averages (`grad_accum`, fewer for the epoch's last, partial group)."""
    group_start = index - index % grad_accum
    group = min(grad_accum, epoch_len - group_start)
    return index + 1 == group_start + group, group


def make_optimizer(groups: list[dict]) -> torch.optim.Optimizer:
    """AdamW, fused where this torch build has it (CPU and CUDA; much faster per step than the
    per-parameter loop, see benchmarks/bench_train_speed.py)."""
    try:
        return torch.optim.AdamW(groups, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups)


def param_groups(model, lr: float, head_lr: float, weight_decay: float) -> list[dict]:
    """Encoder and heads get their own learning rates; biases and norms no weight decay."""
    groups = {}
    for name, param in model.named_parameters():
        is_head = name.startswith("heads.")
        no_decay = param.ndim < 2
        key = (is_head, no_decay)
        if key not in groups:
            groups[key] = {
                "params": [],
                "lr": head_lr if is_head else lr,
                "weight_decay": 0.0 if no_decay else weight_decay,
            }
        groups[key]["params"].append(param)
    return list(groups.values())


def task_counts(batch: dict) -> dict[str, int]:
    """Rows per task in a batch: one task for single-task batches, a count per task for mixup."""
    if "task" in batch:
        return {batch["task"]: 1}
    counts = torch.bincount(batch["task_ids"], minlength=len(batch["tasks"]))
    return {name: int(counts[i]) for i, name in enumerate(batch["tasks"])}


def guarded(loader, rank: int):
    """The loader's batches; a batch that fails to load ends this rank with the task named."""
    batches = iter(loader)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except MtlError:
            raise
        except Exception as err:
            epoch, step = loader.position
            try:
                tasks = ",".join(map(repr, loader.tasks_at(epoch, step)))
            except Exception:
                tasks = "?"
            detail = (str(err).strip().splitlines() or [""])[-1]
            raise MtlError(
                f"rank {rank}: task {tasks}: loading its batch at epoch {epoch} step {step} "
                f"failed: {type(err).__name__}: {detail}"
            ) from err
        yield batch
