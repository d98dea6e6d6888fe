"""Packed vs padded encoder calls on real mixed batches: seconds per training step.

The batches: the first `--steps` steps of `python train.py experiment=bundled loader=mixup`
(every bundled task, one batch of each per step, padded to the step's longest row), or of any
`--overrides`. Each step runs forward + backward of the whole multi-task model (encoder, every
head, the summed loss) twice on the same batch: padded (`model.pack=false`, one padded row
per example: what any padded collator gives, the peer) and packed (`model.pack=true`,
`mtl.models.packing`), in alternating order, same weights, dropout off so both compute the
same loss (checked). Prints one table and one JSON line: seconds per step, real / computed
token slots, and padded / packed seconds (the speedup). A step that packing would not shorten by
`mtl.models.packing.MIN_SAVING` runs padded both times (`packed` shows -).

`--memory`: each way's peak memory over the steps too, in a fresh process each (`--only
padded|packed`): the peak resident memory above what the process held once its model and
batches were built (on a GPU, the peak allocated).

Generation and head tasks mixed on the packaged decoder:

    python benchmarks/bench_packing.py --model decoder --memory --overrides loader=mixup \
        "task=[pydoc_heading,pydoc_topic,pydoc_code,pydoc_code_share]"

    python benchmarks/bench_packing.py [--steps 6] [--model minilm] [--overrides ...] [--memory]
        [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
from harness import (
    QUICK_MIXUP,
    checked_packer,
    emit,
    first_steps,
    pack_timed_step,
    parser,
    peak_rss,
    reset_peak,
    run_child,
    table,
)

from mtl.builders.model import build_model
from mtl.models.packing import Packing


def main() -> None:
    args = parser(__doc__, "tiny model, 2 steps, small tasks", threads=0)
    args.add_argument("--steps", type=int, default=6)
    args.add_argument("--model", default="minilm")
    args.add_argument("--overrides", nargs="*", default=["experiment=bundled", "loader=mixup"])
    args.add_argument("--memory", action="store_true", help="each way's peak memory too")
    args.add_argument("--only", choices=["padded", "packed"], help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    args = args.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = [*args.overrides, f"model={args.model}"]
    if args.quick:
        args.steps, overrides = 2, list(QUICK_MIXUP)
    dropouts = ["hidden_dropout_prob", "attention_probs_dropout_prob"]  # BERT's
    dropouts += ["resid_pdrop", "embd_pdrop", "attn_pdrop"]  # GPT-2's
    overrides += ["model.head_dropout=0", *(f"+model.config.{k}=0" for k in dropouts)]
    settings, tasks, steps = first_steps(overrides, args.steps)
    torch.manual_seed(0)
    model = build_model(settings, tasks)
    packer = checked_packer(model, steps)
    if packer is None:
        raise SystemExit("mtl: error: this encoder's packed call differs from its padded one")
    if args.only:
        emit(peak_of(model, steps, packer if args.only == "packed" else None))
        return
    pack_timed_step(model, steps[0], None)  # warm-up
    rows = []
    for i, batch in enumerate(steps):
        mask = batch["attention_mask"]
        packing = Packing(mask)
        order = [None, packer] if i % 2 == 0 else [packer, None]
        result = {("packed" if p else "padded"): pack_timed_step(model, batch, p) for p in order}
        (padded_s, padded_loss), (packed_s, packed_loss) = result["padded"], result["packed"]
        if abs(padded_loss - packed_loss) > 1e-3 * max(1.0, abs(padded_loss)):
            raise SystemExit(f"step {i}: losses differ: padded {padded_loss}, packed {packed_loss}")
        real = int(mask.sum())
        rows.append({
            "rows": mask.shape[0], "length": mask.shape[1],
            "packed_rows": packing.packed_rows if packing.worth_it() else "-",
            "padded_eff": real / mask.numel(),
            "packed_eff": real / (packing.packed_rows * mask.shape[1]) if packing.worth_it()
            else real / mask.numel(),
            "padded_s": padded_s, "packed_s": packed_s,
        })  # fmt: skip
    table(
        ["step", "rows", "len", "packed", "eff pad", "eff pack", "padded s", "packed s", "speedup"],
        [[i, r["rows"], r["length"], r["packed_rows"], r["padded_eff"], r["packed_eff"],
          r["padded_s"], r["packed_s"], r["padded_s"] / r["packed_s"]]
         for i, r in enumerate(rows)],
    )  # fmt: skip
    padded = sum(r["padded_s"] for r in rows)
    packed = sum(r["packed_s"] for r in rows)
    figures = {
        "bench": "packing",
        "peer": "padded batch (model.pack=false)",
        "model": "tiny" if args.quick else args.model,
        "steps": len(rows),
        "padded_s_per_step": padded / len(rows),
        "packed_s_per_step": packed / len(rows),
        "speedup": padded / packed,
        "median_step_speedup": statistics.median(r["padded_s"] / r["packed_s"] for r in rows),
        "padded_efficiency": statistics.mean(r["padded_eff"] for r in rows),
        "packed_efficiency": statistics.mean(r["packed_eff"] for r in rows),
        "threads": torch.get_num_threads(),
    }
    if args.memory:
        for way in ("padded", "packed"):
            child = run_child([__file__, *argv, "--only", way])
            figures[f"{way}_peak_mib"] = child["peak_mib"]
        print(f"peak memory: padded {figures['padded_peak_mib']:.0f} MiB, packed "
              f"{figures['packed_peak_mib']:.0f} MiB")  # fmt: skip
    emit(figures, args.json)


def peak_of(model, steps: list, packer) -> dict:
    """The peak memory of `steps` run one way (after a warm-up step), above what the process
    held before them; MiB."""
    cuda = torch.cuda.is_available()
    pack_timed_step(model, steps[0], packer)
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        reset_peak()
        base = peak_rss()
    for batch in steps:
        pack_timed_step(model, batch, packer)
    peak = torch.cuda.max_memory_allocated() if cuda else peak_rss()
    return {"peak_mib": max(peak - base, 0) / 2**20}


if __name__ == "__main__":
    main()
