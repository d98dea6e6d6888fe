"""The optimizer and its schedule: AdamW over parameter groups (encoder, heads and a balancer's
own parameters; decay and no decay), linear warmup and decay over the planned steps."""

from __future__ import annotations

import torch
from transformers import get_linear_schedule_with_warmup


def build_optimizer(model, balancer, trainer, total_steps: int):
    """AdamW and its linear schedule (warmup `trainer.warmup_ratio` of `total_steps`). A
    balancer's own parameters (uncertainty's log-variances) are trained like the heads."""
    t = trainer
    groups = param_groups(model, t.lr, t.head_lr, t.weight_decay)
    if list(balancer.parameters()):
        groups.append({"params": list(balancer.parameters()), "lr": t.head_lr, "weight_decay": 0.0})
    optimizer = make_optimizer(groups)
    warmup = int(t.warmup_ratio * total_steps)
    return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


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
        is_head = model.owner(name).part == "head"
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
