"""Reading back what mtl wrote: weights files (`read_weights`), the digests an export records of
every file (`digests_of`, `check_digests`), and the one line for a damaged file (`damaged`)."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

from mtl.artifacts.layout import TASKS_FILE
from mtl.errors import MtlError


def damaged(path: str | Path, err: BaseException, fix: str) -> MtlError:
    """The one line for a file that cannot be read as what it should be: its path, the reader's
    own words (first line) and `fix`, what to do."""
    text = str(err).strip()
    detail = text.splitlines()[0][:160] if text else type(err).__name__
    return MtlError(f"{path} is damaged (cut short or overwritten? {detail}); {fix}")


def read_weights(path: str | Path, fix: str) -> dict:
    """The tensors of a weights file (`.safetensors`, else a torch file saved with plain
    tensors), or a one-line MtlError naming the file, what is wrong and `fix`."""
    import pickle

    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            return load_file(path)
        if not zipfile.is_zipfile(path):  # torch reads any other file as its legacy format
            raise damaged(path, ValueError("not the zip archive torch saves"), fix)
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise MtlError(f"{path} is missing; {fix}") from None
    except (SafetensorError, RuntimeError, pickle.UnpicklingError, EOFError, OSError) as err:
        raise damaged(path, err, fix) from None


def file_digest(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def export_files(folder: Path) -> list[Path]:
    """The files of an export that its digests cover: all but `mtl_tasks.json` (which holds
    them) and hidden files (a file manager's), in name order."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.name != TASKS_FILE
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def digests_of(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of `export_files(folder)`: what `mtl_tasks.json` records."""
    return {p.relative_to(folder).as_posix(): file_digest(p) for p in export_files(folder)}


def first_unlike(folder: Path, digests: dict) -> tuple[str, bool] | None:
    """The first file `digests` records ({path in `folder`: sha256}) that is not as recorded:
    (its name, whether it is missing or lies outside `folder`); None when every one matches.
    An export's digests and a checkpoint's marker are checked with it."""
    for name, recorded in digests.items():
        path = folder / str(name)
        if not path.is_file() or folder.resolve() not in path.resolve().parents:
            return str(name), True
        if file_digest(path) != recorded:
            return str(name), False
    return None


def check_digests(folder: Path, meta: dict) -> None:
    """One line for a file whose sha256 is not the one its export recorded, one it records that
    is missing, and (format 2) a file it does not record; format 1 (weights only) and exports
    without digests get one line on stderr saying what could not be checked."""
    digests = meta.get("digests") or {}
    if not isinstance(digests, dict):
        raise MtlError(
            f"model={folder}: {TASKS_FILE}'s digests are unreadable; export the run again"
        )
    unlike = first_unlike(folder, digests)
    if unlike is not None:
        name, missing = unlike
        if missing:
            raise MtlError(f"model={folder}: {name} is missing; export the run again")
        raise MtlError(
            f"{folder / name} is not the file the export wrote (its sha256 is not the one "
            f"{TASKS_FILE} records: changed or damaged since); export the run again"
        )
    if meta.get("format", 1) >= 2:
        extra = [p for p in export_files(folder) if p.relative_to(folder).as_posix() not in digests]
        if extra:
            raise MtlError(
                f"{extra[0]} is not a file the export wrote ({TASKS_FILE} records no digest of "
                "it); remove it, or export the run again"
            )
    else:
        print(
            f"mtl: model={folder} is an export of an earlier mtl: only its weights files are "
            "checked against what wrote them; export the run again to check every file",
            file=sys.stderr,
        )
