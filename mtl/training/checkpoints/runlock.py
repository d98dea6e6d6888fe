"""One training per run folder: `<run>/.mtl-lock` names the process that trains into it.

The lock holds the host, pid, the process's start (its boot id and start tick from `/proc`,
which tell a reused pid from the holder) and the wall-clock time it was taken. A training takes
the folder before it writes anything there (`take_run_folder`) and gives it back when it ends,
whatever ends it short of SIGKILL. A second training on the same folder is refused with one line
naming the holder. A lock whose holder is gone (same host, and the pid is not running, or is
running but started at another time: a reused pid) is taken over, said in one line. A lock of
another host is never taken over: this host cannot tell whether that process still runs.

The lock is written to a temporary file and renamed into place, under an `flock` of the run
folder itself, so two trainings starting at once on one host cannot both take it (and a start
that is refused leaves no file behind).
With several ranks, rank 0 takes the lock and tells every rank the outcome, so a refusal is
raised by every rank alike (`RunFolder.take`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from mtl.artifacts import write_file
from mtl.errors import MtlError

LOCK = ".mtl-lock"
GUARD = ".mtl-lock.guard"  # the flock's file of earlier versions (a start file: mtl.cli.train)


def process_start(pid: int) -> str | None:
    """`<boot id>:<start tick>` of a running process (Linux), None where /proc cannot say."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the name, in parentheses, may hold spaces
    return f"{boot}:{fields[19]}"  # field 22 of stat: start time in clock ticks after boot


def me() -> dict:
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": process_start(pid),
        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def describe(holder: dict) -> str:
    return f"pid {holder['pid']} on {holder['host']} (since {holder['since']})"


def is_running(holder: dict) -> bool:
    """Whether the holder may still run: True for another host (no way to tell)."""
    if holder["host"] != socket.gethostname():
        return True
    pid = int(holder["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # running, as another user
    start = process_start(pid)
    return start is None or holder.get("start") is None or start == holder["start"]


def read_lock(path: Path) -> dict | None:
    """The holder named in the lock file, None when there is none; MtlError when unreadable."""
    try:
        holder = json.loads(path.read_text())
        holder["pid"] = int(holder["pid"])
        holder.setdefault("since", "?")
        str(holder["host"])
        return holder
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, OSError) as err:
        raise MtlError(
            f"{path} is not a lock mtl wrote ({type(err).__name__}); if no training uses "
            f"{path.parent}, delete {path} and start again"
        ) from None


def take_lock(run_dir: Path) -> str | None:
    """Take `<run_dir>/.mtl-lock` for this process. Returns the line to print when a stale lock
    was taken over (else None); raises a one-line MtlError when a running process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    guard = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        holder = read_lock(path)
        mine = me()
        said = None
        if holder is not None:
            if is_running(holder):
                if (holder["host"], holder["pid"]) == (mine["host"], mine["pid"]):
                    raise MtlError(f"{run_dir} is already taken by this process")
                raise MtlError(
                    f"{run_dir} is in use by another training, {describe(holder)}; wait for it "
                    f"or stop it, or train into another folder (if that process is gone, "
                    f"delete {path})"
                )
            said = f"mtl: taking over {run_dir} from {describe(holder)}, which is no longer running"
        write_file(path, json.dumps(mine), overwrite=True)
    finally:
        os.close(guard)  # and its flock with it
    return said


def release_lock(run_dir: Path) -> None:
    """Remove the lock if this process holds it (another one's is left alone)."""
    path = run_dir / LOCK
    with contextlib.suppress(MtlError, OSError):
        holder = read_lock(path)
        if holder and (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid()):
            path.unlink()


class RunFolder:
    """The run folder held for one training: `take()` on every rank (a collective with several
    ranks), `release()` when the training ends. Rank 0 holds the lock; a refusal it meets is
    raised on every rank (`all_ranks`), so no rank waits on the others."""

    def __init__(self, run_dir: Path, accelerator):
        self.run_dir = Path(run_dir)
        self.accelerator = accelerator
        self.held = False

    def take(self) -> None:
        outcome = [None, None]  # [error, line to print]
        if self.accelerator.is_main_process:
            try:
                outcome[1] = take_lock(self.run_dir)
                self.held = True
            except MtlError as err:
                outcome[0] = str(err)
            except OSError as err:
                outcome[0] = f"cannot take {self.run_dir}: {err}"
        if self.accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(outcome, from_process=0)
        if outcome[0] is not None:
            raise MtlError(outcome[0], all_ranks=True)
        if outcome[1] and self.accelerator.is_main_process:
            print(outcome[1], file=sys.stderr)

    def release(self) -> None:
        if self.held:
            release_lock(self.run_dir)
            self.held = False
