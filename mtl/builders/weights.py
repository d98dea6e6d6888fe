"""Where a run's trained weights are: its checkpoint folders and the files that say one is
complete, its best model, an export (`trained_weights`, `resolve_checkpoint`).

A checkpoint is `<run>/checkpoints/step_<N:07d>` (`mtl.artifacts.RunLayout` spells the run
folder's layout); a save under way or cut short is a `.tmp-*` folder, one being replaced or
deleted an `.old-*` folder; the marker `mtl_checkpoint.json` (every file's name and size),
written last, says that a folder is complete. The best model is
`checkpoints/best`. Training writes them (`mtl.training.checkpoints`); training, export and
`model.init_from` read them through this module.

The marker also records each file's sha256 (`SHA256`; older runs' markers record sizes only,
and are checked by size): `incomplete_reason` (cheap: names and sizes) tells a complete folder
when scanning for one, and `check_as_saved` (every byte) runs before a checkpoint is read, so a
file changed at the same size since it was saved is one line naming it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from mtl.artifacts import (
    HEADS_FILE,
    TASKS_FILE,
    RunLayout,
    check_digests,
    first_unlike,
    is_export,
    read_weights,
)
from mtl.errors import MtlError, env_rank, untrusted
from mtl.models import load_encoder
from mtl.models.multitask import model_state

MARKER = "mtl_checkpoint.json"
SHA256 = "sha256"  # the marker's {file: sha256}


WEIGHTS = ("model.safetensors", "pytorch_model_fsdp.bin")  # DDP's, FSDP's (full state dict)


BEST_WEIGHTS = "model.safetensors"  # in checkpoints/best (older runs hold model.pt)


def best_weights_file(best: Path) -> Path:
    """The weights file of a `checkpoints/best` folder (`model.pt` in older runs)."""
    older = best / "model.pt"
    return older if older.is_file() and not (best / BEST_WEIGHTS).is_file() else best / BEST_WEIGHTS


DESCRIPTION = "mtl_run.json"  # the run's tasks and model (checkpoints.compatible.describe)


TMP_PREFIX = ".tmp-"  # a save under way, or left by a killed one


OLD_PREFIX = ".old-"  # a checkpoint being replaced or deleted


STEP_NAME = re.compile(r"^(?:\.tmp-|\.old-)?step_(\d+)$")


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


def changed(folder: Path) -> str | None:
    """The first file of a complete checkpoint whose sha256 is not the one its marker records
    (None when all match, or the marker records none)."""
    try:
        sums = json.loads((folder / MARKER).read_text()).get(SHA256) or {}
    except (OSError, ValueError, AttributeError):
        return MARKER
    if not isinstance(sums, dict):
        return MARKER
    unlike = first_unlike(folder, sums)
    return None if unlike is None else unlike[0]


def check_as_saved(folder: Path, fix: str) -> None:
    """One line naming the file of checkpoint `folder` that changed since it was saved (its
    sha256 is not the marker's) and `fix`; nothing when every file is as saved."""
    name = changed(folder)
    if name is not None:
        raise MtlError(
            f"{folder / name} is not the file the checkpoint saved (its sha256 is not the one "
            f"{MARKER} records: changed or damaged since); {fix}",
            all_ranks=True,
        )


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
    root = RunLayout(p).checkpoints if RunLayout(p).checkpoints.is_dir() else p
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


class NoCheckpoint(MtlError):
    """A folder that holds no trained weights at all (not a damaged one)."""


def earlier_checkpoint(folder: Path, before: Path | None = None) -> Path | None:
    """The complete step checkpoint of the highest step in `folder` (a run's `checkpoints/`),
    other than `before`: what to use when `before` (or the best model) is damaged."""
    if not folder.is_dir():
        return None
    for candidate in reversed(step_folders(folder)):
        if candidate != before and incomplete_reason(candidate) is None:
            return candidate
    return None


def _instead(damaged: Path) -> str:
    """What to give instead of `damaged`, a step checkpoint or the best model of a run."""
    run = RunLayout.of_checkpoint(damaged)
    if run is None:  # a checkpoint copied out of its run: no other one to name
        return "give another whole checkpoint of its run instead, or train again"
    found = earlier_checkpoint(run.checkpoints, damaged)
    if damaged != run.best and incomplete_reason(run.best) is None:
        found = run.best
    if found is not None:
        return f"give another whole checkpoint of the run instead ({found}), or train again"
    return "this run has no other whole checkpoint; train again"


def _best_weights(best: Path) -> dict:
    """The weights of a `checkpoints/best` folder, checked against its marker first."""
    problem = incomplete_reason(best)
    if problem is not None:
        raise MtlError(f"{best} is damaged ({problem}); {_instead(best)}")
    check_as_saved(best, _instead(best))
    return read_weights(best_weights_file(best), _instead(best))


INIT_FROM_CODE = (
    "model.init_from takes weights only and runs no code a folder names: start from an export "
    "of a built-in model.family"
)


def _export_weights(folder: Path, path: str) -> dict:
    """The encoder's and heads' weights of an export folder (its `mtl_tasks.json` read once:
    an export of LoRA adapters is refused, every file checked against its digest)."""
    try:
        meta = json.loads((folder / TASKS_FILE).read_text())
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict):
        raise MtlError(f"model.init_from={path}: {TASKS_FILE} is unreadable; export the run again")
    if "peft" in meta:
        raise MtlError(
            f"model.init_from={path} is an export of LoRA adapters (model.peft), not of the "
            "encoder's weights; start from an export with the adapter merged (mtl-export "
            "<run> <out> merge=true, for a run with one adapter shared)"
        )
    check_digests(folder, meta)
    with untrusted(f"model.init_from={path}", fix=INIT_FROM_CODE):
        encoder = load_encoder(str(folder)).state_dict()
    heads = read_weights(folder / HEADS_FILE, "export the run again")
    return {f"encoder.{k}": v for k, v in encoder.items()} | model_state(heads)


def trained_weights(path: str) -> tuple[dict, Path]:
    """The model weights of a run folder (its best model, else its latest complete checkpoint),
    a checkpoint folder or an export folder (`mtl-export`, `<run>/export`: its encoder and
    heads.safetensors), and where they came from (`model.init_from`, `mtl-export`). A damaged
    file (cut short, overwritten, not matching the checkpoint's marker) is a one-line MtlError
    naming it and what to give instead."""
    folder = Path(path)
    if is_export(folder):
        return _export_weights(folder, path), folder
    best = RunLayout(folder).best
    if (best / MARKER).is_file():
        return _best_weights(best), best_weights_file(best)
    if folder.name == RunLayout.BEST and (folder / MARKER).is_file():
        return _best_weights(folder), folder
    if (folder / MARKER).is_file() or STEP_NAME.match(folder.name):
        checkpoint = folder  # a checkpoint folder
    else:  # a run folder (or its checkpoints/): its checkpoint of the highest step
        root = RunLayout(folder).checkpoints
        root = root if root.is_dir() else folder
        steps = (
            [p for p in step_folders(root) if not p.name.startswith(".")] if root.is_dir() else []
        )
        if not steps:
            raise NoCheckpoint(
                f"model.init_from={path}: not an mtl run, checkpoint or export folder (no "
                "complete checkpoint in it); give <run folder>, <run>/checkpoints/step_N or "
                "<run>/export"
            )
        checkpoint = steps[-1]
    problem = incomplete_reason(checkpoint) if checkpoint.is_dir() else "no such folder"
    if problem is not None:
        raise MtlError(f"{checkpoint} is damaged ({problem}); {_instead(checkpoint)}")
    check_as_saved(checkpoint, _instead(checkpoint))
    name = WEIGHTS[0] if (checkpoint / WEIGHTS[0]).is_file() else WEIGHTS[1]
    return read_weights(checkpoint / name, _instead(checkpoint)), checkpoint
