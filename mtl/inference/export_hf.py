"""One task of a trained model as a standard transformers model (`<export>/<task>/`).

A task type's head maps onto an `AutoModelFor...` class when it is the type's own head with BERT's
pooler (sentence-level types) or a linear layer per token (tagging, QA), on a BERT-family
encoder; `standard_model` builds that model and checks its logits against mtl's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

USE_MTL = "use mtl.load_model / mtl-predict"


@dataclass
class Standard:
    """How a task type's head maps onto a transformers class: the `AutoModelFor...` name, the
    config keys it adds, whether the head pools (pooler -> dropout -> out, BERT's pooler), and
    the module of the transformers model that the head's `out` becomes."""

    auto_class: str
    config: dict[str, Any]
    pooled: bool
    out: str


def standard_kind(task_type, label_names: list[str] | None) -> Standard | None:
    """The transformers counterpart of a task type (None: it has none)."""
    from mtl.task_types import (
        MultiLabelClassification,
        MultipleChoice,
        QuestionAnswering,
        Regression,
        SequenceClassification,
        TokenClassification,
    )

    names = list(label_names or [])
    labels = {
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
    }
    if isinstance(task_type, MultiLabelClassification):
        labels["problem_type"] = "multi_label_classification"
        return Standard("AutoModelForSequenceClassification", labels, True, "classifier")
    if isinstance(task_type, SequenceClassification):
        labels["problem_type"] = "single_label_classification"
        return Standard("AutoModelForSequenceClassification", labels, True, "classifier")
    if isinstance(task_type, Regression):
        config = {"num_labels": 1, "problem_type": "regression"}
        return Standard("AutoModelForSequenceClassification", config, True, "classifier")
    if isinstance(task_type, TokenClassification):
        return Standard("AutoModelForTokenClassification", labels, False, "classifier")
    if isinstance(task_type, QuestionAnswering):
        return Standard("AutoModelForQuestionAnswering", {"num_labels": 2}, False, "qa_outputs")
    if isinstance(task_type, MultipleChoice):
        return Standard("AutoModelForMultipleChoice", {}, True, "classifier")
    return None


def standard_model(model, name: str, task_type, label_names, tokenizer):
    """(transformers model computing task `name`'s logits, None) or (None, why not and the fix).

    Built generically: `AutoModelFor<X>.from_config(encoder config + labels)`, the encoder's
    weights loaded into its `base_model`, then the head mapped: `pooler` onto the base model's
    `pooler.dense` (BERT's pooler, so BERT-family encoders only), `out` onto `classifier` (QA:
    `qa_outputs`). The mapping is checked by running both on a small batch: equal logits
    (within 1e-4) or no export."""
    import torch
    import transformers
    from torch import nn

    kind = standard_kind(task_type, label_names)
    if kind is None:
        kind_name = type(task_type).__name__
        return None, f"type {kind_name} has no standard transformers class; {USE_MTL}"
    head = model.heads[name]
    own_head = type(task_type.default_head(8, max(1, len(label_names or [])), 0.0))
    if type(head) is not own_head:
        return None, (
            f"its head is {type(head).__name__}, not the type's own {own_head.__name__}; "
            f"no standard transformers class computes it: {USE_MTL}"
        )
    if kind.pooled and getattr(head, "pooler", None) is None:
        return None, (
            "head pools by mean; no standard transformers class does that: "
            f"{USE_MTL}, or pooling cls"
        )
    config = copy.deepcopy(model.encoder.config)
    for key, value in kind.config.items():
        setattr(config, key, value)
    auto = getattr(transformers, kind.auto_class)
    try:
        hf = auto.from_config(config)
    except ValueError:  # the encoder's model type has no such class
        return None, f"transformers has no {kind.auto_class} for {config.model_type}; {USE_MTL}"
    base, out = hf.base_model, getattr(hf, kind.out, None)
    dense = getattr(getattr(base, "pooler", None), "dense", None)
    model_type = config.model_type
    if not isinstance(out, nn.Linear) or (kind.pooled and not isinstance(dense, nn.Linear)):
        what = "BERT's pooler and classifier" if kind.pooled else f"a linear {kind.out}"
        return None, f"{auto.__name__} for {model_type} has no {what} to map the head on; {USE_MTL}"
    device = next(model.parameters()).device
    hf.to(device).eval()
    missing, unexpected = base.load_state_dict(model.encoder.state_dict(), strict=False)
    if unexpected or any(not key.startswith("pooler.") for key in missing):
        return None, f"the encoder's weights do not fit {type(hf).__name__}; {USE_MTL}"
    with torch.no_grad():
        if kind.pooled:
            dense.load_state_dict(head.pooler.state_dict())
        out.load_state_dict(head.out.state_dict())
    difference = logits_difference(model, hf, name, tokenizer, kind)
    if not difference <= 1e-4:
        return None, (
            f"{type(hf).__name__} does not reproduce the head's logits (they differ by "
            f"{difference:.2g}); {USE_MTL}"
        )
    return hf.cpu(), None


def logits_difference(model, hf, name: str, tokenizer, kind: Standard) -> float:
    """The largest difference between task `name`'s logits from `model` and from the
    transformers model `hf`, on a small padded batch (positions the head masks left out)."""
    import torch

    device = next(model.parameters()).device
    texts = ["An export check: the first row of the batch.", "A second, shorter row."]
    batch = tokenizer(texts, ["with a pair", "and another pair, longer"], padding=True)
    batch = {k: torch.tensor(v, device=device) for k, v in batch.items()}
    batch["task"] = name
    with torch.no_grad():
        ours = model.logits(batch)[name].float()
        inputs = {k: v for k, v in batch.items() if k != "task"}
        if kind.auto_class == "AutoModelForMultipleChoice":  # the rows as one example's choices
            inputs = {k: v.unsqueeze(0) for k, v in inputs.items()}
        output = hf(**inputs)
        if kind.auto_class == "AutoModelForQuestionAnswering":
            theirs = torch.stack([output.start_logits, output.end_logits], -1)
        else:
            theirs = output.logits
        theirs = theirs.float().reshape(ours.shape)
    kept = ours != torch.finfo(ours.dtype).min
    return float((ours - theirs)[kept].abs().max())
