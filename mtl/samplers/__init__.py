"""Batch samplers: yield lists of dataset indices, one epoch at a time, sharded across ranks."""

from mtl.samplers.block_shuffle import BlockShuffleBatchSampler
from mtl.samplers.random import RandomBatchSampler
from mtl.samplers.token_budget import TokenBudgetBatchSampler

__all__ = ["BlockShuffleBatchSampler", "RandomBatchSampler", "TokenBudgetBatchSampler"]
