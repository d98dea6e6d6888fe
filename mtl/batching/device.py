"""Batches onto the device the model runs on (training, evaluation, diagnostics, prediction)."""

from __future__ import annotations

import torch


def to_device(batch: dict, device) -> dict:
    """The batch with its tensors (also inside dicts) on `device`. To a GPU the copies do not
    block the host: from pinned memory (`data.pin_memory`, on by default there) they run
    asynchronously, ordered before the kernels that read them. Off the CPU the batch also keeps
    its host `attention_mask` as `host_attention_mask`, for packing to plan from."""
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
    return moved
