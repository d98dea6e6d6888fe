"""Sentence-level heads pool with BERT's pooler by default, started from the encoder's own."""

from __future__ import annotations

import torch
from safetensors import safe_open

from mtl.builders.model import build_model
from mtl.builders.tasks import build_tasks
from mtl.config import validate
from mtl.models import resolve_model_path
from mtl.models.heads import SequenceClassificationHead


def test_default_model_heads_start_from_the_checkpoints_pooler(make_cfg):
    cfg = make_cfg("model=minilm", "task=[synthetic_cls,synthetic_tag,synthetic_reg]")
    settings = validate(cfg)
    tasks, _ = build_tasks(settings, 0)
    model = build_model(settings, tasks)
    path = resolve_model_path(None)
    with safe_open(f"{path}/model.safetensors", "pt") as f:
        weight, bias = f.get_tensor("pooler.dense.weight"), f.get_tensor("pooler.dense.bias")
    assert model.encoder.pooler is None  # not a shared, unused pooler in the encoder
    pooled = [name for name, head in model.heads.items() if getattr(head, "pooler", None)]
    assert pooled == ["synthetic_cls", "synthetic_reg"]  # the tagger has no pooler
    for name in pooled:
        assert torch.equal(model.heads[name].pooler.weight, weight)
        assert torch.equal(model.heads[name].pooler.bias, bias)
    # each task's pooler is its own copy: training one task does not move another's
    assert model.heads["synthetic_cls"].pooler.weight.data_ptr() != (
        model.heads["synthetic_reg"].pooler.weight.data_ptr()
    )


def test_cls_pooling_reads_the_first_token_and_mean_pooling_ignores_padding():
    torch.manual_seed(0)
    hidden = torch.randn(2, 4, 6)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    cls = SequenceClassificationHead(6, 3, dropout=0.0)
    changed = hidden.clone()
    changed[:, 1:] += 5.0  # only tokens after the first
    assert torch.equal(cls(hidden, mask), cls(changed, mask))
    mean = SequenceClassificationHead(6, 3, dropout=0.0, pooling="mean")
    padded = hidden.clone()
    padded[1, 2:] = 100.0  # padding positions
    assert torch.equal(mean(hidden, mask), mean(padded, mask))
    expected = mean.out(hidden[1, :2].mean(0))
    assert torch.allclose(mean(hidden, mask)[1], expected, atol=1e-6)
