"""Checkpoints: accelerate's `save_state` folders under `<run>/checkpoints/step_<N>`.

A checkpoint holds the model, optimizer, scheduler, RNG states, the composite loader's position
and the run counters (`TrainState`), so that `trainer.resume=<folder>` continues exactly.
"""

from __future__ import annotations

from pathlib import Path

from mtl.errors import MtlError
from mtl.logging import ShareMeter


class TrainState:
    """Counters saved with each checkpoint (accelerate's `register_for_checkpointing`)."""

    def __init__(self, shares: ShareMeter):
        self.step = 0  # optimizer steps done
        self.epoch = 0  # epochs completed
        self.shares = shares

    def state_dict(self) -> dict:
        return {"step": self.step, "epoch": self.epoch, "shares": self.shares.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.epoch = state["step"], state["epoch"]
        self.shares.load_state_dict(state["shares"])


def save_checkpoint(accelerator, run_dir: Path, step: int) -> None:
    """`<run>/checkpoints/step_<N>`: model, optimizer, scheduler, RNG, loader and counters."""
    accelerator.save_state(str(run_dir / "checkpoints" / f"step_{step:07d}"))


def resolve_checkpoint(path: str) -> str:
    """A checkpoint folder, or a run folder (its latest checkpoint)."""
    p = Path(path)
    if (p / "checkpoints").is_dir():
        steps = sorted((p / "checkpoints").glob("step_*"))
        if steps:
            return str(steps[-1])
    if not p.is_dir():
        raise MtlError(
            f"trainer.resume={path}: no such checkpoint folder; give a "
            "<run>/checkpoints/step_N folder or a run folder"
        )
    return str(p)
