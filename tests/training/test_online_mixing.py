"""`loader.online` in training: the weights move with what the run measures, are logged as
`mix_weight/<task>`, and a run resumed from a checkpoint ends as the run never stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from mtl.artifacts import RunLayout
from mtl.reporting.figures import read_rows, run_figures
from mtl.reporting.workspace import folder_spec, spec_keys
from mtl.training.loop import run

ONLINE = [
    "loader.online={policy:exp3,update_every:2,options:{exploration:0.2}}",
    "trainer.max_steps=12",
    "trainer.epochs=3",
    "trainer.log_every=2",
    "data.max_examples=96",
]


def mix_weights(run_dir: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k.split("/", 1)[1]: v for k, v in r.items() if k.startswith("mix_weight/")}
        for r in rows
        if "loss" in r
    ]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    last = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    return load_file(last / "model.safetensors")


@pytest.mark.parametrize(
    "loader",
    [pytest.param("loader=random", marks=pytest.mark.slow), "loader=mixup"],
)
def test_exp3_moves_the_weights_and_a_resumed_run_ends_bit_equal(make_cfg, tmp_path, loader):
    """loader=random (one task a step) and loader=mixup (each step's task batches split by the
    weights): the weights move, and a run resumed mid-epoch ends bit-equal."""
    full = tmp_path / "full"
    cfg = make_cfg(loader, *ONLINE, output_dir=full)
    run(cfg)
    weights = mix_weights(full)
    assert len(weights) == 6
    tasks = sorted(weights[0])
    assert tasks == ["synthetic_cls", "synthetic_reg", "synthetic_tag"]
    assert all(sum(w.values()) == pytest.approx(1.0) for w in weights)
    assert len({tuple(w[t] for t in tasks) for w in weights}) > 1  # they moved
    rows = [json.loads(line) for line in (full / "metrics.jsonl").read_text().splitlines()]
    rewards = [{t: r.get(f"mix_policy/{t}") for t in tasks} for r in rows if "loss" in r]
    assert all(v > 0 for v in rewards[-1].values())  # exp3's smoothed rewards, logged
    assert rewards[-1] != rewards[-2]
    # mtl-report draws them beside the weights; the W&B workspace has a panel of each
    panels = run_figures(read_rows(full / "metrics.jsonl"))["report_mixing"].axes[: len(tasks)]
    assert sorted(ax.get_title() for ax in panels) == tasks
    for ax in panels:  # a task's figure from the first window that drew it
        key = f"mix_policy/{ax.get_title()}"
        assert list(ax.get_lines()[0].get_ydata()) == [r[key] for r in rows if key in r]
    (full / ".hydra").mkdir()  # as mtl-train writes it
    OmegaConf.save(cfg, full / ".hydra" / "config.yaml")
    keys = spec_keys(folder_spec("e", "p", run=full))["history"]
    assert {f"mix_policy/{t}" for t in tasks} <= keys <= set().union(*map(set, rows))
    part = tmp_path / "part"
    every = ["trainer.checkpoint_every=5", "trainer.keep_last=null"]
    run(make_cfg(loader, *ONLINE, *every, output_dir=part))
    resumed = tmp_path / "resumed"
    checkpoint = RunLayout(part).step(5)
    run(make_cfg(loader, *ONLINE, f"trainer.resume={checkpoint}", output_dir=resumed))
    assert mix_weights(resumed)[-3:] == mix_weights(full)[-3:]
    want, got = final_weights(full), final_weights(resumed)
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)


def _edit_loader(state):
    state["online"]["weights"] = [-1.0, 1.0, 1.0]


def _edit_update(state):
    state["online"]["plan"]["updates"].append([10**6, 99, [1 / 3] * 3])


def _edit_window(state):
    state["mixing"] = [1, 2, 3]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_edit_loader, "the weights are [-1.0, 1.0, 1.0], not 3 numbers >= 0 summing to 1"),
        (_edit_update, "an update of the plan is at slot 1000000, number 99"),
        (_edit_window, "the online-mixing window is [1, 2, 3], not a mapping"),
    ],
)
def test_a_checkpoint_whose_mixing_state_is_out_of_range_is_refused(make_cfg, tmp_path, edit, says):
    """The marker rewritten to match (as one who knew the format would): the state itself is
    checked, the resume refused in one line naming the checkpoint, no file of the run changed."""
    from mtl.errors import MtlError
    from tests.conftest import file_digests, resealed

    part = tmp_path / "part"
    every = ["trainer.checkpoint_every=5", "trainer.keep_last=null"]
    run(make_cfg("loader=mixup", *ONLINE, *every, output_dir=part))
    checkpoint = RunLayout(part).step(5)
    for path in checkpoint.glob("custom_checkpoint_*.pkl"):
        state = torch.load(path, weights_only=True)
        if ("online" in state) == (edit is not _edit_window):
            edit(state)
            torch.save(state, path)
    resealed(checkpoint)
    before = file_digests(tmp_path)
    resumed = tmp_path / "resumed"
    with pytest.raises(MtlError) as err:
        run(make_cfg("loader=mixup", *ONLINE, f"trainer.resume={checkpoint}", output_dir=resumed))
    message = str(err.value)
    assert message.startswith(f"trainer.resume={checkpoint}: checkpoint {checkpoint} holds a ")
    assert says in message and "\n" not in message
    assert file_digests(tmp_path) == before
