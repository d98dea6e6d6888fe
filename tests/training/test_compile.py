"""trainer.compile: the compiled encoder trains as the eager one, on few compiled graphs.

The compiled run uses torch.compile's `aot_eager` backend: it traces and recompiles exactly as
`inductor` does (same guards, same dynamic-shape decisions) but runs the traced graph with
PyTorch's own kernels, so the test does not spend a minute in a C++ compiler on every graph.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mtl.config import validate
from mtl.errors import MtlError
from mtl.training.loop import run
from mtl.training.setup.speed import BUCKET, loader_settings

# One encoder layer and no packing: tracing costs seconds per layer and per graph, and packed
# batches (another call signature) would add graphs of their own.
SMALL = ["task=[synthetic_cls]", "data.pad_to_multiple_of=8", "trainer.cpu=true"]
SMALL += ["model.config.num_hidden_layers=1", "model.pack=false"]


class Widths:
    """A loop hook that keeps the padded length of every training batch."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_micro_step(self, run, progress, batch, loss) -> None:
        self.seen.append(int(batch["input_ids"].shape[1]))


def step_losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def compile_figures(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if "compile/graphs" in r]
    return row


@pytest.mark.slow  # torch.compile of a whole training
def test_compiled_encoder_trains_like_eager_on_few_graphs(make_cfg, tmp_path, capfd):
    eager_widths, compiled_widths = Widths(), Widths()
    run(make_cfg(*SMALL, output_dir=tmp_path / "eager"), hooks=[eager_widths])
    compiled_cfg = make_cfg(
        *SMALL,
        "trainer.compile=true",
        "trainer.compile_backend=aot_eager",
        output_dir=tmp_path / "compiled",
    )
    run(compiled_cfg, hooks=[compiled_widths])

    assert compiled_widths.seen == eager_widths.seen  # the same batches, 8-token buckets
    assert all(width % 8 == 0 for width in compiled_widths.seen)
    buckets = len(set(compiled_widths.seen))
    assert buckets >= 2
    eager, compiled = step_losses(tmp_path / "eager"), step_losses(tmp_path / "compiled")
    assert list(compiled) == list(eager) == [1, 2, 3, 4]
    assert list(compiled.values()) == pytest.approx(list(eager.values()), rel=1e-4, abs=1e-5)

    figures = compile_figures(tmp_path / "compiled")
    assert figures["compile/graphs"] >= 1
    # training's length changes and the evaluation's graph: fewer than one graph per bucket
    assert figures["compile/recompiles"] < buckets
    assert "torch.compile:" in capfd.readouterr().err


def test_compile_buckets_and_pinned_memory_defaults(make_cfg):
    settings = validate(make_cfg("trainer.compile=true"))
    on_cpu = loader_settings(settings, torch.device("cpu")).data
    assert (on_cpu.pad_to_multiple_of, on_cpu.pin_memory) == (BUCKET, False)
    on_gpu = loader_settings(settings, torch.device("cuda", 0)).data
    assert on_gpu.pin_memory is True
    plain = loader_settings(validate(make_cfg()), torch.device("cpu")).data
    assert plain.pad_to_multiple_of is None
    chosen = validate(make_cfg("trainer.compile=true", "data.pad_to_multiple_of=16"))
    assert loader_settings(chosen, torch.device("cuda")).data.pad_to_multiple_of == 16


def test_unknown_compile_backend_is_one_line(make_cfg):
    with pytest.raises(MtlError, match="trainer.compile_backend='nope' is not a torch.compile"):
        run(make_cfg(*SMALL, "trainer.compile=true", "trainer.compile_backend=nope"))
