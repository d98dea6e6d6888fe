"""Greedy decoding for a generation task: what evaluation and `mtl-predict` write.

Prompts of different lengths are left-padded into one batch (each row's last prompt token is the
batch's last column), positions count each row's own tokens (`cumsum` of the mask, as
transformers' `generate` does), and every step after the first feeds one token per row through
the decoder's KV cache. A row is done at its end token (the task's: EOS, else SEP); the
generated ids stop before it. Greedy decoding of an export with transformers
(`pipeline("text-generation")`, `generate(do_sample=False)`) gives the same tokens.
"""

from __future__ import annotations

import torch


def left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids [B, T], attention_mask [B, T]) of the prompts, padded on the left."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
    return ids, mask


@torch.no_grad()
def greedy(
    model,
    task: str,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    end_id: int,
    pad_id: int,
    device=None,
    stop_early: bool = True,
) -> list[list[int]]:
    """The ids `model` (a `MultiTaskModel` with task `task`'s LM head) writes after each prompt,
    greedily, at most `max_new_tokens`, without the end token. `stop_early=False` runs every
    step even when every row has ended (processes that must call the model equally often)."""
    ids, mask = left_padded(prompts, pad_id)
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=ids.device)
    written, cache = [], None
    for _ in range(max_new_tokens):
        logits, cache = model.next_token_logits(task, ids, mask, positions, cache)
        token = torch.where(done, pad_id, logits.argmax(-1))
        written.append(token)
        done |= token == end_id
        if stop_early and bool(done.all()):
            break
        ids = token[:, None]
        mask = torch.cat([mask, torch.ones_like(ids)], 1)
        positions = positions[:, -1:] + 1
    rows = torch.stack(written, 1).tolist() if written else [[] for _ in prompts]
    return [row[: row.index(end_id)] if end_id in row else row for row in rows]
