"""Dev-set evaluation: each process scores its own shard, then the metric sums are all-reduced.

Dev examples are sorted by length before batching (order does not matter for metrics, padding
does), and split between processes without padding, so every example counts exactly once.
"""

from __future__ import annotations

import numpy as np
import torch


def eval_batches(lengths, batch_size: int, rank: int = 0, world: int = 1) -> list[list[int]]:
    """This process's dev batches: its strided share of the examples, longest first."""
    order = np.argsort(-np.asarray(lengths), kind="stable")[rank::world]
    return [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]


@torch.no_grad()
def evaluate(
    model, tasks: dict, datasets: dict, collators: dict, metrics: dict, accelerator, batch_size: int
) -> dict[str, float]:
    """`{"eval/<task>/<figure>": value}` over the whole dev split of every task."""
    net = accelerator.unwrap_model(model)
    was_training = net.training
    net.eval()
    results: dict[str, float] = {}
    for name, task in tasks.items():
        metric = metrics[name]
        stats = torch.zeros(metric.size, dtype=torch.float64)
        batches = eval_batches(
            task.dev["length"], batch_size, accelerator.process_index, accelerator.num_processes
        )
        for indices in batches:
            batch = collators[name](datasets[name].__getitems__(indices))
            batch = {
                k: v.to(accelerator.device) if torch.is_tensor(v) else v for k, v in batch.items()
            }
            with accelerator.autocast():
                out = net(batch)
            stats += metric.update(out["logits"][name].float().cpu(), batch["labels"].cpu())
        stats = accelerator.reduce(stats.to(accelerator.device), reduction="sum").cpu()
        for key, value in metric.compute(stats).items():
            results[f"eval/{name}/{key}"] = value
    net.train(was_training)
    return results
