"""Packed encoder calls: the rows of a padded batch laid end to end in fewer rows.

A batch padded to its longest row wastes the padding's compute: a mixup step pads every task's
rows to the longest QA window, a `sampler=random` batch to its longest paragraph. Packing puts
several rows into one row of the same length (first-fit decreasing), gives each its own
positions (0, 1, ...) and a block-diagonal attention mask (a token sees only its own row's
tokens), runs the encoder once on the packed rows and copies every row's hidden states back to
its own place. The hidden states of real tokens equal the padded call's (to float rounding);
padding positions hold zeros. The heads see the same `[N, L, H]` as without packing.

It needs an encoder that takes a 4-D attention mask and `position_ids` (transformers' BERT
family does). The encoder's family (`mtl.models.families`) adds what it needs: decoders a causal
mask within each row, ModernBERT its sliding-window layers' own mask. `PackedEncoder` checks
this once, on the first batch it would pack, against the padded call; if they differ it warns
once and pads as before.
"""

from __future__ import annotations

import inspect
import sys

import numpy as np
import torch
from torch import nn

from mtl.batching import host_to

# Pack a batch only when it saves at least this share of the padded token slots: a batch that
# is already dense (length-sorted batches) runs as it is.
MIN_SAVING = 0.25


def first_fit(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray, int]:
    """First-fit decreasing: (packed row of each row, its offset there, number of packed rows).
    Rows of length 0 get packed row -1."""
    bins = np.full(len(lengths), -1, dtype=np.int64)
    offsets = np.zeros(len(lengths), dtype=np.int64)
    used = np.zeros(len(lengths), dtype=np.int64)  # at most one packed row per row
    count = 0
    for row in np.argsort(-lengths, kind="stable"):
        n = lengths[row]
        if n == 0:
            continue
        fits = np.flatnonzero(used[:count] + n <= capacity)
        b = fits[0] if len(fits) else count
        count += b == count
        bins[row], offsets[row] = b, used[b]
        used[b] += n
    return bins, offsets, count


class Packing:
    """Where every token of a right-padded batch goes in the packed batch."""

    def __init__(self, attention_mask: torch.Tensor):
        mask = attention_mask.detach().cpu().numpy().astype(bool)
        self.rows, self.length = mask.shape
        lengths = mask.sum(1)
        self.is_prefix = bool((mask == (np.arange(self.length) < lengths[:, None])).all())
        bins, offsets, self.packed_rows = first_fit(lengths, self.length)
        real = np.flatnonzero(mask.reshape(-1))  # flat [N * L] index of each real token
        row, position = np.divmod(real, self.length)
        self.positions = position
        self.source = real
        self.target = bins[row] * self.length + offsets[row] + position  # flat [B' * L]
        self.segment = row
        self.on_device: dict[torch.device, tuple[torch.Tensor, ...]] = {}

    def indices(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        """(target, source, positions, segment) on `device`: one copy, made without waiting
        for the device (`host_to`), once per batch."""
        if device not in self.on_device:
            parts = (self.target, self.source, self.positions, self.segment)
            flat = host_to(np.concatenate(parts).astype(np.int64), device)
            self.on_device[device] = flat.split([len(p) for p in parts])
        return self.on_device[device]

    def worth_it(self) -> bool:
        return self.is_prefix and self.packed_rows <= (1 - MIN_SAVING) * self.rows

    def pack(
        self, inputs: dict, pad_token_id: int, position_base: int, causal: bool = False
    ) -> dict:
        """Packed `input_ids`, `token_type_ids`, `position_ids` and a 4-D bool attention mask
        (`causal`: a token sees only its row's tokens up to itself)."""
        device = inputs["input_ids"].device
        size = self.packed_rows * self.length
        target, source, positions, segments = self.indices(device)

        def scatter(values: torch.Tensor, fill: int) -> torch.Tensor:
            out = values.new_full((size,), fill)
            out[target] = values
            return out.view(self.packed_rows, self.length)

        packed = {"input_ids": scatter(inputs["input_ids"].reshape(-1)[source], pad_token_id)}
        if "token_type_ids" in inputs:
            packed["token_type_ids"] = scatter(inputs["token_type_ids"].reshape(-1)[source], 0)
        packed["position_ids"] = scatter(positions + position_base, position_base)
        # Each padding slot of a packed row is its own segment that sees only itself, so no
        # attention row is empty (an empty one gives NaN) and no real token sees padding.
        segment = torch.arange(size, device=device) + self.rows
        segment[target] = segments
        segment = segment.view(self.packed_rows, self.length)
        allowed = segment[:, None, :, None] == segment[:, None, None, :]
        if causal:
            allowed = allowed & torch.ones(self.length, self.length, device=device).tril().bool()
        packed["attention_mask"] = allowed
        return packed

    def unpack(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B', L, H] packed hidden states -> [N, L, H], zeros at padding positions."""
        flat = hidden.reshape(-1, hidden.shape[-1])
        target, source, _, _ = self.indices(hidden.device)
        out = flat.new_zeros(self.rows * self.length, flat.shape[-1])
        out = out.index_copy(0, source, flat.index_select(0, target))
        return out.view(self.rows, self.length, -1)


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool attention mask as an additive one (0 where allowed, the dtype's minimum else)."""
    zeros = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zeros.masked_fill(~allowed, torch.finfo(dtype).min)


class PackedEncoder:
    """Calls `encoder` on packed rows when that saves compute and the encoder supports it.

    `__call__(inputs) -> last_hidden_state [N, L, H]`. Whether the encoder supports it is
    decided once, on the first batch worth packing: both calls in eval mode, in float32, without
    gradients; real tokens must agree within `atol`.
    """

    def __init__(
        self, encoder: nn.Module, pad_token_id: int = 0, adapter=None, *, atol: float = 1e-4
    ):
        self.pad_token_id = pad_token_id
        self.causal = bool(getattr(adapter, "causal", False))
        self.packed_inputs = getattr(adapter, "packed_inputs", lambda packed: packed)
        self.atol = atol
        config = getattr(encoder, "config", None)
        self.sdpa = getattr(config, "_attn_implementation", "eager") == "sdpa"
        embeddings = getattr(encoder, "embeddings", None)
        padding_idx = getattr(embeddings, "padding_idx", None)  # RoBERTa counts from pad + 1
        self.position_base = 0 if padding_idx is None else int(padding_idx) + 1
        parameters = inspect.signature(encoder.forward).parameters
        self.supported: bool | None = None if "position_ids" in parameters else False

    def __call__(
        self, encoder: nn.Module, inputs: dict, host_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """`host_mask`: the batch's attention mask on the host, where `inputs` are on a device
        (the plan is made from it without waiting for the device)."""
        host = inputs["attention_mask"] if host_mask is None else host_mask
        if bool(host.all()):  # every token is real: no mask for transformers to read
            unmasked = {k: v for k, v in inputs.items() if k != "attention_mask"}
            return encoder(**unmasked).last_hidden_state
        if self.supported is not False:  # planned only for an encoder that packs
            packing = Packing(host)
            if packing.worth_it():
                if self.supported is None:
                    self.supported = self.check(encoder, inputs, packing)
                if self.supported:
                    return packing.unpack(self.run(encoder, inputs, packing))
        return encoder(**inputs).last_hidden_state

    def run(self, encoder: nn.Module, inputs: dict, packing: Packing) -> torch.Tensor:
        packed = packing.pack(inputs, self.pad_token_id, self.position_base, self.causal)
        packed = self.packed_inputs(packed)
        if not self.sdpa:
            dtype = next(encoder.parameters()).dtype
            mask = packed["attention_mask"]
            packed["attention_mask"] = (
                {k: additive(v, dtype) for k, v in mask.items()}
                if isinstance(mask, dict)
                else additive(mask, dtype)
            )
        return encoder(**packed).last_hidden_state

    def check(self, encoder: nn.Module, inputs: dict, packing: Packing) -> bool:
        """Whether the packed call matches the padded one on `inputs` (once per model: one
        host-device sync for the gap; eager even where the encoder is compiled, so the check
        compiles no graphs of its own)."""
        was_training = encoder.training
        encoder.eval()
        device_type = inputs["input_ids"].device.type
        try:
            with (
                torch.no_grad(),
                torch.autocast(device_type, enabled=False),
                torch.compiler.set_stance("force_eager"),
            ):
                padded = encoder(**inputs).last_hidden_state
                packed = packing.unpack(self.run(encoder, inputs, packing))
            keep = inputs["attention_mask"].bool()
            gap = float((padded[keep] - packed[keep]).abs().max())
        except Exception as err:  # an encoder that rejects 4-D masks or position ids
            gap, reason = float("inf"), f"{type(err).__name__}: {str(err).splitlines()[0]}"
        else:
            reason = f"hidden states differ by {gap:.2g}"
        finally:
            encoder.train(was_training)
        if gap <= self.atol:
            return True
        print(
            f"mtl: warning: model.pack: the encoder's packed call does not match its padded "
            f"call ({reason}); batches run padded (set model.pack=false to skip this check)",
            file=sys.stderr,
        )
        return False
