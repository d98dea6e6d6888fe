"""The logged window: what the steps since the last log did (losses, each task's share of the
batches, tokens), reduced over the processes once per window."""

from __future__ import annotations

import math
import time

import torch

from mtl.batching.collators import task_rows
from mtl.errors import MtlError


class Window:
    """The logged window in progress: what the steps since the last log did, and when it began.

    Per task: the sum and count of its micro-steps' losses (on the device, read once per window)
    and its rows (a batch of one task counts 1, a mixed batch each task's rows); sequences (rows
    the encoder reads: an example, or each choice or QA window of one), real and padded tokens.
    Counts are host numbers until the window is reduced (a tensor op per batch costs more than
    the sums). `figures` reduces the window over the processes (one gather of the losses, one
    sum of the counts), adds its rows to the run's `share_totals` (checkpointed in `TrainState`)
    and starts the next window at the step after.
    """

    def __init__(self, tasks: list[str], device, first_step: int, world: int = 1):
        self.tasks, self.world = list(tasks), world
        self.index = {name: i for i, name in enumerate(self.tasks)}
        self.loss_sums = torch.zeros(len(self.tasks), 2, dtype=torch.float32, device=device)
        # per task, then: sequences, real tokens, padded tokens
        self.counts = [0.0] * (len(self.tasks) + 3)
        self.first_step, self.started = first_step, time.perf_counter()

    def add_batch(self, batch: dict) -> None:
        """A batch's rows per task, sequences and tokens (from its host tensors)."""
        mask = batch["attention_mask"]
        tokens = batch["num_tokens"] if "num_tokens" in batch else int(mask.sum())
        counts = self.counts
        for name, count in task_counts(batch).items():
            counts[self.index[name]] += count
        counts[-3] += mask.shape[0]
        counts[-2] += tokens
        counts[-1] += mask.numel()

    def add_losses(self, task_losses: dict[str, torch.Tensor]) -> None:
        """A micro-step's loss of each task it held."""
        for name, value in task_losses.items():
            self.loss_sums[self.index[name], 0] += value.detach().float()
            self.loss_sums[self.index[name], 1] += 1

    def figures(
        self, accelerator, step: int, totals: torch.Tensor, target: dict, planned: torch.Tensor
    ) -> dict:
        """`loss/<task>`, `loss` (the mean over the window's micro-step losses), `share/<task>`
        (the window), `share_total/<task>` (since the run began), `share_target/<task>` (what
        the loader schedules this epoch), `share_target_total/<task>` (what it scheduled since
        the run began: each window's rows split by the plan in force, so that it compares with
        `share_total`), `padding_efficiency`, `tokens_per_s` and `examples_per_s`, summed over
        the processes; then the next window starts. `totals` and `planned` (the run's rows per
        task so far, as done and as planned; checkpointed in `TrainState`) are added to. A
        NaN/inf loss is reported with its task and rank, on every rank at the same step."""
        figures = self.losses(accelerator, step)
        window, seconds = self.close(accelerator, step)
        rows = window[: len(self.tasks)]
        totals += rows
        if all(name in target for name in self.tasks):
            plan = torch.tensor([target[n] for n in self.tasks], dtype=torch.float64)
            planned += plan * rows.sum()
        for i, name in enumerate(self.tasks):
            figures[f"share/{name}"] = float(rows[i] / rows.sum().clamp(min=1))
            figures[f"share_total/{name}"] = float(totals[i] / totals.sum().clamp(min=1))
            if name in target:
                figures[f"share_target/{name}"] = float(target[name])
            if planned.sum() > 0:
                figures[f"share_target_total/{name}"] = float(planned[i] / planned.sum())
        figures["padding_efficiency"] = float(window[-2] / window[-1].clamp(min=1))
        figures["tokens_per_s"] = float(window[-2]) / seconds
        figures["examples_per_s"] = float(window[-3]) / seconds
        return figures

    def close(self, accelerator, step: int) -> tuple[torch.Tensor, float]:
        """The window's counts summed over the processes and its seconds; the next window
        starts at the step after `step`."""
        counted = torch.tensor(self.counts, dtype=torch.float64, device=accelerator.device)
        window = accelerator.reduce(counted, reduction="sum").cpu()
        seconds = max(time.perf_counter() - self.started, 1e-9)
        self.counts = [0.0] * len(self.counts)
        self.first_step, self.started = step + 1, time.perf_counter()
        return window, seconds

    def state(self, accelerator) -> dict:
        """Every rank's sums and counts so far, gathered (a collective: call it on every rank),
        so that a resumed run's window holds what the stopped one's held."""
        counts = torch.tensor([self.counts], dtype=torch.float64, device=accelerator.device)
        return {
            "loss_sums": accelerator.gather(self.loss_sums.reshape(1, -1)).cpu().tolist(),
            "counts": accelerator.gather(counts).cpu().tolist(),
            "first_step": self.first_step,
        }

    def load(self, state: dict, rank: int) -> None:
        """This rank's part of `state` (from a launch of as many processes; of another size,
        rank 0 takes the sums of all)."""
        sums = torch.tensor(state["loss_sums"], dtype=torch.float32)
        counts = torch.tensor(state["counts"], dtype=torch.float64)
        if len(sums) != self.world:
            sums = (sums.sum(0) if rank == 0 else sums[0] * 0).unsqueeze(0)
            counts = (counts.sum(0) if rank == 0 else counts[0] * 0).unsqueeze(0)
            rank = 0
        self.loss_sums = sums[rank].reshape(self.loss_sums.shape).to(self.loss_sums.device)
        self.counts = counts[rank].tolist()
        self.first_step = int(state["first_step"])

    def task_figures(self, accelerator, step: int) -> dict[str, dict[str, float]]:
        """Per task: "rows" and, where it had any, "loss" (the mean of its micro-step losses),
        summed over the processes (the same on every rank); then the next window starts."""
        losses = self.losses(accelerator, step)
        rows, _ = self.close(accelerator, step)
        figures: dict[str, dict[str, float]] = {}
        for i, name in enumerate(self.tasks):
            figures[name] = {"rows": float(rows[i])}
            if f"loss/{name}" in losses:
                figures[name]["loss"] = losses[f"loss/{name}"]
        return figures

    def losses(self, accelerator, step: int) -> dict[str, float]:
        """Each task's mean loss over the window and `loss`, from every rank's sums (gathered)."""
        world, names = accelerator.num_processes, self.tasks
        gathered = accelerator.gather(self.loss_sums.reshape(1, -1))
        per_rank = (
            gathered.reshape(world, len(names), 2).cpu().clone()
        )  # gather may return its input
        self.loss_sums.zero_()
        bad = [
            f"task {names[i]!r} on rank {r}"
            for r in range(world)
            for i in range(len(names))
            if per_rank[r, i, 1] > 0 and not math.isfinite(float(per_rank[r, i, 0]))
        ]
        if bad:
            raise MtlError(
                f"loss is NaN/inf for {', '.join(bad)} in steps {self.first_step}-{step}; check "
                "that task's data and labels, or lower the learning rate",
                all_ranks=True,
            )
        sums = per_rank.double().sum(dim=0)
        figures: dict[str, float] = {}
        total, count = 0.0, 0.0
        for i, name in enumerate(names):
            if sums[i, 1] > 0:
                figures[f"loss/{name}"] = float(sums[i, 0] / sums[i, 1])
                total += float(sums[i, 0])
                count += float(sums[i, 1])
        figures["loss"] = total / max(count, 1.0)
        return figures


def task_counts(batch: dict) -> dict[str, int]:
    """What a batch adds to each task's share: 1 for a batch of one task, its rows in a mixed
    batch (mixup)."""
    return {
        name: 1 if rows is None else int(rows.numel()) for name, rows in task_rows(batch).items()
    }


def mix_text(figures: dict[str, float], names: list[str]) -> str:
    """The window's share of each task for the progress bar: `pydoc_to…=0.50 pydoc_code=0.25`."""
    labels = short_names(names)
    return " ".join(f"{labels[name]}={figures.get(f'share/{name}', 0):.2f}" for name in names)


def short_names(names: list[str], width: int = 8) -> dict[str, str]:
    """A distinct label per name: the name itself when it has at most `width` characters, else its
    shortest prefix of at least `width` that begins no other name, with `…` (the whole name when
    that is no shorter). `pydoc_code`, `pydoc_code_share` -> `pydoc_code`, `pydoc_code_…`."""
    labels = {}
    for name in names:
        others = [other for other in names if other != name]
        size = width
        while size < len(name) and any(other.startswith(name[:size]) for other in others):
            size += 1
        labels[name] = name if size >= len(name) - 1 else name[:size] + "…"
    return labels
