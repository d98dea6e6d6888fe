"""The speed paths side by side in one run: sampler, precision, compile, packing, LoRA, Trainer.

Every row trains with the real loop (`mtl.training.loop.run` on the composed config, as
`train.py` would) on the same data and seed and times its steps with the loop's `batches` hook
(`harness.LoopClock`, steady state from step `--warmup`: compiling and the first batches are not
timed); evaluation and checkpoints at the end are not timed. Every row runs `--rounds` times (2),
the rows in the same order each round, and its fastest round counts: the first round also meets
every new width's kernels (block_shuffle gives many), which the first row of a precision would
otherwise pay alone. Each comparison names its peer (first) and gives candidate / peer examples/s:

- sampler: `sampler=random` vs `sampler=block_shuffle` (fp32), on one task (`pydoc_topic`)
- precision: fp32 vs `trainer.mixed_precision=bf16` (block_shuffle)
- compile: eager vs `trainer.compile=true` (block_shuffle, bf16)
- packing: `loader=mixup` over five bundled tasks, `model.pack=false` vs packed (bf16)
- lora: the whole model trained vs one LoRA adapter (`model.peft=lora`; block_shuffle, bf16)
- Trainer: `benchmarks/bench_vs_trainer.py` in processes of its own (each tool one process).

The encoder is BERT-base-sized and randomly initialised (12 layers, hidden 768, 12 heads,
intermediate 3072: MiniLM's architecture and tokenizer), batch 32, max_length 256. `--quick`:
the tiny model on the small synthetic tasks (32 examples each), 3 steps, 1 round, compile with the
`eager` backend (dynamo traces and guards, no code generation) and fp32 in the bf16 rows (bf16 on a
CPU without bf16 units runs at about 0.2 GFLOP/s): the same pipeline as a smoke run on a CPU, whose
figures say nothing of a GPU's.
`--markdown PATH` appends the table as a dated section (with the device's name) to PATH.

    python benchmarks/bench_gpu.py [--steps 60] [--warmup 10] [--rounds 2]
        [--markdown docs/benchmarks.md] [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from datetime import date
from pathlib import Path

from harness import LoopClock, compose, emit, parser, quiet_transformers, run_child, scratch, table

BERT_BASE = [
    "model=tiny",  # random init, MiniLM's tokenizer; the sizes below make it BERT-base
    "model.config.hidden_size=768",
    "model.config.num_hidden_layers=12",
    "model.config.num_attention_heads=12",
    "model.config.intermediate_size=3072",
]
ONE_TASK = {"full": ["pydoc_topic"], "quick": ["synthetic_cls"]}
MIXUP = {
    "full": ["pydoc_topic", "pydoc_code", "pydoc_pair", "pydoc_choice", "pydoc_qa"],
    "quick": ["synthetic_cls", "synthetic_tag", "synthetic_pair"],
}
BF16 = ["trainer.mixed_precision=bf16"]
# name -> (tasks, overrides); the comparisons below pair them (peer first)
ROWS = {
    "random fp32": (ONE_TASK, ["sampler=random"]),
    "block_shuffle fp32": (ONE_TASK, []),
    "block_shuffle bf16": (ONE_TASK, BF16),
    "mixup padded bf16": (MIXUP, ["loader=mixup", *BF16, "model.pack=false"]),
    "mixup packed bf16": (MIXUP, ["loader=mixup", *BF16]),
    "block_shuffle bf16 lora": (ONE_TASK, [*BF16, "model.peft=lora"]),
    "block_shuffle bf16 compiled": (ONE_TASK, [*BF16, "trainer.compile=true"]),  # last: compiles
}
COMPARISONS = {
    "sampler": ("random fp32", "block_shuffle fp32"),
    "precision": ("block_shuffle fp32", "block_shuffle bf16"),
    "compile": ("block_shuffle bf16", "block_shuffle bf16 compiled"),
    "packing": ("mixup padded bf16", "mixup packed bf16"),
    "lora": ("block_shuffle bf16", "block_shuffle bf16 lora"),
}


def one_row(row: tuple, args: argparse.Namespace, out_dir: Path, cuda: bool) -> dict:
    import torch

    from mtl.training.loop import run

    tasks, overrides = row[0]["quick" if args.quick else "full"], row[1]
    if args.quick:
        overrides = [o for o in overrides if o not in BF16]
    common = [
        "logger=none",
        "trainer.progress_bar=false",
        f"task=[{','.join(tasks)}]",
        "trainer.epochs=1",
        f"trainer.max_steps={args.steps}",
        "trainer.log_every=1000000",  # one window, at the end: no logging inside the timing
        "trainer.export=false",
        "trainer.diagnose_every=0",  # the task-interaction diagnostics at evaluation: not timed
        f"seed={args.seed}",
        f"output_dir={out_dir}",
    ]
    if args.quick:
        # toy sizes: the dry run checks the pipeline, not the figures
        common += ["model=tiny", "data.max_examples=32", "trainer.compile_backend=eager"]
    else:
        common += [*BERT_BASE, "task.pydoc_topic.batch_size=32", "task.pydoc_topic.max_length=256"]
    if not cuda:
        common.append("trainer.cpu=true")
    if cuda:
        torch.cuda.empty_cache()
    clock, cfg = LoopClock(), compose([*common, *overrides])
    with contextlib.redirect_stdout(io.StringIO()):  # run()'s summary
        run(cfg, hooks=[clock])
    # what the row trained (the tiny model's 32 with --quick; MiniLM's config names none)
    hidden = cfg.model.config.get("hidden_size")
    return clock.steady(min(args.warmup, len(clock.marks) - 1)) | {"hidden_size": hidden}


def trainer_row(args: argparse.Namespace) -> dict:
    """bench_vs_trainer.py, one pair of processes (MiniLM; the tiny model with --quick); its
    table printed before this script's."""
    script = Path(__file__).with_name("bench_vs_trainer.py")
    argv = [str(script), "--repeats", "1", "--threads", str(args.threads)]
    return run_child(argv + (["--quick"] if args.quick else []), echo=True)


def markdown(device: str, args, rows: dict, ratios: dict, trainer: dict) -> str:
    model = (
        "tiny model, synthetic tasks, fp32 in the bf16 rows (--quick)"
        if args.quick
        else "BERT-base-sized encoder (random init), pydoc_topic batch 32, max_length 256"
    )
    lines = [
        f"\n### {device}, {date.today().isoformat()} (`scripts/gpu_check.sh`)\n",
        f"{model}; {args.steps} steps per row ({args.warmup} not timed), the fastest of "
        f"{args.rounds} round(s), seed {args.seed}.\n",
        "| comparison | peer | examples/s | candidate | examples/s | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, (peer, candidate) in COMPARISONS.items():
        a, b = rows[peer]["examples_per_s"], rows[candidate]["examples_per_s"]
        lines.append(f"| {name} | {peer} | {a:.1f} | {candidate} | {b:.1f} | {ratios[name]:.2f}x |")
    speed = {r["tool"]: r["examples_per_s"] for r in trainer["runs"]}
    lines.append(
        f"| mtl vs Trainer ({trainer['model']}, own processes) | Trainer | {speed['trainer']:.1f} "
        f"| mtl | {speed['mtl']:.1f} | {trainer['ratio_mtl_vs_trainer']:.2f}x |"
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    quick = "tiny model, synthetic tasks, 3 steps, compile backend eager, fp32 throughout"
    p = parser(__doc__, quick, threads=2)
    p.add_argument("--steps", type=int, default=60, help="optimizer steps per row")
    p.add_argument("--warmup", type=int, default=10, help="first steps left out of timing")
    p.add_argument("--rounds", type=int, default=2, help="runs of each row; the fastest counts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--markdown", metavar="PATH", help="append the table as a section to PATH")
    args = p.parse_args()
    if args.quick:  # one thread: on a busy CPU two threads wait on each other every tiny op
        args.steps, args.warmup, args.threads, args.rounds = 3, 1, 1, 1

    import torch

    quiet_transformers()
    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else f"CPU, {args.threads} torch threads"
    rows: dict[str, dict] = {}
    by_round: dict[str, list[float]] = {name: [] for name in ROWS}
    with scratch("bench_gpu_") as workdir:
        for round_index in range(args.rounds):
            for i, (name, row) in enumerate(ROWS.items()):
                start = time.perf_counter()
                got = one_row(row, args, workdir / f"{round_index}-{i}", cuda)
                got["run_seconds"] = time.perf_counter() - start
                by_round[name].append(got["examples_per_s"])
                if name not in rows or got["examples_per_s"] > rows[name]["examples_per_s"]:
                    rows[name] = got
                print(
                    f"{name}, round {round_index + 1}: {got['run_seconds']:.0f} s, "
                    f"{got['examples_per_s']:.1f} examples/s",
                    file=sys.stderr,
                )
    trainer = trainer_row(args)
    ratios = {
        name: rows[c]["examples_per_s"] / rows[peer]["examples_per_s"]
        for name, (peer, c) in COMPARISONS.items()
    }
    ratios["mtl_vs_trainer"] = trainer["ratio_mtl_vs_trainer"]
    print(
        f"{device}; {args.steps} steps per row, {args.warmup} not timed; the fastest of "
        f"{args.rounds} round(s)"
    )
    table(
        ["row", "steps", "examples", "seconds", "ex/s", "ms/step"],
        [[n, r["steps"], r["examples"], r["seconds"], r["examples_per_s"], r["ms_per_step"]]
         for n, r in rows.items()],
        [0, 0, 0, 2, 1, 1],
    )  # fmt: skip
    print("; ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items()))
    if args.markdown:
        with open(args.markdown, "a") as out:
            out.write(markdown(device, args, rows, ratios, trainer))
    figures = {
        "bench": "gpu",
        "peer": "per comparison: random sampler, fp32, eager, padded mixup, the whole model, "
        "HF Trainer",
        "device": device,
        "model": "tiny" if args.quick else "bert-base-sized",
        "steps": args.steps,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "examples_per_s": {n: round(r["examples_per_s"], 3) for n, r in rows.items()},
        "examples_per_s_by_round": {n: [round(v, 3) for v in vs] for n, vs in by_round.items()},
        "hidden_size": {n: r["hidden_size"] for n, r in rows.items()},
        "ratios": {n: round(v, 3) for n, v in ratios.items()},
        "trainer": trainer,  # bench_vs_trainer.py's own figures
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
