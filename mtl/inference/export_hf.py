"""One task of a trained model as a standard transformers model (`<export>/<task>/`).

Asks the parts: the task type names its transformers counterpart (`export_kind`, a
`mtl.models.heads.TransformersModel`, or None), the encoder's family names the modules of that
model a head's parts go to (`EncoderAdapter.export_targets`: RoBERTa's `classifier.dense` and
`out_proj`, DistilBERT's `pre_classifier`, a decoder's `score`, ...), and the head copies itself
into that model (`to_transformers`; a head without it has no standard form). Only the type's
own head is exported (another head computes something else), on an encoder whose weights fit
the model's base; the logits of both are compared before anything is written.
"""

from __future__ import annotations

import copy

from mtl.models.heads import USE_MTL, TransformersModel


def standard_model(model, name: str, task_type, label_names, tokenizer):
    """(transformers model computing task `name`'s logits, None) or (None, why not and the fix).

    Built generically: `AutoModelFor<X>.from_config(encoder config + the kind's keys)`, the
    encoder's weights loaded into its `base_model`, then `head.to_transformers(model, targets)`
    (the family's modules for the head's parts). A decoder without a pad token id gets the
    tokenizer's, which its sequence classifier needs to find each row's last token. Checked by
    running both on a small batch: equal logits (within 1e-4) or no export."""
    import transformers

    kind = task_type.export_kind(label_names)
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
    config = copy.deepcopy(model.encoder.config)
    for key, value in kind.config.items():
        setattr(config, key, value)
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = tokenizer.pad_token_id
    auto = getattr(transformers, kind.auto_class)
    try:
        hf = auto.from_config(config)
    except ValueError:  # the encoder's model type has no such class
        return None, f"transformers has no {kind.auto_class} for {config.model_type}; {USE_MTL}"
    device = next(model.parameters()).device
    hf.to(device).eval()
    missing, unexpected = hf.base_model.load_state_dict(model.encoder.state_dict(), strict=False)
    if unexpected or any(not key.startswith("pooler.") for key in missing):
        return None, f"the encoder's weights do not fit {type(hf).__name__}; {USE_MTL}"
    why_not = head.to_transformers(hf, model.adapter.export_targets(kind.auto_class, kind.out))
    if why_not is not None:
        return None, why_not
    difference = logits_difference(model, hf, name, tokenizer, kind)
    if not difference <= 1e-4:
        return None, (
            f"{type(hf).__name__} does not reproduce the head's logits (they differ by "
            f"{difference:.2g}); {USE_MTL}"
        )
    return hf.cpu(), None


def logits_difference(model, hf, name: str, tokenizer, kind: TransformersModel) -> float:
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
        inputs = model.adapter.encoder_inputs(batch)
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
