"""Cost of each balancer against `balancer=sum` on the same batches: seconds per step, peak memory.

The batches: the first `--steps` steps of `python train.py loader=mixup` (the default three
tasks and MiniLM; `--quick`: three synthetic tasks, the tiny model, sum/uncertainty/upgrad),
every task in every step. Each row is one optimizer step of the whole model as the training
loop takes it with that balancer (`mtl.training.step.Step`): forward, then either the weighted
loss backpropagated once (`sum`, `uncertainty`, `dwa`) or one gradient per task on the shared
encoder (`mtl.training.step.TaskGradients`: a backward pass through the encoder per task)
aggregated by torchjd, then AdamW. Rows run interleaved on
their own copy of the same weights (`harness.best_of`, best of `--rounds`); peak memory is each
row's own child process: its peak RSS during its steps over its RSS before them (MiB; Linux's
VmHWM, reset before the steps). The peer: `sum`.

What scales with the number of tasks T: the aggregating rows do T backward passes through the
encoder (sum does one) and keep a [T, encoder parameters] float32 matrix; the aggregation itself
works on the T x T Gram matrix (MGDA, UPGrad, ... solve a T-sized problem). Prints one table
and one JSON line.

    python benchmarks/bench_balancers.py [--steps 2] [--rounds 2] [--quick] [--only sum,upgrad]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time

import psutil
import torch
from harness import (
    best_of,
    compose,
    emit,
    first_steps,
    parser,
    peak_rss,
    ratios,
    reset_peak,
    run_child,
    table,
)

BALANCERS = ["sum", "uncertainty", "dwa", "upgrad", "mgda", "pcgrad", "cagrad", "imtl_g"]
BALANCERS += ["aligned_mtl", "nash_mtl", "dualproj", "graddrop"]
QUICK = ["sum", "uncertainty", "upgrad"]
QUICK_OVERRIDES = ["loader=mixup", "model=tiny", "data.max_examples=32"]
QUICK_OVERRIDES += ["task=[synthetic_cls,synthetic_tag,synthetic_reg]"]


def stepper(name: str, overrides: list[str], model, tasks):
    """A function that trains `model` one optimizer step on a batch with balancer `name`: the
    training step (`mtl.training.step.Step`) on accelerate's one-process CPU accelerator."""
    from accelerate import Accelerator
    from hydra.utils import instantiate
    from transformers import get_constant_schedule

    from mtl.training.step import Step

    cfg = compose(["logger=none", f"balancer={name}", *overrides])
    balancer = instantiate(cfg.balancer, list(tasks))
    groups = [{"params": list(model.parameters())}]
    if list(balancer.parameters()):
        groups.append({"params": list(balancer.parameters())})
    optimizer = torch.optim.AdamW(groups, lr=1e-5)
    update = Step(
        model, balancer, optimizer, get_constant_schedule(optimizer), Accelerator(cpu=True)
    )

    def step(batch) -> None:
        update.micro_step(batch, sync=True, group=1)
        update.update()

    return step


def setup(args):
    from mtl.builders.model import build_model

    overrides = QUICK_OVERRIDES if args.quick else ["loader=mixup"]
    settings, tasks, batches = first_steps(overrides, args.steps)
    torch.manual_seed(0)
    model = build_model(settings, tasks)
    model.eval()  # dropout off: every row computes the same first step
    return overrides, tasks, batches, model


def child(args, name: str) -> None:
    overrides, tasks, batches, model = setup(args)
    step = stepper(name, overrides, model, tasks)
    base = psutil.Process().memory_info().rss
    reset_peak()
    for batch in batches:
        step(batch)
    print(f'{{"peak_mib": {max(peak_rss() - base, 0) / 2**20:.1f}}}')


def main() -> None:
    p = parser(__doc__, "three synthetic tasks, the tiny model, three balancers", threads=2)
    p.add_argument("--steps", type=int, default=2, help="batches (optimizer steps) per round")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds (after one warm-up)")
    p.add_argument("--only", help="comma-separated balancers (default: all, sum first)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.steps, args.rounds = 1, 1
    torch.set_num_threads(args.threads)
    if args.child:
        return child(args, args.child)
    names = args.only.split(",") if args.only else QUICK if args.quick else BALANCERS
    names = ["sum", *[n for n in names if n != "sum"]]
    overrides, tasks, batches, model = setup(args)
    start = time.perf_counter()
    rows = {
        n: rounds_of(stepper(n, overrides, copy.deepcopy(model), tasks), batches) for n in names
    }
    seconds = best_of(rows, args.rounds)
    argv = [sys.argv[0], "--steps", str(args.steps), "--threads", str(args.threads)]
    argv += ["--quick"] if args.quick else []
    memory = {n: run_child([*argv, "--child", n])["peak_mib"] for n in names}
    ratio = ratios(seconds, "sum")
    table(
        ["balancer", "s/step", "x sum", "peak MiB", "x sum"],
        [(n, seconds[n], ratio[n], memory[n], memory[n] / max(memory["sum"], 1e-9)) for n in names],
        digits=[0, 3, 2, 0, 2],
    )
    print(f"{len(tasks)} tasks, {args.steps} steps x {args.rounds} rounds, "
          f"{time.perf_counter() - start:.0f} s")  # fmt: skip
    emit(
        {
            "bench": "balancers",
            "peer": "sum",
            "tasks": len(tasks),
            "s_per_step": {n: round(v, 4) for n, v in seconds.items()},
            "time_vs_sum": ratio,
            "peak_mib": memory,
        },
        args.json,
    )


def rounds_of(step, batches):
    def run() -> int:
        for batch in batches:
            step(batch)
        return len(batches)

    return run


if __name__ == "__main__":
    main()
