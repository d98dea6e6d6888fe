"""The two backward paths a balancer gives the loop, and the per-task gradients of the second.

`LossBackward` (a loss weighting): the balancer's loss, backpropagated once per micro-step.
`TaskGradients` (a gradient aggregation): a mixup micro-step (one encoder call, each task's loss
on its rows of the shared hidden states) gives one gradient per task; so does an accumulation
group whose micro-steps read different tasks (round_robin with `trainer.grad_accum` = the number
of tasks). Each task's gradient is taken with `torch.autograd.grad` on the shared parameters and
its own head (one backward pass per task through the encoder: what scales with the number of
tasks), kept in a row of a [tasks, shared parameters] matrix, and handed to the balancer at the
optimizer step.

Written by hand rather than with torchjd's `mtl_backward` / `jac_to_grad`, which do the same for
one call: `mtl_backward` takes the Jacobian through the encoder in one batched (vmap) pass, whose
rows differ in the last bits from `torch.autograd.grad`'s task by task (the updates would
change); with `parallel_chunk_size=1` it matches, but is then these same per-task passes, and
needs the encoder's output, which the model does not return. What
neither has: rows kept per task over the micro-steps of a group whose micro-steps hold different
tasks (a `.jac` has one row per tensor of one call), rows averaged over the processes that held
each task, a step with one task passing its row through without the aggregator, the
aggregation being the balancer's `aggregate(matrix, tasks)` (a user's balancer need not be a
torchjd `Aggregator`), and a parameter no task reached keeping `.grad=None`, as under a plain
backward.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from mtl.balancers.base import Balancer


class LossBackward:
    """A loss weighting's backward path. `backward(task_losses, group)`: the balancer's
    `loss(task_losses)` / `group` through `accelerator.backward` (loss scaling, DeepSpeed);
    returns that loss, detached, before the division by `group`. `step()` (before the
    optimizer step): the balancer's own parameters' gradients averaged over the processes."""

    def __init__(self, balancer: Balancer, accelerator):
        self.balancer, self.accelerator = balancer, accelerator

    def backward(self, task_losses: Mapping[str, torch.Tensor], group: int) -> torch.Tensor:
        loss = self.balancer.loss(task_losses)
        self.accelerator.backward(loss / group)
        return loss.detach()

    def step(self) -> None:
        average_grads(list(self.balancer.parameters()), self.accelerator.num_processes)


class TaskGradients:
    """The shared parameters' gradient of each task over one accumulation group.

    `backward(task_losses, group)`: for every task of the micro-step, the gradient of its
    weighted term (`balancer.weighted`) / `group` on the shared parameters (all outside
    `heads.`) is added to that task's row; its head's gradient is added to the head's `.grad`,
    as a plain backward would. It returns the sum of the weighted terms, detached: the loss
    whose per-task gradients were taken. `step()` (before the optimizer step): with several
    processes, rows and heads' gradients are averaged over the processes that held the task (one
    all-reduce, which every process joins, with or without rows of a task); then the rows of the
    tasks the group held go to `balancer.aggregate` (one task: its row passes through) and the
    result becomes the shared parameters' `.grad`. Parameters no task reached keep no gradient,
    as under a plain backward. The balancer's own parameters are averaged as `LossBackward`'s.
    """

    def __init__(self, model, balancer: Balancer, accelerator):
        net = accelerator.unwrap_model(model)
        named = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
        self.balancer, self.tasks = balancer, list(balancer.tasks)
        self.shared = [p for n, p in named if not n.startswith("heads.")]
        self.heads = {t: [p for n, p in named if n.startswith(f"heads.{t}.")] for t in self.tasks}
        self.sizes = [p.numel() for p in self.shared]
        device = accelerator.device
        self.rows = torch.zeros(len(self.tasks), sum(self.sizes), device=device)
        self.held = torch.zeros(len(self.tasks), device=device)
        self.reached = torch.zeros(len(self.shared), device=device)
        self.world = accelerator.num_processes

    def backward(self, task_losses: Mapping[str, torch.Tensor], group: int) -> torch.Tensor:
        weighted = self.balancer.weighted(task_losses)
        names = list(weighted)
        for k, name in enumerate(names):
            i, head = self.tasks.index(name), self.heads[name]
            grads = torch.autograd.grad(
                weighted[name] / group,
                [*self.shared, *head],
                retain_graph=k + 1 < len(names),
                allow_unused=True,
            )
            shared = grads[: len(self.shared)]
            for j, (view, grad) in enumerate(
                zip(self.rows[i].split(self.sizes), shared, strict=True)
            ):
                if grad is not None:
                    view.add_(grad.reshape(-1))
                    self.reached[j] = 1
            for param, grad in zip(head, grads[len(self.shared) :], strict=True):
                if grad is not None:
                    param.grad = grad if param.grad is None else param.grad + grad
            self.held[i] = 1
        return sum(value.detach() for value in weighted.values())

    def step(self) -> None:
        if self.world > 1:
            self.average_over_processes()
        held = self.held > 0
        tasks = [t for t, h in zip(self.tasks, held.tolist(), strict=True) if h]
        matrix = self.rows[held]
        if len(tasks) == 1:
            update = matrix[0]
        else:
            update = self.balancer.aggregate(matrix, tasks)
        for param, view, reached in zip(
            self.shared, update.split(self.sizes), self.reached.tolist(), strict=True
        ):
            param.grad = view.view_as(param).clone() if reached else None
        self.rows.zero_()
        self.held.zero_()
        self.reached.zero_()
        average_grads(list(self.balancer.parameters()), self.world)

    def average_over_processes(self) -> None:
        """Rows and heads' gradients averaged over the processes that held each task."""
        heads = [(i, p) for i, t in enumerate(self.tasks) for p in self.heads[t]]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for _, p in heads]
        flat = torch.cat(
            [self.rows.reshape(-1), self.held, self.reached, *[g.reshape(-1) for g in grads]]
        )
        dist.all_reduce(flat)
        n_rows, n_tasks = self.rows.numel(), len(self.tasks)
        self.rows.copy_(flat[:n_rows].view_as(self.rows))
        counts = flat[n_rows : n_rows + n_tasks]
        self.rows /= counts.clamp(min=1)[:, None]
        self.reached.copy_(flat[n_rows + n_tasks : n_rows + n_tasks + len(self.shared)])
        offset = n_rows + n_tasks + len(self.shared)
        for (i, param), grad in zip(heads, grads, strict=True):
            part = flat[offset : offset + grad.numel()].view_as(grad)
            offset += grad.numel()
            param.grad = part / counts[i] if counts[i] > 0 else None
        self.held.copy_(counts)


def average_grads(params: list[torch.Tensor], world: int) -> None:
    """Average `params`' gradients over the processes (a balancer's own parameters, which DDP
    does not see); every process joins, with or without a gradient."""
    if world < 2 or not params:
        return
    flat = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
    )
    dist.all_reduce(flat)
    flat /= world
    for param, part in zip(params, flat.split([p.numel() for p in params]), strict=True):
        param.grad = part.view_as(param).clone()


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


def notice_one_task_steps(loader, grad_accum: int, balancer_name: str, is_main: bool) -> None:
    if is_main and one_task_steps(loader, grad_accum):
        print(
            f"mtl: balancer {balancer_name} does nothing here: every optimizer step holds one "
            f"task (use loader=mixup, or trainer.grad_accum=<number of tasks> with "
            "loader=round_robin)",
            file=sys.stderr,
        )
