"""Read the logged history back from an offline W&B run file (`run-<id>.wandb`).

The file is a 7-byte header (`:W&B`, a 2-byte magic, a version byte), then records framed as in
LevelDB's log format: 32 KiB blocks, each chunk with a 7-byte header (crc32, little-endian
length, type: 1 full, 2 first, 3 middle, 4 last). Payloads are `wandb_internal_pb2.Record`
messages; `history` records hold the items of one `log` call.

A resume reads them (`mtl.training.tracking.history.wandb_seen_step`) to send W&B only the rows
it does not hold yet: wandb's Python package no longer reads its run files (its Go core does),
and an offline run has no server to ask (`run.starting_step` is the server's answer).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
FILE_HEADER = 7
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path) -> list[bytes]:
    """The raw record payloads of a `.wandb` file, in order."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file (no ':W&B' header)")
    out, pending, pos = [], b"", FILE_HEADER
    while pos + CHUNK_HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < CHUNK_HEADER:  # block trailer padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind == 0 and length == 0:  # zero padding at the end of a block
            pos += BLOCK - pos % BLOCK if pos % BLOCK else 0
            continue
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(pending + chunk)
            pending = b""
    return out


def read_history(path: str | Path) -> list[dict]:
    """One dict per logged step: `{"_step": s, key: value, ...}` (values decoded from JSON)."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for payload in records(path):
        record = pb.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            row[key] = json.loads(item.value_json) if item.value_json else None
        rows.append(row)
    return rows
