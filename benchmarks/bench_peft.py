"""Full fine-tuning against one shared LoRA adapter (`model.peft=lora`) and one per task
(`model.peft={per_task: true}`): step time, peak memory, checkpoint and export size, and the
length of a task's gradient row an aggregating balancer combines (the shared parameters), for
MiniLM and a larger Qwen2-shaped decoder.

Each row is one `python train.py` run of `--steps` optimizer steps in a process of its own (so
its peak RSS is its own: Linux's VmHWM over the RSS before the first step, MiB; with --quick,
every row in this process) on the default three tasks under loader=mixup (max_length 128):
MiniLM (the packaged pretrained model, 22.7M parameters) and a random Qwen2-shaped model
(hidden 512, 8 layers, 8 heads with 2 key-value heads, MLP 1536, about 40M parameters). Step
time: the median over the steps after `--warmup`; the checkpoint: the step checkpoint folder at
the last step (model, optimizer, loader and random states); the export: `<run>/export` (LoRA:
the adapters in peft's format, the heads and the tokenizer; full: the whole model). The peer:
full fine-tuning of the same model.

    python benchmarks/bench_peft.py [--steps 12] [--warmup 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from harness import (
    LoopClock,
    compose,
    emit,
    parser,
    peak_rss,
    quiet_transformers,
    reset_peak,
    run_child,
    scratch,
    table,
)

MODES = {"full": [], "lora": ["model.peft=lora"], "lora_per_task": ["model.peft={per_task: true}"]}
QWEN2 = {  # Qwen2-shaped, random: hidden 512, 8 layers
    "hidden_size": 512,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 1536,
}


def folder_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def save_qwen2(folder: Path, quick: bool) -> Path:
    """A random Qwen2-shaped model with the MiniLM tokenizer (the tiny one with --quick)."""
    from mtl.models.tiny import save_tiny_model

    return save_tiny_model("qwen2", folder, **({} if quick else QWEN2))


def one_row(args: argparse.Namespace, model: str, mode: str, work: str) -> dict:
    """One run's figures (`--child MODEL MODE WORK` prints them as one JSON line)."""
    import psutil

    from mtl.cli.job import train  # the run and its export, as train.py

    overrides = [
        "loader=mixup",
        "logger=none",
        "trainer.progress_bar=false",
        "trainer.epochs=100",
        f"trainer.max_steps={args.steps}",
        f"trainer.checkpoint_every={args.steps}",
        "trainer.eval_every=null",
        "trainer.diagnose_every=0",
        "data.max_examples=64" if args.quick else "data.max_examples=400",
        f"output_dir={work}",
        *MODES[mode],
    ]
    if model != "minilm":
        overrides += [f"model.name_or_path={model}", "model.family=decoder"]
    if not args.quick:
        overrides += [f"task.{t}.max_length=128" for t in ("pydoc_topic", "pydoc_code")]
        overrides.append("task.pydoc_code_share.max_length=128")
    clock = LoopClock()
    base = psutil.Process().memory_info().rss
    reset_peak()
    results = train(compose(overrides), hooks=[clock])
    steps = [b - a for a, b in zip(clock.marks, [*clock.marks[1:], clock.end], strict=True)]
    trainable = sum(p.numel() for p in results.model.parameters() if p.requires_grad)
    checkpoint = Path(work) / "checkpoints" / f"step_{args.steps:07d}"
    return {
        "ms_per_step": 1000 * statistics.median(steps[args.warmup :]),
        "peak_mib": max(peak_rss() - base, 0) / 2**20,
        "checkpoint_mib": folder_mib(checkpoint),
        "export_mib": folder_mib(Path(work) / "export"),
        "trainable": trainable,
        "shared": sum(p.numel() for _, p in results.model.shared_parameters()),
        "parameters": sum(p.numel() for p in results.model.parameters()),
    }


def main() -> None:
    quick = "a tiny Qwen2 alone, 4 steps, 64 examples per task, every row in this process"
    p = parser(__doc__, quick, threads=2)
    p.add_argument("--steps", type=int, default=12, help="optimizer steps per run")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the median")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.steps, args.warmup = 4, 1
    import torch

    torch.set_num_threads(args.threads)
    quiet_transformers()
    if args.child:
        print(json.dumps(one_row(args, *args.child)))
        return
    rows = {}
    with scratch("bench_peft_") as work:
        qwen2 = save_qwen2(work / "qwen2", args.quick)
        models = {"qwen2-shaped": str(qwen2)}  # and, but with --quick, MiniLM first
        models = models if args.quick else {"minilm": None, **models}
        for label, model in models.items():
            for mode in MODES:
                where = [model or label, mode, str(work / f"{label}-{mode}")]
                if args.quick:  # toy figures: a process each would only add its start-up
                    rows[f"{label} {mode}"] = one_row(args, *where)
                    continue
                argv = [__file__, "--steps", str(args.steps), "--warmup", str(args.warmup)]
                argv += ["--threads", str(args.threads), "--child", *where]
                rows[f"{label} {mode}"] = run_child(argv)
                print(f"{label} {mode}: done", file=sys.stderr)
    table(
        ["row", "trainable", "shared", "ms/step", "peak MiB", "checkpoint MiB", "export MiB"],
        [[n, r["trainable"], r["shared"], r["ms_per_step"], r["peak_mib"], r["checkpoint_mib"],
          r["export_mib"]] for n, r in rows.items()],
        [0, 0, 0, 1, 1, 2, 2],
    )  # fmt: skip
    ratios = {}
    for label in models:
        full = rows[f"{label} full"]
        for mode in [m for m in MODES if m != "full"]:
            lora = rows[f"{label} {mode}"]
            keys = ("ms_per_step", "checkpoint_mib", "export_mib")
            ratios[f"{label} {mode}"] = ratio = {k: lora[k] / full[k] for k in keys}
            print(
                f"{label}: {mode} / full step time {ratio['ms_per_step']:.2f}x, checkpoint "
                f"{ratio['checkpoint_mib']:.3f}x, export {ratio['export_mib']:.3f}x"
            )
    emit(
        {"bench": "peft", "peer": "full fine-tuning of the same model", "rows": rows,
         "ratios": ratios, "steps": args.steps},
        args.json,
    )  # fmt: skip


if __name__ == "__main__":
    main()
