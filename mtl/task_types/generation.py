"""Generation: a prompt and the completion a decoder should write (causal-LM fine-tuning).

A row is `prompt_column` and `completion_column` (texts). It is encoded as the prompt's tokens
(with the tokenizer's special tokens: a BOS where it adds one) followed by the completion's and
an end-of-sequence token (the tokenizer's EOS, else its SEP), one row of `input_ids`. The
completion tokens and that end token are the row's labels; the prompt's positions are -100 (not
trained) unless `train_on_prompt: true`. A row longer than `max_length` keeps its completion:
the prompt is cut from the left (its first token, a BOS, kept), and where even the completion
does not fit, its end is cut. Each position predicts the next token of its own row (the labels
are shifted in the head, row by row: no token predicts another row's, padded or packed).

The head is the decoder's own LM head (`mtl.models.heads.LanguageModelHead`: the input
embeddings where the decoder ties them, shared by every task; a head of its own where it does
not). The loss is the mean over the batch's completion tokens (`loss_reduction: token`) or the
mean of each row's mean (`sequence`).

Dev metrics, teacher-forced (the model reads the reference completion), each evaluation:
`token_accuracy` (the share of completion tokens whose next-token prediction is right), `loss`
(mean cross-entropy per completion token) and `perplexity` (exp of it). Generated
(`mtl.models.decoding`: greedy, at most `max_new_tokens`, until the end token), every
`generate_every` evaluations and at the last step's, on the same `generate_rows` dev rows each
time (a seeded sample): `exact_match`, `rouge_l` and `chrf` of the written text against the
completion as the tokenizer writes it back (decoded from its tokens: an uncased tokenizer's
lowercased, as anything the model writes is); any other metric (`module.function`) reads the
same texts. The main metric is the first of `metrics`; a generated one needs `generate_every: 1`.
Rows may also be conversations (`messages_column`: `mtl.task_types.chat`). docs/generation.md
says it all for users.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from mtl.batching import IGNORE_INDEX
from mtl.errors import MtlError
from mtl.models.heads import LanguageModelHead, TransformersModel, next_token_losses
from mtl.task_types.base import TaskConfig, TaskType
from mtl.task_types.chat import (
    assistant_spans,
    message_problem,
    plain_template,
    render,
    trained_turns,
)
from mtl.task_types.metrics import Metric

REDUCTIONS = ("token", "sequence")
FORCED = ("token_accuracy", "loss", "perplexity")  # teacher-forced: every other one is generated


@dataclass
class GenerationOptions(TaskConfig):
    """`generation` keys: the two text columns, whether the prompt is trained on, and how the
    loss is reduced."""

    prompt_column: str = "prompt"
    completion_column: str = "completion"
    train_on_prompt: bool = False
    loss_reduction: str = "token"  # token: mean over completion tokens; sequence: of row means
    generate_every: int = 1  # evaluations between generated ones (and the last step's)
    generate_rows: int = 64  # dev rows generated for (a seeded sample, the same every time)
    max_new_tokens: int = 64  # tokens written at most per row
    messages_column: str | None = None  # conversations ({role, content} turns) instead
    chat_template: str | None = None  # null: the tokenizer's (else plain); plain; a template

    def check(self, name: str) -> None:
        super().check(name)
        for key in ("generate_every", "generate_rows", "max_new_tokens"):
            if getattr(self, key) < 1:
                raise MtlError(f"task.{name}.{key}={getattr(self, key)} must be >= 1")
        main = (self.metrics or ["token_accuracy"])[0]
        if main not in FORCED and self.generate_every != 1:
            raise MtlError(
                f"task.{name}.metrics starts with {main!r}, scored on generated text, which "
                f"generate_every={self.generate_every} leaves out of most evaluations; set "
                "generate_every: 1 or put a teacher-forced metric first (token_accuracy, loss)"
            )
        if self.loss_reduction not in REDUCTIONS:
            raise MtlError(
                f"task.{name}.loss_reduction={self.loss_reduction!r}; use token (the mean over "
                "the batch's completion tokens) or sequence (the mean of each row's mean)"
            )


def cut_prompt(prompt: list[int], room: int) -> list[int]:
    """`prompt` in at most `room` (>= 1) tokens: cut from the left, its first token (a BOS)
    kept."""
    return prompt if len(prompt) <= room else prompt[:1] + prompt[len(prompt) - room + 1 :]


def unrendered(tokenizer, template: str, messages: list[dict]) -> str | None:
    """Why the chat template cannot render a conversation to train on (None: it can)."""
    try:
        assistant_spans(tokenizer, template, trained_turns(messages))
    except ValueError as err:
        return str(err)
    except Exception as err:  # the template's own refusal (jinja's raise_exception), any kind
        return f"is refused by the chat template ({str(err).splitlines()[0][:120]})"
    return None


def _share(rows: np.ndarray, numerator: int) -> float:
    return float(rows[:, numerator].sum() / max(rows[:, 1].sum(), 1))


def token_accuracy(predictions: np.ndarray, references) -> float:
    return _share(predictions, 2)


def token_loss(predictions: np.ndarray, references) -> float:
    return _share(predictions, 0)


def perplexity(predictions: np.ndarray, references) -> float:
    return math.exp(min(token_loss(predictions, references), 700.0))


# Scores of generated text against the reference completion, one pair per dev row: each equal
# to its reference implementation (tests/task_types/test_generation.py).

_NON_ALPHANUMERIC = re.compile(r"[^a-z0-9]+")


def exact_match(predictions, references) -> float:
    """The share of rows whose generated text equals the completion (spaces around aside)."""
    pairs = list(zip(predictions, references, strict=True))
    return sum(p.strip() == r.strip() for p, r in pairs) / max(len(pairs), 1)


def _rouge_tokens(text: str) -> list[str]:
    """rouge-score's default tokens: lowercase, runs of anything but a-z0-9 split."""
    return [t for t in _NON_ALPHANUMERIC.sub(" ", text.lower()).split() if t]


def _lcs(a: list[str], b: list[str]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(predictions, references) -> float:
    """ROUGE-L F-measure (rouge-score's `rougeL`, no stemming), the mean over rows."""
    total = 0.0
    pairs = list(zip(predictions, references, strict=True))
    for prediction, reference in pairs:
        p, r = _rouge_tokens(prediction), _rouge_tokens(reference)
        common = _lcs(r, p) if p and r else 0
        if common:
            precision, recall = common / len(p), common / len(r)
            total += 2 * precision * recall / (precision + recall)
    return total / max(len(pairs), 1)


def chrf(predictions, references, order: int = 6, beta: float = 2.0) -> float:
    """Corpus chrF (sacrebleu's `CHRF()`: character n-grams up to 6, whitespace removed,
    statistics summed over the rows, precision and recall averaged over the orders), 0-100."""
    stats = np.zeros((order, 3))  # per order: hypothesis n-grams, reference n-grams, matches
    for prediction, reference in zip(predictions, references, strict=True):
        hyp, ref = "".join(prediction.split()), "".join(reference.split())
        for n in range(1, order + 1):
            h = Counter(hyp[i : i + n] for i in range(len(hyp) - n + 1))
            r = Counter(ref[i : i + n] for i in range(len(ref) - n + 1))
            # as sacrebleu: a row's hypothesis n-grams count only where its reference has some
            stats[n - 1] += (sum(h.values()) if r else 0, sum(r.values()), sum((h & r).values()))
    found = (stats[:, 0] > 0) & (stats[:, 1] > 0)
    if not found.any():
        return 0.0
    precision = (stats[found, 2] / stats[found, 0]).mean()
    recall = (stats[found, 2] / stats[found, 1]).mean()
    if precision + recall == 0:
        return 0.0
    factor = beta**2
    return float(100 * (1 + factor) * precision * recall / (factor * precision + recall))


class Generation(TaskType):
    """A prompt and its completion, written by a decoder (module docstring)."""

    type_name = "generation"
    Options = GenerationOptions
    known_metrics = (
        Metric(token_accuracy, "token_accuracy", True),
        Metric(token_loss, "loss", False),
        Metric(perplexity, "perplexity", False),
        Metric(exact_match, "exact_match", True),
        Metric(rouge_l, "rouge_l", True),
        Metric(chrf, "chrf", True),
    )
    default_metrics = ("token_accuracy", "loss", "perplexity", "exact_match", "rouge_l", "chrf")
    token_labels = True
    writes_text = True

    def columns(self) -> list[str]:
        c = self.config
        return [c.messages_column] if c.messages_column else [c.prompt_column, c.completion_column]

    @staticmethod
    def end_id(tokenizer, where: str) -> int:
        """The token that ends a completion: the tokenizer's EOS, else its SEP."""
        end = tokenizer.eos_token_id
        end = tokenizer.sep_token_id if end is None else end
        if end is None:
            raise MtlError(
                f"{where}: the tokenizer has no end-of-sequence token (eos_token, or sep_token) "
                "to end a completion with; use a tokenizer that has one"
            )
        return end

    def template(self, tokenizer) -> str:
        """The chat template conversations are rendered with: the task's `chat_template`, else
        the tokenizer's, else the plain default (`mtl.task_types.chat.PLAIN`)."""
        given = self.config.chat_template
        if given and given != "plain":
            return given
        own = getattr(tokenizer, "chat_template", None)
        if own and given != "plain":
            return own
        return plain_template(tokenizer, self.end_id(tokenizer, f"task {self.name!r}"))

    def check_rows(self, rows, tokenizer, where: str) -> None:
        """Every row has a text to write: a text prompt and a non-empty completion, or a
        conversation with an assistant turn that the chat template renders; else one line
        counting and naming the rows (1 is the split's first)."""
        c = self.config
        bad: dict[str, list[int]] = {}  # what is wrong -> the rows it is wrong with
        if c.messages_column:
            template = self.template(tokenizer)
            for number, messages in enumerate(rows[c.messages_column], 1):
                problem = message_problem(messages) or unrendered(tokenizer, template, messages)
                if problem:
                    bad.setdefault(f"{c.messages_column!r} {problem}", []).append(number)
        else:
            pairs = zip(rows[c.prompt_column], rows[c.completion_column], strict=True)
            for number, (prompt, completion) in enumerate(pairs, 1):
                if not isinstance(prompt, str) or not isinstance(completion, str):
                    problem = "prompt or completion is not a text"
                elif not completion.strip():
                    problem = f"completion ({c.completion_column!r}) is empty"
                else:
                    continue
                bad.setdefault(problem, []).append(number)
        if bad:
            problem, numbers = next(iter(bad.items()))
            total = len(rows[self.columns()[0]])
            listed = ", ".join(map(str, numbers[:5])) + (", ..." if len(numbers) > 5 else "")
            raise MtlError(
                f"{where}: {len(numbers)} of {total} rows whose {problem} (rows {listed}): a "
                "row with nothing to write teaches nothing; drop them or fix them"
            )
        if not c.messages_column:
            self.check_room(rows[c.prompt_column], tokenizer, where)

    def check_room(self, prompts, tokenizer, where: str) -> None:
        """Refuse a `max_length` that cuts every prompt (below the shortest prompt + 1 token:
        a mistyped value, not long rows)."""
        shortest = min(len(ids) for ids in tokenizer(list(prompts))["input_ids"])
        if self.config.max_length < shortest + 1:
            raise MtlError(
                f"{where}: max_length={self.config.max_length} cuts every prompt (the shortest "
                f"has {shortest} tokens, and a completion needs at least 1 more); set "
                f"task.{self.name}.max_length to at least {shortest + 1}"
            )

    def encode(self, rows, tokenizer, label_names, where):
        c = self.config
        end = self.end_id(tokenizer, where)
        out: dict[str, list] = {"input_ids": [], "labels": [], "length": [], "prompt_length": []}
        if c.messages_column:
            conversations = [trained_turns(m) for m in rows[c.messages_column]]
            completions = [messages[-1]["content"] for messages in conversations]
        else:
            completions = list(rows[c.completion_column])
        completion_ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
        if c.messages_column:
            template = self.template(tokenizer)
            for messages in conversations:
                self.add(out, *self.conversation(tokenizer, template, messages))
        else:
            prompt_ids = tokenizer(list(rows[c.prompt_column]))["input_ids"]
            for p, comp in zip(prompt_ids, completion_ids, strict=True):
                self.add(out, *self.row(list(p), [*comp, end]))
        # what generated text is scored against: the completion as the tokenizer writes it back
        # (an uncased tokenizer's lowercased, as the model's text is)
        out["completion"] = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        return out

    @staticmethod
    def add(out: dict[str, list], ids: list[int], labels: list[int], prompt_length: int) -> None:
        out["input_ids"].append(ids)
        out["labels"].append(labels)
        out["length"].append(len(ids))
        out["prompt_length"].append(prompt_length)

    def conversation(self, tokenizer, template: str, messages: list[dict]):
        """One conversation's ids, labels (its assistant turns') and prompt length (the tokens
        before its last assistant turn), cut from the left to `max_length` (its first token
        kept)."""
        text, spans = assistant_spans(tokenizer, template, messages)
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, starts = encoded["input_ids"], [start for start, _ in encoded["offset_mapping"]]
        trained = [any(a <= start < b for a, b in spans) for start in starts]
        on_prompt = self.config.train_on_prompt
        labels = [t if on_prompt or k else IGNORE_INDEX for t, k in zip(ids, trained, strict=True)]
        prompt_length = sum(start < spans[-1][0] for start in starts)
        cut = len(ids) - self.config.max_length
        if cut > 0:
            ids, labels = ids[:1] + ids[cut + 1 :], labels[:1] + labels[cut + 1 :]
            prompt_length = max(prompt_length - cut, 1)
        return ids, labels, prompt_length

    def row(self, prompt: list[int], completion: list[int]) -> tuple[list[int], list[int], int]:
        """One row's ids, labels and prompt length, cut to `max_length` (module docstring)."""
        limit = self.config.max_length
        completion = completion[: limit - 1]  # at least one prompt token reads before it
        prompt = cut_prompt(prompt, limit - len(completion))
        ids = prompt + completion
        kept = prompt if self.config.train_on_prompt else [IGNORE_INDEX] * len(prompt)
        return ids, kept + completion, len(prompt)

    def num_labels(self, label_names) -> int:
        return 0

    def export_kind(self, label_names):
        return TransformersModel("AutoModelForCausalLM", {}, "lm_head")

    def default_head(self, hidden_size, num_labels, dropout):
        return LanguageModelHead(hidden_size, reduction=self.config.loss_reduction)

    def predict(self, logits: torch.Tensor, batch: dict) -> list[tuple[float, int, int]]:
        """Per row: (summed cross-entropy, completion tokens, tokens predicted right)."""
        loss, kept = next_token_losses(logits, batch["labels"])
        right = (logits[:, :-1].argmax(-1) == batch["labels"][:, 1:]) & kept
        rows = torch.stack([loss.sum(1), kept.sum(1).float(), right.sum(1).float()], 1)
        return [(a, int(b), int(c)) for a, b, c in rows.cpu().tolist()]

    def score(self, predictions, dev, label_names) -> dict:
        """The teacher-forced metrics (`predictions`: `predict`'s rows); the generated ones are
        `score_generated`'s."""
        rows = np.asarray(predictions, dtype=np.float64).reshape(-1, 3)
        return {n: float(m(rows, None)) for n, m in self.metrics.items() if n in FORCED}

    # -- generation (evaluation: mtl.training.evaluate; mtl-predict) ------------------------------

    def generates(self, evaluation: int | None) -> bool:
        """Whether the `evaluation`-th evaluation (None: the last step's, or a test split's)
        generates text: a metric reads it and `generate_every` says so."""
        if all(name in FORCED for name in self.metrics):
            return False
        return evaluation is None or evaluation % self.config.generate_every == 0

    def generation_rows(self, size: int) -> list[int]:
        """The split's rows generated for at evaluation: `generate_rows` of them, a sample
        seeded alike every time (in row order)."""
        if size <= self.config.generate_rows:
            return list(range(size))
        rng = np.random.default_rng(0)
        return sorted(rng.choice(size, self.config.generate_rows, replace=False).tolist())

    def score_generated(self, texts: list[str], completions: list[str]) -> dict[str, float]:
        """The generated metrics of `texts` against the rows' completions."""
        return {
            name: float(metric(texts, completions))
            for name, metric in self.metrics.items()
            if name not in FORCED
        }

    def references(self, dev, label_names):
        return [None] * len(dev)

    def input_columns(self) -> list[str]:
        return [self.config.messages_column or self.config.prompt_column]

    def encode_inputs(self, rows, tokenizer, label_names, where):
        """The prompts alone (what the model writes after: a conversation rendered with the
        generation prompt), cut from the left as in training (their first token kept) to
        leave room for one written token."""
        column = self.input_columns()[0]
        for number, value in enumerate(rows[column], 1):
            problem = (
                message_problem(value, needs_assistant=False)
                if self.config.messages_column
                else None
                if isinstance(value, str)
                else "is not a text"
            )
            if problem:
                raise MtlError(f"{where}, row {number}: {column!r} {problem}")
        if self.config.messages_column:
            template = self.template(tokenizer)
            texts = [render(tokenizer, template, m, prompt=True) for m in rows[column]]
            prompts = tokenizer(texts, add_special_tokens=False)["input_ids"]
        else:
            prompts = tokenizer(list(rows[column]))["input_ids"]
        out: dict[str, list] = {"input_ids": [], "length": []}
        for ids in prompts:
            ids = cut_prompt(list(ids), self.config.max_length - 1)
            out["input_ids"].append(ids)
            out["length"].append(len(ids))
        return out

    def readable(self, outputs, label_names, row, encoded):
        """{"prediction": the written text}."""
        return {"prediction": outputs[0]}

    def configure_export(self, model, tokenizer) -> None:
        """Greedy decoding that ends where training's completions end (`generation_config`);
        a conversation task's tokenizer carries the chat template it was trained with."""
        if self.config.messages_column:
            tokenizer.chat_template = self.template(tokenizer)
        config = model.generation_config
        config.eos_token_id = self.end_id(tokenizer, f"task {self.name!r}")
        config.pad_token_id = tokenizer.pad_token_id
        config.do_sample, config.max_new_tokens = False, self.config.max_new_tokens
        config.bos_token_id = tokenizer.bos_token_id
