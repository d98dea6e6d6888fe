"""Training steps with freed host memory kept for reuse vs handed back to the OS (glibc).

The first `--steps` steps of `python train.py experiment=bundled loader=mixup` (or any
`--overrides`), trained as the run trains them (dropout on, AdamW, packed encoder calls), in two
fresh processes: one with `mtl.cli.host_memory.keep_freed_memory()` (what `train.py` does,
`trainer.keep_freed_memory=true`), one with glibc's defaults. Per step: wall seconds, kernel
(sys) seconds and minor page faults; per process: peak resident memory. The first `--warmup`
steps (the encoder check, the heap growing to its peak) are left out of the medians. Prints one
table and one JSON line.

    python benchmarks/bench_host_memory.py [--steps 8] [--warmup 3] [--overrides ...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time

import torch
from harness import QUICK_MIXUP, emit, first_steps, parser, run_child, table

from mtl.builders.model import build_model
from mtl.cli.host_memory import keep_freed_memory


def steps_in_this_process(overrides: list[str], steps: int, keep: bool) -> dict:
    kept = keep_freed_memory() if keep else False
    settings, tasks, data = first_steps(overrides, steps)
    torch.manual_seed(0)
    model = build_model(settings, tasks)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    rows = []
    for batch in data:
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        sum(model(batch)["task_losses"].values()).backward()
        optimizer.step()
        optimizer.zero_grad()
        after = resource.getrusage(resource.RUSAGE_SELF)
        rows.append({
            "wall_s": time.perf_counter() - start,
            "sys_s": after.ru_stime - before.ru_stime,
            "faults": after.ru_minflt - before.ru_minflt,
        })  # fmt: skip
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"kept": kept, "steps": rows, "peak_rss_mib": peak_mib}


def in_fresh_process(args: argparse.Namespace, keep: bool) -> dict:
    command = [__file__, "--child", "keep" if keep else "default",
               "--steps", str(args.steps), "--overrides", *args.overrides]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    return run_child(command, env)


def main() -> None:
    args = parser(__doc__, "tiny model, 4 steps, small tasks")
    args.add_argument("--steps", type=int, default=8)
    args.add_argument("--warmup", type=int, default=3)
    args.add_argument("--overrides", nargs="*", default=["experiment=bundled", "loader=mixup"])
    args.add_argument("--child", choices=["keep", "default"], help=argparse.SUPPRESS)
    args = args.parse_args()
    if args.quick:
        args.steps, args.warmup, args.overrides = 4, 2, QUICK_MIXUP
    if args.child:
        print(json.dumps(steps_in_this_process(args.overrides, args.steps, args.child == "keep")))
        return
    runs = {"keep": in_fresh_process(args, True), "default": in_fresh_process(args, False)}
    pairs = zip(runs["keep"]["steps"], runs["default"]["steps"], strict=True)
    table(
        ["step", "kept s", "sys", "faults", "default s", "sys", "faults"],
        [[i, k["wall_s"], k["sys_s"], k["faults"], d["wall_s"], d["sys_s"], d["faults"]]
         for i, (k, d) in enumerate(pairs)],
    )  # fmt: skip

    def median(name: str, key: str) -> float:
        return statistics.median(s[key] for s in runs[name]["steps"][args.warmup :])

    figures = {
        "bench": "host_memory",
        "peer": "glibc defaults (trainer.keep_freed_memory=false)",
        "steps_timed": args.steps - args.warmup,
        "kept": runs["keep"]["kept"],
        "keep_s_per_step": median("keep", "wall_s"),
        "default_s_per_step": median("default", "wall_s"),
        "speedup": median("default", "wall_s") / median("keep", "wall_s"),
        "keep_sys_s_per_step": median("keep", "sys_s"),
        "default_sys_s_per_step": median("default", "sys_s"),
        "keep_faults_per_step": median("keep", "faults"),
        "default_faults_per_step": median("default", "faults"),
        "keep_peak_rss_mib": runs["keep"]["peak_rss_mib"],
        "default_peak_rss_mib": runs["default"]["peak_rss_mib"],
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
