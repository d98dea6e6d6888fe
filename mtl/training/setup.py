"""Setting up a run: what it builds once (`Run`) from the composed config, and where it starts
(`Progress`: a resumed run's counters come from its checkpoint)."""

from __future__ import annotations

import inspect
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import set_seed
from omegaconf import DictConfig, OmegaConf
from transformers import get_linear_schedule_with_warmup
from transformers.utils import logging as hf_logging

from mtl.balancers.gradients import notice_one_task_steps
from mtl.config import Settings
from mtl.config.checks import import_target
from mtl.data import task_dataset
from mtl.errors import MtlError
from mtl.training.build import (
    build,
    build_composite_loader,
    build_model,
    build_tasks,
    build_train_loaders,
)
from mtl.training.checkpoint import carry_best, resolve_checkpoint
from mtl.training.distributed import Tracer, check_same_run
from mtl.training.hooks import Hooks, ProgressBar
from mtl.training.resume import (
    check_compatible,
    check_run_folder,
    describe,
    load_checkpoint,
    make_logger,
    run_of,
)
from mtl.training.speed import CompileCounter, compile_encoder, loader_settings
from mtl.training.state import Progress, TrainState, Window
from mtl.training.tracking import RunLogger, ShareMeter


@dataclass(frozen=True)
class Run:
    """What a run builds once and keeps to its end: its config and settings, folder, accelerator,
    tasks and tokenizer, the composite loader, the prepared model, optimizer and schedule, the
    logger, the number of optimizer steps planned (`total_steps`), what its checkpoints record
    of it (`description`), the row of each task in the window's loss sums (`task_index`), its
    hooks and its balancer (`mtl.balancers`). The objects themselves change as it trains
    (weights, optimizer state, the loader's position); which objects they are does not."""

    cfg: DictConfig
    settings: Settings
    run_dir: Path
    accelerator: Any
    tasks: dict
    tokenizer: Any
    loader: Any
    model: Any
    optimizer: Any
    scheduler: Any
    logger: RunLogger
    total_steps: int
    description: dict
    task_index: dict[str, int]
    hooks: Hooks
    balancer: Any = None


def quiet_libraries() -> None:
    hf_logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.WARNING)


def build_run(cfg: DictConfig, settings: Settings, accelerator, hooks=()) -> tuple[Run, Progress]:
    """Tasks, loaders, model, optimizer and schedule, logger and hooks (the configured ones, then
    `hooks`); the progress of a resumed run loaded from its checkpoint."""
    t, run_dir = settings.trainer, Path(cfg.output_dir)
    checkpoint = resolve_checkpoint(t.resume) if t.resume else None
    same_run = checkpoint is not None and run_of(checkpoint) == run_dir.resolve()
    restart = check_run_folder(run_dir, same_run, t.resume)
    set_seed(cfg.seed, device_specific=True)
    tasks, tokenizer = build_tasks(settings, cfg.seed)
    loader = build_loader(cfg, settings, tasks, tokenizer, accelerator)
    model = build_model(settings, tasks)
    if t.compile:
        compile_encoder(model, t.compile_backend)
    description = describe(settings, tasks, tokenizer, balancer_node(cfg))
    if checkpoint is not None:
        check_compatible(checkpoint, model, description, f"trainer.resume={t.resume}")
    total_steps = planned_steps(loader, t.epochs, t.grad_accum, t.max_steps)
    balancer = build_balancer(cfg, settings, tasks, loader, accelerator)
    groups = param_groups(model, t.lr, t.head_lr, t.weight_decay)
    if list(balancer.parameters()):  # uncertainty's log-variances: trained like the heads
        groups.append({"params": list(balancer.parameters()), "lr": t.head_lr, "weight_decay": 0.0})
    optimizer = make_optimizer(groups)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(t.warmup_ratio * total_steps), total_steps
    )
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    state = TrainState(ShareMeter(list(tasks)))
    accelerator.register_for_checkpointing(loader, state)
    if balancer.state_dict():  # its parameters or running state (resume stays exact)
        accelerator.register_for_checkpointing(balancer)
    if checkpoint is not None:
        load_checkpoint(accelerator, checkpoint, f"trainer.resume={t.resume}")
        if not same_run:
            carry_best(accelerator, run_of(checkpoint), run_dir, state.best_step)
    rewind = (state.metrics_rows, state.step) if same_run else (0, 0) if restart else None
    logger = make_logger(cfg, settings, accelerator, rewind)
    if accelerator.is_main_process:
        resumed = f" (resuming at step {state.step})" if checkpoint else ""
        print(f"mtl: run folder {run_dir.resolve()}{resumed}", file=sys.stderr)
    hooks = [*configured_hooks(settings, run_dir, accelerator, tasks, state, total_steps), *hooks]
    run = Run(
        cfg, settings, run_dir, accelerator, tasks, tokenizer, loader, model, optimizer,
        scheduler, logger, total_steps, description, {name: i for i, name in enumerate(tasks)},
        Hooks(hooks), balancer=balancer,
    )  # fmt: skip
    loss_sums = torch.zeros(len(tasks), 2, dtype=torch.float32, device=accelerator.device)
    return run, Progress(state, Window(loss_sums, state.step + 1))


def build_loader(cfg: DictConfig, settings: Settings, tasks: dict, tokenizer, accelerator):
    """The composite loader over this rank's shard of each task, checked to be the same run on
    every rank."""
    loaders = build_train_loaders(
        tasks,
        loader_settings(settings, accelerator.device),
        cfg.sampler,
        seed=cfg.seed,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )
    loader = build_composite_loader(
        cfg.loader, loaders, seed=cfg.seed, pad_token_id=tokenizer.pad_token_id
    )
    check_same_run(accelerator, OmegaConf.to_container(cfg, resolve=True), loader)
    return loader


def balancer_node(cfg: DictConfig) -> DictConfig:
    """The run's balancer config (`balancer=sum` when the config has none)."""
    return cfg.get("balancer") or OmegaConf.create({"_target_": "mtl.balancers.Sum"})


def build_balancer(cfg: DictConfig, settings: Settings, tasks: dict, loader, accelerator):
    """The configured balancer (`balancer=sum` when the config has none), on the device. Its
    class gets the task names, `model.loss_weights` and the regression tasks (those whose head
    maps onto a transformers regression model), each where its constructor names it; an
    aggregating balancer says at start when every step holds one task."""
    node = balancer_node(cfg)
    regression = []
    for name, task in tasks.items():
        kind = task.task_type.export_kind(task.label_names)
        if kind is not None and kind.config.get("problem_type") == "regression":
            regression.append(name)
    given = {"loss_weights": dict(settings.model.loss_weights), "regression": regression}
    accepted = inspect.signature(import_target(node._target_, "balancer._target_")).parameters
    kwargs = {k: v for k, v in given.items() if k in accepted}
    balancer = build(node, "balancer", list(tasks), **kwargs).to(accelerator.device)
    if balancer.aggregates:
        if settings.trainer.mixed_precision == "fp16":
            raise MtlError(
                f"balancer {node._target_} aggregates gradients, which fp16 loss scaling does "
                "not reach; use trainer.mixed_precision=bf16 or no"
            )
        accum, is_main = settings.trainer.grad_accum, accelerator.is_main_process
        notice_one_task_steps(loader, accum, node.get("aggregator") or node._target_, is_main)
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


def make_optimizer(groups: list[dict]) -> torch.optim.Optimizer:
    """AdamW, fused where this torch build has it (CPU and CUDA: one kernel for all parameters,
    much faster per step than the per-parameter loop, see benchmarks/bench_train_speed.py; under
    fp16 accelerate's grad scaler passes its scale to the fused kernel)."""
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
