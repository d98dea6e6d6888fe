"""generation: prompt -> completion rows, labels on the completion alone, the decoder's own LM
head (its loss against transformers' causal-LM loss), one line for bad rows and for an encoder,
and a tiny random decoder that learns the bundled synthetic_gen task."""

from __future__ import annotations

import json
import sys

import pytest
import torch

# rouge-score imports absl, whose log handler keeps the stderr of the moment (pytest's captured
# stream, closed later); the next logging.config call (a Hydra run in a later test) flushes every
# handler ever made: the handler writes to the process's own stderr instead.
from absl import logging as absl_logging
from rouge_score import rouge_scorer
from sacrebleu.metrics import CHRF
from transformers import AutoModelForCausalLM

from mtl.batching import IGNORE_INDEX
from mtl.data import load_tokenizer
from mtl.errors import MtlError
from mtl.models import MultiTaskModel, load_encoder_and_pooler
from mtl.models.families import adapter_for
from mtl.models.heads import LanguageModelHead
from mtl.models.tiny import save_tiny_model
from mtl.task_types import Generation, task_config
from mtl.training.loop import run

SLOW = pytest.mark.slow
absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__  # see the imports


def generation(**options) -> Generation:
    config = task_config({"type": "generation", "source": {"bundled": "synthetic_gen"}, **options})
    return Generation("gen", config)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def test_labels_are_the_completion_and_its_end_token(tokenizer):
    rows = {"prompt": ["the cat sat"], "completion": ["on a mat"]}
    out = generation().encode(rows, tokenizer, None, "task 'gen'")
    prompt = tokenizer("the cat sat")["input_ids"]  # [CLS] ... [SEP]: its special tokens
    completion = tokenizer("on a mat", add_special_tokens=False)["input_ids"]
    end = tokenizer.sep_token_id  # MiniLM's tokenizer has no EOS: its SEP ends a completion
    assert out["input_ids"] == [prompt + completion + [end]]
    assert out["labels"] == [[IGNORE_INDEX] * len(prompt) + completion + [end]]
    assert out["length"] == [len(prompt) + len(completion) + 1]
    on_prompt = generation(train_on_prompt=True).encode(rows, tokenizer, None, "task 'gen'")
    assert on_prompt["labels"] == on_prompt["input_ids"]


def test_a_long_row_keeps_its_completion_and_cuts_the_prompt_from_the_left(tokenizer):
    prompt = " ".join(f"w{i}" for i in range(40))
    rows = {"prompt": [prompt], "completion": ["the end"]}
    out = generation(max_length=12).encode(rows, tokenizer, None, "task 'gen'")
    ids, labels = out["input_ids"][0], out["labels"][0]
    completion = tokenizer("the end", add_special_tokens=False)["input_ids"] + [102]
    full = tokenizer(prompt)["input_ids"]
    assert len(ids) == 12 and ids[-len(completion) :] == completion
    assert ids[0] == full[0] and ids[1 : 12 - len(completion)] == full[-(11 - len(completion)) :]
    assert labels[-len(completion) :] == completion
    assert set(labels[: -len(completion)]) == {IGNORE_INDEX}


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        (
            {"prompt": ["a", "b", "c"], "completion": ["x", "  ", ""]},
            "2 of 3 rows whose completion ('completion') is empty (rows 2, 3)",
        ),
        (
            {"prompt": [None, "b"], "completion": ["x", "y"]},
            "1 of 2 rows whose prompt or completion is not a text (rows 1)",
        ),
    ],
)
def test_bad_rows_are_counted_and_named_in_one_line(tokenizer, rows, says):
    with pytest.raises(MtlError) as caught:
        generation().check_rows(rows, tokenizer, "task 'gen', train split")
    assert str(caught.value).startswith(f"task 'gen', train split: {says}: ")


def test_loss_reduction_is_checked():
    with pytest.raises(MtlError, match="loss_reduction='mean'; use token"):
        task_config(
            {"type": "generation", "source": {"bundled": "x"}, "loss_reduction": "mean"}
        ).check("gen")


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    return save_tiny_model("qwen2", tmp_path_factory.mktemp("qwen2") / "model")


def test_the_loss_is_transformers_causal_lm_loss(decoder, tokenizer):
    """The head on the decoder's hidden states, with the LM head's weights: the same loss as
    `AutoModelForCausalLM(..., labels=...)` (shifted within each row, prompt positions out)."""
    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_pretrained(decoder).eval()
    encoder, _ = load_encoder_and_pooler(str(decoder))
    encoder.load_state_dict(lm.model.state_dict())
    head = LanguageModelHead(encoder.config.hidden_size)
    head.attach(encoder, adapter_for(encoder.config))
    head.proj.weight.data.copy_(lm.lm_head.weight.data)
    gen = generation()
    rows = {"prompt": ["a b c", "d"], "completion": ["e f", "g h i"]}
    out = gen.encode(rows, load_tokenizer(str(decoder)), None, "task 'gen'")
    collate = gen.collator(pad_token_id=0)
    batch = collate([{k: out[k][i] for k in out} | {"example_id": i} for i in range(2)])
    with torch.no_grad():
        hidden = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        ours = head.loss(head(hidden.last_hidden_state, batch["attention_mask"]), batch["labels"])
        theirs = lm(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
            labels=batch["labels"],
        ).loss  # fmt: skip
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)


def test_a_tied_lm_head_is_the_decoders_embedding_and_shared(tmp_path, tokenizer):
    folder = save_tiny_model("gpt2", tmp_path / "gpt2")  # GPT-2 ties its LM head
    encoder, _ = load_encoder_and_pooler(str(folder))
    model = MultiTaskModel(encoder, {"gen": generation().make_head(32, 0, 0.0)})
    assert model.task_parameters("gen") == []  # the head holds no weight of its own
    shared = dict(model.shared_parameters())
    embedding = encoder.get_input_embeddings().weight
    assert any(p is embedding for p in shared.values())
    assert not [k for k in model.state_dict() if k.startswith("heads.")]
    hidden = torch.randn(1, 3, 32)
    assert torch.equal(model.heads["gen"](hidden, None), hidden @ embedding.T)


def test_an_encoder_is_refused_in_one_line(make_cfg):
    with pytest.raises(MtlError, match="a generation task needs a decoder"):
        run(make_cfg("task=[synthetic_gen]"))


@SLOW
def test_a_tiny_decoder_learns_the_synthetic_task(make_cfg, decoder, tmp_path):
    """Loss falls, token accuracy and exact match rise well above their first evaluation's and
    chance (about a minute)."""
    cfg = make_cfg(
        "task=[synthetic_gen]", f"model.name_or_path={decoder}", "model.random_init=true",
        "data.max_examples=null", "trainer.epochs=10", "trainer.max_steps=200",
        "trainer.lr=3e-3", "trainer.head_lr=3e-3", "trainer.log_every=50",
    )  # fmt: skip
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evals = [r for r in rows if "eval/synthetic_gen/loss" in r]
    first, last = evals[0], evals[-1]
    assert last["eval/synthetic_gen/loss"] < first["eval/synthetic_gen/loss"] / 5
    assert (
        last["eval/synthetic_gen/token_accuracy"] > 0.9 > first["eval/synthetic_gen/token_accuracy"]
    )
    # greedy generation writes the theme for most rows (chance: 1/3 for one theme always)
    assert last["eval/synthetic_gen/exact_match"] > 0.5 > first["eval/synthetic_gen/exact_match"]


def test_the_export_is_a_causal_lm_transformers_loads(train_here, decoder, tmp_path, monkeypatch):
    """`mtl-export <run> <out> standard=true`: the task's folder is an `AutoModelForCausalLM`
    (with its tokenizer and generation config) whose logits are mtl's; mtl.load_model reads the
    export back."""
    import mtl
    from mtl.cli.export import main as export_main

    monkeypatch.chdir(tmp_path)
    code, err = train_here(
        "debug=fast", "task=[synthetic_gen]", f"model.name_or_path={decoder}",
        "model.random_init=true", "hydra.run.dir=run",
    )  # fmt: skip
    assert code == 0, err
    out = tmp_path / "out"
    export_main([str(tmp_path / "run"), str(out), "standard=true"])
    folder = out / "synthetic_gen"
    assert (folder / "generation_config.json").is_file()
    lm = AutoModelForCausalLM.from_pretrained(folder).eval()
    loaded = mtl.load_model(out)
    batch = loaded.tokenizer(["the cat . about :"], return_tensors="pt")
    with torch.no_grad():
        theirs = lm(**batch).logits
        ours = loaded.model.logits({**batch, "task": "synthetic_gen"})["synthetic_gen"]
    assert torch.allclose(ours, theirs, atol=1e-4)
    assert lm.generation_config.eos_token_id == loaded.tokenizer.eos_token_id
    assert lm.generation_config.do_sample is False


def test_mtl_predict_writes_what_a_text_generation_pipeline_writes(train_here, decoder, tmp_path):
    """A run's export, `standard=true`: `mtl-predict` (batched, left-padded, KV cache) writes,
    for each prompt, what `pipeline("text-generation")` writes greedily on the task's folder."""
    from transformers import pipeline

    from mtl.cli.export import main as export_main
    from mtl.cli.predict import main as predict_main

    code, err = train_here(
        "debug=fast", "task=[synthetic_gen]", f"model.name_or_path={decoder}",
        "model.random_init=true", f"hydra.run.dir={tmp_path / 'run'}",
        "task.synthetic_gen.max_new_tokens=6",
    )  # fmt: skip
    assert code == 0, err
    export_main([str(tmp_path / "run"), str(tmp_path / "out"), "standard=true"])
    prompts = ["cat dog . about :", "a", "bread and tea with soup . about :", "bus"]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    predict_main([
        f"model={tmp_path / 'out'}", "task=synthetic_gen", f"input={tmp_path / 'in.jsonl'}",
        f"output={tmp_path / 'out.csv'}", "batch_size=3",
    ])  # fmt: skip
    import csv

    ours = [row["prediction"] for row in csv.DictReader((tmp_path / "out.csv").open())]
    pipe = pipeline("text-generation", model=str(tmp_path / "out" / "synthetic_gen"))
    theirs = [out[0]["generated_text"] for out in pipe(prompts, return_full_text=False)]
    assert ours == theirs
    assert any(ours)  # the model wrote something (tokens of a random model, here)


def test_generated_metrics_every_kth_evaluation_and_at_the_last(make_cfg, decoder, tmp_path):
    """`generate_every: 3` with an evaluation each step: generated at the 3rd and the last (the
    4th); the teacher-forced metrics at every one."""
    cfg = make_cfg(
        "task=[synthetic_gen]", f"model.name_or_path={decoder}", "model.random_init=true",
        "trainer.eval_every=1", "task.synthetic_gen.generate_every=3",
        "task.synthetic_gen.generate_rows=5", "task.synthetic_gen.max_new_tokens=3",
    )  # fmt: skip
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evals = [r for r in rows if "eval/synthetic_gen/loss" in r]
    assert [r["step"] for r in evals] == [1, 2, 3, 4]
    generated = [r["step"] for r in evals if "eval/synthetic_gen/exact_match" in r]
    assert generated == [3, 4]
    assert all(0 <= r["eval/synthetic_gen/chrf"] <= 100 for r in evals if r["step"] in (3, 4))


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("generate_every=0", "task.synthetic_gen.generate_every=0 must be >= 1"),
        ("prompt_column=question", "column 'question' missing from the train split"),
        ("generate_rows=0", "task.synthetic_gen.generate_rows=0 must be >= 1"),
        ("max_new_tokens=-2", "task.synthetic_gen.max_new_tokens=-2 must be >= 1"),
        ("metrics=[exact_match,loss]", "starts with 'exact_match', scored on generated text"),
    ],
)
def test_generation_settings_out_of_range_are_one_line(train_here, decoder, override, says):
    extra = ["task.synthetic_gen.generate_every=2"] if "metrics" in override else []
    code, err = train_here(
        "debug=fast", "task=[synthetic_gen]", f"model.name_or_path={decoder}",
        "model.random_init=true", f"task.synthetic_gen.{override}", *extra,
    )  # fmt: skip
    assert code == 2 and says in err and "Traceback" not in err, err


TEXTS = [
    ("the cat sat on the mat", "The cat sat on a mat."),
    ("animals", "animals"),
    ("", "food"),
    ("vehicles and boats", "food"),
    ("New-York, 2024!", "new york 2024"),
    ("a b a b a", "b a b"),
]


def test_generated_text_scores_equal_rouge_score_and_sacrebleu():
    from mtl.task_types.generation import chrf, exact_match, rouge_l

    predictions, references = [p for p, _ in TEXTS], [r for _, r in TEXTS]
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    expected = [scorer.score(r, p)["rougeL"].fmeasure for p, r in TEXTS]
    assert rouge_l(predictions, references) == pytest.approx(sum(expected) / len(expected))
    corpus = CHRF().corpus_score(predictions, [references]).score
    assert chrf(predictions, references) == pytest.approx(corpus)
    for i in range(len(TEXTS)):  # and row by row
        one = CHRF().corpus_score(predictions[i : i + 1], [references[i : i + 1]]).score
        assert chrf(predictions[i : i + 1], references[i : i + 1]) == pytest.approx(one)
    assert exact_match(predictions, references) == pytest.approx(1 / 6)
    assert exact_match([" animals "], ["animals"]) == 1.0


def test_a_max_length_that_cuts_every_prompt_is_one_line(train_here, decoder):
    code, err = train_here(
        "debug=fast", "task=[synthetic_gen]", f"model.name_or_path={decoder}",
        "model.random_init=true", "task.synthetic_gen.max_length=5",
    )  # fmt: skip
    assert code == 2 and "Traceback" not in err, err
    assert "max_length=5 cuts every prompt (the shortest has" in err
    assert "set task.synthetic_gen.max_length to at least" in err


def test_the_packaged_decoder_trains_a_generation_task_offline(make_cfg, tmp_path):
    """`model=decoder`: a GPT-2 from random weights over the packaged tokenizer (resized
    smaller here), trained on the bundled synthetic_gen; without random_init, one line."""
    cfg = make_cfg(
        "model=decoder", "task=[synthetic_gen]", "+model.config.n_layer=1",
        "+model.config.n_embd=32", "+model.config.n_head=2",
    )  # fmt: skip
    results = run(cfg)
    assert "eval/synthetic_gen/exact_match" in results.dev
    config = results.model.encoder.config
    assert (config.model_type, config.n_layer, config.vocab_size) == ("gpt2", 1, 30522)
    with pytest.raises(MtlError, match="mtl-decoder has no trained weights"):
        other = tmp_path / "other"
        run(
            make_cfg(
                "model=decoder", "task=[synthetic_gen]", "model.random_init=false", output_dir=other
            )
        )


def test_a_generated_metric_is_the_main_one_and_what_the_run_monitors(make_cfg, decoder):
    """`metrics: [exact_match, ...]` and `trainer.monitor` on it: the best model is chosen by
    it, as by any other figure."""
    cfg = make_cfg(
        "task=[synthetic_gen]", f"model.name_or_path={decoder}", "model.random_init=true",
        "task.synthetic_gen.metrics=[exact_match,loss]", "task.synthetic_gen.generate_rows=4",
        "task.synthetic_gen.max_new_tokens=3", "trainer.eval_every=2",
        "trainer.monitor=eval/synthetic_gen/exact_match",
    )  # fmt: skip
    results = run(cfg)
    assert list(results.dev) == [
        "eval/synthetic_gen/exact_match", "eval/synthetic_gen/loss", "eval/mean",
    ]  # fmt: skip
    assert results.dev["eval/mean"] == results.dev["eval/synthetic_gen/exact_match"]
