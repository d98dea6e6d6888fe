"""Shared encoder and per-task heads."""

from mtl.models.encoder import load_encoder, resolve_model_path
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
    "load_encoder",
    "resolve_model_path",
]
