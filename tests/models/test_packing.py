"""Packed encoder calls give the padded call's hidden states, losses and gradients."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mtl.batching import to_device
from mtl.builders.loaders import build_composite_loader, build_train_loaders
from mtl.builders.model import build_model
from mtl.builders.tasks import build_tasks
from mtl.config import validate
from mtl.models import load_encoder
from mtl.models.packing import PackedEncoder, Packing, first_fit

NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, **NO_DROPOUT}  # fmt: skip


@given(st.lists(st.integers(0, 40), min_size=1, max_size=60), st.integers(40, 64))
@settings(max_examples=200, deadline=None)
def test_first_fit_places_every_row_once_without_overlap(lengths, capacity):
    lengths = np.array(lengths)
    bins, offsets, count = first_fit(lengths, capacity)
    assert (bins[lengths == 0] == -1).all()
    slots = {}
    for row in np.flatnonzero(lengths):
        assert 0 <= bins[row] < count and offsets[row] + lengths[row] <= capacity
        for position in range(offsets[row], offsets[row] + lengths[row]):
            assert slots.setdefault((bins[row], position), row) == row  # no slot used twice
    assert len(slots) == lengths.sum()
    # first fit: a row went to a later packed row only because it fitted in no earlier one
    used = np.bincount(bins[lengths > 0], weights=lengths[lengths > 0], minlength=count)
    for row in np.flatnonzero(lengths):
        assert (used[: bins[row]] + lengths[row] > capacity).all()


def padded_batch(lengths, width, vocab=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(1, vocab, (len(lengths), width), generator=g) * mask
    types = (torch.rand(len(lengths), width, generator=g) < 0.3).long() * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_hidden_states_and_gradients_equal_the_padded_call(attention):
    torch.manual_seed(0)
    encoder = load_encoder(
        None, random_init=True, config={**TINY, "attn_implementation": attention}
    )
    packed = PackedEncoder(encoder)
    inputs = padded_batch([3, 40, 5, 0, 7, 12, 2, 9, 4, 6], width=40)  # a row with no tokens too
    packing = Packing(inputs["attention_mask"])
    assert packing.worth_it() and packing.packed_rows < 5
    keep = inputs["attention_mask"].bool()
    results = []
    for call in (lambda: encoder(**inputs).last_hidden_state, lambda: packed(encoder, inputs)):
        encoder.zero_grad()
        hidden = call()
        hidden[keep].pow(2).sum().backward()
        results.append((hidden, [p.grad.clone() for p in encoder.parameters()]))
    (padded, padded_grads), (unpacked, packed_grads) = results
    assert packed.supported is True
    assert torch.allclose(unpacked[keep], padded[keep], atol=1e-5)
    assert (unpacked[~keep] == 0).all()
    for a, b in zip(padded_grads, packed_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_packing_plans_from_the_host_mask_a_device_batch_keeps():
    """Off the CPU, `to_device` keeps the host mask and packing plans from it, never reading
    the device copy (that read would wait for the device every batch)."""
    batch = {**padded_batch([3, 40, 5, 7], width=40), "task": "t"}
    moved = to_device(batch, "meta")
    assert moved["attention_mask"].device.type == "meta"
    assert moved["host_attention_mask"] is batch["attention_mask"]
    assert "host_attention_mask" not in to_device(batch, "cpu")  # on the CPU: one copy

    torch.manual_seed(0)
    encoder = load_encoder(None, random_init=True, config=TINY)
    packed = PackedEncoder(encoder)
    inputs = padded_batch([3, 40, 5, 0, 7, 12, 2, 9, 4, 6], width=40)
    host = inputs["attention_mask"].clone()

    def no_read():
        raise AssertionError("the device mask was read on the host")

    inputs["attention_mask"].detach = no_read  # what Packing would call to read it
    with torch.no_grad():
        hidden = packed(encoder, inputs, host)
        padded = encoder(**inputs).last_hidden_state
    assert packed.supported is True
    keep = host.bool()
    assert torch.allclose(hidden[keep], padded[keep], atol=1e-5)


def test_a_dense_batch_runs_padded():
    inputs = padded_batch([30, 31, 29, 32], width=32)
    assert not Packing(inputs["attention_mask"]).worth_it()
    left_padded = inputs["attention_mask"].flip(1)  # not right padding: never packed
    assert not Packing(
        torch.cat([left_padded, padded_batch([2] * 8, 32)["attention_mask"]])
    ).worth_it()


class RunningSum(nn.Module):
    """An encoder that takes position ids but whose outputs depend on the tokens before, mask
    or not: packing changes them, so the check must refuse it."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 4)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None):
        return type("Out", (), {"last_hidden_state": self.embed(input_ids).cumsum(1)})()


def test_an_encoder_that_packing_changes_runs_padded_with_one_warning(capsys):
    encoder = RunningSum()
    packed = PackedEncoder(encoder)
    inputs = padded_batch([3, 20, 2, 4, 5, 1], width=20)
    expected = encoder(**inputs).last_hidden_state
    for _ in range(2):
        assert torch.equal(packed(encoder, inputs), expected)
    assert packed.supported is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.pack" in err[0] and "differ" in err[0]


def test_mixup_batches_of_every_task_type_give_the_same_losses_packed(make_cfg):
    """The user's path: the composed config, every task type mixed into one batch per step."""
    overrides = [f"+model.config.{k}={v}" for k, v in NO_DROPOUT.items()]
    cfg = make_cfg(
        "loader=mixup",
        "sampler=random",
        "task=[synthetic_cls,synthetic_tag,synthetic_reg,synthetic_pair,synthetic_choice,synthetic_qa]",
        "model.head_dropout=0",
        *overrides,
    )
    settings_ = validate(cfg)
    tasks, tokenizer = build_tasks(settings_, 0)
    loader = build_composite_loader(
        cfg.loader,
        build_train_loaders(tasks, settings_, cfg.sampler, seed=0),
        seed=0,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = build_model(settings_, tasks)
    assert model.packed is not None  # on by default
    packed_steps = 0
    for batch in itertools.islice(iter(loader), 4):
        packed_steps += Packing(batch["attention_mask"]).worth_it()
        with_packing = model(batch)
        packer, model.packed = model.packed, None
        without = model(batch)
        model.packed = packer
        assert with_packing["task_losses"].keys() == without["task_losses"].keys()
        for name, loss in without["task_losses"].items():
            assert torch.allclose(with_packing["task_losses"][name], loss, atol=1e-5)
        for name, logits in without["logits"].items():
            real = logits > torch.finfo(logits.dtype).min  # not QA padding or an empty choice
            if logits.ndim == 3:  # per token: only real tokens (padding has no label)
                rows = batch["task_ids"] == batch["tasks"].index(name)
                real &= batch["attention_mask"][rows].bool()[..., None]
            got = with_packing["logits"][name]
            assert torch.allclose(got[real], logits[real], atol=1e-4), name
    assert packed_steps >= 1 and model.packed.supported is True
