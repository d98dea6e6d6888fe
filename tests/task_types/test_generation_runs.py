"""Generation tasks in every part of a run, as a user types it: two generation tasks (the bundled
synthetic_gen and pydoc_heading) on a tiny decoder under every loader and sampler, a mixup step
packed equal to padded, shared and per-task LoRA (peft's export format; merge=true a plain causal
LM), an exact resume after Ctrl-C, and mtl-dry-run over them."""

from __future__ import annotations

import itertools
import json
import random
import signal

import pytest
import torch
from safetensors.torch import load_file

from mtl.builders.loaders import build_composite_loader, build_train_loaders
from mtl.builders.model import build_model
from mtl.builders.tasks import build_tasks
from mtl.config import validate
from mtl.models.packing import Packing
from mtl.models.tiny import save_tiny_model
from mtl.training.loop import run
from tests.training.test_loop import SignalAt, last_checkpoint, read_metrics

SLOW = pytest.mark.slow
TASKS = ["synthetic_gen", "pydoc_heading"]


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """A tiny GPT-2 (its LM head tied to its embeddings: one head every task shares)."""
    return save_tiny_model("gpt2", tmp_path_factory.mktemp("gpt2") / "model")


@pytest.fixture(scope="module")
def untied(tmp_path_factory):
    """A tiny Qwen2 (an LM head of its own: one per task)."""
    return save_tiny_model("qwen2", tmp_path_factory.mktemp("qwen2") / "model")


def generating(decoder) -> list[str]:
    small = [
        f"task.{t}.{k}={v}" for t in TASKS for k, v in (("generate_rows", 4), ("max_new_tokens", 3))
    ]
    return [
        f"task=[{','.join(TASKS)}]",
        f"model.name_or_path={decoder}",
        "model.random_init=true",
        *small,
    ]


def trained_every_task(run_dir) -> None:
    rows = read_metrics(run_dir)
    for task in TASKS:
        assert any(r.get(f"loss/{task}", 0) > 0 for r in rows), task
        assert any(f"eval/{task}/exact_match" in r for r in rows), task


@pytest.mark.parametrize(
    "loader",
    [
        "mixup",
        pytest.param("random", marks=SLOW),
        pytest.param("round_robin", marks=SLOW),
        pytest.param("sequential", marks=SLOW),
    ],
)
def test_generation_tasks_train_under_every_loader(make_cfg, decoder, tmp_path, loader):
    run(make_cfg(*generating(decoder), f"loader={loader}", "trainer.max_steps=6"))
    trained_every_task(tmp_path / "run")


@pytest.mark.parametrize(
    "sampler", [pytest.param("random", marks=SLOW), pytest.param("token_budget", marks=SLOW)]
)
def test_generation_tasks_train_under_every_sampler(make_cfg, decoder, tmp_path, sampler):
    """(block_shuffle, the default, is the loaders' above: it sorts by `length`, the prompt's and
    the completion's tokens together.)"""
    run(make_cfg(*generating(decoder), "loader=mixup", f"sampler={sampler}", "trainer.max_steps=6"))
    trained_every_task(tmp_path / "run")


@pytest.mark.parametrize("model", ["decoder", "untied"])
def test_a_mixup_step_of_generation_tasks_is_the_same_packed(make_cfg, request, model):
    """Packed (causal, per row: no token sees or predicts another row's) = padded, per task."""
    cfg = make_cfg(*generating(request.getfixturevalue(model)), "loader=mixup", "sampler=random")
    settings = validate(cfg)
    tasks, tokenizer = build_tasks(settings, 0)
    loaders = build_train_loaders(tasks, settings, cfg.sampler, seed=0)
    loader = build_composite_loader(
        cfg.loader, loaders, seed=0, pad_token_id=tokenizer.pad_token_id
    )
    torch.manual_seed(0)
    net = build_model(settings, tasks).eval()  # no dropout: both calls see the same network
    packed_calls = 0
    for batch in itertools.islice(iter(loader), 3):
        with_packing = net(batch)
        packer, net.packed = net.packed, None
        without = net(batch)
        net.packed = packer
        packed_calls += Packing(batch["attention_mask"]).worth_it()
        assert with_packing["task_losses"].keys() == without["task_losses"].keys() == set(TASKS)
        for name, loss in without["task_losses"].items():
            torch.testing.assert_close(with_packing["task_losses"][name], loss, rtol=0, atol=1e-5)
    assert packed_calls >= 1


@SLOW
def test_ctrl_c_and_resume_end_bit_equal(make_cfg, decoder, tmp_path, capsys):
    """Ctrl-C at a random step, `trainer.resume=<run>`: the weights of the run never stopped."""
    from mtl.cli.job import train

    common = [*generating(decoder), "loader=mixup", "trainer.max_steps=8", "trainer.epochs=20"]
    full = tmp_path / "full"
    run(make_cfg(*common, output_dir=full))
    part, step = tmp_path / "part", random.randrange(1, 8)
    stopped = train(make_cfg(*common, output_dir=part), hooks=[SignalAt(step, signal.SIGINT)])
    assert (stopped.stop, stopped.step) == ("signal", step)
    train(make_cfg(*common, f"trainer.resume={part}", output_dir=part))
    want, got = (load_file(last_checkpoint(d) / "model.safetensors") for d in (full, part))
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want), f"stopped at step {step}"
    rows = {r["step"]: r for r in read_metrics(full)}
    for row in read_metrics(part):  # each logged row as the run never stopped wrote it
        if "eval/synthetic_gen/exact_match" in row:
            assert (
                row["eval/synthetic_gen/exact_match"]
                == rows[row["step"]]["eval/synthetic_gen/exact_match"]
            )


@pytest.mark.parametrize("per_task", [False, pytest.param(True, marks=SLOW)])
def test_lora_trains_generation_tasks_and_exports_them(
    train_here, decoder, tmp_path, monkeypatch, per_task
):
    """model.peft=lora, shared or per task: the export holds peft's adapters (on the base
    decoder, as every task's); merge=true gives each generation task a plain causal-LM folder
    whose logits are mtl's."""
    import peft
    from transformers import AutoModel, AutoModelForCausalLM

    import mtl
    from mtl.cli.export import main as export_main

    monkeypatch.chdir(tmp_path)
    option = "model.peft={r:4,per_task:true}" if per_task else "model.peft={r:4}"
    code, err = train_here(
        "debug=fast", *generating(decoder), "loader=mixup", option, "trainer.lr=1e-2",
        "hydra.run.dir=run",
    )  # fmt: skip
    assert code == 0, err
    export = tmp_path / "run" / "export"
    assert json.loads((export / "mtl_tasks.json").read_text())["peft"]["base_model"] == "base"
    loaded = mtl.load_model(export)
    ids = torch.tensor([[101, 2000, 2001, 2002, 102]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "task": "synthetic_gen"}
    folder = export / ("adapters/synthetic_gen" if per_task else "adapter")
    plain = peft.PeftModel.from_pretrained(AutoModel.from_pretrained(export / "base"), folder)
    export_main(["run", "merged", "merge=true", "standard=true"])
    lm = AutoModelForCausalLM.from_pretrained(tmp_path / "merged" / "synthetic_gen").eval()
    with torch.no_grad():
        want = loaded.model.encode(batch, "synthetic_gen")
        torch.testing.assert_close(plain.eval()(input_ids=ids).last_hidden_state, want)
        logits = loaded.model.logits(batch)["synthetic_gen"]
        torch.testing.assert_close(lm(input_ids=ids).logits, logits, rtol=0, atol=1e-4)


def test_dry_run_reads_generation_tasks_as_training_does(decoder, capsys):
    from mtl.cli.dry_run import main

    main(["loader=mixup", *generating(decoder)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("synthetic_gen: ") and "train rows" in lines[0]
    assert lines[1].startswith("pydoc_heading: 1558 train rows, batch size 16")
