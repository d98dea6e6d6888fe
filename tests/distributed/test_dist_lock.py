"""One training per run folder with two processes (`torchrun --nproc_per_node 2 train.py`):
rank 0 takes the folder and every rank learns the outcome, so a refusal ends both ranks alike
(one line, no hang, the folder as it was) and a stale lock is taken over once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mtl.training.checkpoints.runlock import LOCK, process_start
from tests.conftest import file_digests

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
ARGS = ["debug=fast", "task=[synthetic_cls,synthetic_tag]", "trainer.dist_timeout_s=20"]

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def launch(run_dir: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("MTL_LAUNCH_TIME", None)
    return subprocess.run(
        [*TORCHRUN, str(ROOT / "train.py"), *ARGS, f"hydra.run.dir={run_dir}", *extra],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_dist_a_held_folder_is_refused_on_every_rank_and_a_stale_lock_taken_over(tmp_path):
    """The refusal leaves every file of the folder as it was, the holder's Hydra record too: no
    rank writes into a run folder that exists before the run is accepted, whichever check refuses
    it (another training's folder: tests/cli/test_run_folder.py, one process)."""
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):  # as the holder's Hydra wrote
        (run_dir / ".hydra" / name).write_text(f"# the holder's {name}\n")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    lock = {
        "host": socket.gethostname(),
        "pid": holder.pid,
        "start": process_start(holder.pid),
        "since": "2026-01-01 00:00:00 UTC",
    }
    (run_dir / LOCK).write_text(json.dumps(lock))
    before = file_digests(run_dir)
    try:
        refused = launch(run_dir, tmp_path)
    finally:
        holder.kill()
        holder.wait()
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    errors = [line for line in output.splitlines() if line.startswith("mtl: error:")]
    assert errors == [
        f"mtl: error: {run_dir} is in use by another training, pid {holder.pid} on "
        f"{socket.gethostname()} (since 2026-01-01 00:00:00 UTC); wait for it or stop it, or "
        f"train into another folder (if that process is gone, delete {run_dir / LOCK})"
    ]
    # torchrun reports a worker's exit status 2 with its own traceback; none comes from mtl
    assert str(ROOT / "mtl") not in output and "MtlError" not in output, output[-3000:]
    assert file_digests(run_dir) == before  # the lock and the record left as they were

    taken = launch(run_dir, tmp_path, "trainer.trace=true")  # the holder is gone now
    output = taken.stdout + taken.stderr
    assert taken.returncode == 0, output[-3000:]
    assert len([line for line in output.splitlines() if "taking over" in line]) == 1
    assert output.count(f"mtl: run folder {run_dir}") == 2  # at start and at the end, by rank 0
    assert not (run_dir / LOCK).exists()
    for rank in (0, 1):  # a launch of two processes
        header = json.loads((run_dir / f"trace_rank{rank}.jsonl").open().readline())
        assert (header["world"], header["rank"]) == (2, rank)
