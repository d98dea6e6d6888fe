"""Batching: tokenized rows and the collators that pad them; imports no task type.

May import `mtl.errors` only (and third-party libraries).
"""

from mtl.batching.collators import TaskCollator
from mtl.batching.device import host_to, to_device
from mtl.batching.rows import (
    IGNORE_INDEX,
    PackedRows,
    TokenizedSplit,
    arrow_table,
    flat_list_column,
)

__all__ = [
    "IGNORE_INDEX",
    "PackedRows",
    "TaskCollator",
    "TokenizedSplit",
    "arrow_table",
    "flat_list_column",
    "host_to",
    "to_device",
]
