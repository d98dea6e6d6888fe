"""Speed settings for a GPU: the compiled encoder, length buckets and pinned host memory.

- `trainer.compile=true` compiles the shared encoder in place (`nn.Module.compile`, so its
  parameter names and checkpoints stay as they are) with `trainer.compile_backend`. A compiled
  graph holds for the shapes it was traced with; block-shuffled batches have a new length almost
  every step, so with compile on every batch is padded to a multiple of `BUCKET` tokens
  (`data.pad_to_multiple_of`, when not set): a handful of lengths, and after the first length
  change torch compiles one graph with a dynamic length. `CompileCounter` logs how many graphs
  were compiled and how many of them after the first step (`compile/graphs`,
  `compile/recompiles`). Half-written kernel libraries that a stopped compile left in torch's
  cache are deleted first (`compile_cache`).
- `data.pin_memory` (null by default) is on when the run trains on a GPU: the loaders' batches
  sit in page-locked memory and `to_device` copies them without blocking the host.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import torch

from mtl.config import Settings
from mtl.errors import MtlError
from mtl.training.setup.compile_cache import repair_cache

BUCKET = 32  # tokens: the length step of batches with trainer.compile (data.pad_to_multiple_of)


def loader_settings(settings: Settings, device: torch.device) -> Settings:
    """`settings` with `data.pin_memory` and `data.pad_to_multiple_of` set where they are null:
    pinned memory on a CUDA device, length buckets of `BUCKET` with `trainer.compile`."""
    data = settings.data
    pin = data.pin_memory if data.pin_memory is not None else device.type == "cuda"
    multiple = data.pad_to_multiple_of
    if multiple is None and settings.trainer.compile:
        multiple = BUCKET
    return replace(settings, data=replace(data, pin_memory=pin, pad_to_multiple_of=multiple))


def compile_encoder(model: torch.nn.Module, backend: str) -> None:
    """Compile `model.encoder` in place with torch.compile's `backend`, after deleting the
    half-written kernel libraries a stopped compile left in torch's cache (`repair_cache`, on
    one process per machine: its processes share the cache)."""
    backends = torch.compiler.list_backends(exclude_tags=())
    if backend not in backends:
        raise MtlError(
            f"trainer.compile_backend={backend!r} is not a torch.compile backend here; "
            f"use one of {', '.join(backends)}"
        )
    if os.environ.get("LOCAL_RANK", "0") == "0":
        repair_cache()
    model.encoder.compile(backend=backend)


def graphs_compiled() -> int:
    """Graphs torch.compile has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class CompileCounter:
    """A loop hook (`mtl.training.hooks`) for `trainer.compile`: at the end of the run it logs
    `compile/graphs` (graphs compiled during the run: training, evaluation) and
    `compile/recompiles` (those compiled after the first optimizer step, when the first
    batch's graph exists) and prints them on one line."""

    def __init__(self) -> None:
        self.start = graphs_compiled()
        self.after_first_step: int | None = None

    def on_step_end(self, run, progress) -> None:
        if self.after_first_step is None:
            self.after_first_step = graphs_compiled()

    def on_train_end(self, run, progress) -> None:
        now = graphs_compiled()
        first = now if self.after_first_step is None else self.after_first_step
        figures = {"compile/graphs": now - self.start, "compile/recompiles": now - first}
        run.logger.log(figures, step=progress.state.step)
        if run.accelerator.is_main_process:
            print(
                f"mtl: torch.compile: {figures['compile/graphs']} graph(s) compiled, "
                f"{figures['compile/recompiles']} after the first step",
                file=sys.stderr,
            )
