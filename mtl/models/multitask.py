"""The multi-task model: one shared encoder, one head per task in an `nn.ModuleDict`."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from mtl.batching.collators import task_rows
from mtl.models.families import EncoderAdapter, adapter_for
from mtl.models.lora import adapter_tasks, task_adapters, use_adapter
from mtl.models.packing import PackedEncoder

HEADS = "heads"  # the ModuleDict of the task heads: their keys are `heads.<task>.<parameter>`


def head_task(key: str) -> str | None:
    """The task whose head a parameter (or state-dict key) belongs to; None for a shared one
    (the encoder, and every other parameter that is not a head's)."""
    parts = key.split(".", 2)
    return parts[1] if len(parts) == 3 and parts[0] == HEADS else None


def heads_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The heads' part of a model state, keyed `<task>.<parameter>` (an export's
    heads.safetensors)."""
    return {key.split(".", 1)[1]: value for key, value in state.items() if head_task(key)}


def model_state(heads: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`heads_state` back to the model's keys."""
    return {f"{HEADS}.{key}": value for key, value in heads.items()}


class ParameterGroups:
    """The parameter groups of a model whose task heads live in `heads` and whose encoder (in
    `encoder`) may carry one adapter per task (`mtl.models.lora`): the rule that every place
    asks (the optimizer's groups, the step's per-task gradients, diagnostics, checkpoints and
    exports)."""

    def parameter_tasks(self) -> dict[str, str | None]:
        """{trainable parameter's name: the task it belongs to, None for a shared one}, in the
        model's order: a task's parameters are its head's and, with per-task adapters, its
        adapter's."""
        encoder = getattr(self, "encoder", None)
        adapters = {}
        if encoder is not None and task_adapters(encoder, self.heads):  # type: ignore[attr-defined]
            adapters = {f"encoder.{n}": task for n, task in adapter_tasks(encoder).items()}
        named = self.named_parameters()  # type: ignore[attr-defined]
        return {n: head_task(n) or adapters.get(n) for n, p in named if p.requires_grad}

    def shared_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """The trainable parameters every task shares (named), in the model's order."""
        owner = self.parameter_tasks()
        named = self.named_parameters()  # type: ignore[attr-defined]
        return [(n, p) for n, p in named if n in owner and owner[n] is None]

    def task_parameters(self, task: str) -> list[tuple[str, nn.Parameter]]:
        """The trainable parameters of `task` alone (its head, and its adapter when each task
        has one), named, in the model's order."""
        owner = self.parameter_tasks()
        named = self.named_parameters()  # type: ignore[attr-defined]
        return [(n, p) for n, p in named if owner.get(n, "") == task]


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

    An encoder with one peft adapter per task (`model.peft={per_task: true}`) runs each task's
    rows through that task's adapter: one encoder call per task a batch holds.
    """

    def __init__(
        self,
        encoder: nn.Module,
        heads: Mapping[str, nn.Module],
        *,
        pack: bool = True,
        adapter: EncoderAdapter | None = None,
    ):
        super().__init__()
        self.encoder = encoder
        config = getattr(encoder, "config", None)
        self.adapter = adapter or adapter_for(config)
        shape = self.adapter.head_shape()
        for head in heads.values():
            if callable(getattr(head, "adapt", None)):
                head.adapt(shape)
        pad_token_id = getattr(config, "pad_token_id", None) or 0
        self.packed = PackedEncoder(encoder, pad_token_id, self.adapter) if pack else None
        self.heads = nn.ModuleDict(heads)

    def encode(self, batch: Mapping, task: str | None = None, rows=None) -> torch.Tensor:
        """The encoder's hidden states of the batch (of its `rows` alone, when given), through
        `task`'s adapter when each task has one."""
        inputs = self.adapter.encoder_inputs(batch)
        host = batch.get("host_attention_mask")
        if rows is not None:
            inputs = {key: value[rows] for key, value in inputs.items()}
            host = None if host is None else host[rows.cpu()]
        if task is not None and task_adapters(self.encoder, self.heads):
            use_adapter(self.encoder, task)
        if self.packed is not None:
            return self.packed(self.encoder, inputs, host)
        return self.encoder(**inputs).last_hidden_state

    def logits(self, batch: Mapping) -> dict[str, torch.Tensor]:
        """{task: its head's outputs} for a single-task batch, without labels or loss."""
        hidden = self.encode(batch, batch["task"])
        return {batch["task"]: self.heads[batch["task"]](hidden, batch["attention_mask"])}

    def forward(self, batch: Mapping) -> dict:
        """Returns {"task_losses": {task: scalar}, "logits": {task: tensor}}, tasks in the
        batch's order."""
        per_task = task_adapters(self.encoder, self.heads)
        hidden = None if per_task else self.encode(batch)
        mask = batch["attention_mask"]
        groups = {}
        for name, rows in task_rows(batch).items():
            if rows is None:
                h = self.encode(batch, name) if per_task else hidden
                groups[name] = (h, mask, batch["labels"])
            else:
                h = self.encode(batch, name, rows) if per_task else hidden[rows]  # type: ignore[index]
                groups[name] = (h, mask[rows], batch["labels"][name])
        task_losses, logits = {}, {}
        for name, (h, m, labels) in groups.items():
            head = self.heads[name]
            logits[name] = head(h, m)
            task_losses[name] = head.loss(logits[name], labels)
        return {"task_losses": task_losses, "logits": logits}
