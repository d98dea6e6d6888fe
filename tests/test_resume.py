"""A training killed (SIGKILL) and resumed in its own folder is one run; one training per folder.

Every run here is `python train.py` in a subprocess, as a user starts it: the tiny model, tiny
synthetic tasks, W&B offline (the default logger) read back from its `.wandb` files.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mtl.runlock import LOCK, process_start
from mtl.wandb_file import read_history

ROOT = Path(__file__).resolve().parents[1]
COMMON = [
    "model=tiny",
    "debug=fast",
    "logger=wandb",
    "task=[synthetic_cls,synthetic_tag]",
    "data.max_examples=96",
    "trainer.max_steps=24",
    "trainer.epochs=4",
    "trainer.eval_every=5",
    "trainer.checkpoint_every=1",
    "trainer.keep_last=2",
    "trainer.export=false",
]
TIMED = ("tokens_per_s", "examples_per_s")  # wall-clock figures: differ between two runs
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def command(*overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), *COMMON, *overrides]


def train(*overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(*overrides), cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )


def start(*overrides: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        command(*overrides),
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMED} for line in lines]


def wandb_runs(run_dir: Path) -> tuple[set[str], list[int]]:
    """The run ids of the `.wandb` files in the run folder, and every step they hold, in order."""
    files = sorted((run_dir / "wandb").glob("*run-*/run-*.wandb"))
    ids = {path.stem.removeprefix("run-") for path in files}
    steps = [row["step"] for path in files for row in read_history(path)]
    return ids, steps


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    last = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    return load_file(last / "model.safetensors")


def complete_checkpoint(run_dir: Path) -> bool:
    return any((p / "mtl_checkpoint.json").is_file() for p in run_dir.glob("checkpoints/step_*"))


def wait_for(predicate, proc: subprocess.Popen, poll: float = 0.002) -> bool:
    """Poll until `predicate()`; False if the process ended first."""
    while not predicate():
        if proc.poll() is not None:
            return False
        time.sleep(poll)
    return True


def logged_rows(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def saving(run_dir: Path) -> bool:
    root = run_dir / "checkpoints"
    return root.is_dir() and any(name.startswith(".tmp-step") for name in os.listdir(root))


@pytest.mark.slow
def test_killed_five_times_and_resumed_is_one_run(tmp_path):
    full = tmp_path / "full"
    done = train(f"output_dir={full}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    part = tmp_path / "part"
    rng = random.Random(16)
    kills, in_save, attempts = 0, 0, 0
    while True:
        attempts += 1
        assert attempts < 20, "the run kept finishing before it could be killed"
        resume = [f"trainer.resume={part}"] if complete_checkpoint(part) else []
        proc = start(*resume, f"output_dir={part}", cwd=tmp_path)
        if kills == 5:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            break
        before = logged_rows(part)
        if not wait_for(lambda b=before: logged_rows(part) > b, proc):  # training under way
            proc.communicate()
            continue
        if kills % 2:  # as soon as a save is seen under way
            landed = wait_for(lambda: saving(part), proc)
        else:  # at a random moment of the next steps
            time.sleep(rng.uniform(0, 1.5))
            landed = proc.poll() is None
        if not landed:
            proc.communicate()
            continue
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        assert "Traceback" not in err, err[-3000:]
        kills += 1
        in_save += any(p.name.startswith((".tmp-", ".old-")) for p in part.glob("checkpoints/*"))
        if resume:
            assert "resuming" not in err or "skipping" in err
    assert "Traceback" not in err, err[-3000:]
    assert f"taking over {part}" in err  # the last kill left its lock
    assert in_save >= 1, "no kill landed inside a checkpoint save"

    # the same model as the run that was never stopped
    expected, got = final_weights(full), final_weights(part)
    assert expected.keys() == got.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=0)
    # metrics.jsonl: each row once, as the uninterrupted run wrote them
    want, have = rows(full), rows(part)
    assert [r["step"] for r in have] == [r["step"] for r in want]
    for a, b in zip(have, want, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7)
    # W&B: one run, every step once
    ids, steps = wandb_runs(part)
    assert ids == {(part / "wandb_run_id").read_text().strip()}
    assert steps == sorted(set(steps)) == sorted(wandb_runs(full)[1])
    assert not (part / LOCK).exists()


@pytest.mark.slow
def test_a_second_training_on_a_folder_in_use_is_refused_then_takes_over(tmp_path):
    run_dir = tmp_path / "run"
    first = start("trainer.max_steps=400", "trainer.epochs=100", f"output_dir={run_dir}", cwd=tmp_path)
    try:
        assert wait_for(lambda: complete_checkpoint(run_dir), first, poll=0.05)
        second = train(f"trainer.resume={run_dir}", f"output_dir={run_dir}", cwd=tmp_path)
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr[-3000:]
        assert lines[0].startswith(f"mtl: error: {run_dir} is in use by another training, ")
        assert f"pid {first.pid} on " in lines[0]
        assert first.poll() is None  # the first one trains on
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    resumed = train(f"trainer.resume={run_dir}", f"output_dir={run_dir}", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    taken = [line for line in resumed.stderr.splitlines() if "taking over" in line]
    assert len(taken) == 1 and f"pid {first.pid} " in taken[0]
    assert "no longer running" in taken[0]
    assert not (run_dir / LOCK).exists()


def test_process_start_tells_a_reused_pid(tmp_path):
    me = process_start(os.getpid())
    assert me is not None and me == process_start(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_start(child.pid) not in (None, me)
    finally:
        child.kill()
        child.wait()
    assert process_start(child.pid) is None
