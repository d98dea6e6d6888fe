"""A training killed (SIGKILL) and resumed in its own folder is one run; one training per folder.

Every run here is `python train.py` in a subprocess, as a user starts it: the tiny model, tiny
synthetic tasks, W&B offline (the default logger) read back from its `.wandb` files.
"""

from __future__ import annotations

import copy
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

from mtl.artifacts import RunLayout
from mtl.errors import MtlError
from mtl.training.checkpoints.runlock import LOCK, process_start
from mtl.training.tracking.wandb_file import read_history
from tests.conftest import file_digests, resealed

ROOT = Path(__file__).resolve().parents[2]
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
# A weighted mixup mixed online (loader=random online: the 2-process test in tests/distributed).
ONLINE = ("loader=mixup", "loader.online={policy:exp3,update_every:3,options:{exploration:0.2}}")
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
def test_killed_twice_and_resumed_is_one_run(tmp_path, train_here):
    """SIGKILL at a random moment, then inside a checkpoint save of the resumed run, each time
    resumed (the last start resumes a resumed run): one run, as the run never stopped (that one
    runs in this process, on one thread as the others). Its tasks are mixed online (exp3
    splitting each mixup step: the loader's plan, the policy's state and window are in each
    checkpoint), the hardest mixture to resume."""
    full = tmp_path / "full"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the processes' OMP_NUM_THREADS=1
    try:
        code, err = train_here(*COMMON, f"output_dir={full}", *ONLINE)
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err[-3000:]
    part = tmp_path / "part"
    rng = random.Random(16)
    kills, in_save, attempts, taken_over = 0, 0, 0, 0
    lock_left = (
        False  # the last kill left the run's lock (it can land after the lock is given back)
    )

    def ended(err: str) -> None:
        nonlocal lock_left, taken_over
        assert "Traceback" not in err, err[-3000:]
        assert (f"taking over {part}" in err) == lock_left, err[-3000:]
        taken_over += lock_left
        lock_left = False

    while True:
        attempts += 1
        assert attempts < 20, "the run kept finishing before it could be killed"
        resume = [f"trainer.resume={part}"] if complete_checkpoint(part) else []
        proc = start(*resume, f"output_dir={part}", *ONLINE, cwd=tmp_path)
        if kills == 2:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            ended(err)
            break
        before = logged_rows(part)
        if not wait_for(lambda b=before: logged_rows(part) > b, proc):  # training under way
            ended(proc.communicate()[1])
            continue
        if kills % 2:  # as soon as a save is seen under way
            landed = wait_for(lambda: saving(part), proc)
        else:  # at a random moment of the next steps
            time.sleep(rng.uniform(0, 1.5))
            landed = proc.poll() is None
        if not landed:
            ended(proc.communicate()[1])
            continue
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        ended(err)
        lock_left = (part / LOCK).exists()
        kills += 1
        in_save += any(p.name.startswith((".tmp-", ".old-")) for p in part.glob("checkpoints/*"))
    print(f"{kills} kills in {attempts} attempts, {in_save} inside a checkpoint save")
    assert taken_over >= 1, "no kill left a lock to take over"
    assert f"mtl: run folder {part} (resuming at step " in err
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
def test_a_second_training_on_a_folder_in_use_is_refused_then_takes_over(tmp_path, train_here):
    """The first training is a process of its own (it holds the folder, then is killed); the
    second ones run in this process, as `mtl-train` would."""
    run_dir = tmp_path / "run"
    first = start(
        "trainer.max_steps=400", "trainer.epochs=100", f"output_dir={run_dir}", cwd=tmp_path
    )
    try:
        assert wait_for(lambda: complete_checkpoint(run_dir), first, poll=0.05)
        for again in ([f"trainer.resume={run_dir}"], ["seed=1"]):  # a resume, a new training
            code, err = train_here(*COMMON, *again, f"output_dir={run_dir}")
            assert code == 2
            lines = err.strip().splitlines()
            assert len(lines) == 1, err[-3000:]
            assert lines[0].startswith(f"mtl: error: {run_dir} is in use by another training, ")
            assert f"pid {first.pid} on " in lines[0]
            assert first.poll() is None  # the first one trains on
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    code, err = train_here(*COMMON, f"trainer.resume={run_dir}", f"output_dir={run_dir}")
    assert code == 0, err[-3000:]
    taken = [line for line in err.splitlines() if "taking over" in line]
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


# Bad input around resume, in-process through `mtl.cli.job.main` (what train.py calls),
# real config composed; each is one `mtl: error:` line and status 2, or one line and a run.

FAST = ["debug=fast", "task=[synthetic_cls,synthetic_tag]", "trainer.export=false"]


@pytest.fixture(scope="module")
def compose(compose_cfg):
    """`compose(*overrides)`: the real config with FAST and these overrides."""
    return lambda *overrides: compose_cfg(*FAST, *overrides)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, compose) -> Path:
    """A finished 4-step run folder with checkpoints at steps 2 and 4 (copy it to change it)."""
    from mtl.training.loop import run

    run_dir = tmp_path_factory.mktemp("trained") / "run"
    run(compose(f"output_dir={run_dir}", "trainer.checkpoint_every=2", "trainer.keep_last=2"))
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(run_dir, tmp_path / "copy"))


@pytest.fixture
def refused(capsys, compose):
    """`refused(*overrides)`: the one line a run with these overrides is refused with
    (status 2)."""
    from mtl.cli.job import main

    def line(*overrides: str) -> str:
        with pytest.raises(SystemExit) as exit_:
            main(compose(*overrides))
        assert exit_.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("mtl: error: "), lines
        return lines[0]

    return line


def test_resume_from_a_missing_folder(tmp_path, refused):
    line = refused(f"trainer.resume={tmp_path}/nope", f"output_dir={tmp_path}/run")
    assert "no such folder" in line
    assert not (tmp_path / "run" / LOCK).exists()


def test_resume_from_a_folder_that_is_not_a_run(tmp_path, refused):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("mine")
    line = refused(f"trainer.resume={tmp_path}/notes", f"output_dir={tmp_path}/run")
    assert "neither a checkpoint folder nor a run folder" in line


def test_resume_from_a_run_without_a_checkpoint(tmp_path, refused):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    line = refused(f"trainer.resume={tmp_path}/run", f"output_dir={tmp_path}/run")
    assert "no checkpoint in" in line and "start without trainer.resume" in line


def test_resume_from_a_run_whose_checkpoints_are_cut_short(trained, tmp_path, refused):
    run_dir = copy_of(trained, tmp_path)
    for folder in run_dir.glob("checkpoints/step_*"):
        with open(folder / "optimizer.bin", "r+b") as f:
            f.truncate(10)
    line = refused(f"trainer.resume={run_dir}", f"output_dir={run_dir}")
    assert "no complete checkpoint" in line and "optimizer.bin has 10 bytes" in line


class Payload:
    """A pickle that runs a command when loaded: what a handed-over checkpoint could carry."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize(
    "name", ["custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl", "random_states_0.pkl"]
)
def test_resume_runs_no_code_a_checkpoint_carries(trained, tmp_path, refused, name):
    """A pickle payload padded to the size the marker records: refused in one line naming the
    file, before anything is loaded (its sha256 is not the marker's; with the marker rewritten
    to match, it is not plain data); the payload never runs (its marker file is not written)."""
    import pickle

    run_dir = copy_of(trained, tmp_path)
    marker = tmp_path / "ran"
    path = RunLayout(run_dir).step(4) / name
    payload = pickle.dumps(Payload(marker))
    path.write_bytes(payload + b"\0" * (path.stat().st_size - len(payload)))
    line = refused(f"trainer.resume={run_dir}", f"output_dir={run_dir}")
    assert f"{path} is not the file the checkpoint saved (its sha256 is not the one" in line
    resealed(path.parent)
    line = refused(f"trainer.resume={run_dir}", f"output_dir={run_dir}")
    assert f"{path} is not plain data (damaged, or made to run code" in line
    assert "model.init_from=" in line
    assert not marker.exists()


def test_random_states_overwritten_at_their_size_are_one_line(trained, tmp_path, refused):
    """accelerate would go on without the random states it cannot read (the resume no longer
    exact, without a word); mtl refuses in one line naming the file."""
    run_dir = copy_of(trained, tmp_path)
    path = RunLayout(run_dir).step(4) / "random_states_0.pkl"
    path.write_bytes(random.Random(0).randbytes(path.stat().st_size))
    resealed(path.parent)
    line = refused(f"trainer.resume={run_dir}", f"output_dir={run_dir}")
    assert f"{path} is not plain data" in line and "trainer.resume=" in line


def test_resume_from_a_damaged_checkpoint(trained, tmp_path, refused):
    run_dir = copy_of(trained, tmp_path)
    for name in ("model.safetensors", "optimizer.bin"):
        path = RunLayout(run_dir).step(4) / name
        path.write_bytes(b"\0" * path.stat().st_size)  # the size the marker lists, no content
        line = refused(f"trainer.resume={run_dir}", f"output_dir={run_dir}")
        assert f"{path} is not the file the checkpoint saved" in line
        resealed(path.parent)
        line = refused(f"trainer.resume={run_dir}", f"output_dir={run_dir}")
        assert "step_0000004 cannot be loaded" in line and "trainer.resume=" in line


@pytest.mark.parametrize(
    ("overrides", "differs"),
    [
        (["task=[synthetic_cls,synthetic_reg]"], "tasks [synthetic_cls (sequence_classification)"),
        (["model.config.hidden_size=64", "model.config.intermediate_size=128"], "the encoder"),
        (
            ["+task.synthetic_cls.label_names=[animals,food,vehicles,other]"],
            "synthetic_cls (['animals', 'food', 'vehicles', 'other'])",
        ),
        # its log-variances are parameters the checkpoint's optimizer does not hold
        (["balancer=uncertainty"], "balancer [_target_ (mtl.balancers.Sum)], this run has"),
    ],
)
def test_resume_with_another_config_names_what_differs(
    trained, tmp_path, overrides, differs, refused
):
    line = refused(*overrides, f"trainer.resume={trained}", f"output_dir={tmp_path}/run")
    assert differs in line
    assert f"model.init_from={trained} instead of trainer.resume={trained}" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_resume_with_another_tokenizer(trained, tmp_path, refused):
    from mtl.data import load_tokenizer

    tokenizer = copy.deepcopy(load_tokenizer(None))  # the loaded one is shared
    tokenizer.add_tokens(["zzqx"])
    tokenizer.save_pretrained(tmp_path / "tok")
    line = refused(
        f"model.tokenizer={tmp_path}/tok", f"trainer.resume={trained}",
        f"output_dir={tmp_path}/run",
    )  # fmt: skip
    assert "trained with tokenizer '(packaged MiniLM)'" in line and str(tmp_path / "tok") in line


def test_shapes_are_compared_for_checkpoints_without_a_description(trained, tmp_path, compose):
    """A checkpoint saved before checkpoints described their run: the shapes tell."""
    import shutil

    from mtl.builders.model import build_model
    from mtl.builders.tasks import build_tasks
    from mtl.config import validate
    from mtl.data import load_tokenizer
    from mtl.errors import MtlError
    from mtl.training.checkpoints.compatible import check_compatible, describe

    step = Path(shutil.copytree(RunLayout(trained).step(4), tmp_path / "step_4"))
    (step / "mtl_run.json").unlink()
    cfg = compose("task=[synthetic_cls,synthetic_reg]")
    settings = validate(cfg)
    tasks, _ = build_tasks(settings, 0)
    model = build_model(settings, tasks)
    ours = describe(settings, tasks, load_tokenizer(None))
    with pytest.raises(MtlError, match=r"tasks \['synthetic_cls', 'synthetic_tag'\], this run"):
        check_compatible(str(step), model, ours, "trainer.resume=x")


def test_a_description_without_one_of_its_keys_is_one_line(trained, tmp_path):
    """Every mtl that writes mtl_run.json writes all four keys: one without is damaged, and the
    comparison is not skipped."""
    import shutil

    from mtl.errors import MtlError
    from mtl.training.checkpoints.compatible import check_compatible

    step = Path(shutil.copytree(RunLayout(trained).step(4), tmp_path / "step_4"))
    saved = json.loads((step / "mtl_run.json").read_text())
    del saved["balancer"]
    (step / "mtl_run.json").write_text(json.dumps(saved))
    with pytest.raises(MtlError, match=r"cannot be loaded \(KeyError: 'balancer'\)") as err:
        check_compatible(str(step), None, {}, "trainer.resume=x")
    assert "\n" not in str(err.value)


def lock_of(run_dir: Path, **holder) -> Path:
    import socket

    run_dir.mkdir(parents=True, exist_ok=True)
    holder = {"host": socket.gethostname(), "since": "2026-01-01 00:00:00 UTC", **holder}
    (run_dir / LOCK).write_text(json.dumps(holder))
    return run_dir / LOCK


def test_a_garbage_lock_is_refused_and_kept(tmp_path, refused):
    lock = tmp_path / "run" / LOCK
    lock.parent.mkdir()
    lock.write_text("{not json")
    line = refused(f"output_dir={tmp_path}/run")
    assert f"{lock} is not a lock mtl wrote" in line and f"delete {lock}" in line
    assert lock.read_text() == "{not json"


def test_a_lock_of_another_host_is_refused(tmp_path, refused):
    lock = lock_of(tmp_path / "run", host="elsewhere", pid=os.getpid())
    line = refused(f"output_dir={tmp_path}/run")
    assert f"in use by another training, pid {os.getpid()} on elsewhere" in line
    assert json.loads(lock.read_text())["host"] == "elsewhere"


def test_a_lock_held_by_a_running_process_is_refused(tmp_path, refused):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock_of(tmp_path / "run", pid=child.pid, start=process_start(child.pid))
        line = refused(f"output_dir={tmp_path}/run")
        assert f"pid {child.pid} on " in line and "in use by another training" in line
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("reason", ["dead", "reused"])
def test_a_stale_lock_is_taken_over_in_one_line(tmp_path, capsys, reason, compose):
    from mtl.training.loop import run

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if reason == "dead":
        child.kill()
        child.wait()
    try:  # a reused pid: running, but started at another moment than the lock says
        lock_of(tmp_path / "run", pid=child.pid, start="another-boot:1")
        run(compose(f"output_dir={tmp_path}/run"))
    finally:
        child.kill()
        child.wait()
    taken = [line for line in capsys.readouterr().err.splitlines() if "taking over" in line]
    assert taken == [
        f"mtl: taking over {tmp_path}/run from pid {child.pid} on {os.uname().nodename} "
        "(since 2026-01-01 00:00:00 UTC), which is no longer running"
    ]
    assert not (tmp_path / "run" / LOCK).exists()


def test_a_new_training_into_a_folder_holding_one_is_refused(trained, tmp_path, refused):
    before = sorted(p.name for p in trained.rglob("*"))
    line = refused(f"output_dir={trained}")
    assert f"{trained} holds another training (step_0000004)" in line
    assert f"trainer.resume={trained}" in line
    other = refused(f"trainer.resume={tmp_path}/x", f"output_dir={trained}")
    assert "no such folder" in other  # the checkpoint is checked first
    forked = copy_of(trained, tmp_path)
    line = refused(f"trainer.resume={forked}", f"output_dir={trained}")
    assert "holds another training" in line and "train into a new folder" in line
    assert sorted(p.name for p in trained.rglob("*")) == before


def test_a_garbage_wandb_run_id_is_one_line(trained, tmp_path, refused):
    run_dir = copy_of(trained, tmp_path)
    (run_dir / "wandb_run_id").write_text("../../x y\n")
    line = refused("logger=wandb", f"trainer.resume={run_dir}", f"output_dir={run_dir}")
    assert "wandb_run_id holds '../../x y', not a W&B run id" in line


def test_resume_in_its_own_folder_cuts_metrics_back_to_the_checkpoint(
    trained, tmp_path, capsys, compose
):
    """A run killed after step 4's rows were written but resumed from step 2: the rows of
    steps 3 and 4 are written once, by the resumed run."""
    from mtl.cli.job import train

    run_dir = copy_of(trained, tmp_path)
    want = [
        {k: v for k, v in r.items() if k not in TIMED}
        for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
    ]
    import shutil

    shutil.rmtree(RunLayout(run_dir).step(4))
    (run_dir / "results.json").unlink()
    train(
        compose(f"trainer.resume={run_dir}", f"output_dir={run_dir}", "trainer.checkpoint_every=2")
    )
    have = rows(run_dir)
    assert [r["step"] for r in have] == [r["step"] for r in want] == [1, 2, 3, 4, 4]
    for a, b in zip(have, want, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7)
    err = capsys.readouterr().err
    assert f"mtl: run folder {run_dir} (resuming at step 2)" in err
    assert f"mtl: run folder {run_dir}: results.json" in err


def test_a_start_into_a_folder_whose_attempt_saved_no_checkpoint_restarts_it(
    tmp_path, capsys, compose
):
    """Killed before its first checkpoint: the same command again is that run from step 0 (its
    record, `.hydra/config.yaml`, says it is the same); another config, or a folder with no
    record, is refused and left as it was."""
    from omegaconf import OmegaConf

    from mtl.training.loop import run

    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "loss": 9.0}\n{"step": 2, "lo')
    cfg = compose(f"output_dir={run_dir}")
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    before = file_digests(run_dir)
    with pytest.raises(MtlError, match=r"holds another training \(metrics.jsonl, no checkpoint"):
        run(compose(f"output_dir={run_dir}", "seed=5"))
    assert file_digests(run_dir) == before
    run(cfg)
    steps = [r["step"] for r in rows(run_dir)]
    assert steps == [1, 2, 3, 4, 4] and rows(run_dir)[0]["loss"] != 9.0
    assert "error" not in capsys.readouterr().err
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "metrics.jsonl").write_text('{"step": 1, "loss": 9.0}\n')
    before = file_digests(bare)
    with pytest.raises(MtlError, match="whose config is unknown"):
        run(compose(f"output_dir={bare}"))
    assert file_digests(bare) == before
