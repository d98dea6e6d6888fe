"""Task-interaction diagnostics: how the tasks' gradients on the shared encoder relate, and how a
step on one task's gradient changes the others' losses.

Figures, for every task (config order) and ordered pair of tasks:
- `grad_norm/<task>`: the norm of the task's loss gradient on the shared encoder's parameters;
- `grad_cos/<a>/<b>` (a before b): the cosine of tasks a's and b's gradients (< 0: they conflict);
- `affinity/<a>/<b>`: the lookahead task affinity of Fifty et al. (NeurIPS 2021),
  `1 - L_b(θ - lr g_a) / L_b(θ)` with θ the shared parameters, g_a task a's gradient and lr the
  encoder's configured learning rate (`trainer.lr`, the same at every step, so that figures of
  different steps compare): > 0 when a plain step on a lowers b's loss;
- `task_weight/<task>`: the weight the balancer gave the task at its last step.

Each task's gradient and losses are taken on a held batch: the first `HELD_ROWS` rows of its dev
split, in eval mode (no dropout), the same on every process (each computes them alike; no
collective, and the training batches, their order and the random state are not touched).
"""

from __future__ import annotations

import itertools

import torch

from mtl.batching import to_device
from mtl.data import task_dataset

HELD_ROWS = 32


class Diagnostics:
    """The figures above for the model's current weights (`figures(lr)`); the parameters are
    put back exactly after each lookahead."""

    def __init__(self, model, tasks: dict, accelerator):
        self.net = accelerator.unwrap_model(model)
        self.shared = [p for _, p in self.net.shared_parameters()]
        self.sizes = [p.numel() for p in self.shared]
        self.batches = {}
        for name, task in tasks.items():
            dataset = task_dataset(task, "dev")
            rows = list(range(min(HELD_ROWS, len(dataset))))
            batch = task.collator()(dataset.__getitems__(rows))
            self.batches[name] = to_device(batch, accelerator.device)

    def loss(self, task: str) -> torch.Tensor:
        return self.net(self.batches[task])["task_losses"][task]

    def figures(self, lr: float) -> dict[str, float]:
        if not self.shared:  # one adapter per task (model.peft per_task): no shared parameter
            return {}
        was_training = self.net.training
        self.net.eval()
        losses, grads = {}, {}
        for task in self.batches:
            loss = self.loss(task)
            parts = torch.autograd.grad(loss, self.shared, allow_unused=True)
            flat = [
                g if g is not None else torch.zeros_like(p)
                for g, p in zip(parts, self.shared, strict=True)
            ]
            losses[task], grads[task] = loss.item(), torch.cat([g.reshape(-1) for g in flat])
        out = {f"grad_norm/{t}": g.norm().item() for t, g in grads.items()}
        for a, b in itertools.combinations(grads, 2):
            cos = torch.nn.functional.cosine_similarity(grads[a], grads[b], dim=0)
            out[f"grad_cos/{a}/{b}"] = cos.item()
        with torch.no_grad():
            saved = [p.detach().clone() for p in self.shared]
            for a in grads:
                for param, step in zip(self.shared, grads[a].split(self.sizes), strict=True):
                    param.sub_(lr * step.view_as(param))
                for b in grads:
                    if b != a:
                        out[f"affinity/{a}/{b}"] = 1 - self.loss(b).item() / losses[b]
                for param, value in zip(self.shared, saved, strict=True):
                    param.copy_(value)
        self.net.train(was_training)
        return out


def diagnostic_keys(tasks: list[str]) -> list[str]:
    """Every key `Diagnostics` and the balancer's weights log for `tasks`, in logging order."""
    keys = [f"grad_norm/{t}" for t in tasks]
    keys += [f"grad_cos/{a}/{b}" for a, b in itertools.combinations(tasks, 2)]
    keys += [f"affinity/{a}/{b}" for a in tasks for b in tasks if a != b]
    return keys + [f"task_weight/{t}" for t in tasks]
