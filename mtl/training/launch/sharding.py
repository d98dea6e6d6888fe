"""`trainer.strategy=fsdp`: the model sharded over the processes with accelerate's FSDP plugin
(FSDP2, `fully_shard`), and the check that accelerate really shards.

Each transformer layer of the encoder is a unit of its own, the rest (embeddings, heads) the
root unit; checkpoints hold the full weights, gathered on rank 0
(`mtl.training.checkpoints.checkpoint`).
accelerate runs FSDP only over devices: with `cpu=True` (a CPU launch) it wraps the model in DDP
whatever the plugin says, and a single process runs unwrapped, so such a run is refused with one
MtlError (see docs/distributed.md for what was measured on CPU).
"""

from __future__ import annotations

import torch
from accelerate import Accelerator

from mtl.errors import MtlError


def fsdp_plugin():
    """accelerate's FSDP2 plugin: a unit per transformer layer (`ShardingAccelerator` names the
    encoder's layer classes), full weights gathered on rank 0 for checkpoints."""
    from accelerate import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        state_dict_type="FULL_STATE_DICT",
        reshard_after_forward=True,
    )


class ShardingAccelerator(Accelerator):
    """accelerate's `Accelerator`; under FSDP, `prepare` gives each transformer layer of the
    model's encoder a unit of its own (the layer classes its transformers model names in
    `_no_split_modules`, unless the plugin names others), and the model's `logits` (what
    evaluation calls) gathers the root unit's weights as `forward` does."""

    def prepare(self, *args, **kwargs):
        if self.distributed_type.value != "FSDP":
            return super().prepare(*args, **kwargs)
        plugin = self.state.fsdp_plugin
        models = [obj for obj in args if isinstance(obj, torch.nn.Module)]
        for model in models:
            layers = getattr(getattr(model, "encoder", None), "_no_split_modules", None)
            if plugin.transformer_cls_names_to_wrap is None and layers:
                plugin.transformer_cls_names_to_wrap = list(layers)
        prepared = super().prepare(*args, **kwargs)
        from torch.distributed.fsdp import register_fsdp_forward_method

        for obj in prepared if isinstance(prepared, tuple) else (prepared,):
            if hasattr(obj, "logits"):
                register_fsdp_forward_method(obj, "logits")
        return prepared


def check_strategy(strategy: str, distributed_type: str) -> None:
    """Refuse `trainer.strategy=fsdp` where accelerate would not shard (it runs FSDP only on a
    launch of several processes on devices; on CPU it falls back to DDP)."""
    if strategy != "fsdp" or distributed_type == "FSDP":
        return
    raise MtlError(
        f"trainer.strategy=fsdp: accelerate runs this launch as {distributed_type}, not FSDP: it "
        "shards a model only over the GPUs (or other devices) of a launch of several processes; "
        "launch one process per GPU (torchrun --nproc_per_node N), or use trainer.strategy=ddp",
        all_ranks=True,
    )
