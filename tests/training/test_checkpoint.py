"""Checkpoints written whole or not at all, resume from a run folder, keep_last, stop signals.

A real `Accelerator(cpu=True)` with a small linear model, AdamW and a scheduler; no mtl loop.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from mtl.artifacts import RunLayout
from mtl.builders.weights import MARKER, resolve_checkpoint
from mtl.errors import MtlError
from mtl.training.checkpoints.checkpoint import save_checkpoint
from mtl.training.checkpoints.signals import StopSignal
from mtl.training.state import TrainState


class Setup:
    """A prepared model, optimizer and scheduler, with counters registered for checkpointing."""

    def __init__(self):
        self.accelerator = Accelerator(cpu=True)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (1 + s))
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(
            model, optimizer, scheduler
        )
        self.state = TrainState(["a", "b"])
        self.accelerator.register_for_checkpointing(self.state)

    def train_step(self) -> None:
        loss = self.model(torch.randn(8, 4)).pow(2).mean()
        self.accelerator.backward(loss)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()
        self.state.step += 1

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.model.state_dict().items()}


@pytest.fixture
def setup() -> Setup:
    return Setup()


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_save_then_load_round_trip(setup, tmp_path):
    for _ in range(3):
        setup.train_step()
    saved = setup.weights()
    moments = setup.optimizer.state_dict()["state"][0]["exp_avg"].clone()
    path = save_checkpoint(setup.accelerator, tmp_path, setup.state.step)
    assert path == RunLayout(tmp_path).step(3)
    assert names(tmp_path) == {"checkpoints"}
    assert names(path.parent) == {"step_0000003"}  # no .tmp-* folder left
    assert {MARKER, "model.safetensors", "optimizer.bin", "random_states_0.pkl"} <= names(path)
    after_save = torch.rand(3)

    setup.train_step()
    setup.train_step()
    setup.state.epoch = 9
    assert not torch.equal(setup.weights()["weight"], saved["weight"])

    setup.accelerator.load_state(resolve_checkpoint(str(tmp_path)))
    assert_same(setup.weights(), saved)
    torch.testing.assert_close(setup.optimizer.state_dict()["state"][0]["exp_avg"], moments)
    assert setup.scheduler.state_dict()["last_epoch"] == 3
    assert (setup.state.step, setup.state.epoch) == (3, 0)
    assert torch.equal(torch.rand(3), after_save)  # RNG state restored


def test_save_of_an_existing_step_replaces_it(setup, tmp_path):
    setup.train_step()
    save_checkpoint(setup.accelerator, tmp_path, 1)
    setup.train_step()
    second = setup.weights()
    path = save_checkpoint(setup.accelerator, tmp_path, 1)
    assert names(path.parent) == {"step_0000001"}
    setup.train_step()
    setup.accelerator.load_state(resolve_checkpoint(str(tmp_path)))
    assert_same(setup.weights(), second)


def test_a_save_killed_midway_leaves_the_previous_checkpoint_latest(setup, tmp_path, capsys):
    setup.train_step()
    save_checkpoint(setup.accelerator, tmp_path, 1)
    kept = setup.weights()
    setup.train_step()
    real_save_state = setup.accelerator.save_state

    def killed_after_writing(output_dir):  # the files are there; the job dies before the end
        real_save_state(output_dir)
        raise KeyboardInterrupt

    setup.accelerator.save_state = killed_after_writing
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(setup.accelerator, tmp_path, 2)
    assert names(tmp_path / "checkpoints") == {"step_0000001", ".tmp-step_0000002"}

    resolved = resolve_checkpoint(str(tmp_path))
    assert resolved == str(RunLayout(tmp_path).step(1))
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and ".tmp-step_0000002 (left by an interrupted save)" in lines[0]
    setup.accelerator.load_state(resolved)
    assert_same(setup.weights(), kept)

    setup.accelerator.save_state = real_save_state
    save_checkpoint(setup.accelerator, tmp_path, 3)  # the next save clears what was left
    assert names(tmp_path / "checkpoints") == {"step_0000001", "step_0000003"}


def test_incomplete_folders_are_skipped_and_named(setup, tmp_path, capsys):
    setup.train_step()
    good = save_checkpoint(setup.accelerator, tmp_path, 2)
    root = good.parent
    no_marker = shutil.copytree(good, root / "step_0000003")
    (no_marker / MARKER).unlink()  # copied by hand without the marker
    no_model = shutil.copytree(good, root / "step_0000004")
    (no_model / "model.safetensors").unlink()
    truncated = shutil.copytree(good, root / "step_0000005")
    with open(truncated / "optimizer.bin", "r+b") as f:
        f.truncate(10)
    tmp = shutil.copytree(good, root / ".tmp-step_0000006")

    assert resolve_checkpoint(str(tmp_path)) == str(good)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    for expected in [
        ".tmp-step_0000006 (left by an interrupted save)",
        f"step_0000005 (optimizer.bin has 10 bytes, not {(good / 'optimizer.bin').stat().st_size})",
        "step_0000004 (model.safetensors missing)",
        f"step_0000003 (no {MARKER}",
        f"resuming from {good}",
    ]:
        assert expected in lines[0]
    assert resolve_checkpoint(str(root)) == str(good)  # the checkpoints/ folder works too
    capsys.readouterr()

    assert resolve_checkpoint(str(good)) == str(good)
    assert capsys.readouterr().err == ""  # nothing skipped, nothing said
    for folder, problem in [
        (no_marker, "no " + MARKER),
        (no_model, "model.safetensors"),
        (tmp, ""),
    ]:
        with pytest.raises(MtlError, match=f"trainer.resume={folder}: incomplete.*{problem}"):
            resolve_checkpoint(str(folder))


def test_latest_is_by_step_number_not_by_name(setup, tmp_path):
    save_checkpoint(setup.accelerator, tmp_path, 9_999_999)
    save_checkpoint(setup.accelerator, tmp_path, 10_000_000)
    assert resolve_checkpoint(str(tmp_path)).endswith("step_10000000")


def test_keep_last_keeps_the_newest(setup, tmp_path):
    for step in range(1, 6):
        setup.train_step()
        save_checkpoint(setup.accelerator, tmp_path / "two", step, keep_last=2)
        save_checkpoint(setup.accelerator, tmp_path / "all", step, keep_last=None)
    assert names(tmp_path / "two" / "checkpoints") == {"step_0000004", "step_0000005"}
    assert len(names(tmp_path / "all" / "checkpoints")) == 5


def test_run_folder_without_a_complete_checkpoint_is_one_line(setup, tmp_path):
    save_checkpoint(setup.accelerator, tmp_path, 1)
    root = tmp_path / "checkpoints"
    os.rename(root / "step_0000001", root / ".tmp-step_0000001")
    with pytest.raises(MtlError, match="no complete checkpoint") as err:
        resolve_checkpoint(str(tmp_path))
    assert "\n" not in str(err.value) and ".tmp-step_0000001" in str(err.value)
    with pytest.raises(MtlError, match="no such folder"):
        resolve_checkpoint(str(tmp_path / "missing"))
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(MtlError, match="no checkpoint in"):
        resolve_checkpoint(str(tmp_path / "empty"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_stop_signal_requests_a_stop_and_restores_handlers(setup, tmp_path, signum):
    def before(*_):
        raise AssertionError("the previous handler ran")

    previous = signal.signal(signum, before)
    try:
        with StopSignal() as stop:
            assert not stop.should_stop(setup.accelerator)
            os.kill(os.getpid(), signum)
            assert stop.should_stop(setup.accelerator)
            assert stop.should_stop(setup.accelerator)  # and stays so
            name = signal.Signals(signum).name
            assert stop.message(7, tmp_path) == (
                f"mtl: received {name}: saving a checkpoint at step 7 and stopping; "
                f"resume with trainer.resume={tmp_path}"
            )
        assert signal.getsignal(signum) is before
    finally:
        signal.signal(signum, previous)


DIST_SCRIPT = """
import os, signal, sys, torch
from accelerate import Accelerator
from mtl.training.checkpoints.checkpoint import save_checkpoint
from mtl.training.checkpoints.signals import StopSignal

accelerator = Accelerator(cpu=True)
model = accelerator.prepare(torch.nn.Linear(2, 2))
run_dir = sys.argv[1]
with StopSignal() as stop:
    for step in range(1, 100):
        if step == 3 and accelerator.process_index == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # only rank 1 is told
        if stop.should_stop(accelerator):
            # one write per line: the two ranks share stdout, and print's separate "\\n"
            # write could land after the other rank's line
            if accelerator.is_main_process:
                os.write(1, (stop.message(step, run_dir) + "\\n").encode())
            path = save_checkpoint(accelerator, run_dir, step)
            line = f"rank {accelerator.process_index} stopped at {step}: {path.name}\\n"
            os.write(1, line.encode())
            break
"""


@pytest.mark.distributed
@pytest.mark.slow
def test_dist_all_ranks_stop_at_the_same_step(tmp_path):
    script = tmp_path / "stop.py"
    script.write_text(textwrap.dedent(DIST_SCRIPT))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        + [str(script), str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert (
        lines.count(
            f"mtl: received SIGTERM: saving a checkpoint at step 4 and stopping; "
            f"resume with trainer.resume={tmp_path / 'run'}"
        )
        == 1
    )
    # the step after the signal: the ranks read each boundary's flags at the next one
    assert {"rank 0 stopped at 4: step_0000004", "rank 1 stopped at 4: step_0000004"} <= set(lines)
    ckpt = RunLayout(tmp_path / "run").step(4)
    assert {"random_states_0.pkl", "random_states_1.pkl", MARKER} <= names(ckpt)
    assert resolve_checkpoint(str(tmp_path / "run")) == str(ckpt)


def test_the_ctrl_c_line_is_on_a_line_of_its_own_below_the_progress_bar(capsys):
    import re

    from tqdm import tqdm

    from mtl.training.checkpoints.signals import CTRL_C_MESSAGE

    bar = tqdm(total=10, file=sys.stderr, desc="train")
    bar.update(3)
    with StopSignal() as stop:
        signal.raise_signal(signal.SIGINT)
    bar.close()
    assert stop.received == signal.SIGINT
    lines = re.split(r"[\r\n]", capsys.readouterr().err)
    assert CTRL_C_MESSAGE in lines  # not appended to the bar's line
