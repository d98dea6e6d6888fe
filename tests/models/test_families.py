"""Every model family end to end: a tiny random model of each (`mtl.models.tiny`, the MiniLM
tokenizer) trained on all six task types under mixup and random, packed, resumed exactly,
exported to the family's own `AutoModelFor...` classes and predicted with mtl-predict.

One module-scoped set of runs per family is shared by every assertion on it.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    pipeline,
)

import mtl
from mtl.artifacts import RunLayout
from mtl.cli.job import train
from mtl.cli.predict import main as predict_main
from mtl.data.bundled import bundled_rows
from mtl.data.tokenizer import load_tokenizer
from mtl.errors import MtlError
from mtl.inference.export import write_export
from mtl.inference.export_hf import standard_model
from mtl.models import MultiTaskModel, load_encoder_and_pooler
from mtl.models.families import (
    ADAPTERS,
    DecoderAdapter,
    ElectraAdapter,
    EncoderAdapter,
    adapter_class,
    adapter_for,
    family_from_transformers,
    last_token,
)
from mtl.models.heads import SequenceClassificationHead, TokenClassificationHead
from mtl.models.packing import Packing
from mtl.models.tiny import save_tiny_model
from mtl.task_types import task_config, task_type_class
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = [
    "bert",
    "roberta",
    "xlm-roberta",
    "electra",
    "distilbert",
    "deberta-v2",
    "modernbert",
    "qwen2",
    "gpt2",
]
NOT_PACKED = {"deberta-v2"}  # its attention takes no 4-D mask: padded, with one warning line
# transformers has no decoder multiple-choice class
NO_CLASS = {"qwen2": {"synthetic_choice"}, "gpt2": {"synthetic_choice"}}
AUTO = {
    "synthetic_cls": AutoModelForSequenceClassification,
    "synthetic_pair": AutoModelForSequenceClassification,
    "synthetic_reg": AutoModelForSequenceClassification,
    "synthetic_tag": AutoModelForTokenClassification,
    "synthetic_choice": AutoModelForMultipleChoice,
    "synthetic_qa": AutoModelForQuestionAnswering,
}
TASKS = list(AUTO)
METRIC = {  # each task's main metric
    "synthetic_cls": "accuracy",
    "synthetic_pair": "accuracy",
    "synthetic_reg": "pearson",
    "synthetic_tag": "f1",
    "synthetic_choice": "accuracy",
    "synthetic_qa": "exact_match",
}
PACK_WARNING = "model.pack: the encoder's packed call does not match"


# Whole runs as train.py makes them (mixup and random over all six task types, resumed, export,
# pipelines, mtl-predict) for every family but BERT, whose runs are tests/training/test_loop.py
# and tests/inference/test_export.py. Without training runs, every family:
# test_every_family_packs_and_exports_every_task_type.
WHOLE = [f for f in FAMILIES if f != "bert"]
MIXUP = [
    "loader=mixup",
    "data.max_examples=48",
    "trainer.epochs=2",
    "trainer.max_steps=4",
    "trainer.checkpoint_every=2",
    "trainer.keep_last=null",
    "trainer.export=false",
]
_MIXUP_RUNS: dict[str, tuple[Path, Path, str]] = {}


def family_cfg(out: Path, model: Path, *overrides: str):
    return compose_config(
        "debug=fast",
        "model=minilm",
        f"model.name_or_path={model}",
        f"task=[{','.join(TASKS)}]",
        f"output_dir={out}",
        *overrides,
    )


def mixup_run(model_type: str, tmp_path_factory) -> tuple[Path, Path, str]:
    """(tiny model folder, its mixup run with every task's standard export, the run's stderr),
    made once per family."""
    if model_type not in _MIXUP_RUNS:
        root = tmp_path_factory.mktemp(model_type)
        model = save_tiny_model(model_type, root / "model")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            results = train(family_cfg(root / "mixup", model, *MIXUP))
        export = root / "mixup" / "export"
        r = results
        write_export(r.model, r.tokenizer, r.tasks, r.settings, export, standard=True)
        _MIXUP_RUNS[model_type] = model, root / "mixup", stderr.getvalue()
    return _MIXUP_RUNS[model_type]


@pytest.fixture(scope="module", params=WHOLE)
def runs(request, tmp_path_factory) -> SimpleNamespace:
    model, mixup, stderr = mixup_run(request.param, tmp_path_factory)
    return SimpleNamespace(model_type=request.param, mixup=mixup, stderr=stderr)


@pytest.fixture(scope="module", params=WHOLE)
def deep(request, tmp_path_factory) -> SimpleNamespace:
    """One epoch of loader=random (one batch of each task)."""
    model, mixup, _ = mixup_run(request.param, tmp_path_factory)
    random = ["loader=random", "data.max_examples=16", "trainer.max_steps=null"]
    train(family_cfg(mixup.parent / "random", model, *random, "trainer.export=false"))
    return SimpleNamespace(random=mixup.parent / "random")


@pytest.fixture(scope="module", params=WHOLE)
def resumed(request, tmp_path_factory) -> SimpleNamespace:
    """A family's mixup run and the same run resumed from its step 2 in another folder."""
    model, mixup, _ = mixup_run(request.param, tmp_path_factory)
    step_2 = RunLayout(mixup).step(2)
    resumed = mixup.parent / "resumed"
    train(family_cfg(resumed, model, *MIXUP, f"trainer.resume={step_2}"))
    return SimpleNamespace(model_type=request.param, mixup=mixup, resumed=resumed)


@pytest.fixture(scope="module")
def loaded(runs):
    return mtl.load_model(runs.mixup / "export")


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def trained_tasks(run_dir: Path) -> set[str]:
    """The tasks with a training loss logged at some step."""
    rows = [row for row in metrics(run_dir) if "loss" in row]
    return {t for t in TASKS for row in rows if row.get(f"loss/{t}", 0) > 0}


def input_rows(name: str, n: int = 6) -> list[dict]:
    _, _, _, dev = bundled_rows(name, size=400)
    return [{k: v for k, v in r.items() if k not in ("label", "answers")} for r in dev[:n]]


def mtl_batch(loaded, name: str, rows: list[dict]) -> dict:
    """The rows encoded and padded as mtl-predict batches them."""
    info = loaded.tasks[name]
    tt = info.task_type
    columns = {c: [r[c] for r in rows] for c in tt.input_columns()}
    enc = tt.encode_inputs(columns, loaded.tokenizer, info.label_names, "test")
    enc.setdefault("example_id", list(range(len(enc["input_ids"]))))
    data = tt.dataset(Dataset.from_dict(enc))
    batch = tt.collator(loaded.tokenizer.pad_token_id)(data.__getitems__(list(range(len(data)))))
    return batch | {"task": name}


@pytest.mark.slow
def test_trains_every_task_type_under_mixup(runs):
    assert trained_tasks(runs.mixup) == set(TASKS)
    best = json.loads((runs.mixup / "results.json").read_text())["best"]
    assert all(f"eval/{t}/{METRIC[t]}" in best for t in TASKS)


@pytest.mark.slow
def test_trains_every_task_type_under_random(deep):
    assert trained_tasks(deep.random) == set(TASKS)


@pytest.mark.slow
def test_packs_where_the_family_allows_it(runs, loaded):
    """The packed call equals the padded one (checked on uneven rows); the run warned only
    where it does not (DeBERTa: padded)."""
    assert (PACK_WARNING in runs.stderr) == (runs.model_type in NOT_PACKED)
    texts = ["a short row", "a much longer row of text " * 6, "x", "y z", "one two", "three"]
    inputs = loaded.model.adapter.encoder_inputs(
        dict(loaded.tokenizer(texts, padding=True, return_tensors="pt"))
    )
    packing = Packing(inputs["attention_mask"])
    assert packing.worth_it() and packing.packed_rows == 2
    packed = loaded.model.packed
    with contextlib.redirect_stderr(io.StringIO()):
        agrees = packed.check(loaded.model.encoder, inputs, packing)
    assert agrees == (runs.model_type not in NOT_PACKED)


@pytest.mark.slow
def test_resume_continues_exactly(resumed):
    def losses(run_dir):
        return {r["step"]: r["loss"] for r in metrics(run_dir) if "loss" in r}

    full, again = losses(resumed.mixup), losses(resumed.resumed)
    assert sorted(again) == [3, 4]
    assert again == pytest.approx({s: full[s] for s in again}, rel=1e-5)
    step_4 = Path("checkpoints") / "step_0000004" / "model.safetensors"
    want, got = load_file(resumed.mixup / step_4), load_file(resumed.resumed / step_4)
    assert want.keys() == got.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_exports_each_task_type_with_mtl_logits(name, runs, loaded):
    folder = runs.mixup / "export" / name
    if name in NO_CLASS.get(runs.model_type, set()):
        assert not folder.exists()
        return
    model = AUTO[name].from_pretrained(folder).eval()
    assert model.config.model_type == runs.model_type
    batch = mtl_batch(loaded, name, input_rows(name))
    inputs = loaded.model.adapter.encoder_inputs(batch)
    if name == "synthetic_choice":  # rows b * C + j are example b's choices
        inputs = {k: v.reshape(len(batch["labels"]), -1, v.shape[-1]) for k, v in inputs.items()}
    with torch.no_grad():
        ours = loaded.model.logits(batch)[name]
        out = model(**inputs)
    if name == "synthetic_qa":
        theirs = torch.stack([out.start_logits, out.end_logits], -1)
    else:
        theirs = out.logits
    theirs = theirs.reshape(ours.shape)
    kept = ours != torch.finfo(ours.dtype).min  # QA: padding positions the head masks
    torch.testing.assert_close(theirs[kept], ours[kept], rtol=0, atol=1e-4)
    assert ours.abs().max() > 1e-3


@pytest.mark.slow
def test_pipelines_predict_as_mtl_predict(resumed, tmp_path):
    """text-classification and token-classification pipelines of the exported tasks give what
    `mtl-predict` writes for the same rows."""
    runs = resumed  # its first run's export
    for name in ("synthetic_cls", "synthetic_tag"):
        rows = input_rows(name)
        source = tmp_path / f"{name}.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = tmp_path / f"{name}.out.jsonl"
        predict_main(
            [f"model={runs.mixup / 'export'}", f"task={name}", f"input={source}", f"output={out}"]
        )
        want = [json.loads(line) for line in out.read_text().splitlines()]
        folder = str(runs.mixup / "export" / name)
        if name == "synthetic_cls":
            got = pipeline("text-classification", model=folder)(
                [r["text"] for r in rows], truncation=True
            )
            assert [g["label"] for g in got] == [w["prediction"] for w in want]
            assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], abs=1e-4)
            continue
        tag = pipeline("token-classification", model=folder, ignore_labels=[])
        tokenizer = AutoTokenizer.from_pretrained(folder)
        for row, result in zip(rows, want, strict=True):
            word_ids = tokenizer(row["text"], is_split_into_words=True).word_ids()
            if len(word_ids) > tokenizer.model_max_length:
                continue  # mtl predicts a long row in windows, the pipeline in one call
            by_token = {e["index"]: e["entity"] for e in tag(" ".join(row["text"]))}
            firsts = [i for i, w in enumerate(word_ids) if w is not None and w != word_ids[i - 1]]
            assert [by_token[i] for i in firsts] == result["prediction"]


TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}


def test_bert_heads_are_unchanged_by_their_family():
    torch.manual_seed(0)
    heads = {"c": SequenceClassificationHead(32, 3), "t": TokenClassificationHead(32, 4)}
    before = {k: v.clone() for k, v in nn.ModuleDict(heads).state_dict().items()}
    encoder, _ = load_encoder_and_pooler(None, random_init=True, config=TINY_BERT)
    model = MultiTaskModel(encoder, heads)
    assert type(model.adapter) is EncoderAdapter
    after = model.heads.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_family_override_by_name_or_class():
    encoder, _ = load_encoder_and_pooler(None, random_init=True, config=TINY_BERT, family="electra")
    assert encoder.config.mtl_family == "electra"  # an export folder is read back the same way
    model = MultiTaskModel(encoder, {"c": SequenceClassificationHead(32, 3)})
    assert type(model.adapter) is ElectraAdapter and model.heads["c"].activation == "gelu"
    assert adapter_class("mtl.models.families.DecoderAdapter", "bert") is DecoderAdapter
    with pytest.raises(MtlError, match=r"model.family='nope' is not a family; choose from bert"):
        adapter_class("nope", "bert")
    with pytest.raises(MtlError, match="not a subclass of mtl.models.families.EncoderAdapter"):
        adapter_class("mtl.models.heads.SequenceClassificationHead", "bert")


def test_decoder_heads_score_the_last_real_token_with_left_or_right_padding():
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 8)
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert torch.equal(last_token(hidden, right), hidden[[0, 1], [2, 4]])
    assert torch.equal(last_token(hidden, left), hidden[[0, 1], [4, 4]])
    head = SequenceClassificationHead(8, 3, dropout=0.0)
    head.adapt(DecoderAdapter().head_shape())
    assert head.pooler is None and head.out.bias is None
    changed = hidden.clone()
    changed[0, :2] += 5.0  # tokens before the last real one do not reach the score directly
    torch.testing.assert_close(head(hidden, right)[0], head.out(hidden[0, 2]))
    assert torch.equal(head(changed, left)[0], head(hidden, left)[0])


def test_a_decoder_tokenizer_without_a_pad_token_pads_with_eos(tmp_path):
    folder = save_tiny_model("qwen2", tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.pad_token, tokenizer.eos_token = None, "[SEP]"
    tokenizer.save_pretrained(folder)
    loaded = load_tokenizer(str(folder))
    assert loaded.pad_token == "[SEP]" and loaded.pad_token_id == loaded.sep_token_id


TYPES = {  # a task of each type: (type, its config's own keys, label names)
    "cls": ("sequence_classification", {}, ["a", "b", "c"]),
    "reg": ("regression", {}, None),
    "tag": ("token_classification", {}, ["O", "B-X", "I-X"]),
    "choice": ("multiple_choice", {"choices_column": "choices"}, None),
    "qa": ("question_answering", {}, None),
    "multi": ("multi_label_classification", {}, ["x", "y"]),
}


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_family_packs_and_exports_every_task_type(model_type, tmp_path):
    """Without a training run: the tiny model with a head of each task type learns (a gradient
    reaches the encoder from every head), packs where its family allows it, and every task
    type exports to the family's own class with mtl's logits (`standard_model` checks them)."""
    folder = save_tiny_model(model_type, tmp_path / "model")
    encoder, _ = load_encoder_and_pooler(str(folder))
    tokenizer = load_tokenizer(str(folder))
    types = {}
    for name, (type_name, keys, _) in TYPES.items():
        config = task_config({"type": type_name, "source": {"bundled": "x"}, **keys}, name)
        types[name] = task_type_class(type_name, name)(name, config)
    heads = {n: t.make_head(32, max(1, t.num_labels(TYPES[n][2])), 0.0) for n, t in types.items()}
    model = MultiTaskModel(encoder, heads)
    texts = ["a short row", "a much longer row of text " * 6, "x", "y z", "one two", "three"]
    batch = dict(tokenizer(texts, padding=True, return_tensors="pt"))
    inputs = model.adapter.encoder_inputs(batch)
    assert (
        ("token_type_ids" in batch) == ("token_type_ids" in inputs) == model.adapter.token_type_ids
    )
    if model_type == "gpt2":  # as GPT-2's own: no pad token; mtl pads with its end-of-text
        assert AutoTokenizer.from_pretrained(folder).pad_token is None
        assert encoder.config.pad_token_id is None and tokenizer.pad_token == "<|endoftext|>"
    packing = Packing(inputs["attention_mask"])
    with contextlib.redirect_stderr(io.StringIO()) as err:
        agrees = model.packed.check(model.encoder, inputs, packing)
    assert agrees == (model_type not in NOT_PACKED), err.getvalue()
    for name in types:
        model.zero_grad()
        logits = model.logits(batch | {"task": name})[name]
        logits[logits != torch.finfo(logits.dtype).min].sum().backward()
        grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
        assert grads and any(g.abs().sum() > 0 for g in grads), name
    model.eval()
    exported = {}
    for name, task_type in types.items():
        hf, why_not = standard_model(model, name, task_type, TYPES[name][2], tokenizer)
        exported[name] = hf is not None or why_not
    missing = {"choice"} if model_type in NO_CLASS else set()
    assert {n for n, done in exported.items() if done is not True} == missing, exported


DECIDED = {  # model type: its family (listed in `model_types`, or what transformers implies)
    **dict.fromkeys(["gpt2", "gpt_neox", "opt", "bloom", "falcon", "phi", "gptj"], "decoder"),
    **dict.fromkeys(["granite", "smollm3", "llama", "qwen2", "mistral", "olmo"], "decoder"),
    "bert": "bert",
    "roberta": "roberta",
    "xlm-roberta": "roberta",
    "electra": "electra",
    "distilbert": "distilbert",
    "deberta-v2": "deberta-v2",
    "modernbert": "modernbert",
    "albert": "bert",
    "big_bird": "bert",  # a causal LM class too, and a masked-LM one: an encoder
    "t5": "bert",  # no causal LM class
}


@pytest.mark.parametrize("model_type", list(DECIDED))
def test_the_family_is_what_transformers_says_the_model_is(model_type):
    assert adapter_for(AutoConfig.for_model(model_type)).family == DECIDED[model_type]


def test_every_listed_model_type_is_what_transformers_says():
    """A family's own list never contradicts transformers: a decoder family lists only causal
    LMs with no masked-LM class, an encoder family none of them."""
    for adapter in ADAPTERS:
        for model_type in adapter.model_types:
            implied = family_from_transformers(model_type)[0]
            assert (implied == "decoder") == adapter.causal, (adapter.family, model_type)


@pytest.mark.parametrize(
    ("architectures", "is_decoder", "family"),
    [
        (["MyForCausalLM"], False, "decoder"),
        (["MyLMHeadModel"], False, "decoder"),
        (["MyForCausalLM", "MyForMaskedLM"], False, "bert"),
        (["MyModel"], True, "decoder"),
        (["MyModel"], False, "bert"),
        (None, False, "bert"),
    ],
)
def test_a_model_type_transformers_does_not_know_goes_by_its_config(
    architectures, is_decoder, family
):
    config = SimpleNamespace(
        model_type="my_remote_model", architectures=architectures, is_decoder=is_decoder
    )
    assert adapter_for(config).family == family


def test_an_unlisted_model_type_names_its_family_in_one_line(tmp_path, capsys):
    sizes = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 99}
    AutoConfig.for_model("gpt_neox", intermediate_size=64, **sizes).save_pretrained(tmp_path)
    encoder, _ = load_encoder_and_pooler(str(tmp_path), random_init=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "mtl: model type 'gpt_neox' has no family of its own; it trains as family decoder "
        "(transformers has a causal LM and no masked LM for it); set model.family= to choose "
        "another (bert, roberta, electra, distilbert, deberta-v2, modernbert, decoder)"
    ]
    assert encoder.config.mtl_family == "decoder"  # an export folder reads back the same way
    assert type(MultiTaskModel(encoder, {}).adapter) is DecoderAdapter
    load_encoder_and_pooler(None, random_init=True, config=TINY_BERT)  # a listed type: no line
    assert capsys.readouterr().err == ""
