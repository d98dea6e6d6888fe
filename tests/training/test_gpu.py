"""The GPU paths (`pytest -m gpu`, run by scripts/gpu_check.sh): skipped without a CUDA device.

Packing under bf16 autocast, AMP training (bf16, fp16) with the fused AdamW and pinned batches,
and torch.compile with the inductor backend against the eager encoder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from mtl.models import load_encoder
from mtl.models.packing import PackedEncoder, Packing
from mtl.training.loop import run
from mtl.training.setup.speed import graphs_compiled

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
TINY["intermediate_size"] = 64
GPU = ["trainer.cpu=false", "task=[synthetic_cls]"]


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


class Seen:
    """A loop hook that keeps what the GPU paths should have done."""

    def __init__(self) -> None:
        self.devices: set[str] = set()
        self.fused: bool | None = None
        self.packed: bool | None = None
        self.widths: list[int] = []
        self.graphs: list[int] = []  # graphs torch had compiled at each optimizer step's end

    def on_step_end(self, run, progress) -> None:
        self.graphs.append(graphs_compiled())

    def on_micro_step(self, run, progress, batch, loss) -> None:
        self.devices.add(batch["input_ids"].device.type)
        self.widths.append(int(batch["input_ids"].shape[1]))
        assert torch.isfinite(loss)

    def on_train_end(self, run, progress) -> None:
        self.fused = bool(run.optimizer.optimizer.defaults.get("fused"))
        packed = run.accelerator.unwrap_model(run.model).packed
        self.packed = None if packed is None else packed.supported


def test_packed_hidden_states_equal_padded_under_bf16_autocast():
    torch.manual_seed(0)
    encoder = load_encoder(random_init=True, config=TINY).cuda().eval()
    lengths = torch.tensor([5, 30, 9, 17, 3, 28, 12, 6])
    mask = (torch.arange(32)[None, :] < lengths[:, None]).long().cuda()
    inputs = {"input_ids": torch.randint(5, 1000, mask.shape, device="cuda") * mask}
    inputs["attention_mask"] = mask
    packing = Packing(mask)
    assert packing.worth_it()
    packed = PackedEncoder(encoder)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        padded_states = encoder(**inputs).last_hidden_state.float()
        packed_states = packing.unpack(packed.run(encoder, inputs, packing)).float()
    keep = mask.bool()
    assert (padded_states[keep] - packed_states[keep]).abs().max() < 5e-2  # bf16 rounding
    assert packed.check(encoder, inputs, packing)  # the fp32 check still accepts the encoder


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_amp_training_with_fused_adamw_and_packing(make_cfg, tmp_path, precision):
    seen = Seen()
    cfg = make_cfg(
        "trainer.cpu=false",
        f"trainer.mixed_precision={precision}",
        "loader=mixup",
        "sampler=random",
    )
    run(cfg, hooks=[seen])
    assert seen.devices == {"cuda"}
    assert seen.fused is True
    assert seen.packed is True  # mixup batches were packed, and matched the padded call
    losses = [r["loss"] for r in metrics(tmp_path / "run") if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)


def test_inductor_compile_matches_eager_on_few_graphs(make_cfg, tmp_path, monkeypatch):
    """Three epochs over the same 4 batches (3 widths, some packed): the compiled losses are
    eager's, and once the first epoch has met every width and call (training and evaluation),
    the later epochs compile nothing (a guard that fails at every step, on the step's number
    say, would compile again each step), so the run compiles fewer graphs than it has steps."""
    import torch._inductor.config

    # Inductor draws dropout from its own generator: on an H200 the compiled losses differed by
    # up to 8% from the first step. Eager's random ops make the masks equal, so the losses
    # compare the compiled kernels alone.
    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)
    small = [*GPU, "data.pad_to_multiple_of=8", "trainer.epochs=3", "trainer.max_steps=12"]
    eager, compiled = Seen(), Seen()
    run(make_cfg(*small, output_dir=tmp_path / "eager"), hooks=[eager])
    run(
        make_cfg(*small, "trainer.compile=true", output_dir=tmp_path / "compiled"), hooks=[compiled]
    )
    assert compiled.widths == eager.widths and len(compiled.widths) == 12
    assert len(set(compiled.widths[:4])) >= 3 and compiled.widths[4:8] != compiled.widths[:4]
    loss = {
        name: [r["loss"] for r in metrics(tmp_path / name) if "loss" in r]
        for name in ("eager", "compiled")
    }
    assert loss["compiled"] == pytest.approx(loss["eager"], rel=1e-3, abs=1e-4)
    assert len(set(compiled.graphs[4:])) == 1, compiled.graphs  # epochs 2 and 3: no new graph
    (row,) = [r for r in metrics(tmp_path / "compiled") if "compile/graphs" in r]
    assert 1 <= row["compile/graphs"] < len(compiled.widths)
