"""Batches onto the device the model runs on (training, evaluation, diagnostics, prediction)."""

from __future__ import annotations

import numpy as np
import torch


def to_device(batch: dict, device) -> dict:
    """The batch with its tensors (also inside dicts) on `device`. To a GPU the copies do not
    block the host: from pinned memory (`data.pin_memory`, on by default there) they run
    asynchronously, ordered before the kernels that read them. Off the CPU the batch also keeps
    its host `attention_mask` as `host_attention_mask`, for packing to plan from, and a mixed
    batch its host `task_rows` as `host_task_rows`, for the model to take a task's rows of the
    host mask: the step reads no device value to plan."""
    device = torch.device(device)
    non_blocking = device.type == "cuda"

    def move(value):
        if torch.is_tensor(value):
            return value.to(device, non_blocking=non_blocking)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        return value

    moved = {k: move(v) for k, v in batch.items()}
    if device.type != "cpu" and torch.is_tensor(batch.get("attention_mask")):
        # packing plans on the host (mtl.models.packing): reading the device copy would sync
        moved["host_attention_mask"] = batch["attention_mask"]
    if device.type != "cpu" and isinstance(batch.get("task_rows"), dict):
        moved["host_task_rows"] = batch["task_rows"]
    return moved


def host_to(values: np.ndarray | torch.Tensor, device) -> torch.Tensor:
    """Host values (an array or a CPU tensor) on `device`, without waiting: to a GPU through
    page-locked memory, asynchronously (a plain copy from pageable memory waits for every kernel
    queued before it)."""
    tensor = torch.from_numpy(values) if isinstance(values, np.ndarray) else values
    if torch.device(device).type == "cuda":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)
