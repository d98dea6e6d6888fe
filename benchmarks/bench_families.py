"""Packed vs padded training steps per model family, on the same mixup batches (tiny models, CPU).

The batches: the first `--steps` steps of `loader=mixup` over the six synthetic task types (one
batch of each per step, padded to the step's longest row), tokenized once with the MiniLM
tokenizer every tiny model shares (`mtl.models.tiny`). For each family: a tiny random model
(hidden size 32, 2 layers), the whole multi-task model's forward + backward on each batch,
padded (`model.pack=false`, the peer) and packed (`mtl.models.packing`, with the family's mask),
in alternating order, dropout off (eval mode) so both compute the same loss (checked). A family
whose packed call does not match its padded one runs padded both times (`packs` shows no).
Prints one table and one JSON line: seconds per step and padded / packed (the speedup).

    python benchmarks/bench_families.py [--steps 6] [--families bert qwen2 ...] [--quick]
"""

from __future__ import annotations

import statistics

import torch
from harness import (
    checked_packer,
    compose,
    emit,
    first_steps,
    pack_timed_step,
    parser,
    scratch,
    table,
)

from mtl.builders.model import build_model
from mtl.config import validate
from mtl.models.tiny import TINY, save_tiny_model

TASKS = (
    "task=[synthetic_cls,synthetic_pair,synthetic_reg,synthetic_tag,synthetic_choice,synthetic_qa]"
)


def family_steps(model, steps: list[dict]) -> dict:
    packer = checked_packer(model, steps)
    pack_timed_step(model, steps[0], None)  # warm-up
    padded, packed = [], []
    for i, batch in enumerate(steps):
        order = [("padded", None), ("packed", packer)]
        result = {name: pack_timed_step(model, batch, p) for name, p in order[:: 1 - 2 * (i % 2)]}
        (pad_s, pad_loss), (pack_s, pack_loss) = result["padded"], result["packed"]
        if abs(pad_loss - pack_loss) > 1e-3 * max(1.0, abs(pad_loss)):
            raise SystemExit(f"step {i}: losses differ: padded {pad_loss}, packed {pack_loss}")
        padded.append(pad_s)
        packed.append(pack_s)
    return {"packs": packer is not None, "padded_s": padded, "packed_s": packed}


def main() -> None:
    args = parser(__doc__, "2 steps, 3 families, fewer examples", threads=0)
    args.add_argument("--steps", type=int, default=6)
    args.add_argument("--families", nargs="*", default=list(TINY))
    args = args.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    examples = 64
    if args.quick:
        args.steps, args.families, examples = 2, ["bert", "modernbert", "qwen2"], 32
    common = ["loader=mixup", "model=minilm", TASKS, f"data.max_examples={examples}"]
    rows, figures = [], {}
    with scratch("bench_families") as folder:
        models = {f: save_tiny_model(f, folder / f) for f in args.families}
        first = [*common, f"model.name_or_path={models[args.families[0]]}"]
        _, tasks, steps = first_steps(first, args.steps)
        for family, path in models.items():
            cfg = compose([*common, "output_dir=/tmp/mtl_benchmarks", f"model.name_or_path={path}"])
            torch.manual_seed(0)
            model = build_model(validate(cfg), tasks).eval()
            r = family_steps(model, steps)
            pad, pack = statistics.mean(r["padded_s"]), statistics.mean(r["packed_s"])
            rows.append([family, "yes" if r["packs"] else "no", pad, pack, pad / pack])
            figures[family] = {"packs": r["packs"], "padded_s": pad, "packed_s": pack}
    real = sum(int(b["attention_mask"].sum()) for b in steps)
    slots = sum(b["attention_mask"].numel() for b in steps)
    table(["family", "packs", "padded s/step", "packed s/step", "speedup"], rows, 3)
    emit(
        {
            "bench": "families",
            "peer": "padded batch (model.pack=false)",
            "steps": len(steps),
            "padded_efficiency": real / slots,
            "families": {
                f: {**v, "speedup": v["padded_s"] / v["packed_s"]} for f, v in figures.items()
            },
            "threads": torch.get_num_threads(),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
