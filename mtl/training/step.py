"""One training step: each micro-step's forward and backward, the gradients' synchronisation over
the processes, the balancer's aggregation, the optimizer's update.

`Step(model, balancer, optimizer, scheduler, accelerator, max_grad_norm)` is built once per run;
the loop calls `micro_step(batch, sync, group)` for every batch and `update()` once the
accumulation group of `group` micro-steps is done. The balancer is maths only (`mtl.balancers`):
its loss (a loss weighting) or its `aggregate(matrix, tasks)` of per-task gradients (a gradient
aggregation); this module is what runs it on one process or many. The model names the shared
parameters and each task's (`MultiTaskModel.shared_parameters`, `task_parameters`).

- A loss weighting (`LossBackward`): the balancer's loss, backpropagated once per micro-step
  through accelerate (loss scaling, DeepSpeed); DDP all-reduces the gradients on the group's
  last micro-step.
- A gradient aggregation (`TaskGradients`): every micro-step runs without DDP's sync; a mixup
  micro-step (one encoder call, each task's loss on its rows of the shared hidden states) gives
  one gradient per task, and so does a group whose micro-steps read different tasks (round_robin
  with `trainer.grad_accum` = the number of tasks). Each task's gradient is taken with
  `torch.autograd.grad` on the shared parameters and its own head (one backward pass per task
  through the encoder: what scales with the number of tasks) and kept in a row of a [tasks,
  shared parameters] matrix. At `update()` the rows and the heads' gradients are averaged over
  the processes that held each task (one all-reduce), the rows of the tasks the group held go to
  `balancer.aggregate` (one task: its row passes through), and the result becomes the shared
  parameters' `.grad`. A parameter no task reached keeps `.grad=None`, as under a plain backward.

Written by hand rather than with torchjd's `mtl_backward` / `jac_to_grad`, which do the same for
one call: `mtl_backward` takes the Jacobian through the encoder in one batched (vmap) pass, whose
rows differ in the last bits from `torch.autograd.grad`'s task by task (the updates would
change), and needs the encoder's output, which the model does not return. What neither has: rows
kept per task over the micro-steps of a group, rows averaged over the processes that held each
task, and a step with one task passing its row through without the aggregator.

A loss that is a mean over tokens (a generation task's `token` reduction, a tagging task's) is
each process's mean over its own tokens; on several processes `TokenMeans` weighs it by the
process's share of the tokens before the backward, so the update is the mean over every
process's tokens.

Either way a balancer's own parameters (uncertainty's log-variances), which DDP does not see, are
averaged over the processes before the optimizer step, and `balancer.after_step(sum)` gets a
function that sums a tensor over the processes (DWA's windows of losses).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping

import torch
import torch.distributed as dist
from accelerate.utils import DistributedType

from mtl.batching import host_to


class Step:
    """The step of a run: `micro_step` each batch, `update` each accumulation group."""

    def __init__(self, model, balancer, optimizer, scheduler, accelerator, max_grad_norm=None):
        self.model, self.balancer, self.accelerator = model, balancer, accelerator
        self.optimizer, self.scheduler, self.max_grad_norm = optimizer, scheduler, max_grad_norm
        self.parameters = list(model.parameters())  # clipped each step: listed once
        self.optimizer_step = plain_step(optimizer, accelerator)
        world = accelerator.num_processes
        net = accelerator.unwrap_model(model)
        # tasks whose loss is each process's mean over its tokens: reweighed over the processes
        token_mean = world > 1 and net.token_mean_tasks()
        self.token_means = TokenMeans(net, world) if token_mean else None
        if balancer.aggregates:
            shared = [p for _, p in net.shared_parameters()]
            if not shared and accelerator.is_main_process:
                print(
                    f"mtl: balancer {type(balancer).__name__} does nothing here: no parameter is "
                    "shared by the tasks (model.peft per_task: each task trains its own adapter "
                    "and head)",
                    file=sys.stderr,
                )
            self.gradients: LossBackward | TaskGradients = TaskGradients(
                shared,
                {t: [p for _, p in net.task_parameters(t)] for t in balancer.tasks},
                balancer,
                world,
            )
        else:
            self.gradients = LossBackward(balancer, plain_backward(accelerator), world)

    def micro_step(self, batch: Mapping, sync: bool, group: int) -> tuple[dict, torch.Tensor]:
        """Forward and backward of one batch (on the device) of an accumulation group of `group`
        micro-steps, `sync` on its last. Returns the task losses (a `token` mean weighed by this
        process's share of the tokens: their mean over the processes is the mean over all
        tokens) and the loss backpropagated
        (detached, before the division by `group`; under an aggregation, the sum of the
        weighted terms the per-task gradients were taken from)."""
        # Under no_sync, DDP (find_unused_parameters) still all-reduces a head used only in an
        # earlier micro-batch of the step: tests/distributed checks grad_accum 2.
        together = sync and self.gradients.ddp_syncs
        with contextlib.nullcontext() if together else self.accelerator.no_sync(self.model):
            out = self.model(batch)
            losses = out["task_losses"]
            if self.token_means is not None:
                losses = self.token_means(losses, batch)
            loss = self.gradients.backward(losses, group)
        return losses, loss

    def update(self) -> None:
        """The optimizer step of the group: gradients synchronised (and aggregated), clipped to
        `max_grad_norm`, applied; the schedule advanced; then the balancer's `after_step`."""
        self.gradients.step()
        if self.max_grad_norm:
            self.accelerator.clip_grad_norm_(self.parameters, self.max_grad_norm)
        self.optimizer_step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        self.balancer.after_step(sum_over_processes)


def plain_step(optimizer, accelerator):
    """The optimizer's step. accelerate's wrapper looks for an optional package (importlib)
    twice a step, a quarter of a millisecond of host time; with no grad scaler and no XLA all
    it does then is call the wrapped optimizer's step, which this returns."""
    inner = getattr(optimizer, "optimizer", None)
    wrapped = getattr(optimizer, "scaler", None) is not None
    if inner is None or wrapped or accelerator.distributed_type == DistributedType.XLA:
        return getattr(optimizer, "step", None)
    return inner.step


def plain_backward(accelerator):
    """accelerate's backward, which divides the loss by its own accumulation steps (1 here:
    mtl divides by the group itself) and, with no grad scaler and no engine of its own
    (DeepSpeed, Megatron), then calls the loss's backward: that call alone, one kernel and one
    autograd node a step fewer."""
    own = (DistributedType.DEEPSPEED, DistributedType.MEGATRON_LM)
    if accelerator.scaler is not None or accelerator.distributed_type in own:
        return accelerator.backward
    if accelerator.gradient_accumulation_steps != 1:
        return accelerator.backward
    return torch.Tensor.backward


class TokenMeans:
    """On several processes, the loss of each of `net`'s token-mean tasks (`token_mean_tasks`:
    a mean over this process's tokens, a count that differs between processes) times
    `world * n / N` (n: its tokens here, N: over every process; `net.loss_items`), so that the
    update, averaged over the processes, is the mean over all their tokens (what one process
    with the whole batch computes), as transformers and trl count `num_items_in_batch` over
    devices. One all-reduce of the counts a micro-step, on every process alike (a task absent
    here counts 0); an accumulation group's micro-steps still weigh equally."""

    def __init__(self, net, world: int):
        self.net, self.tasks, self.world = net, net.token_mean_tasks(), world

    def __call__(self, losses: Mapping[str, torch.Tensor], batch: Mapping) -> dict:
        items = self.net.loss_items(batch)
        device = next(iter(losses.values())).device
        zero = torch.zeros((), device=device, dtype=torch.long)
        local = torch.stack([items.get(t, zero) for t in self.tasks]).float()
        total = local.clone()
        dist.all_reduce(total)
        scale = local * self.world / total.clamp(min=1)
        out = dict(losses)
        for i, name in enumerate(self.tasks):
            if name in out:
                out[name] = out[name] * scale[i]
        return out


def sum_over_processes(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` summed over the processes, in a new tensor."""
    total = tensor.clone()
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(total)
    return total


class LossBackward:
    """A loss weighting's backward: `backward(task_losses, group)` backpropagates the balancer's
    `loss(task_losses)` / `group` with `backward` (accelerate's); `step()` averages the
    balancer's own parameters' gradients over the processes."""

    ddp_syncs = True  # DDP all-reduces the group's gradients on its last micro-step

    def __init__(self, balancer, backward, world: int):
        self.balancer, self.backward_fn, self.world = balancer, backward, world

    def backward(self, task_losses: Mapping[str, torch.Tensor], group: int) -> torch.Tensor:
        loss = self.balancer.loss(task_losses)
        self.backward_fn(loss if group == 1 else loss / group)
        return loss.detach()

    def step(self) -> None:
        average_grads(list(self.balancer.parameters()), self.world)


class TaskGradients:
    """The shared parameters' gradient of each task over one accumulation group (module
    docstring): `shared`, the shared parameters; `heads`, each task's own parameters. On one
    process a step reads no device value; on several it reads which tasks any process held
    (one small all-reduced vector a step: what is aggregated depends on it)."""

    ddp_syncs = False  # the rows are averaged here, at the optimizer step

    def __init__(self, shared: list, heads: dict[str, list], balancer, world: int):
        self.balancer, self.tasks, self.world = balancer, list(balancer.tasks), world
        self.shared, self.heads = shared, heads
        self.sizes = [p.numel() for p in self.shared]
        device = shared[0].device if shared else torch.device("cpu")
        self.rows = torch.zeros(len(self.tasks), sum(self.sizes), device=device)
        # Host facts of the group (a task held, a shared parameter reached): no device read
        # decides what is aggregated, except on several processes (`average_over_processes`).
        self.held = [0.0] * len(self.tasks)
        self.reached = [0.0] * len(self.shared)
        self.picks: dict[tuple[int, ...], torch.Tensor] = {}  # rows of the tasks held, on device

    def backward(self, task_losses: Mapping[str, torch.Tensor], group: int) -> torch.Tensor:
        """Each task's weighted term / `group`: its gradient on the shared parameters added to
        its row, on its head to the head's `.grad`. Returns the weighted terms' sum, detached."""
        weighted = self.balancer.weighted(task_losses)
        names = list(weighted)
        for k, name in enumerate(names):
            i, head = self.tasks.index(name), self.heads[name]
            grads = torch.autograd.grad(
                weighted[name] if group == 1 else weighted[name] / group,
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
        """The group's rows (averaged over the processes) aggregated into the shared `.grad`."""
        if self.world > 1:
            self.average_over_processes()
        held = tuple(i for i, h in enumerate(self.held) if h > 0)
        tasks = [self.tasks[i] for i in held]
        matrix = self.rows if len(held) == len(self.tasks) else self.rows[self.pick(held)]
        if len(tasks) == 1 or not self.shared:  # nothing to aggregate
            update = matrix[0]
        else:
            update = self.balancer.aggregate(matrix, tasks)
        for param, view, reached in zip(
            self.shared, update.split(self.sizes), self.reached, strict=True
        ):
            param.grad = view.view_as(param).clone() if reached else None
        self.rows.zero_()
        self.held = [0.0] * len(self.tasks)
        self.reached = [0.0] * len(self.shared)

    def pick(self, held: tuple[int, ...]) -> torch.Tensor:
        """The device index of the rows `held` (made once per set of tasks: a copy to the
        device each step would wait for it)."""
        if held not in self.picks:
            self.picks[held] = host_to(torch.tensor(held), self.rows.device)
        return self.picks[held]
        average_grads(list(self.balancer.parameters()), self.world)

    def average_over_processes(self) -> None:
        """Rows and heads' gradients averaged over the processes that held each task."""
        heads = [(i, p) for i, t in enumerate(self.tasks) for p in self.heads[t]]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for _, p in heads]
        facts = torch.tensor([*self.held, *self.reached], device=self.rows.device)
        flat = torch.cat([self.rows.reshape(-1), facts, *[g.reshape(-1) for g in grads]])
        dist.all_reduce(flat)
        n_rows, n_tasks = self.rows.numel(), len(self.tasks)
        self.rows.copy_(flat[:n_rows].view_as(self.rows))
        counts = flat[n_rows : n_rows + n_tasks]
        self.rows /= counts.clamp(min=1)[:, None]
        # Which tasks any process held: the one device value read each step on several
        # processes (what is aggregated depends on it).
        agreed = flat[n_rows : n_rows + n_tasks + len(self.shared)].tolist()
        self.held, self.reached = agreed[:n_tasks], agreed[n_tasks:]
        offset = n_rows + n_tasks + len(self.shared)
        for (i, param), grad in zip(heads, grads, strict=True):
            part = flat[offset : offset + grad.numel()].view_as(grad)
            offset += grad.numel()
            param.grad = part / counts[i] if self.held[i] > 0 else None


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
