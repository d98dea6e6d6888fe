"""The multi-task model returns each task's loss and logits; how they become one update (and the
tasks' `model.loss_weights`) is the balancer's."""

from __future__ import annotations

import torch

from mtl.models.encoder import load_encoder_and_pooler
from mtl.models.heads import SequenceClassificationHead
from mtl.models.multitask import MultiTaskModel

TINY_BERT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}


def test_the_model_returns_task_losses_and_knows_no_loss_weights():
    torch.manual_seed(0)
    encoder, _ = load_encoder_and_pooler(None, random_init=True, config=TINY_BERT)
    heads = {t: SequenceClassificationHead(32, 3) for t in ("a", "b")}
    model = MultiTaskModel(encoder, heads)
    ids = torch.randint(5, 100, (4, 6))
    batch = {
        "input_ids": ids, "attention_mask": torch.ones_like(ids), "tasks": ["a", "b"],
        "task_ids": torch.tensor([0, 1, 1, 0]),
        "labels": {"a": torch.tensor([0, 2]), "b": torch.tensor([1, 1])},
    }  # fmt: skip
    out = model(batch)
    assert set(out) == {"task_losses", "logits"}
    assert list(out["task_losses"]) == ["a", "b"] and not hasattr(model, "loss_weights")
    alone = model.heads["b"].loss(out["logits"]["b"], batch["labels"]["b"])
    assert torch.equal(out["task_losses"]["b"], alone)  # the mean over the task's rows, unweighted
