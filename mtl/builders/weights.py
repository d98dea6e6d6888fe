"""Where a run's trained weights are: its checkpoint folders and the files that say one is
complete, its best model, an export (`trained_weights`, `resolve_checkpoint`).

A checkpoint is `<run>/checkpoints/step_<N:07d>`; a save under way or cut short is a `.tmp-*`
folder, one being replaced or deleted an `.old-*` folder; the marker `mtl_checkpoint.json`
(every file's name and size), written last, says that a folder is complete. The best model is
`checkpoints/best`. Training writes them (`mtl.training.checkpoints`); training, export and
`model.init_from` read them through this module."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from mtl.artifacts import HEADS_FILE, is_export
from mtl.errors import MtlError, env_rank
from mtl.models import load_encoder

MARKER = "mtl_checkpoint.json"


WEIGHTS = ("model.safetensors", "pytorch_model_fsdp.bin")  # DDP's, FSDP's (full state dict)


DESCRIPTION = "mtl_run.json"  # the run's tasks and model (mtl.training.checkpoints.resume.describe)


TMP_PREFIX = ".tmp-"  # a save under way, or left by a killed one


OLD_PREFIX = ".old-"  # a checkpoint being replaced or deleted


STEP_NAME = re.compile(r"^(?:\.tmp-|\.old-)?step_(\d+)$")


def step_dir_name(step: int) -> str:
    return f"step_{step:07d}"


def step_folders(root: Path) -> list[Path]:
    """The `step_*`, `.tmp-step_*` and `.old-step_*` folders of `root`, lowest step first."""
    found = []
    for path in root.iterdir():
        m = STEP_NAME.match(path.name)
        if m and path.is_dir():
            found.append((int(m.group(1)), not path.name.startswith("."), path))
    return [path for *_, path in sorted(found)]


def incomplete_reason(folder: Path) -> str | None:
    """Why `folder` is not a complete checkpoint (None when it is)."""
    if folder.name.startswith(TMP_PREFIX):
        return "left by an interrupted save"
    if folder.name.startswith(OLD_PREFIX):
        return "left by an interrupted replace or delete"
    try:
        files = json.loads((folder / MARKER).read_text())["files"]
    except FileNotFoundError:
        return f"no {MARKER}: half-written, or copied without it"
    except (ValueError, KeyError, TypeError):
        return f"{MARKER} unreadable"
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, not {size}"
    return None


def resolve_checkpoint(path: str) -> str:
    """The checkpoint folder that `trainer.resume=<path>` loads.

    `path` is a checkpoint folder (`<run>/checkpoints/step_<N>`), used when complete, or a run
    folder (or its `checkpoints/` folder), which gives its complete checkpoint of the highest
    step; incomplete ones of higher steps (`.tmp-*` folders left by a killed save, folders without
    the marker or with files missing) are skipped and named in one line on stderr (rank 0).
    Raises a one-line `MtlError` when `path` does not exist, is an incomplete checkpoint, or
    holds no complete checkpoint.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise MtlError(
            f"trainer.resume={path}: no such folder; give a run folder or one of its "
            "checkpoints/step_N folders",
            all_ranks=True,
        )
    root = p / "checkpoints" if (p / "checkpoints").is_dir() else p
    folders = step_folders(root)
    if not folders and root != p:
        raise MtlError(
            f"trainer.resume={path}: no checkpoint in {root}; start without trainer.resume",
            all_ranks=True,
        )
    if not folders:
        problem = incomplete_reason(p)
        if problem is None:  # a complete checkpoint folder, whatever its name
            return str(p)
        if (p / MARKER).exists() or STEP_NAME.match(p.name) or (p / "random_states_0.pkl").exists():
            raise MtlError(
                f"trainer.resume={path}: incomplete checkpoint ({problem}); give the run folder "
                "to use its latest complete checkpoint",
                all_ranks=True,
            )
        raise MtlError(
            f"trainer.resume={path}: neither a checkpoint folder nor a run folder with "
            "checkpoints/step_N folders",
            all_ranks=True,
        )
    skipped = []
    for folder in reversed(folders):
        problem = incomplete_reason(folder)
        if problem is None:
            if skipped and env_rank() == 0:
                print(
                    f"mtl: trainer.resume: skipping incomplete {'; '.join(skipped)}; "
                    f"resuming from {folder}",
                    file=sys.stderr,
                )
            return str(folder)
        skipped.append(f"{folder.name} ({problem})")
    raise MtlError(
        f"trainer.resume={path}: no complete checkpoint in {root} "
        f"(incomplete: {'; '.join(skipped)}); start without trainer.resume",
        all_ranks=True,
    )


BEST = "best"


def trained_weights(path: str) -> tuple[dict, Path]:
    """The model weights of a run folder (its best model, else its latest complete checkpoint),
    a checkpoint folder or an export folder (`mtl-export`, `<run>/export`: its encoder and
    heads.safetensors), and where they came from (`model.init_from`)."""
    folder = Path(path)
    if is_export(folder):
        encoder = load_encoder(str(folder)).state_dict()
        heads = load_file(folder / HEADS_FILE)
        state = {f"encoder.{k}": v for k, v in encoder.items()}
        return state | {f"heads.{k}": v for k, v in heads.items()}, folder
    best = folder / "checkpoints" / BEST / "model.pt"
    if (folder / "checkpoints" / BEST / MARKER).is_file():
        return torch.load(best, map_location="cpu", weights_only=True), best
    if folder.name == BEST and (folder / MARKER).is_file():
        return torch.load(folder / "model.pt", map_location="cpu", weights_only=True), folder
    try:
        checkpoint = Path(resolve_checkpoint(path))
    except MtlError:
        raise MtlError(
            f"model.init_from={path}: not an mtl run, checkpoint or export folder (no complete "
            "checkpoint in it); give <run folder>, <run>/checkpoints/step_N or <run>/export"
        ) from None
    if (checkpoint / WEIGHTS[0]).is_file():
        return load_file(checkpoint / WEIGHTS[0]), checkpoint
    return torch.load(checkpoint / WEIGHTS[1], map_location="cpu", weights_only=True), checkpoint
