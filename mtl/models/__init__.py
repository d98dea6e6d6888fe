"""Shared encoder and per-task heads."""

from mtl.models.encoder import (
    encoder_config,
    load_encoder,
    load_encoder_and_pooler,
    resolve_model_path,
)
from mtl.models.heads import (
    RegressionHead,
    SequenceClassificationHead,
    TokenClassificationHead,
)
from mtl.models.multitask import MultiTaskModel

__all__ = [
    "MultiTaskModel",
    "RegressionHead",
    "SequenceClassificationHead",
    "TokenClassificationHead",
    "encoder_config",
    "load_encoder",
    "load_encoder_and_pooler",
    "resolve_model_path",
]
