"""Tiny randomly initialised models of every family, offline: for tests and benchmarks.

`save_tiny_model(model_type, folder)` writes a model of that transformers model type (hidden
size 32, 2 layers) built from its config class, with the packaged MiniLM tokenizer (the
vocabulary size matched; a family without token type ids gets a tokenizer that does not make
them, as its own does), so that `model.name_or_path=<folder>` trains it like a hub model.
A model type whose own tokenizer has no pad token (GPT-2) gets none either: an end-of-text
token instead (`NO_PAD`), never added to a row, which mtl pads with as it does GPT-2's. The
files get the modes of the user's umask, as everything mtl writes.

From a shell, to try a family without a download:

    python -m mtl.models.tiny gpt2 tiny_gpt2     # any of TINY's model types, then a folder
    mtl-train model.name_or_path=tiny_gpt2 model.random_init=true debug=fast
"""

from __future__ import annotations

from pathlib import Path

from mtl.artifacts import ordinary_modes
from mtl.models.encoder import default_model_path
from mtl.models.families import adapter_class

#: {model type: its config's size keys}; the rest of each config is the class's default.
TINY = {
    "bert": {},
    "roberta": {"type_vocab_size": 1, "max_position_embeddings": 514},
    "xlm-roberta": {"type_vocab_size": 1, "max_position_embeddings": 514},
    "electra": {"embedding_size": 32},
    "distilbert": {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
    "deberta-v2": {
        "type_vocab_size": 0,
        "relative_attention": True,
        "position_biased_input": False,
        "pos_att_type": ["p2c", "c2p"],
        "position_buckets": 64,
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
    },
    "modernbert": {"local_attention": 16, "global_attn_every_n_layers": 2},
    "qwen2": {"num_key_value_heads": 1, "max_position_embeddings": 512},
    "gpt2": {"n_inner": 64, "n_positions": 512},
}
#: {model type: its tokenizer's end-of-text token}, for types whose tokenizer has no pad token
NO_PAD = {"gpt2": "<|endoftext|>"}
SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}


def save_tiny_model(model_type: str, folder: str | Path, seed: int = 0, **sizes: int) -> Path:
    """A tiny random `model_type` model and the MiniLM tokenizer, saved in `folder`; `sizes`
    replace the config's size keys (a larger model of the same shape)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    ids = {
        name: tokenizer.convert_tokens_to_ids(token)
        for name, token in (("pad", "[PAD]"), ("cls", "[CLS]"), ("sep", "[SEP]"))
    }
    bos, eos = ids["cls"], ids["sep"]
    if model_type in NO_PAD:
        tokenizer.add_special_tokens({"eos_token": NO_PAD[model_type]})
        tokenizer.bos_token, tokenizer.pad_token = tokenizer.eos_token, None
        bos = eos = tokenizer.eos_token_id
        ids["pad"] = None
    keys = {} if model_type == "distilbert" else dict(SIZES)
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        pad_token_id=ids["pad"],
        bos_token_id=bos,
        eos_token_id=eos,
        cls_token_id=ids["cls"],
        sep_token_id=ids["sep"],
        **{**keys, **TINY[model_type], **sizes},
    )
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    folder = Path(folder)
    model.save_pretrained(folder)
    if not adapter_class(None, model_type).token_type_ids:
        tokenizer.model_input_names = ["input_ids", "attention_mask"]
        tokenizer.init_kwargs["model_input_names"] = tokenizer.model_input_names  # saved
    tokenizer.save_pretrained(folder)
    loaded = len(AutoTokenizer.from_pretrained(folder))
    if loaded > config.vocab_size:  # transformers loads some types' own tokenizer class over
        model.resize_token_embeddings(loaded)  # the vocabulary, adding its end token (Qwen2)
        model.save_pretrained(folder)
    ordinary_modes(folder)  # safetensors writes its file 0600
    return folder


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] not in TINY:
        sys.exit(f"usage: python -m mtl.models.tiny <{'|'.join(TINY)}> <folder>")
    from mtl.quiet import quiet_libraries

    with quiet_libraries():
        print(save_tiny_model(sys.argv[1], sys.argv[2]))
