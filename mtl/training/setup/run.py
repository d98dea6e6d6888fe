"""Setting up a run: what it builds once (`Run`) from the composed config, and where it starts
(`Progress`: a resumed run's counters come from its checkpoint). The rules that join options
of different groups once they are built (`check_online`, `check_balancer`) live here too."""

from __future__ import annotations

import inspect
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate.utils import set_seed
from omegaconf import OmegaConf

from mtl.balancers import Balancer
from mtl.builders.instantiate import build
from mtl.builders.loaders import build_composite_loader, build_train_loaders
from mtl.builders.model import build_model
from mtl.builders.tasks import build_tasks
from mtl.config import Settings
from mtl.config.checks import import_target
from mtl.data import task_dataset
from mtl.errors import MtlError
from mtl.training.checkpoints.checkpoint import save_trainable_only
from mtl.training.checkpoints.compatible import describe
from mtl.training.checkpoints.resume import find_start
from mtl.training.hooks import Hooks, ProgressBar
from mtl.training.launch.distributed import Tracer, check_same_run
from mtl.training.setup.optim import build_optimizer
from mtl.training.setup.speed import CompileCounter, compile_encoder, loader_settings
from mtl.training.state import Progress, TrainState
from mtl.training.tracking.history import make_logger
from mtl.training.tracking.logger import RunLogger


@dataclass(frozen=True)
class Run:
    """What a run builds once and keeps to its end: its settings, folder, accelerator, tasks and
    tokenizer, the composite loader, the prepared model, optimizer and schedule, the balancer
    (`mtl.balancers`), the logger, the number of optimizer steps planned (`total_steps`), what
    its checkpoints record of it (`description`) and its hooks. The objects themselves change as
    it trains (weights, optimizer state, the loader's position); which objects they are does
    not."""

    settings: Settings
    run_dir: Path
    accelerator: Any
    tasks: dict
    tokenizer: Any
    loader: Any
    model: Any
    optimizer: Any
    scheduler: Any
    balancer: Any
    logger: RunLogger
    total_steps: int
    description: dict
    hooks: Hooks


def build_run(settings: Settings, accelerator, hooks=()) -> tuple[Run, Progress]:
    """Tasks, loaders, model, balancer, optimizer and schedule, logger and hooks (the configured
    ones, then `hooks`); a resumed run's progress loaded from its checkpoint."""
    t, run_dir = settings.trainer, settings.run_dir
    start = find_start(t.resume, run_dir, settings.config)
    set_seed(settings.seed, device_specific=True)
    tasks, tokenizer = build_tasks(settings, settings.seed)
    loader = build_loader(settings, tasks, tokenizer, accelerator)
    model = build_model(settings, tasks)
    description = describe(settings, tasks, tokenizer, model)
    if t.compile:
        compile_encoder(model, t.compile_backend)
    start.check(model, description)
    total_steps = planned_steps(loader, t.epochs, t.grad_accum, t.max_steps)
    check_online(getattr(loader, "online", None), t, total_steps)
    balancer = build_balancer(settings, tasks, loader, accelerator)
    optimizer, scheduler = build_optimizer(model, balancer, t, total_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    save_trainable_only(accelerator, model)  # model.peft: the frozen base is model.name_or_path
    state = TrainState(list(tasks))
    accelerator.register_for_checkpointing(loader, state)
    if balancer.state_dict():  # its parameters or running state (resume stays exact)
        accelerator.register_for_checkpointing(balancer)
    start.restore(accelerator, model, run_dir, state)
    logger = make_logger(settings, accelerator, start.rewind(state))
    if accelerator.is_main_process:
        resumed = f" (resuming at step {state.step})" if start.checkpoint else ""
        print(f"mtl: run folder {run_dir.resolve()}{resumed}", file=sys.stderr)
    hooks = [*configured_hooks(settings, run_dir, accelerator, tasks, state, total_steps), *hooks]
    run = Run(
        settings,
        run_dir,
        accelerator,
        tasks,
        tokenizer,
        loader,
        model,
        optimizer,
        scheduler,
        balancer,
        logger,
        total_steps,
        description,
        Hooks(hooks),
    )
    return run, Progress(state)


def build_loader(settings: Settings, tasks: dict, tokenizer, accelerator):
    """The composite loader over this rank's shard of each task, checked to be the same run on
    every rank."""
    loaders = build_train_loaders(
        tasks,
        loader_settings(settings, accelerator.device),
        settings.sampler,
        seed=settings.seed,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )
    loader = build_composite_loader(
        settings.loader,
        loaders,
        seed=settings.seed,
        pad_token_id=tokenizer.pad_token_id,
        epochs=settings.trainer.epochs,
    )
    check_same_run(accelerator, OmegaConf.to_container(settings.config, resolve=True), loader)
    return loader


def check_online(online, trainer, total_steps: int) -> None:
    """`loader.online`: an update within the run, and dev figures for a policy that reads them."""
    if online is None:
        return
    if online.update_every > total_steps:
        raise MtlError(
            f"loader.online.update_every={online.update_every} is above the run's "
            f"{total_steps} optimizer steps, so the weights would never move; give at most "
            f"{total_steps}"
        )
    if getattr(online.policy, "reads_dev", False) and not trainer.eval_every:
        raise MtlError(
            f"loader.online.policy={online.options()['policy']} reads the dev figures, which the "
            "run computes only at the end; give trainer.eval_every=<steps> (at most "
            "loader.online.update_every)"
        )


def build_balancer(settings: Settings, tasks: dict, loader, accelerator):
    """The configured balancer (`balancer=sum` when the config has none), on the device. Its
    class gets the task names, `model.loss_weights` and the regression tasks (those whose task
    type's loss is a squared error), each where its constructor names it; an
    aggregating balancer says at start when every step holds one task."""
    node = settings.balancer
    regression = [name for name, task in tasks.items() if task.task_type.squared_error]
    given = {"loss_weights": dict(settings.model.loss_weights), "regression": regression}
    target = import_target(node._target_, "balancer._target_", Balancer)
    accepted = inspect.signature(target).parameters
    kwargs = {k: v for k, v in given.items() if k in accepted}
    balancer = build(node, "balancer", Balancer, list(tasks), **kwargs).to(accelerator.device)
    t, name = settings.trainer, node.get("aggregator") or node._target_
    fp16 = t.mixed_precision == "fp16"
    check_balancer(balancer, name, loader, t.grad_accum, fp16, accelerator.is_main_process)
    return balancer


def configured_hooks(settings, run_dir, accelerator, tasks, state, total_steps) -> list:
    """The tracer (`trainer.trace`), the compile counter (`trainer.compile`) and the progress
    bar (`trainer.progress_bar`, rank 0)."""
    t, hooks = settings.trainer, []
    if t.trace:
        sizes = {name: len(task_dataset(task, "train")) for name, task in tasks.items()}
        hooks.append(Tracer(run_dir, accelerator, sizes))
    if t.compile:
        hooks.append(CompileCounter())
    if t.progress_bar and accelerator.is_main_process:
        hooks.append(ProgressBar(total_steps, state.step))
    return hooks


def planned_steps(loader, epochs: int, grad_accum: int, max_steps: int | None) -> int:
    """Optimizer steps of the whole run: each epoch's own length in accumulation groups (the
    last group of an epoch may be partial), summed, capped by `max_steps`."""
    steps = sum(math.ceil(loader.epoch_length(e) / grad_accum) for e in range(epochs))
    return min(steps, max_steps) if max_steps else steps


def check_balancer(balancer, name: str, loader, grad_accum: int, fp16: bool, is_main: bool):
    """At start: an aggregation under fp16 is refused (loss scaling does not reach its
    per-task gradients); one whose every optimizer step holds one task says it does nothing."""
    if not balancer.aggregates:
        return
    if fp16:
        raise MtlError(
            f"balancer {name} aggregates gradients, which fp16 loss scaling does not reach; use "
            "trainer.mixed_precision=bf16 or no"
        )
    if is_main and one_task_steps(loader, grad_accum):
        print(
            f"mtl: balancer {name} does nothing here: every optimizer step holds one task (use "
            "loader=mixup, or trainer.grad_accum=<number of tasks> with loader=round_robin)",
            file=sys.stderr,
        )


def one_task_steps(loader, grad_accum: int) -> bool:
    """Whether every accumulation group of the loader's first epoch reads a single task."""
    length = loader.epoch_length(0)
    for start in range(0, length, grad_accum):
        tasks = set()
        for step in range(start, min(start + grad_accum, length)):
            tasks.update(loader.tasks_at(0, step))
        if len(tasks) > 1:
            return False
    return True
