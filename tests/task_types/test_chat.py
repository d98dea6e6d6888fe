"""Conversations (`messages_column`) as a generation task's rows: rendered with a chat template
(the tokenizer's, the task's, or the plain default), trained on the assistant turns alone, bad
conversations refused in one line counting them, and a run's export whose pipeline, given the
conversation, writes what mtl-predict writes."""

from __future__ import annotations

import json

import pytest

from mtl.batching import IGNORE_INDEX
from mtl.data import load_tokenizer
from mtl.errors import MtlError
from mtl.models.tiny import save_tiny_model
from mtl.task_types import Generation, task_config

# ChatML, as Qwen's templates write it (the end-of-turn marker is text to this tokenizer)
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TALK = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi there"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "your name"},
    {"role": "assistant", "content": "bob"},
    {"role": "user", "content": "bye"},  # after the last assistant turn: left out
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The tiny GPT-2's: MiniLM's vocabulary, `<|endoftext|>` its BOS and EOS."""
    return load_tokenizer(str(save_tiny_model("gpt2", tmp_path_factory.mktemp("gpt2") / "m")))


def chat(**options) -> Generation:
    config = {"type": "generation", "source": {"bundled": "x"}, "messages_column": "messages"}
    return Generation("chat", task_config(config | options))


def trained_text(tokenizer, out) -> str:
    return tokenizer.decode([t for t in out["labels"][0] if t != IGNORE_INDEX])


def test_the_plain_default_trains_the_assistant_turns_and_their_end_token(tokenizer):
    assert tokenizer.chat_template is None
    out = chat().encode({"messages": [TALK]}, tokenizer, None, "task 'chat'")
    text = tokenizer.decode(out["input_ids"][0])
    assert text == (
        "<|endoftext|> system : be brief user : hi there assistant : hello <|endoftext|> "
        "user : your name assistant : bob <|endoftext|>"
    )
    assert trained_text(tokenizer, out) == "hello <|endoftext|> bob <|endoftext|>"
    prompt = out["input_ids"][0][: out["prompt_length"][0]]
    assert tokenizer.decode(prompt).endswith("user : your name assistant :")
    assert out["completion"] == ["bob"]


def test_a_given_template_trains_each_assistant_turn_with_its_end_of_turn(tokenizer):
    out = chat(chat_template=CHATML).encode({"messages": [TALK]}, tokenizer, None, "w")
    trained = trained_text(tokenizer, out)
    assert trained.count("hello") == 1 and trained.count("bob") == 1
    assert "user" not in trained and "be brief" not in trained
    assert trained.endswith("< | im _ end | >")  # the turn's closing marker is the model's
    on_prompt = chat(chat_template=CHATML, train_on_prompt=True)
    everything = on_prompt.encode({"messages": [TALK]}, tokenizer, None, "w")
    assert everything["labels"] == everything["input_ids"]


def test_a_long_conversation_is_cut_from_the_left_keeping_its_last_reply(tokenizer):
    long = [{"role": "user", "content": " ".join(["word"] * 80)}, *TALK[2:5]]
    out = chat(max_length=16).encode({"messages": [long]}, tokenizer, None, "w")
    ids = out["input_ids"][0]
    assert len(ids) == 16 and ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids).endswith("assistant : bob <|endoftext|>")
    assert trained_text(tokenizer, out).endswith("bob <|endoftext|>")


REFUSING = "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}{{ m['content'] }}{% endfor %}"  # noqa: E501


@pytest.mark.parametrize(
    ("rows", "options", "says"),
    [
        (
            [TALK, TALK[:2], [TALK[1]], TALK],
            {},
            "2 of 4 rows whose 'messages' has no assistant turn (rows 2, 3)",
        ),
        (
            [TALK, [{"role": "robot", "content": "x"}, TALK[2]]],
            {},
            "1 of 2 rows whose 'messages' has a turn of role 'robot' (roles: system, user",
        ),
        ([TALK, "just text"], {}, "(rows 2)"),
        (
            [TALK, TALK[1:5]],
            {"chat_template": REFUSING},
            "1 of 2 rows whose 'messages' is refused by the chat template (no system) (rows 1)",
        ),
    ],
)
def test_bad_conversations_are_counted_and_named_in_one_line(tokenizer, rows, options, says):
    with pytest.raises(MtlError) as caught:
        chat(**options).check_rows({"messages": rows}, tokenizer, "task 'chat', train split")
    message = str(caught.value)
    assert says in message and "\n" not in message, message
    assert message.startswith("task 'chat', train split: ")


def test_a_conversation_task_trains_and_its_pipeline_writes_what_mtl_predict_writes(
    train_here, tmp_path, monkeypatch
):
    """A local file of conversations, a tiny GPT-2 (no chat template of its own: the plain
    default): trained, exported; `pipeline("text-generation")` given each conversation (its
    chat template from the export's tokenizer) writes what mtl-predict writes."""
    from transformers import pipeline

    from mtl.cli.export import main as export_main
    from mtl.cli.predict import main as predict_main
    from mtl.data.bundled.synthetic import synthetic_rows

    monkeypatch.chdir(tmp_path)
    decoder = save_tiny_model("gpt2", tmp_path / "gpt2")
    rows = synthetic_rows("synthetic_gen", 80, 0)
    talks = [
        [
            {"role": "user", "content": r["prompt"]},
            {"role": "assistant", "content": r["completion"]},
        ]
        for r in rows
    ]
    data = tmp_path / "talks.jsonl"
    data.write_text("".join(json.dumps({"messages": t}) + "\n" for t in talks))
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "talk.yaml").write_text(
        "# @package task.talk\ndefaults:\n  - /generation_task_schema\n  - _self_\n"
        f"type: generation\nsource: {{path: {data}}}\nmessages_column: messages\n"
        "max_length: 64\nbatch_size: 8\nmax_new_tokens: 5\n"
    )
    code, err = train_here(
        "debug=fast", "task=[talk]", f"model.name_or_path={decoder}", "model.random_init=true",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "hydra.run.dir=run",
    )  # fmt: skip
    assert code == 0, err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "eval/talk/exact_match" in json.dumps(results)
    export_main(["run", "out", "standard=true"])
    asked = [t[:1] for t in talks[:4]]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"messages": a}) + "\n" for a in asked))
    predict_main(["model=out", "task=talk", "input=in.jsonl", "output=out.jsonl"])
    ours = [json.loads(line)["prediction"] for line in open("out.jsonl")]
    pipe = pipeline("text-generation", model="out/talk")
    theirs = [out[0]["generated_text"] for out in pipe(asked, return_full_text=False)]
    assert ours == theirs and any(ours)
