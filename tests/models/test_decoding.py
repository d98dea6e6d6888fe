"""Greedy decoding (`mtl.models.decoding`): a left-padded batch through the KV cache writes what
transformers' `generate(do_sample=False)` writes for each prompt alone, for each decoder
family's tiny model; per-task adapters decode through the task's own."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from mtl.models import MultiTaskModel, load_encoder_and_pooler
from mtl.models.decoding import greedy, left_padded
from mtl.models.heads import LanguageModelHead
from mtl.models.tiny import save_tiny_model

PROMPTS = [[5, 17, 3, 9, 22, 8, 4], [11], [7, 7, 30, 2]]


def decoder_pair(family: str, folder):
    """(transformers' causal LM, the same weights as an mtl model with a generation head)."""
    path = save_tiny_model(family, folder)
    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_pretrained(path).eval()
    encoder, _ = load_encoder_and_pooler(str(path))
    encoder.load_state_dict(lm.base_model.state_dict())
    model = MultiTaskModel(encoder, {"gen": LanguageModelHead(encoder.config.hidden_size)}).eval()
    head = model.heads["gen"]
    if head.proj is not None:
        head.proj.weight.data.copy_(lm.lm_head.weight.data)
    return lm, model


@pytest.mark.parametrize("family", ["qwen2", "gpt2"])
def test_greedy_writes_what_transformers_generate_writes(family, tmp_path):
    lm, model = decoder_pair(family, tmp_path / family)
    end = 13
    ours = greedy(model, "gen", PROMPTS, max_new_tokens=12, end_id=end, pad_id=0)
    for prompt, written in zip(PROMPTS, ours, strict=True):
        alone = lm.generate(
            input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt)),
            do_sample=False, max_new_tokens=12, eos_token_id=end, pad_token_id=0,
        )[0, len(prompt) :].tolist()  # fmt: skip
        assert written == (alone[: alone.index(end)] if end in alone else alone)
        assert len(written) == 12 or end in alone  # runs to the cap or to its end token


def test_a_row_stops_at_its_end_token_and_the_others_go_on(tmp_path):
    lm, model = decoder_pair("qwen2", tmp_path / "q")
    free = greedy(model, "gen", PROMPTS, max_new_tokens=6, end_id=-1, pad_id=0)
    end = free[0][2]  # the first row's third token ends it
    ended = greedy(model, "gen", PROMPTS, max_new_tokens=6, end_id=end, pad_id=0)
    assert ended[0] == free[0][: free[0].index(end)]
    for row, full in zip(ended[1:], free[1:], strict=True):
        assert row == (full[: full.index(end)] if end in full else full)


def test_left_padding_puts_each_prompt_at_the_end():
    ids, mask = left_padded([[1, 2, 3], [4]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
