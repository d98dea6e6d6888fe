"""The training loop, top to bottom: build, train with accelerate, evaluate, checkpoint, log.

`main(cfg)` is what `train.py` calls with the composed Hydra config. One epoch is one pass of
the composite loader (its `exhaust` policy says what that is). Evaluation runs after each epoch
(and every `trainer.eval_every` steps); a checkpoint is saved every `trainer.checkpoint_every`
steps and at the end, and `trainer.resume=<folder>` continues exactly where it stopped.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from mtl.config import validate
from mtl.data import make_collator, task_dataset
from mtl.errors import MtlError
from mtl.evaluate import evaluate
from mtl.logging import RunLogger, ShareMeter
from mtl.registry import (
    build_composite_loader,
    build_metrics,
    build_model,
    build_tasks,
    build_train_loaders,
)


class TrainState:
    """Counters saved with each checkpoint (accelerate's `register_for_checkpointing`)."""

    def __init__(self, shares: ShareMeter):
        self.step = 0  # optimizer steps done
        self.epoch = 0  # epochs completed
        self.shares = shares

    def state_dict(self) -> dict:
        return {"step": self.step, "epoch": self.epoch, "shares": self.shares.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.epoch = state["step"], state["epoch"]
        self.shares.load_state_dict(state["shares"])


def main(cfg: DictConfig) -> dict[str, float]:
    """Entry point for `train.py`: bad input ends the run with one line on stderr, status 2."""
    try:
        return run(cfg)
    except MtlError as err:
        print(f"mtl: error: {err}", file=sys.stderr)
        sys.exit(2)


def run(cfg: DictConfig) -> dict[str, float]:
    from accelerate import Accelerator, DistributedDataParallelKwargs
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.WARNING)
    settings = validate(cfg)
    t = settings.trainer
    run_dir = Path(cfg.output_dir)
    accelerator = Accelerator(
        cpu=t.cpu,
        mixed_precision=t.mixed_precision,
        gradient_accumulation_steps=t.grad_accum,
        log_with="wandb" if settings.logger.backend == "wandb" else None,
        project_dir=str(run_dir),
        # Single-task batches leave the other heads without gradients.
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
    )
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
    model = build_model(settings, tasks)
    optimizer = torch.optim.AdamW(param_groups(model, t.lr, t.head_lr, t.weight_decay))
    steps_per_epoch = math.ceil(len(loader) / t.grad_accum)
    total_steps = t.max_steps or steps_per_epoch * t.epochs
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(t.warmup_ratio * total_steps), total_steps
    )
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)

    names = list(tasks)
    shares = ShareMeter(names, "rows" if "task_ids" in loader_batch_keys(loader) else "batches")
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

    def run_eval() -> dict[str, float]:
        figures = evaluate(
            model, tasks, dev_sets, collators, metrics, accelerator, t.eval_batch_size
        )
        logger.log(figures, step=state.step)
        return figures

    progress = None
    if t.progress_bar and accelerator.is_main_process:
        from tqdm.auto import tqdm

        progress = tqdm(total=total_steps, initial=state.step, desc="train", dynamic_ncols=True)

    loss_sums = torch.zeros(2 * len(names), dtype=torch.float64)  # per task: loss sum, count
    window_start = time.perf_counter()
    final: dict[str, float] = {}
    done = state.step >= total_steps
    model.train()
    while not done and state.epoch < t.epochs:
        for batch in loader:
            counts = task_counts(batch)
            shares.update(
                counts, int(batch["attention_mask"].sum()), batch["attention_mask"].numel()
            )
            batch = to_device(batch, accelerator.device)
            with accelerator.accumulate(model):
                out = model(batch)
                accelerator.backward(out["loss"])
                if accelerator.sync_gradients and t.max_grad_norm:
                    accelerator.clip_grad_norm_(model.parameters(), t.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            for name, value in out["task_losses"].items():
                i = names.index(name)
                loss_sums[2 * i] += float(value.detach())
                loss_sums[2 * i + 1] += 1
            if not accelerator.sync_gradients:
                continue
            state.step += 1
            if progress is not None:
                progress.update(1)
            if state.step % t.log_every == 0 or state.step == total_steps:
                figures = window_figures(accelerator, names, loss_sums, shares, loader)
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
    if not final or (t.eval_every and state.step % t.eval_every):
        final = run_eval()
    save_checkpoint(accelerator, run_dir, state.step)
    if progress is not None:
        progress.close()
    logger.close()
    if accelerator.is_main_process:
        print_summary(final, tasks, metrics)
        (run_dir / "results.json").write_text(json.dumps({"step": state.step, **final}, indent=2))
    return final


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


def loader_batch_keys(loader) -> set[str]:
    return {"task_ids"} if type(loader).__name__ == "MixupLoader" else {"task"}


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


def window_figures(accelerator, names, loss_sums, shares, loader) -> dict[str, float]:
    """The logging window's losses and shares, summed over processes (one reduce each)."""
    sums = accelerator.reduce(loss_sums.to(accelerator.device), reduction="sum").cpu()
    loss_sums.zero_()
    figures: dict[str, float] = {}
    total, count = 0.0, 0.0
    for i, name in enumerate(names):
        if sums[2 * i + 1] > 0:
            figures[f"loss/{name}"] = float(sums[2 * i] / sums[2 * i + 1])
            total += float(sums[2 * i])
            count += float(sums[2 * i + 1])
    figures["loss"] = total / max(count, 1.0)
    figures.update(shares.figures(accelerator, loader.target_shares()))
    return figures


def mix_text(figures: dict[str, float], names: list[str]) -> str:
    return " ".join(f"{name[:8]}={figures.get(f'share/{name}', 0):.2f}" for name in names)


def save_checkpoint(accelerator, run_dir: Path, step: int) -> None:
    """`<run>/checkpoints/step_<N>`: model, optimizer, scheduler, RNG, loader and counters."""
    accelerator.save_state(str(run_dir / "checkpoints" / f"step_{step:07d}"))


def resolve_checkpoint(path: str) -> str:
    """A checkpoint folder, or a run folder (its latest checkpoint)."""
    p = Path(path)
    if (p / "checkpoints").is_dir():
        steps = sorted((p / "checkpoints").glob("step_*"))
        if steps:
            return str(steps[-1])
    if not p.is_dir():
        raise MtlError(
            f"trainer.resume={path}: no such checkpoint folder; give a "
            "<run>/checkpoints/step_N folder or a run folder"
        )
    return str(p)


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


def print_summary(final: dict[str, float], tasks: dict, metrics: dict) -> None:
    print("\ntask                  type                      metric      dev")
    for name, task in tasks.items():
        key = metrics[name].main
        value = final.get(f"eval/{name}/{key}", float("nan"))
        print(f"{name:<21} {task.type:<25} {key:<11} {value:.4f}")
