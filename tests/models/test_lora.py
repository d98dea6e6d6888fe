"""`model.peft=lora`: LoRA on the frozen encoder, one adapter shared by every task or one per
task (`model.peft={per_task: true}`), trained with the task heads.

A tiny BERT and a tiny Qwen2 (`mtl.models.tiny`) train all six task types under mixup, each way;
the encoder's own weights stay bit-equal, only the adapters and the heads move; a step of one task
leaves the other tasks' adapters bit-equal; a resume ends bit-equal; the export's adapters load
in plain peft + transformers and predict as the trained model did, and a merged export (no peft
needed) gives the unmerged model's logits.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

import mtl
from mtl.artifacts import RunLayout
from mtl.cli.job import train
from mtl.errors import MtlError
from mtl.inference.export import export_model
from mtl.models import load_encoder_and_pooler
from mtl.models.lora import frozen_keys, is_adapted
from mtl.models.tiny import save_tiny_model
from tests.conftest import compose_config
from tests.models.test_families import MIXUP, TASKS, input_rows, mtl_batch, trained_tasks

peft = pytest.importorskip("peft")  # the extra mtl-train[peft] (dev installs it)

# test_families' mixup run of every task type, with its export (written at the end), and LoRA
RUN = ["debug=fast", "model=minilm", f"task=[{','.join(TASKS)}]", "model.peft=lora"]
RUN += [o for o in MIXUP if o != "trainer.export=false"]


PER_TASK = "model.peft={per_task: true}"
ADAPTER = re.compile(r"\.lora_[AB]\.([^.]+)\.")  # a per-task adapter's key names its task


def lora_run(root: Path, model_type: str, *overrides: str, run: tuple = tuple(RUN)):
    """A tiny `model_type` encoder saved under root, and its run with LoRA: (run results, run
    folder, the overrides)."""
    model = root / "model"
    if not model.exists():
        save_tiny_model(model_type, model)
    out = root / "run"
    cfg = compose_config(*run, f"model.name_or_path={model}", f"output_dir={out}", *overrides)
    with contextlib.redirect_stderr(io.StringIO()):
        results = train(cfg)
    (out / ".hydra").mkdir()
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")  # as Hydra writes it for mtl-train
    return results, out, overrides


@pytest.fixture(
    scope="module",
    params=[
        ("bert", "shared"),
        ("bert", "per_task"),
        pytest.param(("qwen2", "shared"), marks=pytest.mark.slow),
        pytest.param(("qwen2", "per_task"), marks=pytest.mark.slow),
    ],
    ids=lambda p: "-".join(p),
)
def trained(request, tmp_path_factory):
    model_type, mode = request.param
    root = tmp_path_factory.mktemp(model_type)
    return lora_run(root, model_type, *([PER_TASK] if mode == "per_task" else []))


def per_task(trained) -> bool:
    return PER_TASK in trained[2]


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(RunLayout(run_dir).step(step) / "model.safetensors")


def test_what_trains_is_peft_s_adapters_and_the_heads(trained):
    results, _, _ = trained
    model = results.model
    assert isinstance(model.encoder, peft.PeftModel) and is_adapted(model.encoder)
    adapter, _ = model.encoder.get_nb_trainable_parameters()
    heads = sum(p.numel() for n, p in model.named_parameters() if model.owner(n).part == "head")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == adapter + heads
    shared = model.shared_parameters()  # what the optimizer and the balancers see as shared
    if not per_task(trained):
        assert shared and all(".lora_" in name for name, _ in shared)
        assert sum(p.numel() for _, p in shared) == adapter
        return
    assert shared == [] and set(model.encoder.peft_config) == set(TASKS)
    owned = 0
    for task in TASKS:  # a task's own: its head and its adapter, nothing of another task's
        names = [n for n, _ in model.task_parameters(task)]
        lora = [n for n in names if ".lora_" in n]
        assert lora and {ADAPTER.search(n)[1] for n in lora} == {task}
        assert {model.owner(n) for n in names} == {(task, "head"), (task, "adapter")}
        owned += sum(p.numel() for n, p in model.task_parameters(task) if n in lora)
    assert owned == adapter


def test_every_task_type_trains_and_only_the_adapters_and_heads_move(trained):
    results, run_dir, _ = trained
    assert trained_tasks(run_dir) == set(TASKS)
    assert results.model.packed.supported  # mixup's steps ran packed through the adapter
    before, after = weights(run_dir, 2), weights(run_dir, 4)
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(".lora_B." in k for k in moved)  # B starts at zero: it moved from there
    owners = [results.model.owner(k) for k in moved]
    assert {task for task, part in owners if part == "head"} == set(TASKS)
    if per_task(trained):  # every task's adapter trained, each through its own rows
        assert {ADAPTER.search(k)[1] for k in moved if ".lora_B." in k} == set(TASKS)
    # the encoder's own weights: bit-equal to the base model's
    base, _ = load_encoder_and_pooler(results.settings.model.name_or_path)
    adapted = results.model.encoder.get_base_model().state_dict()
    own = {k.replace(".base_layer.", "."): v for k, v in adapted.items() if ".lora_" not in k}
    assert own.keys() == base.state_dict().keys()
    assert all(torch.equal(own[k], v) for k, v in base.state_dict().items())


def test_a_step_checkpoint_holds_what_trains_and_not_the_base(trained):
    results, run_dir, _ = trained
    frozen = frozen_keys(results.model)
    saved = weights(run_dir, 4)
    assert frozen and not frozen & saved.keys()
    trainable = {n for n, p in results.model.named_parameters() if p.requires_grad}
    assert trainable <= saved.keys() <= set(results.model.state_dict())
    optimizer = torch.load(RunLayout(run_dir).step(4) / "optimizer.bin")
    moments = [s["exp_avg"].numel() for s in optimizer["state"].values()]
    assert sum(moments) == sum(p.numel() for p in results.model.parameters() if p.requires_grad)


def test_a_resumed_run_ends_bit_equal(trained, tmp_path):
    results, run_dir, overrides = trained
    model_dir = Path(results.settings.model.name_or_path)
    resumed = tmp_path / "resumed"
    step_2 = RunLayout(run_dir).step(2)
    with contextlib.redirect_stderr(io.StringIO()):
        train(
            compose_config(
                *RUN,
                f"model.name_or_path={model_dir}",
                f"output_dir={resumed}",
                f"trainer.resume={step_2}",
                *overrides,
            )
        )
    expected, got = weights(run_dir, 4), weights(resumed, 4)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_the_export_loads_in_peft_and_transformers_and_predicts_as_mtl_does(trained):
    """The run's export (written at its end) holds the adapters in peft's format and names the
    base: plain transformers + peft give the trained encoder's hidden states, and
    mtl.load_model (what mtl-predict reads) the trained model's logits."""
    from transformers import AutoModel

    results, run_dir, _ = trained
    export = run_dir / "export"
    meta = json.loads((export / "mtl_tasks.json").read_text())["peft"]
    assert meta["base_model"] == results.settings.model.name_or_path
    assert meta["per_task"] is per_task(trained)
    assert not (export / "model.safetensors").exists()  # adapters only, not the encoder
    loaded = mtl.load_model(export)
    results.model.eval()
    for name in ("synthetic_cls", "synthetic_tag", "synthetic_qa"):
        batch = mtl_batch(loaded, name, input_rows(name))
        folder = export / (f"adapters/{name}" if per_task(trained) else "adapter")
        base = AutoModel.from_pretrained(meta["base_model"])
        plain = peft.PeftModel.from_pretrained(base, folder).eval()
        names = ("input_ids", "attention_mask", "token_type_ids")
        inputs = {k: batch[k] for k in names if k in batch}
        with torch.no_grad():
            want = results.model.encode(batch, name)
            got = plain(**inputs).last_hidden_state
            mask = batch["attention_mask"].bool()  # padding's hidden states are not read
            torch.testing.assert_close(got[mask], want[mask], rtol=0, atol=1e-5)
            want = results.model.logits(batch)[name]
            torch.testing.assert_close(loaded.model.logits(batch)[name], want, rtol=0, atol=1e-5)


def test_a_merged_export_needs_no_peft_and_gives_the_unmerged_logits(
    trained, tmp_path, monkeypatch
):
    """merge=true: a shared adapter merged into the export's encoder; adapters per task: each
    task's transformers model with its adapter merged."""
    from transformers import AutoModelForSequenceClassification

    results, run_dir, _ = trained
    reference = mtl.load_model(run_dir / "export")  # its tasks and tokenizer, to batch rows
    with contextlib.redirect_stderr(io.StringIO()):
        out = export_model(run_dir, tmp_path / "merged", merge=True)
    results.model.eval()
    monkeypatch.setitem(sys.modules, "peft", None)  # loading it would fail: it is not needed
    if per_task(trained):
        hf = AutoModelForSequenceClassification.from_pretrained(out / "synthetic_cls").eval()
        batch = mtl_batch(reference, "synthetic_cls", input_rows("synthetic_cls"))
        with torch.no_grad():
            got = hf(**results.model.adapter.encoder_inputs(batch)).logits
            want = results.model.logits(batch)["synthetic_cls"]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        return
    loaded = mtl.load_model(out)
    assert not is_adapted(loaded.model.encoder)
    for name in ("synthetic_cls", "synthetic_tag", "synthetic_qa"):
        batch = mtl_batch(loaded, name, input_rows(name))
        with torch.no_grad():
            want = results.model.logits(batch)[name]
            got = loaded.model.logits(batch)[name]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def export_naming_base(run_dir: Path, tmp_path: Path, base: Path) -> Path:
    """A copy of the run's export whose mtl_tasks.json names `base` as its base model."""
    export = shutil.copytree(run_dir / "export", tmp_path / "export")
    meta = json.loads((export / "mtl_tasks.json").read_text())
    meta["peft"]["base_model"] = str(base)
    (export / "mtl_tasks.json").write_text(json.dumps(meta))
    return export


def test_an_export_whose_base_is_gone_is_one_line(trained, tmp_path):
    _, run_dir, _ = trained
    export = export_naming_base(run_dir, tmp_path, tmp_path / "moved")
    with pytest.raises(MtlError) as err:
        mtl.load_model(export)
    assert str(err.value) == (
        f"model={export}: its base model {tmp_path / 'moved'} is not there (moved or deleted): "
        "the export holds adapters for it (mtl_tasks.json's peft.base_model); put the base "
        "model there, or export the run again where it is"
    )


def test_a_base_on_no_disk_is_written_into_the_export(tmp_path):
    """model.random_init: the base exists only in the run, so the export holds it (`base/`,
    the frozen weights without the adapter) and predicts as the trained model."""
    out = tmp_path / "run"
    cfg = compose_config(
        "debug=fast", "task=[synthetic_cls]", "model.peft=lora", f"output_dir={out}"
    )
    with contextlib.redirect_stderr(io.StringIO()):
        results = train(cfg)
    meta = json.loads((out / "export" / "mtl_tasks.json").read_text())["peft"]
    assert meta["base_model"] == "base" and (out / "export" / "base" / "config.json").is_file()
    loaded = mtl.load_model(out / "export")
    results.model.eval()
    batch = mtl_batch(loaded, "synthetic_cls", input_rows("synthetic_cls"))
    with torch.no_grad():
        want = results.model.logits(batch)["synthetic_cls"]
        got = loaded.model.logits(batch)["synthetic_cls"]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_mtl_export_of_a_run_started_from_another_writes_its_base(tmp_path):
    """model.init_from with LoRA: the base is the other run's encoder, on no disk or hub, so
    mtl-export (as the run's own export) writes it to `base/` rather than naming
    model.name_or_path."""
    first, second = tmp_path / "first", tmp_path / "second"
    model = save_tiny_model("bert", tmp_path / "model")
    common = ["debug=fast", "model=minilm", f"model.name_or_path={model}", "task=[synthetic_cls]"]
    common.append("trainer.export=false")
    with contextlib.redirect_stderr(io.StringIO()):
        train(compose_config(*common, f"output_dir={first}"))
        cfg = compose_config(
            *common, "model.peft=lora", f"model.init_from={first}", f"output_dir={second}"
        )
        train(cfg)
    (second / ".hydra").mkdir()
    OmegaConf.save(cfg, second / ".hydra" / "config.yaml")
    with contextlib.redirect_stderr(io.StringIO()):
        out = export_model(second, tmp_path / "export")
    assert json.loads((out / "mtl_tasks.json").read_text())["peft"]["base_model"] == "base"
    assert (out / "base" / "config.json").is_file()


def test_a_step_of_one_task_leaves_the_other_tasks_adapters_bit_equal(tmp_path):
    """Adapters per task, round_robin (one task a step) under UPGrad (no shared parameter: each
    task's gradient goes to its own adapter and head): from one step's checkpoint to the next,
    what moved is the adapter and head of that step's task, and nothing else."""
    run = ["debug=fast", "model=minilm", "task=[synthetic_cls,synthetic_tag,synthetic_reg]"]
    run += ["loader=round_robin", "balancer=upgrad", "data.max_examples=24", "trainer.max_steps=4"]
    run += ["trainer.checkpoint_every=1", "trainer.keep_last=null", "trainer.log_every=1"]
    run += ["trainer.export=false", PER_TASK]
    results, run_dir, _ = lora_run(tmp_path, "bert", run=tuple(run))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "loss" in r]  # a training window each step (and evaluations)
    step_tasks = {r["step"]: {k.split("/")[1] for k in r if k.startswith("loss/")} for r in rows}
    for step in (2, 3, 4):
        before, after = weights(run_dir, step - 1), weights(run_dir, step)
        moved = {k for k in before if not torch.equal(before[k], after[k])}
        owners = {results.model.owner(k).task for k in moved}
        assert len(step_tasks[step]) == 1 and owners == step_tasks[step], (step, owners)
        assert any(".lora_B." in k for k in moved)


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
    results, run_dir, _ = trained
    loaded = mtl.load_model(RunLayout(run_dir).step(4))
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


def test_init_from_a_lora_run_or_its_adapters_names_the_merged_export(trained, tmp_path):
    _, run_dir, _ = trained
    for source, says in [
        (run_dir, "that run trained an adapter .model.peft.; start from its export with the "),
        (run_dir / "export", "is an export of LoRA adapters .model.peft., not of the encoder"),
    ]:
        cfg = compose_config("debug=fast", f"model.init_from={source}", f"output_dir={tmp_path}")
        with pytest.raises(MtlError, match=says):
            train(cfg)
    assert not list(tmp_path.iterdir())


def _other_base(source: Path, out: Path) -> Path:
    """A copy of model folder `source` with other weights of the same shapes."""
    from safetensors.torch import save_file

    shutil.copytree(source, out)
    tensors = load_file(out / "model.safetensors")
    save_file({k: v + 0.01 for k, v in tensors.items()}, out / "model.safetensors")
    return out


def test_an_export_on_another_base_of_the_same_shape_is_one_line(trained, tmp_path):
    """The export names its base by path: another model of the same shape put there (here: the
    export edited to name it) is refused by the digest of the base's frozen weights."""
    results, run_dir, _ = trained
    other = _other_base(Path(results.settings.model.name_or_path), tmp_path / "other")
    export = export_naming_base(run_dir, tmp_path, other)
    with pytest.raises(MtlError) as err:
        mtl.load_model(export)
    assert str(err.value) == (
        f"model={export}: its base model {other} is not the one the adapters were trained on "
        "(its weights' digest is not the one the export recorded): the export holds adapters "
        "for it (mtl_tasks.json's peft.base_model); put the base model there, or export the run "
        "again where it is"
    )


def test_an_export_whose_base_folder_was_replaced_is_one_line(tmp_path):
    """`base/` of a random-init LoRA run replaced by another model of its shape: its files'
    digests say so; with the digests rewritten to match, the base's weights digest still does."""
    from mtl.artifacts import digests_of

    out = tmp_path / "run"
    cfg = compose_config(
        "debug=fast", "task=[synthetic_cls]", "model.peft=lora", f"output_dir={out}"
    )
    with contextlib.redirect_stderr(io.StringIO()):
        train(cfg)
    export = out / "export"
    other = _other_base(export / "base", tmp_path / "other")
    shutil.rmtree(export / "base")
    shutil.copytree(other, export / "base")
    with pytest.raises(MtlError, match=r"base/model.safetensors is not the file the export wrote"):
        mtl.load_model(export)
    meta = json.loads((export / "mtl_tasks.json").read_text())
    meta["digests"] = digests_of(export)
    (export / "mtl_tasks.json").write_text(json.dumps(meta))
    with pytest.raises(MtlError, match=r"its base model base is not the one the adapters were"):
        mtl.load_model(export)


def test_a_resume_on_another_base_of_the_same_shape_is_one_line(tmp_path, train_here):
    """A step checkpoint holds the adapters, not the base: a resume reads model.name_or_path
    again, and another model of the same shape there is refused; no file of the run changes."""
    from tests.conftest import file_digests

    model = save_tiny_model("bert", tmp_path / "model")
    run = tmp_path / "run"
    args = ["debug=fast", "task=[synthetic_cls]", "model.peft=lora", "model=minilm"]
    args += [f"model.name_or_path={model}", "trainer.export=false"]
    code, err = train_here(*args, f"hydra.run.dir={run}")
    assert code == 0, err
    shutil.rmtree(model)
    save_tiny_model("bert", model, seed=1)
    before = file_digests(run)
    code, err = train_here(f"trainer.resume={run}")
    assert code == 2 and err.count("\n") == 1, err
    assert f"the base model {model} is not the one the checkpoint's adapters were trained" in err
    assert file_digests(run) == before


def test_a_single_target_module_is_its_name_not_its_letters():
    from mtl.models.lora import peft_config

    assert peft_config({"target_modules": "query"}).target_modules == {"query"}
    assert peft_config({"target_modules": ["query", "value"]}).target_modules == {"query", "value"}


def test_the_adapters_readme_says_what_the_export_is_and_how_to_load_it(trained):
    """Not peft's empty model-card template: the adapters, their folders, their base."""
    results, run_dir, _ = trained
    meta = json.loads((run_dir / "export" / "mtl_tasks.json").read_text())["peft"]
    root = "adapters" if per_task(trained) else "adapter"
    text = (run_dir / "export" / root / "README.md").read_text()
    assert text.startswith("# LoRA adapters of an mtl export")
    for name, folder in meta["adapters"].items():
        assert f"- `{name}`: `{folder}/`" in text
    assert f"base model `{meta['base_model']}`" in text and "mtl.load_model" in text
    assert "More Information Needed" not in text  # peft's template
