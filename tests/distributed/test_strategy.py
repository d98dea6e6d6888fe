"""`trainer.strategy=ddp|fsdp` as a user picks it (`mtl-train model=tiny debug=fast
logger=none trainer.strategy=...`, in-process).

accelerate runs FSDP only over the devices of a launch of several processes: on this CPU it
would run the model unsharded (one process) or as DDP (`cpu=True`, `MULTI_CPU`), whatever the
plugin says. So here the FSDP path ends in one line naming the fix before anything is built;
the FSDP training itself needs a GPU launch.
"""

from __future__ import annotations

import json

import pytest
import torch
from accelerate.state import AcceleratorState

from mtl.artifacts import RunLayout
from mtl.builders.weights import MARKER, WEIGHTS, trained_weights
from mtl.config import TrainerConfig
from mtl.training.launch.sharding import check_strategy


@pytest.fixture
def mtl_train(tmp_path, monkeypatch, train_here):
    """`mtl_train(*overrides)`: `mtl-train model=tiny debug=fast logger=none *overrides` in a
    fresh folder; returns (exit status, stderr)."""
    monkeypatch.chdir(tmp_path)

    def run(*overrides: str) -> tuple[int, str]:
        try:
            return train_here("model=tiny", "debug=fast", "logger=none", *overrides)
        finally:
            AcceleratorState._reset_state(reset_partial_state=True)

    return run


def error_line(status: int, err: str) -> str:
    assert status == 2 and "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mtl: error: "), err
    return lines[0]


def test_fsdp_without_a_device_is_refused_in_one_line(mtl_train, tmp_path):
    line = error_line(*mtl_train("trainer.strategy=fsdp"))
    assert line == (
        "mtl: error: trainer.strategy=fsdp: accelerate runs this launch as NO, not FSDP: it "
        "shards a model only over the GPUs (or other devices) of a launch of several "
        "processes; launch one process per GPU (torchrun --nproc_per_node N), or use "
        "trainer.strategy=ddp"
    )
    assert not (tmp_path / "outputs").exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["balancer=upgrad"], "balancer torchjd.aggregation.UPGrad aggregates per-task "
         "gradients of whole parameters, which trainer.strategy=fsdp shards; use a loss "
         "weighting (balancer=sum, uncertainty, dwa) or trainer.strategy=ddp"),
        (["trainer.diagnose_every=5"], "trainer.diagnose_every=5: diagnostics take per-task "
         "gradients of whole parameters, which trainer.strategy=fsdp shards; use "
         "trainer.diagnose_every=0, or trainer.strategy=ddp"),
    ],
)  # fmt: skip
def test_what_needs_whole_parameters_is_refused_under_fsdp(
    mtl_train, tmp_path, overrides, expected
):
    """Refused from the config, before any process or device is asked; diagnostics left at
    their default (each evaluation) are off under fsdp instead."""
    line = error_line(*mtl_train("trainer.strategy=fsdp", *overrides))
    assert line == f"mtl: error: {expected}"
    assert not (tmp_path / "outputs").exists()
    assert not TrainerConfig(strategy="fsdp").diagnoses and TrainerConfig().diagnoses


def test_unknown_strategy_is_refused_in_one_line(mtl_train):
    line = error_line(*mtl_train("trainer.strategy=zero3"))
    assert line == "mtl: error: trainer.strategy='zero3' is not one of ddp, fsdp"


def test_strategy_check_passes_what_accelerate_shards():
    assert TrainerConfig().strategy == "ddp"
    check_strategy("ddp", "MULTI_CPU")
    check_strategy("fsdp", "FSDP")  # what a GPU launch with the plugin gives


def test_a_checkpoint_saved_under_fsdp_gives_its_full_weights(tmp_path):
    """accelerate's FSDP plugin (full state dict) writes the weights as pytorch_model_fsdp.bin
    in place of model.safetensors: `model.init_from`, `mtl-export` and `mtl.load_model` read
    them through `trained_weights` as any checkpoint's."""
    folder = RunLayout(tmp_path / "run").step(3)
    folder.mkdir(parents=True)
    state = {"encoder.w": torch.arange(6.0).reshape(2, 3), "heads.a.b": torch.ones(2)}
    torch.save(state, folder / WEIGHTS[1])
    files = {WEIGHTS[1]: (folder / WEIGHTS[1]).stat().st_size}
    (folder / MARKER).write_text(json.dumps({"step": 3, "files": files}))
    weights, source = trained_weights(str(tmp_path / "run"))
    assert source == folder
    assert weights.keys() == state.keys()
    assert all(torch.equal(weights[k], state[k]) for k in state)
