"""Conversations (`messages`: a list of `{role, content}` turns) as a generation task's rows.

A conversation is rendered with the tokenizer's chat template (or the task's `chat_template`),
tokenized without adding special tokens (the template writes them), and its assistant turns are
what is trained on: the characters each assistant turn adds to the rendered text (its content
and whatever the template closes the turn with, an end-of-turn token) are found by rendering the
conversation up to that turn with and without it (`add_generation_prompt` before it), and the
tokens that start inside them are labelled. The turns after the last assistant turn teach
nothing and are left out.

A tokenizer without a chat template gets `PLAIN`: each turn on a line of its own as
`User: ...`, `System: ...`, and `Assistant: <content><end token>` (the end token the task
ends completions with; the generation prompt is `Assistant:`, the space the assistant's
first), with the tokenizer's BOS first where it has one; the export's tokenizer carries it, so
that a pipeline renders conversations alike.
"""

from __future__ import annotations

from typing import Any

ROLES = ("system", "user", "assistant", "tool")

PLAIN = (
    "{{ '%(bos)s' }}"
    "{%% for message in messages %%}"
    "{%% if message['role'] == 'assistant' %%}"
    "{{ 'Assistant: ' + message['content'] + '%(end)s' }}"
    "{%% else %%}"
    "{{ message['role'] | capitalize + ': ' + message['content'] + '\\n' }}"
    "{%% endif %%}"
    "{%% endfor %%}"
    "{%% if add_generation_prompt %%}{{ 'Assistant:' }}{%% endif %%}"
)


def plain_template(tokenizer, end_id: int) -> str:
    """`PLAIN` for `tokenizer`, its BOS and the end token written in."""
    bos = tokenizer.bos_token or ""
    end = tokenizer.convert_ids_to_tokens(end_id)
    return PLAIN % {"bos": bos, "end": end}


def message_problem(messages: Any, needs_assistant: bool = True) -> str | None:
    """Why `messages` is not a conversation to train on (None: it is); `needs_assistant=False`:
    to write the next turn of (prediction)."""
    if not isinstance(messages, list) or not messages:
        return "is not a list of {role, content} turns"
    for turn in messages:
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
            return "has a turn that is not {role, content} with a text content"
        if turn.get("role") not in ROLES:
            return f"has a turn of role {turn.get('role')!r} (roles: {', '.join(ROLES)})"
    if needs_assistant and not any(turn["role"] == "assistant" for turn in messages):
        return "has no assistant turn"
    return None


def trained_turns(messages: list[dict]) -> list[dict]:
    """The conversation up to its last assistant turn."""
    last = max(i for i, turn in enumerate(messages) if turn["role"] == "assistant")
    return messages[: last + 1]


def render(tokenizer, template: str, messages: list[dict], prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=prompt
    )


def assistant_spans(tokenizer, template: str, messages: list[dict]) -> tuple[str, list]:
    """(the rendered conversation, the character spans [start, end) its assistant turns add).
    ValueError where the template does not render a turn as the text before it followed by
    the turn (it cannot be told where an assistant turn starts)."""
    text = render(tokenizer, template, messages)
    spans = []
    for i, turn in enumerate(messages):
        if turn["role"] != "assistant":
            continue
        before = render(tokenizer, template, messages[:i], prompt=True)
        upto = render(tokenizer, template, messages[: i + 1])
        if not (upto.startswith(before) and text.startswith(upto)):
            raise ValueError(
                "its chat template does not render a conversation as its turns one after "
                "another, so the assistant's part cannot be found"
            )
        spans.append((len(before), len(upto)))
    return text, spans
