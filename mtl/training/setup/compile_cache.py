"""torch.compile's cache of compiled kernel libraries, checked before a compiled run.

Inductor builds each C++ kernel library straight into its cache folder (`TORCHINDUCTOR_CACHE_DIR`,
else `<tmp>/torchinductor_<user>`), and a later run loads any library it finds there. A compile
stopped while the compiler writes one (SIGTERM, a job's time limit) leaves a half-written library
that every later compiled run fails to load ("invalid ELF header"). `repair_cache` finds the
libraries that are not whole ELF files and deletes them, each under the lock inductor holds while
it builds that library (one that another process is building now is left alone); the run builds
them again, and one line on stderr names the cache folder and what was removed.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout


def cache_folder() -> Path:
    """Inductor's cache folder, as torch finds it (without creating it)."""
    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if given:
        return Path(given).absolute()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return Path(tempfile.gettempdir()) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def whole_library(path: Path) -> bool:
    """Whether `path` is a whole ELF file: its header is there and its section table (which the
    linker writes last, at the end) lies inside the file."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return True  # not ours to judge: torch reports it
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return False
    order = "little" if head[5] == 1 else "big"
    at = (0x28, 0x3A, 0x3C) if head[4] == 2 else (0x20, 0x2E, 0x30)  # 64-bit, 32-bit fields
    width = 8 if head[4] == 2 else 4
    table = int.from_bytes(head[at[0] : at[0] + width], order)
    entry, count = (int.from_bytes(head[i : i + 2], order) for i in at[1:])
    return table + entry * count <= size


def repair_cache(folder: Path | None = None) -> list[Path]:
    """Delete the half-written kernel libraries of inductor's cache `folder` (default: the one
    torch uses) that no process is building; returns them (one line on stderr when any)."""
    folder = folder or cache_folder()
    if not sys.platform.startswith("linux") or not folder.is_dir():
        return []
    removed = []
    for library in folder.glob("*/*.so"):
        if whole_library(library):
            continue
        lock = FileLock(folder / "locks" / f"{library.name.split('.')[0]}.lock", timeout=0)
        try:
            with lock:
                if not whole_library(library):
                    library.unlink(missing_ok=True)
                    removed.append(library)
        except (Timeout, OSError):
            continue  # being built now, or not ours to remove
    if removed:
        print(
            f"mtl: torch.compile: removed {len(removed)} half-written kernel librar"
            f"{'y' if len(removed) == 1 else 'ies'} (e.g. {removed[0].name}, left by a compile "
            f"that was stopped) from the compile cache {folder}; they are built again",
            file=sys.stderr,
        )
    return removed
