"""What a run folder holds is never lost or misread, as a user types the commands (`mtl-train`
in-process): a refused command leaves every file as it was (`.hydra/` included), Ctrl-C keeps the
progress, and `trainer.resume=<run>` alone continues the run as it was configured."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mtl.training.setup import run as setup_run
from tests.conftest import file_digests

COMMON = (
    "model=tiny",
    "debug=fast",
    "task=[synthetic_cls,synthetic_tag]",
    "trainer.progress_bar=false",
    "trainer.export=false",
)


@pytest.fixture
def trained(tmp_path, train_here) -> Path:
    """A finished 4-step run trained with seed 7 (not the default)."""
    run = tmp_path / "run"
    code, err = train_here(*COMMON, "seed=7", f"hydra.run.dir={run}")
    assert code == 0, err[-2000:]
    return run


@pytest.mark.parametrize(
    "command",
    [
        ["hydra.run.dir={run}"],  # another training into it
        ["trainer.resume={run}", "hydra.run.dir={run}", "seed=0"],  # a resume that changes seed
        ["trainer.resume={run}", "task.synthetic_cls.max_length=16"],
        ["trainer.resume={run}", "loader=mixup"],
    ],
)
def test_a_refused_command_leaves_the_run_folder_as_it_was(trained, train_here, command):
    before = file_digests(trained)
    code, err = train_here(*COMMON, *(arg.format(run=trained) for arg in command))
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("mtl: error: "), err[-2000:]
    assert "Traceback" not in err
    if "trainer.resume={run}" in command:
        assert "the run trained with" in lines[-1] and "drop that override" in lines[-1]
    else:
        assert "holds another training" in lines[-1]
    assert file_digests(trained) == before


class SignalAt:
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, run, progress):
        if progress.state.step == self.step:
            signal.raise_signal(signal.SIGINT)


@pytest.mark.slow  # two whole runs; tests/training/test_loop.py keeps a Ctrl-C resume fast
def test_ctrl_c_then_resume_alone_ends_bit_equal(tmp_path, train_here, monkeypatch):
    """Ctrl-C at a random step, then `trainer.resume=<run>` and nothing else: the run ends
    with the weights of the run never stopped, bit for bit."""
    options = (*COMMON, "seed=3", "loader=mixup", "trainer.max_steps=10", "trainer.epochs=9")
    full, part = tmp_path / "full", tmp_path / "part"
    assert train_here(*options, f"hydra.run.dir={full}")[0] == 0
    step = random.randrange(1, 10)
    configured = setup_run.configured_hooks
    with monkeypatch.context() as patch:
        patch.setattr(
            setup_run,
            "configured_hooks",
            lambda *args: [*configured(*args), SignalAt(step)],
        )
        code, err = train_here(*options, f"hydra.run.dir={part}")
    assert code == 130 and "received SIGINT" in err and "Traceback" not in err
    assert not (part / "results.json").exists()
    code, err = train_here(f"trainer.resume={part}")
    assert code == 0, err[-2000:]
    assert f"(resuming at step {step})" in err
    want, got = (load_file(sorted(d.glob("checkpoints/step_*"))[-1] / "model.safetensors")
                 for d in (full, part))  # fmt: skip
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want), f"stopped at step {step}"


def test_labels_are_the_ones_the_run_trained_with(tmp_path, train_here, monkeypatch):
    """A user relabels `cat` to `tabby` in the training CSV after training: mtl-export and
    mtl-predict model=<run> still name the classes the model learnt (they read no data file)."""
    import csv
    import json

    import mtl
    from mtl.cli.export import main as export_main
    from mtl.cli.predict import main as predict_main

    monkeypatch.chdir(tmp_path)
    rows = [(f"{'purrs softly' if i % 2 else 'barks loudly'} {i}", "cat" if i % 2 else "dog")
            for i in range(40)]  # fmt: skip
    for split in ("train", "dev"):
        with open(f"{split}.csv", "w", newline="") as f:
            csv.writer(f).writerows([("text", "label"), *rows])
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "pets.yaml").write_text(
        "# @package task.pets\ntype: sequence_classification\n"
        "source: {train: train.csv, dev: dev.csv}\n"
    )
    options = ("model=tiny", "debug=fast", "task=[pets]", "trainer.progress_bar=false")
    code, err = train_here("--config-dir", "conf", *options, "hydra.run.dir=run")
    assert code == 0, err[-2000:]
    for split in ("train", "dev"):
        text = Path(f"{split}.csv").read_text()
        Path(f"{split}.csv").write_text(text.replace(",cat", ",tabby"))
    export_main(["run", "again"])
    assert json.loads(Path("again/mtl_tasks.json").read_text())["tasks"]["pets"]["label_names"] == [
        "cat",
        "dog",
    ]
    Path("in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t, _ in rows))
    predict_main(["model=run", "task=pets", "input=in.jsonl", "output=out.jsonl"])
    predicted = {json.loads(line)["prediction"] for line in Path("out.jsonl").open()}
    assert predicted and predicted <= {"cat", "dog"}
    assert mtl.load_model("run").tasks["pets"].label_names == ["cat", "dog"]  # what predict reads
