"""Overhead of mtl's whole training loop over a bare hand-written loop: same model, same batches.

Both train the tiny random BERT (`model=tiny`: a step costs little, so the loop's own per-step
cost shows) on one task (default `pydoc_topic`) for `--steps` optimizer steps, on the same
batches in the same order; peer: the bare loop.

- mtl: the real `mtl.training.loop.run` on the composed config (`model=tiny logger=none
  trainer.progress_bar=false task=[<task>] trainer.epochs=1 loader.steps_per_epoch=<steps>`, the
  default loader, sampler and trainer settings otherwise): accelerate's prepared model, optimizer
  and scheduler, the composite loader, loss sums and task shares, a logged window every
  `trainer.log_every` steps (metrics.jsonl). One epoch of `--steps` steps, so no evaluation or
  checkpoint falls inside the run; those at its end are not timed.
- bare: the pieces built by mtl's registry with the same config and seed (`build_tasks`,
  `build_train_loaders`: the same DataLoader, sampler and collator; `build_model`), then per
  step: batch to the device, the task losses summed and backpropagated (`balancer=sum`), clip
  to `trainer.max_grad_norm`, `optimizer.step()`, `scheduler.step()`, `optimizer.zero_grad()`.
  AdamW (fused where torch has it) over mtl's parameter groups, the same linear schedule and
  warmup. The task's DataLoader is read pass after pass with `batch_sampler.set_epoch(pass)`,
  as mtl's loader reads one task.
  Checked, not assumed: the example ids of every step are the same in both ("same batches"), and
  each window loss mtl logged equals the bare loop's mean loss over those steps ("same losses").

Timed: a timestamp each time the loop asks for its next batch (for mtl through the loop's
`batches` hook, `harness.LoopClock`) and one after the last step; steady state = from the start
of step `--warmup` to the end, examples/s = the examples of those steps / seconds. Each loop's
host work per step: the step's time less the model's compute in it (the forward of
`MultiTaskModel`, autograd's backward and the optimizer's step, timed in both loops alike,
`ComputeClock`); on a GPU that host work is what a step would cost if the device were free.
Runs come in pairs (`--repeats`, same seed), ordered mtl bare, bare mtl, ... so a machine that
speeds up or slows down over the runs favours neither; each ratio is the median of the pairs'.
One torch thread by default: on a small shared machine intra-op thread wake-ups made the tiny
model's steps several times slower and much noisier, and the loop's overhead is Python anyway.

    python benchmarks/bench_loop_overhead.py [--task pydoc_topic] [--steps 300] [--warmup 20]
        [--repeats 4] [--threads 1] [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from harness import (
    LoopClock,
    compose,
    emit,
    grouped,
    parser,
    passes,
    quiet_transformers,
    scratch,
    table,
)


def config_overrides(args: argparse.Namespace, out_dir: Path) -> list[str]:
    out = [
        "model=tiny",
        "logger=none",
        "trainer.progress_bar=false",
        f"task=[{args.task}]",
        "trainer.epochs=1",
        f"loader.steps_per_epoch={args.steps}",
        f"seed={args.seed}",
        f"output_dir={out_dir}",
    ]
    if args.max_examples:
        out.append(f"data.max_examples={args.max_examples}")
    if not torch.cuda.is_available():
        out.append("trainer.cpu=true")
    return out


class ComputeClock:
    """The model's compute, timed where both loops call it: `MultiTaskModel.forward`,
    `torch.autograd.backward` and `torch.optim.AdamW.step` (each call's start and seconds; on
    a GPU each timed call waits for the device at its end)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        from mtl.models.multitask import MultiTaskModel

        places = [
            (MultiTaskModel, "forward"),
            (torch.autograd, "backward"),
            (torch.optim.AdamW, "step"),
        ]
        saved = [getattr(owner, name) for owner, name in places]
        for (owner, name), original in zip(places, saved, strict=True):
            setattr(owner, name, self.timed(original))
        try:
            yield
        finally:
            for (owner, name), original in zip(places, saved, strict=True):
                setattr(owner, name, original)

    def timed(self, function):
        def call(*args, **kwargs):
            start = time.perf_counter()
            out = function(*args, **kwargs)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.calls.append((start, time.perf_counter() - start))
            return out

        return call

    def seconds_after(self, start: float) -> float:
        return sum(seconds for begun, seconds in self.calls if begun >= start)


def host_figures(clock: LoopClock, compute: ComputeClock, warmup: int) -> dict:
    """The steady state's figures, with its compute and host milliseconds per step."""
    figures = clock.steady(warmup)
    computed = compute.seconds_after(clock.marks[warmup])
    figures["compute_ms_per_step"] = 1000 * computed / figures["steps"]
    figures["host_ms_per_step"] = figures["ms_per_step"] - figures["compute_ms_per_step"]
    return figures


def run_mtl(cfg) -> tuple[LoopClock, list[tuple[int, float]]]:
    """The steps' clock, and the (step, loss) of every window mtl logged."""
    from mtl.training.loop import run

    clock = LoopClock()
    with contextlib.redirect_stdout(io.StringIO()):  # run()'s summary
        run(cfg, hooks=[clock])
    lines = (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()
    windows = [(f["step"], f["loss"]) for f in map(json.loads, lines) if "loss" in f]
    return clock, windows


def run_bare(cfg, steps: int) -> tuple[LoopClock, list[float]]:
    """The bare loop; the clock and every step's loss."""
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    from mtl.builders.loaders import build_train_loaders
    from mtl.builders.model import build_model
    from mtl.builders.tasks import build_tasks
    from mtl.config import validate
    from mtl.training.setup.optim import make_optimizer, param_groups

    settings = validate(cfg)
    t = settings.trainer
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    set_seed(cfg.seed, device_specific=True)  # as mtl's build_run, in the same order
    tasks, _ = build_tasks(settings, cfg.seed)
    (loader,) = build_train_loaders(tasks, settings, cfg.sampler, seed=cfg.seed).values()
    model = build_model(settings, tasks).to(device)
    optimizer = make_optimizer(param_groups(model, t.lr, t.head_lr, t.weight_decay))
    scheduler = get_linear_schedule_with_warmup(optimizer, int(t.warmup_ratio * steps), steps)
    model.train()
    clock, losses = LoopClock(), []
    for batch in clock.wrap(passes(loader), steps):
        batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
        loss = sum(model(batch)["task_losses"].values())  # balancer=sum, one task per batch
        loss.backward()
        if t.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    if device.type == "cuda":
        torch.cuda.synchronize()
    clock.end = time.perf_counter()
    return clock, [float(v) for v in losses]


def same_losses(windows: list[tuple[int, float]], losses: list[float]) -> bool:
    """Each logged window's loss (mean over its steps) equals the bare loop's mean there."""
    first = 0
    for step, logged in windows:
        mean = statistics.fmean(losses[first:step])
        if not math.isclose(logged, mean, rel_tol=1e-4, abs_tol=1e-6):
            return False
        first = step
    return bool(windows)


def run_pairs(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """Each run's steady-state figures, and per pair whether both saw the same batches and
    computed the same losses."""
    runs, checks = [], []
    with scratch("bench_loop_overhead_") as workdir:
        for repeat in range(args.repeats):
            cfg = compose(config_overrides(args, workdir / str(repeat)))
            pair = {}
            for name in ("mtl", "bare") if repeat % 2 == 0 else ("bare", "mtl"):  # A B B A ...
                compute = ComputeClock()
                with compute.timing():
                    pair[name] = run_mtl(cfg) if name == "mtl" else run_bare(cfg, args.steps)
                figures = host_figures(pair[name][0], compute, args.warmup)
                runs.append({"loop": name, "repeat": repeat, **figures})
            (mtl_clock, windows), (bare_clock, losses) = pair["mtl"], pair["bare"]
            same = len(mtl_clock.example_ids) == len(bare_clock.example_ids) == args.steps and all(
                torch.equal(a, b)
                for a, b in zip(mtl_clock.example_ids, bare_clock.example_ids, strict=True)
            )
            checks.append({"same_batches": same, "same_losses": same_losses(windows, losses)})
            shutil.rmtree(workdir / str(repeat), ignore_errors=True)
    return runs, checks


def main() -> None:
    p = parser(__doc__, "20 steps, 128 examples, 1 pair", threads=1)
    p.add_argument("--task", default="pydoc_topic")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per run")
    p.add_argument("--warmup", type=int, default=20, help="first steps left out of timing")
    p.add_argument("--repeats", type=int, default=4, help="mtl/bare pairs (default 4)")
    p.add_argument("--max-examples", type=int, default=None, help="cap per task and split")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.quick:
        args.steps, args.warmup, args.repeats = 20, 5, 1
        args.max_examples = args.max_examples or 128
    if not 0 <= args.warmup < args.steps:
        p.error("--warmup must be in [0, --steps)")

    quiet_transformers()
    torch.set_num_threads(args.threads)
    runs, checks = run_pairs(args)

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(
        f"task {args.task}, model tiny, {args.steps} steps ({args.warmup} warm-up steps not "
        f"timed), {device}, {args.threads} torch thread(s)"
    )
    table(
        ["run", "loop", "steps", "examples", "seconds", "ex/s", "ms/step", "compute ms", "host ms"],
        [[i + 1, r["loop"], r["steps"], r["examples"], r["seconds"], r["examples_per_s"],
          r["ms_per_step"], r["compute_ms_per_step"], r["host_ms_per_step"]]
         for i, r in enumerate(runs)],
        [0, 0, 0, 0, 2, 1, 2, 2, 2],
    )  # fmt: skip
    speed, ms = grouped(runs, "loop", "examples_per_s"), grouped(runs, "loop", "ms_per_step")
    host = grouped(runs, "loop", "host_ms_per_step")
    ratios = [m / b for m, b in zip(speed["mtl"], speed["bare"], strict=True)]
    ratio = statistics.median(ratios)
    overhead = statistics.median(m - b for m, b in zip(ms["mtl"], ms["bare"], strict=True))
    host_ratio = statistics.median(m / b for m, b in zip(host["mtl"], host["bare"], strict=True))
    all_same_batches = all(c["same_batches"] for c in checks)
    all_same_losses = all(c["same_losses"] for c in checks)
    print(
        f"mtl / bare examples/s: median {ratio:.3f}x over {len(ratios)} pairs; mtl's extra "
        f"time per step: median {overhead:+.2f} ms; host work per step mtl / bare: median "
        f"{host_ratio:.2f}x (goal <= 1.2x); same batches: {all_same_batches}; "
        f"same losses: {all_same_losses}"
    )
    figures = {
        "bench": "loop_overhead",
        "peer": "a bare hand-written loop on the same batches",
        "task": args.task,
        "model": "tiny",
        "device": device,
        "threads": args.threads,
        "steps": args.steps,
        "warmup": args.warmup,
        "examples_per_s": {k: [round(v, 2) for v in vs] for k, vs in speed.items()},
        "ms_per_step": {k: [round(v, 3) for v in vs] for k, vs in ms.items()},
        "ratio_mtl_vs_bare": round(ratio, 4),
        "pair_ratios": [round(v, 4) for v in ratios],
        "extra_ms_per_step": round(overhead, 3),
        "host_ms_per_step": {k: [round(v, 3) for v in vs] for k, vs in host.items()},
        "host_ratio_mtl_vs_bare": round(host_ratio, 4),
        "same_batches": all_same_batches,
        "same_losses": all_same_losses,
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
