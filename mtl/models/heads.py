"""Task heads: one small module per task type, on top of the shared encoder's hidden states.

Each head maps hidden states `[B, L, H]` (plus the attention mask) to its outputs and owns its
loss, so the multi-task model never needs to know a task's type.

Sentence-level heads pool in one of two ways (`pooling`):
- `"cls"` (default): BERT's pooler, `tanh(dense(first token))`, one per task, started from the
  encoder's pretrained pooler when it has one (`init_poolers`). Head = pooler -> dropout ->
  linear is exactly what transformers' `BertFor{SequenceClassification,MultipleChoice}` compute,
  so each such task exports as a standard transformers model (`mtl-export`).
- `"mean"`: the average of the non-pad token states (the pooling all-MiniLM-L6-v2 was trained
  with); `head: {_target_: mtl.models.heads.SequenceClassificationHead, pooling: mean}`. Such a
  task is used through `mtl.load_model` / `mtl-predict` (no standard transformers class pools so).

Model families (`mtl.models.families`): the multi-task model gives each head its encoder
family's `HeadShape` (`adapt`): which token a sentence head pools (first, or the last non-pad
token of a decoder), the activation after its dense layer (BERT's tanh, ELECTRA's GELU,
DistilBERT's ReLU, ...) or no dense layer, a LayerNorm after it (ModernBERT, whose token heads
run it too) and the output layer's bias. BERT's shape is the default and changes nothing.

Export: a task type names its transformers counterpart (`TransformersModel`, from the type's
`export_kind`), the family names the modules of that model a head's parts go to
(`ExportTargets`), and a head that has one copies itself into that model (`to_transformers`); a
head without `to_transformers` (a user's) has no standard transformers form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers.activations import ACT2FN

from mtl.batching import IGNORE_INDEX
from mtl.errors import MtlError
from mtl.models.families import ExportTargets, HeadShape, last_token


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of the non-pad token states (the pooling all-MiniLM-L6-v2 was trained with)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


POOLINGS = ("cls", "mean")
USE_MTL = "use mtl.load_model / mtl-predict"


@dataclass(frozen=True)
class TransformersModel:
    """A task's standard transformers model: the `AutoModelFor...` class name, the config keys
    it sets (labels, problem type) and the module of that model that a head's `out` becomes."""

    auto_class: str
    config: dict[str, Any]
    out: str


def _copy_module(source: nn.Module, hf: nn.Module, path: str | None, what: str) -> str | None:
    """Copy `source`'s weights onto `hf`'s module `path`; None when done, else why not."""
    target = _submodule(hf, path)
    fits = type(target) is type(source) and all(
        getattr(target, name, None) is not None and getattr(target, name).shape == value.shape
        for name, value in source.state_dict().items()
    )
    if not fits or set(target.state_dict()) != set(source.state_dict()):
        return f"the transformers model has no {what} of the head's shape; {USE_MTL}"
    with torch.no_grad():
        target.load_state_dict(source.state_dict())
    return None


def _submodule(hf: nn.Module, path: str | None) -> nn.Module | None:
    if path is None:
        return None
    if path.startswith("base_model."):
        hf, path = hf.base_model, path.removeprefix("base_model.")
    try:
        return hf.get_submodule(path)
    except AttributeError:
        return None


def _without_bias(linear: nn.Linear) -> nn.Linear:
    """`linear`'s weight in a linear layer without bias."""
    bare = nn.Linear(linear.in_features, linear.out_features, bias=False)
    with torch.no_grad():
        bare.weight.copy_(linear.weight)
    return bare


def activate(name: str, x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) if name == "tanh" else ACT2FN[name](x)


class PooledHead(nn.Module):
    """Base of the sentence-level heads: `pool(hidden, mask)` -> dropout -> `out` (a linear map
    to `out_features`). With `pooling="cls"` the head pools its family's token (first, or last
    non-pad) through `pooler` (dense H -> H, then the family's activation, tanh by default; and
    `norm`, a LayerNorm, where the family has one); with `pooling="mean"` it averages."""

    def __init__(self, hidden_size: int, out_features: int, dropout: float, pooling: str):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}; use one of {', '.join(POOLINGS)}")
        self.pooling = pooling
        self.pooler = nn.Linear(hidden_size, hidden_size) if pooling == "cls" else None
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, out_features)
        self.norm: nn.LayerNorm | None = None
        self.position, self.activation = "first", "tanh"

    def adapt(self, shape: HeadShape) -> None:
        """Take the encoder family's form (`HeadShape`); BERT's (the default) changes nothing.
        A mean-pooling head keeps its pooling."""
        if self.pooling != "cls":
            return
        self.position, self.activation = shape.position, shape.activation
        if shape.activation is None:
            self.pooler = None
        elif not shape.dense_bias and self.pooler.bias is not None:
            self.pooler = _without_bias(self.pooler)
        if shape.norm_eps is not None and self.pooler is not None:
            size = self.pooler.out_features
            self.norm = nn.LayerNorm(size, eps=shape.norm_eps, bias=shape.norm_bias)
        if not shape.out_bias and self.out.bias is not None:
            self.out = _without_bias(self.out)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.pooling == "mean":
            return mean_pool(hidden, attention_mask)
        x = last_token(hidden, attention_mask) if self.position == "last" else hidden[:, 0]
        if self.pooler is not None:
            x = activate(self.activation, self.pooler(x))
        return x if self.norm is None else self.norm(x)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.out(self.dropout(self.pool(hidden, attention_mask)))

    def to_transformers(self, hf: nn.Module, targets: ExportTargets) -> str | None:
        """Copy this head into `hf`: `pooler` and `norm` onto `targets.dense` and
        `targets.norm`, `out` onto `targets.out`; None when done, else why it cannot."""
        if self.pooling == "mean":
            return (
                "head pools by mean; no standard transformers class does that: "
                f"{USE_MTL}, or pooling cls"
            )
        parts = [(self.pooler, targets.dense, "dense layer (pooler)")]
        parts += [(self.norm, targets.norm, "LayerNorm"), (self.out, targets.out, targets.out)]
        for part, path, what in parts:
            why_not = None if part is None else _copy_module(part, hf, path, what)
            if why_not:
                return why_not
        return None


def init_poolers(
    heads: dict[str, nn.Module], weight: torch.Tensor, bias: torch.Tensor | None
) -> None:
    """Start every head's `pooler` from the encoder's pretrained pooler (`weight`, `bias`)."""
    with torch.no_grad():
        for head in heads.values():
            pooler = getattr(head, "pooler", None)
            if isinstance(pooler, nn.Linear) and pooler.weight.shape == weight.shape:
                pooler.weight.copy_(weight)
                if bias is not None and pooler.bias is not None:
                    pooler.bias.copy_(bias)


class SequenceClassificationHead(PooledHead):
    """Pooled sentence vector -> logits over `num_labels`; cross-entropy loss."""

    def __init__(
        self, hidden_size: int, num_labels: int, dropout: float = 0.1, pooling: str = "cls"
    ):
        super().__init__(hidden_size, num_labels, dropout, pooling)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), labels)


class TokenHead(nn.Module):
    """Base of the token-level heads: each token's state -> dropout -> `out`; in a family whose
    token heads transform first (`HeadShape.token_dense`: ModernBERT), `dense` -> activation ->
    `norm` before the dropout."""

    def __init__(self, hidden_size: int, out_features: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, out_features)
        self.dense: nn.Linear | None = None
        self.norm: nn.LayerNorm | None = None
        self.activation = "gelu"

    def adapt(self, shape: HeadShape) -> None:
        """Take the encoder family's form (`HeadShape`); only `token_dense` concerns these."""
        if not shape.token_dense or self.dense is not None:
            return
        size = self.out.in_features
        self.dense = nn.Linear(size, size, bias=shape.dense_bias)
        self.activation = shape.activation or "gelu"
        if shape.norm_eps is not None:
            self.norm = nn.LayerNorm(size, eps=shape.norm_eps, bias=shape.norm_bias)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.dense is not None:
            hidden = activate(self.activation, self.dense(hidden))
        if self.norm is not None:
            hidden = self.norm(hidden)
        return self.out(self.dropout(hidden))

    def to_transformers(self, hf: nn.Module, targets: ExportTargets) -> str | None:
        """Copy `dense`, `norm` and `out` onto `targets`' modules of `hf` (None when done, else
        why it cannot)."""
        parts = [(self.dense, targets.dense, "dense layer"), (self.norm, targets.norm, "LayerNorm")]
        for part, path, what in [*parts, (self.out, targets.out, targets.out)]:
            why_not = None if part is None else _copy_module(part, hf, path, what)
            if why_not:
                return why_not
        return None


class TokenClassificationHead(TokenHead):
    """Per-token logits over `num_labels`; cross-entropy over tokens whose label is not -100
    (their mean: `token_mean`, weighed over the processes by `loss_items`)."""

    token_mean = True

    def __init__(self, hidden_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__(hidden_size, num_labels, dropout)

    def loss_items(self, labels: torch.Tensor) -> torch.Tensor:
        """The number of labelled tokens `loss` averages over."""
        return (labels != IGNORE_INDEX).sum()

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits[:, : labels.shape[1]]
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            labels.reshape(-1),
            ignore_index=IGNORE_INDEX,
        )


class RegressionHead(PooledHead):
    """Pooled sentence vector -> one real value; mean squared error loss."""

    def __init__(
        self, hidden_size: int, num_labels: int = 1, dropout: float = 0.1, pooling: str = "cls"
    ):
        super().__init__(hidden_size, 1, dropout, pooling)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return super().forward(hidden, attention_mask).squeeze(-1)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(logits.float(), labels.float())


class QuestionAnsweringHead(TokenHead):
    """Per-token start and end logits `[B, L, 2]` for extractive QA (padding positions get the
    dtype's minimum, so they are never chosen); the loss is the mean of the start and end
    positions' cross-entropies.

    Labels: Long[B, 2] (start token, end token), or Long[B, L] whose columns 0 and 1 hold the
    pair (a composite loader pads 2-D labels to the batch length with -100).
    """

    def __init__(self, hidden_size: int, num_labels: int = 2, dropout: float = 0.1):
        super().__init__(hidden_size, 2, dropout)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        logits = super().forward(hidden, attention_mask)
        padding = attention_mask.unsqueeze(-1) == 0
        return logits.masked_fill(padding, torch.finfo(logits.dtype).min)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        start = F.cross_entropy(logits[..., 0], labels[:, 0], ignore_index=IGNORE_INDEX)
        end = F.cross_entropy(logits[..., 1], labels[:, 1], ignore_index=IGNORE_INDEX)
        return (start + end) / 2


class MultiLabelHead(SequenceClassificationHead):
    """Pooled sentence vector -> one logit per label; binary cross-entropy per label.

    `loss` reads the first `num_labels` columns of `labels`, so labels that a composite loader
    right-padded (with -100) still line up.
    """

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(
            logits.float(), labels[:, : logits.shape[1]].float()
        )


class MultipleChoiceHead(PooledHead):
    """Pooled vector of each choice row -> one score; softmax cross-entropy over each example's
    choices (`pooling`: see above; "cls" is `BertForMultipleChoice`'s head).

    `forward(hidden [N, L, H], attention_mask [N, L]) -> scores [N]`, a row with no tokens (an
    empty filler choice) scoring the dtype's lowest value, so that it gets no probability.
    `loss(scores [N], labels [B])`: the N rows are B examples of N / B choices each, in order.
    """

    def __init__(
        self, hidden_size: int, num_labels: int = 1, dropout: float = 0.1, pooling: str = "cls"
    ):
        super().__init__(hidden_size, 1, dropout, pooling)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        scores = super().forward(hidden, attention_mask).squeeze(-1)
        empty = attention_mask.sum(-1) == 0
        return scores.masked_fill(empty, torch.finfo(scores.dtype).min)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(by_example(logits, len(labels)).float(), labels)


def by_example(scores: torch.Tensor, examples: int) -> torch.Tensor:
    """Scores [B * C] of B examples' choices as [B, C]."""
    if examples == 0 or scores.numel() % examples:
        raise ValueError(
            f"{scores.numel()} choice scores cannot be split evenly between {examples} examples"
        )
    return scores.reshape(examples, -1)


def next_token_losses(logits: torch.Tensor, labels: torch.Tensor):
    """(cross-entropy [B, L - 1] of each position's next token in its own row, 0 where the
    label is -100; the positions that count), from logits [B, L, V] and labels [B, L]."""
    labels = labels[:, 1:]  # position t predicts the row's token t + 1
    logits = logits[:, :-1].float()
    token = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    ).view(labels.shape)
    return token, labels != IGNORE_INDEX


class LanguageModelHead(nn.Module):
    """The decoder's own LM head, as the head of a generation task: logits over the vocabulary
    at every position; `loss` is next-token cross-entropy within each row, over the positions
    whose labels are not -100, reduced per token (`token`: the mean over the batch's labelled
    tokens) or per row (`sequence`: the mean of each row's mean).

    `attach(encoder, adapter)` (called by `MultiTaskModel` when it is built) gives it the
    decoder's output projection: where the decoder ties it to its input embeddings
    (`tie_word_embeddings`, the default of GPT-2, Qwen2 and most small decoders) the head reads
    the embedding matrix itself, which stays the decoder's parameter (shared by every task, as
    the balancers, the optimizer and the diagnostics see it: `MultiTaskModel.owner`); where it
    does not, the head has a projection of its own (the task's). An encoder (no causal
    attention) is refused in one line: it does not write text."""

    def __init__(
        self, hidden_size: int, num_labels: int = 0, dropout: float = 0.0, *, reduction="token"
    ):
        super().__init__()
        self.hidden_size, self.reduction = hidden_size, reduction
        self.proj: nn.Linear | None = None  # a projection of its own (an untied decoder)
        self.embeddings: nn.Module | None = None  # the decoder's tied input embeddings

    def attach(self, encoder: nn.Module, adapter) -> None:
        if not getattr(adapter, "causal", False):
            raise MtlError(
                "a generation task needs a decoder (a causal LM: model=decoder, a Qwen2, "
                "Llama or GPT-2 checkpoint, or model.family=decoder); this model is an encoder"
            )
        config = encoder.config
        embeddings = encoder.get_input_embeddings()
        if getattr(config, "tie_word_embeddings", True):
            # not registered as this head's: the weight is the decoder's, shared
            object.__setattr__(self, "embeddings", embeddings)
        else:
            self.proj = nn.Linear(self.hidden_size, embeddings.weight.shape[0], bias=False)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.proj is not None:
            return self.proj(hidden)
        if self.embeddings is None:
            raise MtlError("LanguageModelHead: attach(decoder, adapter) first")
        return F.linear(hidden, self.embeddings.weight)

    @property
    def token_mean(self) -> bool:
        """Whether `loss` is a mean over tokens (`token`), whose count differs between the
        processes of a run: the step then weighs each process's mean by its count
        (`loss_items`) so that the update is the mean over every process's tokens."""
        return self.reduction == "token"

    def loss_items(self, labels: torch.Tensor) -> torch.Tensor:
        """The number of tokens `loss` averages over (`token`)."""
        return (labels[:, 1:] != IGNORE_INDEX).sum()

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        token, kept = next_token_losses(logits, labels)
        if self.reduction == "token":
            return token.sum() / kept.sum().clamp(min=1)
        per_row = token.sum(1) / kept.sum(1).clamp(min=1)
        rows = kept.any(1)
        return (per_row * rows).sum() / rows.sum().clamp(min=1)

    def to_transformers(self, hf: nn.Module, targets: ExportTargets) -> str | None:
        """Into `AutoModelForCausalLM`: a tied head is the model's own embeddings already; a
        projection of its own is copied onto `targets.out` (`lm_head`)."""
        if self.proj is None:
            tied = getattr(hf.config, "tie_word_embeddings", True)
            return None if tied else f"the causal LM does not tie its LM head; {USE_MTL}"
        return _copy_module(self.proj, hf, targets.out, "LM head")
