"""Stop signals: Ctrl-C (SIGINT), SIGTERM and SIGUSR1 (SLURM's warning signal,
`--signal=USR1@<s>`) become a request to save a checkpoint and stop at an optimizer-step
boundary, the same step on every rank; a second Ctrl-C stops at once (KeyboardInterrupt). The same
agreement at each step boundary says when a timed checkpoint (`trainer.checkpoint_minutes`) is
due, by rank 0's clock.

On several processes the ranks agree without waiting for the device: each boundary starts an
all-reduce of its flags and reads the one the boundary before started (long done by then), so
a signal stops the run one step later than on one process, on every rank alike."""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from mtl.artifacts import resume_override
from mtl.batching import host_to
from mtl.errors import env_rank

STOP_MESSAGE = (
    "mtl: received {signal}: saving a checkpoint at step {step} and stopping; resume with {resume}"
)
CTRL_C_MESSAGE = (
    "mtl: Ctrl-C: stopping after this step with a checkpoint; Ctrl-C again stops at once, losing "
    "the steps since the last checkpoint"
)


@dataclass(frozen=True)
class Boundary:
    """What every rank agreed at one optimizer-step boundary: stop there (a signal), and save a
    timed checkpoint there."""

    stop: bool
    checkpoint: bool


class StopSignal:
    """Turns Ctrl-C (SIGINT), SIGTERM and SIGUSR1 into a request to save a checkpoint and stop.

    Creating it installs handlers for both signals in this process; `close()` (or leaving the
    `with` block) puts the previous handlers back. A handler only records the signal, so the step
    under way finishes. Call `should_stop(accelerator)` once per optimizer step, on every rank:
    it is True from the first step boundary at which any rank has received a signal (on several
    processes the boundary after: a tiny all-reduce of the flags, read one step later), on every
    rank alike, so all ranks save the same step. A second Ctrl-C raises KeyboardInterrupt in
    the main thread: the user wants out now.
    `agree(accelerator, checkpoint_due)` is the same all-reduce, carrying rank 0's verdict on a
    timed checkpoint as well. Use in the loop:

        with StopSignal() as stop:
            for ...:  # one optimizer step
                ...
                if stop.should_stop(accelerator):
                    accelerator.print(stop.message(state.step, run_dir))
                    save_checkpoint(accelerator, run_dir, state.step, t.keep_last)
                    break

    Handlers can only be installed from the main thread; elsewhere it installs nothing and
    never asks to stop.
    """

    SIGNALS = tuple(
        s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", None)) if s
    )

    def __init__(self):
        self.received = 0  # number of the signal this process received, 0 before any
        self.interrupts = 0  # Ctrl-Cs received
        self.agreed = 0  # the signal the ranks agreed to stop for (highest number), 0 before
        self.pending: tuple | None = None  # the last boundary's all-reduce, under way
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1:
                raise KeyboardInterrupt
            if env_rank() == 0:  # a terminal's Ctrl-C reaches every process of a launch
                # on a line of its own, the progress bar drawn again below it
                tqdm.write(CTRL_C_MESSAGE, file=sys.stderr)
        self.received = self.received or signum

    def should_stop(self, accelerator) -> bool:
        """Whether to save and stop at this step boundary (a collective on several processes)."""
        return self.agree(accelerator).stop

    def agree(self, accelerator, checkpoint_due: bool = False) -> Boundary:
        """Whether to stop at this step boundary (a signal on any rank) and whether to save a
        timed checkpoint (`checkpoint_due` on rank 0): one collective on several processes."""
        if self.agreed:
            return Boundary(True, False)
        if accelerator.num_processes == 1:
            self.agreed = self.received
            return Boundary(bool(self.agreed), checkpoint_due)
        due = int(checkpoint_due and accelerator.is_main_process)
        agreed = self.collect()  # the previous boundary's flags, every rank's
        self.pending = self.start([self.received, due], accelerator.device)
        self.agreed = agreed[0]
        return Boundary(bool(self.agreed), bool(agreed[1]) and not self.agreed)

    @staticmethod
    def start(flags: list[int], device) -> tuple:
        """An all-reduce (max) of `flags`, and a copy of its result to the host, started and
        not waited for."""
        tensor = host_to(torch.tensor(flags, dtype=torch.int32), device)
        work = dist.all_reduce(tensor, op=dist.ReduceOp.MAX, async_op=True)
        work.wait()  # on a GPU: the stream waits, the host does not
        if tensor.device.type != "cuda":
            return tensor, None
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return host, done

    def collect(self) -> list[int]:
        """The flags of the all-reduce the last boundary started (zeros at the first)."""
        if self.pending is None:
            return [0, 0]
        host, done = self.pending
        if done is not None:
            done.synchronize()  # the previous step's kernels, done by the time this one ends
        return [int(v) for v in host.tolist()]

    @property
    def signal_name(self) -> str:
        signum = self.agreed or self.received
        return signal.Signals(signum).name if signum else ""

    def message(self, step: int, run_dir: Path | str) -> str:
        """The one line the run prints when it stops for a signal."""
        resume = resume_override(run_dir)
        return STOP_MESSAGE.format(signal=self.signal_name, step=step, resume=resume)

    def close(self) -> None:
        """Put back the handlers that were there before."""
        for signum, handler in self._previous.items():
            # None: a handler not installed from Python; the default is the best stand-in.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    def __enter__(self) -> StopSignal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
