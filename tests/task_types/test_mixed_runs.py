"""Generation and head tasks in one run on one decoder, as a user types it: a generation task
beside a task of every head type under every loader; a mixed mixup step packed equal to padded
(one decoder call for every task's rows); per-task LoRA over the mix; sampling share apart from
loss weight; an exact resume under mixup and under exp3; one export that transformers loads and
mtl-predict serves for both kinds of task."""

from __future__ import annotations

import csv
import itertools
import json
import random
import signal

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from mtl.builders.loaders import build_composite_loader, build_train_loaders
from mtl.builders.model import build_model
from mtl.builders.tasks import build_tasks
from mtl.config import validate
from mtl.models.packing import Packing
from mtl.models.tiny import save_tiny_model
from mtl.training.loop import run
from tests.inference.test_export import task_files
from tests.training.test_loop import SignalAt, last_checkpoint, read_metrics

SLOW = pytest.mark.slow
GENERATIVE = "synthetic_gen"
# one task of every head type: classification, token tagging, regression, multiple choice,
# extractive QA, and `topics` (multi-label, a local file: tests/inference/test_export.py)
HEADS = ["synthetic_cls", "synthetic_tag", "synthetic_reg", "synthetic_choice", "synthetic_qa"]
TASKS = [GENERATIVE, *HEADS, "topics"]


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """A tiny GPT-2 (its LM head tied to its embeddings: shared by every task)."""
    return save_tiny_model("gpt2", tmp_path_factory.mktemp("gpt2") / "model")


@pytest.fixture(scope="module")
def untied(tmp_path_factory):
    """A tiny Qwen2 (an LM head of its own: the generation task's)."""
    return save_tiny_model("qwen2", tmp_path_factory.mktemp("qwen2") / "model")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return task_files(tmp_path_factory.mktemp("files"))


def mixed(decoder, files, tasks=TASKS) -> list[str]:
    return [
        f"task=[{','.join(tasks)}]",
        f"hydra.searchpath=[file://{files / 'conf'}]",
        f"model.name_or_path={decoder}",
        "model.random_init=true",
        f"task.{GENERATIVE}.generate_rows=4",
        f"task.{GENERATIVE}.max_new_tokens=3",
    ]


@pytest.mark.parametrize(
    "loader",
    [
        "mixup",
        pytest.param("random", marks=SLOW),
        pytest.param("round_robin", marks=SLOW),
        pytest.param("sequential", marks=SLOW),
    ],
)
def test_a_generation_task_and_every_head_type_train_under_every_loader(
    make_cfg, decoder, files, tmp_path, loader
):
    # mixup: 3 steps, each with every task's rows; the others: an epoch of 2 batches a task
    steps = ["trainer.max_steps=3"] if loader == "mixup" else ["trainer.max_steps=null"]
    run(make_cfg(*mixed(decoder, files), f"loader={loader}", "data.max_examples=32", *steps))
    rows = read_metrics(tmp_path / "run")
    for task in TASKS:
        assert any(r.get(f"loss/{task}", 0) > 0 for r in rows), task
    last = json.loads((tmp_path / "run" / "results.json").read_text())
    assert f"eval/{GENERATIVE}/exact_match" in last
    for task, metric in [
        ("synthetic_cls", "accuracy"),
        ("synthetic_qa", "f1"),
        ("topics", "micro_f1"),
    ]:
        assert f"eval/{task}/{metric}" in last
    # diagnostics across types: the cosine of the generation task's gradient and a head task's,
    # drawn by mtl-report in the interaction figure with every other pair
    assert any(f"grad_cos/{GENERATIVE}/synthetic_cls" in r for r in rows)
    if loader == "mixup":
        from mtl.reporting.figures import report
        from mtl.reporting.interaction import interaction_tasks

        assert interaction_tasks(rows) == TASKS
        assert tmp_path / "run" / "report_interaction.png" in report(tmp_path / "run")


@pytest.mark.parametrize("model", ["decoder", "untied"])
def test_a_mixed_mixup_step_is_one_packed_call_equal_to_padded(make_cfg, request, files, model):
    """Every task's rows of a mixup step in one decoder call, packed (causal, per row: no token
    sees another row's): each task's loss is the padded call's."""
    # the tiny Qwen2's byte-level tokenizer writes long rows: room for them to differ in length
    room = [f"task.{t}.max_length=256" for t in TASKS] if model == "untied" else []
    options = [*mixed(request.getfixturevalue(model), files), "loader=mixup", "sampler=random"]
    cfg = make_cfg(*options, *room)
    settings = validate(cfg)
    tasks, tokenizer = build_tasks(settings, 0)
    loaders = build_train_loaders(tasks, settings, cfg.sampler, seed=0)
    loader = build_composite_loader(
        cfg.loader, loaders, seed=0, pad_token_id=tokenizer.pad_token_id
    )
    torch.manual_seed(0)
    net = build_model(settings, tasks).eval()  # no dropout: both calls see the same network
    batches = list(itertools.islice(iter(loader), 3))
    net(batches[0])  # the packed call is checked against the padded one once, at the first
    calls = []
    original = net.encoder.forward
    net.encoder.forward = lambda *a, **k: calls.append(1) or original(*a, **k)
    packed = sum(Packing(b["attention_mask"]).worth_it() for b in batches)
    assert packed >= 1
    for batch in batches:
        calls.clear()
        with_packing = net(batch)
        assert len(calls) == 1  # one decoder call for the rows of every task
        packer, net.packed = net.packed, None
        without = net(batch)
        net.packed = packer
        assert with_packing["task_losses"].keys() == without["task_losses"].keys() == set(TASKS)
        for name, loss in without["task_losses"].items():
            torch.testing.assert_close(with_packing["task_losses"][name], loss, rtol=0, atol=1e-5)


@SLOW
def test_per_task_lora_runs_each_tasks_rows_through_its_own_adapter(
    make_cfg, decoder, files, tmp_path
):
    """model.peft per task over a mixed mixup run: every task's adapter trains (its rows went
    through it), the decoder's own weights stay as they were."""
    tasks = [GENERATIVE, "synthetic_cls", "synthetic_qa"]
    run(
        make_cfg(
            *mixed(decoder, files, tasks), "loader=mixup", "model.peft={r:4,per_task:true}",
            "trainer.max_steps=2", "trainer.lr=1e-2",
        )
    )  # fmt: skip
    state = load_file(last_checkpoint(tmp_path / "run") / "model.safetensors")
    for task in tasks:
        lora_b = [v for k, v in state.items() if f"lora_B.{task}." in k]
        assert lora_b and all(v.abs().sum() > 0 for v in lora_b), task  # B starts at 0


def test_sampling_share_and_loss_weight_are_apart(make_cfg, decoder, files, tmp_path):
    """A task sampled at 3 to 1 (`loader.weighting`) is drawn 3 times as often, with weight 1;
    weighted 3 (`model.loss_weights`), it is drawn as proportional draws it, with weight 3."""
    tasks, steps = [GENERATIVE, "synthetic_cls"], 16
    common = [*mixed(decoder, files, tasks), "loader=random", f"trainer.max_steps={steps}"]
    common += ["trainer.log_every=16", "trainer.eval_every=16", "data.max_examples=256"]
    sampled = tmp_path / "sampled"
    run(make_cfg(*common, "loader.weighting={synthetic_gen: 1, synthetic_cls: 3}",
                 output_dir=sampled))  # fmt: skip
    weighted = tmp_path / "weighted"
    run(make_cfg(*common, "+model.loss_weights={synthetic_cls: 3}", output_dir=weighted))
    last = {d: {k: v for r in read_metrics(d) for k, v in r.items()} for d in (sampled, weighted)}
    assert last[sampled]["share_total/synthetic_cls"] == pytest.approx(0.75, abs=1 / steps)
    assert last[weighted]["share_total/synthetic_cls"] == pytest.approx(0.5, abs=1 / steps)
    assert last[sampled]["task_weight/synthetic_cls"] == 1.0
    assert last[weighted]["task_weight/synthetic_cls"] == 3.0


def test_the_gradient_follows_the_loss_weight(make_cfg, decoder, files):
    """`model.loss_weights` scales a task's term of the update: the shared gradient of a mixed
    step with synthetic_cls weighted 3 is the generation task's plus 3 times synthetic_cls's."""
    from mtl.balancers import Sum

    tasks = [GENERATIVE, "synthetic_cls"]
    cfg = make_cfg(*mixed(decoder, files, tasks), "loader=mixup", "sampler=random",
                   "+model.loss_weights={synthetic_cls: 3}")  # fmt: skip
    settings = validate(cfg)
    built, tokenizer = build_tasks(settings, 0)
    loaders = build_train_loaders(built, settings, cfg.sampler, seed=0)
    loader = build_composite_loader(
        cfg.loader, loaders, seed=0, pad_token_id=tokenizer.pad_token_id
    )
    batch = next(iter(loader))
    torch.manual_seed(0)
    net = build_model(settings, built).eval()
    shared = [p for _, p in net.shared_parameters()]
    balancer = Sum(tasks, loss_weights=settings.model.loss_weights)
    losses = net(batch)["task_losses"]
    step = torch.autograd.grad(balancer.loss(losses), shared, retain_graph=True)
    each = {t: torch.autograd.grad(losses[t], shared, retain_graph=True) for t in tasks}
    for got, gen, cls in zip(step, each[GENERATIVE], each["synthetic_cls"], strict=True):
        torch.testing.assert_close(got, gen + 3 * cls)


@SLOW
@pytest.mark.parametrize(
    "mixing",
    [
        ["loader=mixup"],
        [
            "loader=random",
            "loader.online={policy: exp3, update_every: 2, options: {normalize: first}}",
        ],
    ],
    ids=["mixup", "exp3"],
)
def test_ctrl_c_and_resume_end_bit_equal(make_cfg, decoder, files, tmp_path, mixing):
    """Ctrl-C at a random step of a mixed run (mixup packed; exp3 online), `trainer.resume`:
    the weights and the mixture of the run never stopped."""
    from mtl.cli.job import train

    tasks = [GENERATIVE, "synthetic_cls", "synthetic_tag"]
    common = [*mixed(decoder, files, tasks), *mixing, "trainer.max_steps=8", "trainer.epochs=20"]
    full = tmp_path / "full"
    run(make_cfg(*common, output_dir=full))
    part, step = tmp_path / "part", random.randrange(1, 8)
    stopped = train(make_cfg(*common, output_dir=part), hooks=[SignalAt(step, signal.SIGINT)])
    assert (stopped.stop, stopped.step) == ("signal", step)
    train(make_cfg(*common, f"trainer.resume={part}", output_dir=part))
    want, got = (load_file(last_checkpoint(d) / "model.safetensors") for d in (full, part))
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want), f"stopped at step {step}"
    shares = {r["step"]: r for r in read_metrics(full) if "share/synthetic_cls" in r}
    for row in read_metrics(part):
        if "share/synthetic_cls" in row and row["step"] > step:
            assert row["share/synthetic_cls"] == shares[row["step"]]["share/synthetic_cls"]


def test_one_export_serves_both_kinds_of_task(train_here, decoder, files, tmp_path):
    """`mtl-export <run> <out> standard=true` of a mixed run: the generation task's folder is an
    AutoModelForCausalLM, the classification task's an AutoModelForSequenceClassification, each
    with mtl's outputs; `mtl-predict task=[a,b]` writes both from the one export."""
    import mtl
    from mtl.cli.export import main as export_main
    from mtl.cli.predict import main as predict_main

    tasks = [GENERATIVE, "synthetic_cls"]
    code, err = train_here(
        "debug=fast", *mixed(decoder, files, tasks), "loader=mixup",
        f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert code == 0, err
    out = tmp_path / "out"
    export_main([str(tmp_path / "run"), str(out), "standard=true"])
    loaded = mtl.load_model(out)
    batch = loaded.tokenizer(["the cat . about :"], return_tensors="pt")
    lm = AutoModelForCausalLM.from_pretrained(out / GENERATIVE).eval()
    cls = AutoModelForSequenceClassification.from_pretrained(out / "synthetic_cls").eval()
    with torch.no_grad():
        for name, model in ((GENERATIVE, lm), ("synthetic_cls", cls)):
            ours = loaded.model.logits({**batch, "task": name})[name]
            torch.testing.assert_close(model(**batch).logits, ours, rtol=0, atol=1e-4)
    texts = ["cat dog . about :", "bread and tea with soup", "bus"]
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"prompt": t, "text": t}) + "\n" for t in texts)
    )
    predict_main([
        f"model={out}", f"task=[{','.join(tasks)}]", f"input={tmp_path / 'in.jsonl'}",
        f"output={tmp_path / 'out.csv'}",
    ])  # fmt: skip
    both = list(csv.DictReader((tmp_path / "out.csv").open()))
    predict_main([
        f"model={out}", f"task={GENERATIVE}", f"input={tmp_path / 'in.jsonl'}",
        f"output={tmp_path / 'alone.csv'}",
    ])  # fmt: skip
    alone = list(csv.DictReader((tmp_path / "alone.csv").open()))
    assert [r[f"{GENERATIVE}.prediction"] for r in both] == [r["prediction"] for r in alone]
    labels = set(cls.config.id2label.values())  # the classification folder's labels
    assert {r["synthetic_cls.prediction"] for r in both} <= labels
    assert all(r["synthetic_cls.score"] for r in both)


def test_exp3_over_losses_of_different_kinds_says_how_to_normalise(
    train_here, decoder, files, tmp_path
):
    tasks = [GENERATIVE, "synthetic_cls"]
    online = "loader.online={policy: exp3, update_every: 2%s}"
    for options, noted in (("", True), (", options: {normalize: first}", False)):
        code, err = train_here(
            "debug=fast", *mixed(decoder, files, tasks), "loader=random", online % options,
            "trainer.export=false", f"hydra.run.dir={tmp_path / str(noted)}",
        )  # fmt: skip
        assert code == 0, err
        said = "differ in scale (cross-entropy, generation)" in err
        assert said == noted, err
        assert ("options: {normalize: first}" in err) == noted
