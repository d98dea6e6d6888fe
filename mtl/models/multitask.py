"""The multi-task model: one shared encoder, one head per task in an `nn.ModuleDict`."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPast

from mtl.batching.collators import task_rows
from mtl.models.families import EncoderAdapter, adapter_for
from mtl.models.lora import adapter_tasks, add_adapter, is_adapted, merge_adapter, use_adapter
from mtl.models.packing import PackedEncoder

# transformers renamed the decoder's KV cache from `past_key_values` (in and out) to `cache`
CACHE = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
HEADS = "heads"  # the ModuleDict of the task heads: their keys are `heads.<task>.<parameter>`


class Owner(NamedTuple):
    """Who a parameter belongs to: `task` (None: every task shares it) and `part` ("encoder",
    "head" or "adapter")."""

    task: str | None
    part: str


def _head_task(key: str) -> str | None:
    parts = key.split(".", 2)
    return parts[1] if len(parts) == 3 and parts[0] == HEADS else None


def task_labels(batch: Mapping, name: str, rows) -> torch.Tensor:
    """`name`'s labels in a batch whose rows of it are `rows` (`task_rows`; None: every row,
    a batch of one task)."""
    return batch["labels"] if rows is None else batch["labels"][name]


def heads_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The heads' part of a model state, keyed `<task>.<parameter>` (an export's
    heads.safetensors)."""
    return {key.split(".", 1)[1]: value for key, value in state.items() if _head_task(key)}


def model_state(heads: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`heads_state` back to the model's keys."""
    return {f"{HEADS}.{key}": value for key, value in heads.items()}


class ParameterGroups:
    """Which task owns each parameter of a model whose task heads live in `heads` (an
    `nn.ModuleDict`), and whose encoder may carry one adapter per task (`adapter_owner`:
    {parameter name: task}). `owner` is the one rule: the optimizer's groups, checkpoint
    compatibility, `model.init_from`, loading an export, the step's per-task gradients and the
    diagnostics all ask it."""

    adapter_owner: Mapping[str, str] = MappingProxyType({})

    def owner(self, name: str) -> Owner:
        """Who owns a parameter or state-dict key (`module.`, as a prepared model prefixes
        them, aside): a task's head, a task's adapter, or the shared encoder (a shared adapter
        too)."""
        name = name.removeprefix("module.")
        task = _head_task(name)
        if task is not None:
            return Owner(task, "head")
        task = self.adapter_owner.get(name)
        return Owner(task, "encoder" if task is None else "adapter")

    def shared_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """The trainable parameters every task shares (named), in the model's order."""
        named = self.named_parameters()  # type: ignore[attr-defined]
        return [(n, p) for n, p in named if p.requires_grad and self.owner(n).task is None]

    def task_parameters(self, task: str) -> list[tuple[str, nn.Parameter]]:
        """The trainable parameters of `task` alone (its head, and its adapter when each task
        has one), named, in the model's order."""
        named = self.named_parameters()  # type: ignore[attr-defined]
        return [(n, p) for n, p in named if p.requires_grad and self.owner(n).task == task]


class MultiTaskModel(ParameterGroups, nn.Module):
    """Runs the encoder once per batch and each task's head on that task's rows.

    A single-task batch carries `task` (a name) and `labels` (a tensor). A mixed batch (from
    `MixupLoader`) carries `task_ids` (row -> index into `tasks`) and `labels` as a dict
    `{task: labels of its rows, in row order}`. It returns each task's loss (the mean loss of
    that task's rows) and logits; how the task losses become one update (and the tasks'
    `model.loss_weights`) is the balancer's (`mtl.balancers`).

    `pack=True`: a batch with much padding runs the encoder on its rows packed end to end
    (`mtl.models.packing`); the heads get the same hidden states either way.

    `adapter`: the encoder's family (`mtl.models.families`; default: from its config). It picks
    the encoder's inputs, how packed calls are masked, and each head's form (a head with
    `adapt(shape)` takes the family's `HeadShape`).

    An encoder with one peft adapter per task (`add_adapters(config, per_task=True)`, or
    `per_task_adapters=True` for an encoder that carries them already) runs each task's rows
    through that task's adapter: one encoder call per task a batch holds.
    """

    def __init__(
        self,
        encoder: nn.Module,
        heads: Mapping[str, nn.Module],
        *,
        pack: bool = True,
        adapter: EncoderAdapter | None = None,
        per_task_adapters: bool = False,
    ):
        super().__init__()
        self.encoder = encoder
        config = getattr(encoder, "config", None)
        self.adapter = adapter or adapter_for(config)
        shape = self.adapter.head_shape()
        for head in heads.values():
            if callable(getattr(head, "adapt", None)):
                head.adapt(shape)
            if callable(getattr(head, "attach", None)):  # a head that reads the decoder's own
                head.attach(encoder, self.adapter)  # parts (the LM head of a generation task)
        pad_token_id = getattr(config, "pad_token_id", None) or 0
        self.packed = PackedEncoder(encoder, pad_token_id, self.adapter) if pack else None
        self.heads = nn.ModuleDict(heads)
        self.own_adapters(per_task_adapters)

    def own_adapters(self, per_task: bool) -> None:
        """Record whether the encoder carries one adapter per task, and whose each adapter
        parameter is (`owner`)."""
        self.per_task_adapters = per_task
        owner = adapter_tasks(self.encoder) if per_task else {}
        self.adapter_owner = {f"encoder.{name}": task for name, task in owner.items()}

    def add_adapters(self, config, *, per_task: bool = False) -> None:
        """Put a peft adapter (`config`) on the encoder, or with `per_task` one per task named
        by it, the encoder's own weights frozen (`model.peft`)."""
        self.encoder = add_adapter(self.encoder, config, list(self.heads) if per_task else None)
        self.own_adapters(per_task)

    def merged(self, task: str | None = None) -> MultiTaskModel:
        """This model when its encoder carries no adapter; else a copy whose encoder has the
        adapter (`task`'s, with one per task) merged into its weights (an export's)."""
        if not is_adapted(self.encoder):
            return self
        merged = copy.deepcopy(self)  # the copy's own encoder to merge into; heads are small
        merged.encoder = merge_adapter(merged.encoder, task)
        merged.own_adapters(False)
        return merged

    def encode(self, batch: Mapping, task: str | None = None, rows=None) -> torch.Tensor:
        """The encoder's hidden states of the batch (of its `rows` alone, when given), through
        `task`'s adapter when each task has one."""
        inputs = self.adapter.encoder_inputs(batch)
        host = batch.get("host_attention_mask")
        if rows is not None:
            inputs = {key: value[rows] for key, value in inputs.items()}
            host_rows = (batch.get("host_task_rows") or {}).get(task)
            if host is not None:  # the task's rows of the host mask (planned there: no read)
                host = host[host_rows if host_rows is not None else rows.cpu()]
        if task is not None and self.per_task_adapters:
            use_adapter(self.encoder, task)
        if self.packed is not None:
            return self.packed(self.encoder, inputs, host)
        return self.encoder(**inputs).last_hidden_state

    def next_token_logits(self, task: str, input_ids, attention_mask, position_ids, cache):
        """(logits [B, V] of the token after each row's last, the decoder's KV cache) through
        `task`'s LM head and adapter: one step of decoding (`mtl.models.decoding`)."""
        if self.per_task_adapters:
            use_adapter(self.encoder, task)
        out = self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{CACHE: cache},
        )
        last = out.last_hidden_state[:, -1:]
        return self.heads[task](last, attention_mask[:, -1:])[:, -1], getattr(out, CACHE)

    def logits(self, batch: Mapping) -> dict[str, torch.Tensor]:
        """{task: its head's outputs} for a single-task batch, without labels or loss."""
        hidden = self.encode(batch, batch["task"])
        return {batch["task"]: self.heads[batch["task"]](hidden, batch["attention_mask"])}

    def token_mean_tasks(self) -> list[str]:
        """The tasks whose loss is a mean over tokens (a head with `token_mean`), in the
        model's order: `loss_items` counts their tokens."""
        return [name for name, head in self.heads.items() if getattr(head, "token_mean", False)]

    def loss_items(self, batch: Mapping) -> dict[str, torch.Tensor]:
        """{task: the tokens its loss averages over in `batch`} for the batch's tasks among
        `token_mean_tasks` (read by the step on several processes only)."""
        items = {}
        for name, rows in task_rows(batch).items():
            head = self.heads[name]
            if getattr(head, "token_mean", False):
                items[name] = head.loss_items(task_labels(batch, name, rows))
        return items

    def forward(self, batch: Mapping) -> dict:
        """Returns {"task_losses": {task: scalar}, "logits": {task: tensor}}, tasks in the
        batch's order."""
        per_task = self.per_task_adapters
        hidden = None if per_task else self.encode(batch)
        mask = batch["attention_mask"]
        groups = {}
        for name, rows in task_rows(batch).items():
            labels = task_labels(batch, name, rows)
            if rows is None:
                h = self.encode(batch, name) if per_task else hidden
                groups[name] = (h, mask, labels)
            else:
                h = self.encode(batch, name, rows) if per_task else hidden[rows]  # type: ignore[index]
                groups[name] = (h, mask[rows], labels)
        task_losses, logits = {}, {}
        for name, (h, m, labels) in groups.items():
            head = self.heads[name]
            logits[name] = head(h, m)
            task_losses[name] = head.loss(logits[name], labels)
        return {"task_losses": task_losses, "logits": logits}
