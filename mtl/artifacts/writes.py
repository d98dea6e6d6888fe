"""Writing what a command makes on disk: whole or not at all, and never over what it did not make.

Every path a command writes (an export folder, predictions, figures, sweep summaries) goes
through `write_folder` or `write_file`: the content is written beside the target as a hidden
temporary sibling and renamed into place, so a reader (or a kill) sees the old content or the
new, never a mix. A target that exists is replaced only when the caller says so (`overwrite`:
the user's `overwrite=true`, or a name the command owns) or when `ours(target)` recognises it as
an earlier output of the same kind (an export by its `mtl_tasks.json`); `overwrite` replaces a
folder only if `ours` recognises it or it is empty (else it would remove the user's files). The
current folder, a folder that holds it, and the `protect`ed folders (the run being read) and
their ancestors are never written, whatever `overwrite` says.

On Linux the final rename is `renameat2`: `RENAME_NOREPLACE` for a new target (a folder that
appeared meanwhile is not replaced) and `RENAME_EXCHANGE` to swap a new folder for an old one in
one step; elsewhere plain renames do the same with a short window between two of them. A write
killed half way leaves its hidden `.<name>.tmp-<host>-<pid>-*` folder; the next write of the same
target on that host deletes it once that process is gone.

A write that runs out of disk space (an OS error, or the one torch's or safetensors' writer
raises) leaves nothing of itself and is one line naming the folder (`out_of_space`, `no_space`).

What mtl writes (these outputs, checkpoints) gets the modes an ordinary write gets under the
user's umask (`ordinary_modes`): files 0666 and folders 0777, less the umask. Temporary files,
and libraries such as safetensors that write through one, would otherwise leave 0600 and 0700,
which colleagues on a shared machine cannot read.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from mtl.errors import MtlError

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


_AT_FDCWD = -100


def check_target(
    path: str | Path,
    *,
    what: str = "output",
    folder: bool = False,
    overwrite: bool = False,
    ours: Callable[[Path], bool] | None = None,
    protect: Iterable[str | Path] = (),
) -> Path:
    """`path` if a command may write it, else a one-line MtlError naming why and the fix.

    `folder`: the output is a folder (a file there is refused even with `overwrite`).
    `what` names the argument in messages (`output=`, `out`)."""
    target = Path(path).expanduser()
    try:
        real = target.resolve()
        real.parent.is_dir()  # EACCES: a folder on the way cannot be entered
    except OSError as err:
        raise MtlError(
            f"{what}={path}: cannot reach it ({os.strerror(err.errno or 0).lower()}); give a "
            "path in a folder you can write"
        ) from None
    if _holds(real, Path.cwd().resolve()):
        raise MtlError(
            f"{what}={path} is the current folder or holds it; give a new path, e.g. ./export"
        )
    for kept in protect:
        if _holds(real, Path(kept).resolve()):
            raise MtlError(
                f"{what}={path} is {kept} or holds it (the folder being read); give another path"
            )
    if not real.parent.is_dir():
        raise MtlError(f"{what}={path}: no folder {target.parent}; create it first")
    check_writable(real.parent, f"{what}={path}")
    if not (target.exists() or target.is_symlink()):
        return target
    if folder and not target.is_dir():
        raise MtlError(f"{what}={path} is a file, and this writes a folder; give another path")
    if not folder and target.is_dir():
        raise MtlError(f"{what}={path} is a folder, and this writes a file; give a file path")
    if ours is not None and ours(target):
        return target
    if folder and overwrite and any(target.iterdir()):
        held = sorted(p.name for p in target.iterdir())
        shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        raise MtlError(
            f"{what}={path} is a folder mtl did not write (it holds {shown}); overwrite=true "
            "replaces only a folder mtl wrote or an empty one: give another path, or remove it "
            "yourself"
        )
    if overwrite:
        return target
    raise MtlError(f"{what}={path} exists; give overwrite=true to replace it, or another path")


def check_writable(folder: Path, what: str) -> None:
    """A one-line MtlError when this process cannot create a file in `folder` (permissions, a
    read-only file system), found before any work by creating an unnamed file there (Linux's
    O_TMPFILE: nothing appears in the folder) or, elsewhere, a hidden one deleted at once."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        reason = os.strerror(err.errno) if err.errno else type(err).__name__
        raise MtlError(
            f"{what}: cannot write in {folder} ({reason.lower()}); give a folder you can write"
        ) from None


def umask() -> int:
    """The process's umask (read from /proc on Linux; elsewhere set and restored at once)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def ordinary_modes(path: Path) -> None:
    """Give `path` (a file, or a folder and everything in it) the modes an ordinary write gets
    under the umask: files 0666, folders 0777, less the umask (executable bits kept)."""
    mask = umask()
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if item.is_symlink():
            continue
        if item.is_dir():
            item.chmod(0o777 & ~mask)
        else:
            executable = item.stat().st_mode & 0o111
            item.chmod((0o666 | executable) & ~mask)


NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


NO_SPACE_TEXTS = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122")


def out_of_space(err: BaseException, folder: Path) -> bool:
    """Whether writing into `folder` failed for want of disk space: the OS's error, or the text
    torch's and safetensors' writers wrap it in (torch's zip writer may say only "unexpected
    pos", so a RuntimeError on a disk with under 1 MiB free counts too)."""
    if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:
        return True
    if any(text in str(err) for text in NO_SPACE_TEXTS):
        return True
    return isinstance(err, RuntimeError) and _free(folder) < 2**20


def _free(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 2**62


def no_space(folder: Path, what: str, fix: str = "") -> MtlError:
    """The one line for a write of `what` into `folder` that ran out of disk space."""
    return MtlError(
        f"{what}: no space left on the disk of {folder} (what was written is removed); free "
        f"some space there{fix or ' or write elsewhere, and run the command again'}"
    )


def write_folder(path: str | Path, fill: Callable[[Path], None], **check: Any) -> Path:
    """Make folder `path` whole or not at all: `fill(tmp)` writes into a new hidden sibling,
    which then takes the place of `path` (an old folder there is deleted only after the swap).
    `check`: the keywords of `check_target`, which runs first."""
    target = check_target(path, folder=True, **check)
    _remove_abandoned(target)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=_tmp_prefix(target, os.getpid())))
    try:
        fill(tmp)
        ordinary_modes(tmp)
        _sync_tree(tmp)
        put_in_place(tmp, target)  # tmp now holds the old folder, if there was one
    except Exception as err:  # asked while the part written still fills the disk
        if out_of_space(err, target.parent):
            raise no_space(target.parent, str(path)) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def write_file(
    path: str | Path, data: str | bytes | Callable[[BinaryIO], object], **check: Any
) -> Path:
    """Make file `path` whole or not at all: `data` (text, bytes, or `data(f)` writing to a
    binary file object) goes to a hidden sibling renamed into place. `check`: as `write_folder`."""
    target = check_target(path, folder=False, **check)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.tmp-")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        ordinary_modes(tmp)
        if target.is_file():  # as a write over it: the file keeps its mode
            tmp.chmod(target.stat().st_mode & 0o7777)
        if target.exists() or target.is_symlink():
            os.replace(tmp, target)
        else:
            _rename_new(tmp, target)
        fsync(target.parent)
    except Exception as err:  # asked while the part written still fills the disk
        if out_of_space(err, target.parent):
            raise no_space(target.parent, str(path)) from None
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return target


def put_in_place(tmp: Path, target: Path) -> None:
    """Folder `tmp` (complete, flushed) becomes `target` in one rename: a folder already at
    `target` is exchanged with it (`tmp` then holds the old one, for the caller to delete), so
    at no moment is `target` missing or half-written; then the names are flushed."""
    if target.exists():
        _swap(tmp, target)
    else:
        _rename_new(tmp, target)
    fsync(target.parent)


def _tmp_prefix(target: Path, pid: int) -> str:
    return f".{target.name}.tmp-{socket.gethostname()}-{pid}-"


def _remove_abandoned(target: Path) -> None:
    """Delete the temporary folders of writes of `target` whose process (on this host) is gone:
    a killed export leaves one, as big as the export."""
    for path in target.parent.glob(f".{glob.escape(target.name)}.tmp-*"):
        pid = path.name.removeprefix(_tmp_prefix(target, 0)[:-2]).split("-")[0]
        if path.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holds(folder: Path, inner: Path) -> bool:
    """Whether `folder` is `inner` or one of its ancestors (both resolved)."""
    return folder == inner or folder in inner.parents


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2(2); False where the system or file system lacks it (the caller falls back)."""
    function = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(dst))


def _rename_new(tmp: Path, target: Path) -> None:
    try:
        if _renameat2(tmp, target, RENAME_NOREPLACE):
            return
    except FileExistsError:
        raise MtlError(f"{target} appeared while it was being written; run again") from None
    if target.exists():
        raise MtlError(f"{target} appeared while it was being written; run again")
    os.rename(tmp, target)


def _swap(tmp: Path, target: Path) -> None:
    """Exchange folders `tmp` (new) and `target` (old): afterwards `tmp` holds the old one."""
    if _renameat2(tmp, target, RENAME_EXCHANGE):
        return
    aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old-"))
    os.replace(target, aside / "old")
    os.rename(tmp, target)
    os.rename(aside, tmp)


def _sync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fsync(path)
    fsync(folder)


def fsync(path: Path) -> None:
    """Flush a file or folder to disk (a folder: the names in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
