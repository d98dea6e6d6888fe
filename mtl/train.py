"""The training loop, top to bottom: build, train with accelerate, evaluate, checkpoint, log.

`main(cfg)` is what `train.py` calls with the composed Hydra config. One epoch is one pass of
the composite loader (its `exhaust` policy says what that is). Evaluation runs after each epoch
(and every `trainer.eval_every` steps); a checkpoint is saved every `trainer.checkpoint_every`
steps and at the end, and `trainer.resume=<folder>` continues exactly where it stopped.

Several processes (DDP through accelerate): every rank takes the same task(s) at every step (the
loader's schedule is seeded, not drawn from the global RNG) from its own shard of each task, so
the heads used in a step are the same on all ranks and their gradients are all-reduced together.
Ranks that would disagree are refused at start (`mtl.distributed.check_same_run`). Losses are
summed on the device and read once per logged window: a NaN/inf loss is found there (every
`trainer.log_every` steps, all ranks at once through one all-gather) and ends the run on every
rank with an error naming the task and rank. A failing batch ends its rank with an error naming
the task; the launcher then stops the others, and any collective that waits longer than
`trainer.dist_timeout_s` fails rather than hangs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from mtl.checkpoint import TrainState, resolve_checkpoint, save_checkpoint
from mtl.config import validate
from mtl.data import make_collator, task_dataset
from mtl.distributed import Tracer, check_same_run, env_rank, make_accelerator
from mtl.errors import MtlError
from mtl.evaluate import evaluate
from mtl.logging import (
    RunLogger,
    ShareMeter,
    mix_text,
    print_summary,
    run_group,
    run_name,
    window_figures,
)
from mtl.registry import (
    build_composite_loader,
    build_metrics,
    build_model,
    build_tasks,
    build_train_loaders,
)


def main(cfg: DictConfig) -> dict[str, float]:
    """Entry point for `train.py`: bad input ends the run with one line on stderr, status 2."""
    try:
        return run(cfg)
    except MtlError as err:
        # An error every rank raised alike is printed once, by rank 0.
        if env_rank() == 0 or not getattr(err, "all_ranks", False):
            print(f"mtl: error: {err}", file=sys.stderr)
        sys.exit(2)


def run(cfg: DictConfig) -> dict[str, float]:
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    settings = validate(cfg)
    t = settings.trainer
    run_dir = Path(cfg.output_dir)
    accelerator = make_accelerator(t, run_dir, log_with_wandb=settings.logger.backend == "wandb")
    set_seed(cfg.seed, device_specific=True)

    tasks, tokenizer = build_tasks(settings, cfg.seed)
    loaders = build_train_loaders(
        tasks,
        settings,
        cfg.sampler,
        tokenizer,
        seed=cfg.seed,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )
    loader = build_composite_loader(
        cfg.loader, loaders, seed=cfg.seed, pad_token_id=tokenizer.pad_token_id
    )
    check_same_run(accelerator, OmegaConf.to_container(cfg, resolve=True), loader)
    model = build_model(settings, tasks)
    optimizer = make_optimizer(param_groups(model, t.lr, t.head_lr, t.weight_decay))
    steps_per_epoch = math.ceil(len(loader) / t.grad_accum)
    total_steps = t.max_steps or steps_per_epoch * t.epochs
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(t.warmup_ratio * total_steps), total_steps
    )
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)

    names = list(tasks)
    shares = ShareMeter(names)
    state = TrainState(shares)
    accelerator.register_for_checkpointing(loader, state)
    if t.resume:
        accelerator.load_state(resolve_checkpoint(t.resume))

    logger = RunLogger(
        accelerator,
        settings.logger,
        run_dir,
        name=run_name(cfg),
        group=run_group(),
        config=OmegaConf.to_container(cfg, resolve=True),
    )
    dev_sets = {name: task_dataset(task, "dev") for name, task in tasks.items()}
    collators = {
        name: make_collator(task.type, name, pad_token_id=tokenizer.pad_token_id)
        for name, task in tasks.items()
    }
    metrics = build_metrics(tasks)

    evaluated_at = -1

    def run_eval() -> dict[str, float]:
        nonlocal evaluated_at
        figures = evaluate(
            model, tasks, dev_sets, collators, metrics, accelerator, t.eval_batch_size
        )
        logger.log(figures, step=state.step)
        evaluated_at = state.step
        return figures

    progress = None
    if t.progress_bar and accelerator.is_main_process:
        from tqdm.auto import tqdm

        progress = tqdm(total=total_steps, initial=state.step, desc="train", dynamic_ncols=True)

    tracer = None
    if t.trace:
        sizes = {name: len(task_dataset(task, "train")) for name, task in tasks.items()}
        tracer = Tracer(run_dir, accelerator, sizes)
    index = {name: i for i, name in enumerate(names)}
    # Per task: loss sum, count; kept on the device, read once per logged window.
    loss_sums = torch.zeros(len(names), 2, dtype=torch.float32, device=accelerator.device)
    window_first = state.step + 1
    window_start = time.perf_counter()
    final: dict[str, float] = {}
    done = state.step >= total_steps
    model.train()
    while not done and state.epoch < t.epochs:
        first = loader.state_dict()["step"]  # > 0 when resuming mid-epoch
        for i, batch in enumerate(guarded(loader, accelerator.process_index), start=first):
            counts = task_counts(batch)
            mask = batch["attention_mask"]
            tokens = batch["num_tokens"] if "num_tokens" in batch else int(mask.sum())
            shares.update(counts, tokens, mask.numel())
            batch = to_device(batch, accelerator.device)
            sync, group = accumulation(i, len(loader), t.grad_accum)
            # Under no_sync, DDP (find_unused_parameters) still all-reduces a head used only in
            # an earlier micro-batch of the step: tests/distributed checks grad_accum 2.
            with contextlib.nullcontext() if sync else accelerator.no_sync(model):
                out = model(batch)
                accelerator.backward(out["loss"] / group)
            if sync:
                if t.max_grad_norm:
                    accelerator.clip_grad_norm_(model.parameters(), t.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            for name, value in out["task_losses"].items():
                loss_sums[index[name], 0] += value.detach().float()
                loss_sums[index[name], 1] += 1
            if tracer is not None:
                tracer.add(batch, out["loss"].detach())
            if not sync:
                continue
            state.step += 1
            if tracer is not None:
                tracer.step(state.step, state.epoch, accelerator.unwrap_model(model))
            if progress is not None:
                progress.update(1)
            if state.step % t.log_every == 0 or state.step == total_steps:
                steps = (window_first, state.step)
                figures = window_figures(accelerator, names, loss_sums, shares, loader, steps)
                window_first = state.step + 1
                seconds = time.perf_counter() - window_start
                figures["tokens_per_s"] = figures.pop("tokens") / max(seconds, 1e-9)
                figures["lr"] = scheduler.get_last_lr()[0]
                figures["epoch"] = state.epoch
                logger.log(figures, step=state.step)
                if progress is not None:
                    progress.set_postfix(
                        loss=f"{figures['loss']:.3f}", mix=mix_text(figures, names)
                    )
                window_start = time.perf_counter()
            if t.eval_every and state.step % t.eval_every == 0:
                final = run_eval()
            if t.checkpoint_every and state.step % t.checkpoint_every == 0:
                save_checkpoint(accelerator, run_dir, state.step)
            if state.step >= total_steps:
                done = True
                break
        else:
            state.epoch += 1
            final = run_eval()
    if evaluated_at != state.step:  # stopped by max_steps, or resumed at the very end
        final = run_eval()
    save_checkpoint(accelerator, run_dir, state.step)
    if progress is not None:
        progress.close()
    logger.close()
    if accelerator.is_main_process:
        print_summary(final, tasks, metrics)
        (run_dir / "results.json").write_text(json.dumps({"step": state.step, **final}, indent=2))
    return final


def accumulation(index: int, epoch_len: int, grad_accum: int) -> tuple[bool, int]:
    """For the `index`-th batch of an epoch: whether an optimizer step follows it, and how many
    batches that step averages (`grad_accum`, fewer for the epoch's last, partial group)."""
    group_start = index - index % grad_accum
    group = min(grad_accum, epoch_len - group_start)
    return index + 1 == group_start + group, group


def make_optimizer(groups: list[dict]) -> torch.optim.Optimizer:
    """AdamW, fused where this torch build has it (CPU and CUDA: about 6x faster a step than
    the per-parameter loop on MiniLM's 22.7M parameters, see scripts/bench_train_speed.py)."""
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


def to_device(batch: dict, device) -> dict:
    def move(value):
        if torch.is_tensor(value):
            return value.to(device, non_blocking=True)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        return value

    return {k: move(v) for k, v in batch.items()}


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
            detail = (str(err).strip().splitlines() or [""])[-1]
            raise MtlError(
                f"rank {rank}: task {scheduled_tasks(loader)}: loading its batch at epoch "
                f"{loader.epoch} step {loader._step} failed: {type(err).__name__}: {detail}"
            ) from err
        yield batch


def scheduled_tasks(loader) -> str:
    """The task(s) the loader's current step reads (for error messages)."""
    try:
        row = loader.schedule(loader.epoch)[loader._step]
        return ",".join(repr(loader.names[t]) for t in loader._tasks_at(row))
    except Exception:
        return "?"
