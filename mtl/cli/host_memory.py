"""Keep freed host memory for reuse instead of handing it back to the OS after every step.

A training step on the CPU allocates and frees large buffers (activations, attention scores,
their gradients: hundreds of MB each on a mixup step). glibc's malloc serves blocks above a
dynamic threshold (32 MB at most) with a fresh `mmap` and unmaps them on free, and trims the
heap's free top back to the OS, so each step faults every page of them in again: on the bundled
mixup steps about half of the CPU time went to the kernel. `keep_freed_memory` raises both
thresholds to 1 GiB (`mallopt`), so freed blocks stay in the heap and the next step reuses them.
The process keeps its peak memory instead of returning it between steps.

Linux with glibc only; a no-op elsewhere, and when the user already tunes malloc through
`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or `GLIBC_TUNABLES`. `trainer.keep_freed_memory`
(default true) turns it on for a training run.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
M_MMAP_THRESHOLD = -3
KEEP_BYTES = 1 << 30
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory(limit: int = KEEP_BYTES) -> bool:
    """Raise glibc's mmap and trim thresholds to `limit` bytes; True if both were set."""
    if not sys.platform.startswith("linux") or any(k in os.environ for k in USER_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, ...)
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, limit)) and bool(mallopt(M_TRIM_THRESHOLD, limit))
