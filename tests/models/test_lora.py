"""`model.peft=lora`: one LoRA adapter on the shared encoder, trained with the task heads.

A tiny BERT and a tiny Qwen2 (`mtl.models.tiny`) train all six task types under mixup with the
adapter; the encoder's own weights stay bit-equal, only the adapter and the heads move; a resume
ends bit-equal; the export (the adapter merged) loads without peft and predicts as the trained
model did.
"""

from __future__ import annotations

import contextlib
import copy
import io
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

import mtl
from mtl.cli.job import train
from mtl.errors import MtlError
from mtl.models import load_encoder_and_pooler
from mtl.models.lora import frozen_keys, is_adapted
from mtl.models.multitask import head_task
from mtl.models.tiny import save_tiny_model
from tests.conftest import compose_config
from tests.models.test_families import MIXUP, TASKS, input_rows, mtl_batch, trained_tasks

peft = pytest.importorskip("peft")  # the extra mtl-train[peft] (dev installs it)

# test_families' mixup run of every task type, with its export (written at the end), and LoRA
RUN = ["debug=fast", "model=minilm", f"task=[{','.join(TASKS)}]", "model.peft=lora"]
RUN += [o for o in MIXUP if o != "trainer.export=false"]


def lora_run(root: Path, model_type: str, *overrides: str):
    """A tiny `model_type` encoder saved under root, and its run with LoRA: (run results, run
    folder)."""
    model = save_tiny_model(model_type, root / "model")
    out = root / "run"
    cfg = compose_config(*RUN, f"model.name_or_path={model}", f"output_dir={out}", *overrides)
    with contextlib.redirect_stderr(io.StringIO()):
        results = train(cfg)
    (out / ".hydra").mkdir()
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")  # as Hydra writes it for mtl-train
    return results, out


@pytest.fixture(scope="module", params=["bert", pytest.param("qwen2", marks=pytest.mark.slow)])
def trained(request, tmp_path_factory):
    return lora_run(tmp_path_factory.mktemp(request.param), request.param)


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{step:07d}" / "model.safetensors")


def test_what_trains_is_peft_s_adapter_and_the_heads(trained):
    results, _ = trained
    model = results.model
    assert isinstance(model.encoder, peft.PeftModel) and is_adapted(model.encoder)
    adapter, _ = model.encoder.get_nb_trainable_parameters()
    heads = sum(p.numel() for name, p in model.named_parameters() if head_task(name))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == adapter + heads
    shared = model.shared_parameters()  # what the optimizer and the balancers see as shared
    assert shared and all(".lora_" in name for name, _ in shared)
    assert sum(p.numel() for _, p in shared) == adapter


def test_every_task_type_trains_and_only_the_adapter_and_heads_move(trained):
    results, run_dir = trained
    assert trained_tasks(run_dir) == set(TASKS)
    assert results.model.packed.supported  # mixup's steps ran packed through the adapter
    before, after = weights(run_dir, 2), weights(run_dir, 4)
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(".lora_B." in k for k in moved)  # B starts at zero: it moved from there
    assert {head_task(k) for k in moved} - {None} == set(TASKS)
    # the encoder's own weights: bit-equal to the base model's
    base, _ = load_encoder_and_pooler(results.settings.model.name_or_path)
    adapted = results.model.encoder.get_base_model().state_dict()
    own = {k.replace(".base_layer.", "."): v for k, v in adapted.items() if ".lora_" not in k}
    assert own.keys() == base.state_dict().keys()
    assert all(torch.equal(own[k], v) for k, v in base.state_dict().items())


def test_a_step_checkpoint_holds_what_trains_and_not_the_base(trained):
    results, run_dir = trained
    frozen = frozen_keys(results.model)
    saved = weights(run_dir, 4)
    assert frozen and not frozen & saved.keys()
    trainable = {n for n, p in results.model.named_parameters() if p.requires_grad}
    assert trainable <= saved.keys() <= set(results.model.state_dict())
    optimizer = torch.load(run_dir / "checkpoints" / "step_0000004" / "optimizer.bin")
    moments = [s["exp_avg"].numel() for s in optimizer["state"].values()]
    assert sum(moments) == sum(p.numel() for p in results.model.parameters() if p.requires_grad)


def test_a_resumed_run_ends_bit_equal(trained, tmp_path):
    results, run_dir = trained
    model_dir = Path(results.settings.model.name_or_path)
    resumed = tmp_path / "resumed"
    step_2 = run_dir / "checkpoints" / "step_0000002"
    with contextlib.redirect_stderr(io.StringIO()):
        train(
            compose_config(
                *RUN,
                f"model.name_or_path={model_dir}",
                f"output_dir={resumed}",
                f"trainer.resume={step_2}",
            )
        )
    expected, got = weights(run_dir, 4), weights(resumed, 4)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_the_export_needs_no_peft_and_predicts_as_the_trained_model(trained, monkeypatch):
    results, run_dir = trained
    monkeypatch.setitem(sys.modules, "peft", None)  # loading it would fail: it is not needed
    loaded = mtl.load_model(run_dir / "export")
    assert not is_adapted(loaded.model.encoder)
    results.model.eval()
    for name in ("synthetic_cls", "synthetic_tag", "synthetic_qa"):
        batch = mtl_batch(loaded, name, input_rows(name))
        with torch.no_grad():
            want = results.model.logits(batch)[name]
            got = loaded.model.logits(batch)[name]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_model_peft_without_peft_installed_is_one_line(train_here, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    code, err = train_here("debug=fast", "model.peft=lora", f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2
    assert err.strip().splitlines() == [
        "mtl: error: model.peft needs the peft package, which is not installed; install it "
        'with: pip install "mtl-train[peft]"'
    ]
    assert not (tmp_path / "run").exists()


def test_a_step_checkpoint_loads_with_the_base_it_left_out(trained):
    """mtl.load_model of a step checkpoint (it holds what trains) predicts as the run's model
    with that step's adapter and heads on its frozen base."""
    results, run_dir = trained
    loaded = mtl.load_model(run_dir / "checkpoints" / "step_0000004")
    expected = copy.deepcopy(results.model)  # its base: the base model's (checked above)
    missing, unexpected = expected.load_state_dict(weights(run_dir, 4), strict=False)
    assert not unexpected and set(missing) == frozen_keys(expected)
    expected.eval()
    for name in ("synthetic_cls", "synthetic_tag"):
        batch = mtl_batch(loaded, name, input_rows(name))
        with torch.no_grad():
            want = expected.logits(batch)[name]
            got = loaded.model.logits(batch)[name]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_init_from_a_lora_run_names_its_export(trained, tmp_path):
    _, run_dir = trained
    cfg = compose_config(
        "debug=fast", f"model.init_from={run_dir}", f"output_dir={tmp_path / 'run'}"
    )
    with pytest.raises(MtlError, match="that run trained an adapter .model.peft.; start from its "):
        train(cfg)
