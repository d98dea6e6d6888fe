"""Training speed of the real loop: examples/s with `sampler=random` vs `sampler=block_shuffle`.

Each run composes the real Hydra config (as `train.py` would; see tests/conftest.py) with
`logger=none trainer.progress_bar=false task=[<tasks>] trainer.epochs=<epochs> sampler=<s>`, the
default model (MiniLM) unless `--quick` (`model=tiny`, few examples), and calls
`mtl.training.loop.run` in-process on the CPU with `torch.set_num_threads(2)`. Same data, seed and
number of epochs for both samplers, so both take the same number of steps (one task: ceil(examples /
32) per epoch). Runs are interleaved A B A B ... (`--repeats` pairs) so a busy machine slows both
alike.

Timed: the training loop only, i.e. from the start to the end of each epoch's iteration over the
loader (data loading, forward, backward, optimizer, logging), by the loop's `batches` hook
(`harness.LoopClock`); setup (tokenizing, model load), evaluation and
checkpointing are left out. examples/s = training examples drawn / seconds. Dev metric: the task's
main metric after the last epoch (the value `run()` returns). Peer: the random sampler (plain
shuffled batches) in the same loop. Goal: block_shuffle >= 2.5x the examples/s of random, dev metric
within 1 point.

    python benchmarks/bench_train_speed.py [--tasks pydoc_topic] [--epochs 1] [--repeats 2]
        [--max-examples N] [--plot docs/train_speed.png] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from harness import (
    LoopClock,
    compose,
    emit,
    grouped,
    parser,
    quiet_transformers,
    scratch,
    table,
)

SAMPLERS = ("random", "block_shuffle")  # baseline, candidate (--samplers changes them)


def one_run(sampler: str, args: argparse.Namespace, out_dir: Path) -> dict:
    """`sampler` is a config name, optionally with its options: `token_budget:max_tokens=1632`."""
    name, _, options = sampler.partition(":")
    from mtl.training.loop import run

    overrides = [
        "logger=none",
        "trainer.progress_bar=false",
        f"task=[{','.join(args.tasks)}]",
        f"trainer.epochs={args.epochs}",
        "trainer.log_every=1000000",  # one logged window per run: no logging inside the timing
        f"sampler={name}",
        *(f"sampler.{o}" for o in options.split(",") if o),
        f"output_dir={out_dir}",
        "trainer.cpu=true",
    ]
    if args.max_examples:
        overrides.append(f"data.max_examples={args.max_examples}")
    if args.quick:
        overrides.append("model=tiny")
    cfg = compose(overrides)
    start = time.perf_counter()
    clock = LoopClock()
    with contextlib.redirect_stdout(io.StringIO()):  # run()'s summary
        final = run(cfg, hooks=[clock]).dev
    total = time.perf_counter() - start
    seconds, examples = clock.seconds, clock.examples
    metrics = {}
    for task in args.tasks:
        keys = sorted(k for k in final if k.startswith(f"eval/{task}/"))
        main = next((k for k in keys if k.rsplit("/", 1)[1] in ("accuracy", "f1", "pearson")), None)
        metrics[task] = final[main] if main else float("nan")
    return {
        "sampler": sampler,
        "timed": "loop",
        "seconds": seconds,
        "run_seconds": total,
        "examples": examples,
        "examples_per_s": examples / seconds if seconds and examples else float("nan"),
        "dev": metrics,
    }


def plot(runs: list[dict], path: str, samplers: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for sampler, color in zip(samplers, ("tab:gray", "tab:blue"), strict=True):
        xs = [i + 1 for i, r in enumerate(runs) if r["sampler"] == sampler]
        ys = [r["examples_per_s"] for r in runs if r["sampler"] == sampler]
        ax.bar(xs, ys, color=color, label=sampler)
    ax.set_xlabel("run (interleaved A/B)")
    ax.set_ylabel("training examples / s")
    ax.set_title(f"Training loop speed, {samplers[0]} vs {samplers[1]} sampler")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_all(args: argparse.Namespace) -> list[dict]:
    """Every run, interleaved A B A B ..."""
    runs = []
    with scratch("bench_train_speed_") as workdir:
        for repeat in range(args.repeats):
            for i, sampler in enumerate(args.samplers):
                out_dir = workdir / f"{repeat}_{i}"
                runs.append(one_run(sampler, args, out_dir) | {"repeat": repeat})
                print(f"run {len(runs)}: {json.dumps(runs[-1])}", file=sys.stderr, flush=True)
                shutil.rmtree(out_dir, ignore_errors=True)
    return runs


def print_runs(args: argparse.Namespace, runs: list[dict]) -> None:
    print(
        f"tasks {args.tasks}, {args.epochs} epoch(s), model {'tiny' if args.quick else 'minilm'}, "
        f"CPU, {args.threads} torch threads, timed: {runs[0]['timed']}"
    )
    table(
        ["run", "sampler", "examples", "seconds", "ex/s", "run s",
         *(f"dev {t}" for t in args.tasks)],
        [[i + 1, r["sampler"], r["examples"], r["seconds"], r["examples_per_s"], r["run_seconds"],
          *(r["dev"][t] for t in args.tasks)] for i, r in enumerate(runs)],
        [0, 0, 0, 1, 2, 1, *([4] * len(args.tasks))],
    )  # fmt: skip


def main() -> None:
    p = parser(__doc__, "tiny model, 64 examples, 1 pair", threads=2)
    p.add_argument("--tasks", nargs="+", default=["pydoc_topic"])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2, help="A/B pairs (default 2)")
    p.add_argument("--max-examples", type=int, default=None, help="cap per task and split")
    p.add_argument("--plot", default=None, help="write a PNG of examples/s per run")
    p.add_argument(
        "--samplers",
        nargs=2,
        default=list(SAMPLERS),
        metavar=("BASELINE", "CANDIDATE"),
        help="two sampler configs, options after a colon: token_budget:max_tokens=1632",
    )
    args = p.parse_args()
    if args.quick:
        args.max_examples, args.repeats = args.max_examples or 64, 1

    import torch

    quiet_transformers()
    torch.set_num_threads(args.threads)
    runs = run_all(args)
    print_runs(args, runs)
    tasks, (base, cand) = args.tasks, args.samplers
    speed = grouped(runs, "sampler", "examples_per_s")
    pair_ratios = [b / a for a, b in zip(speed[base], speed[cand], strict=True)]
    ratio = statistics.median(pair_ratios)
    dev = {
        s: {t: statistics.median(r["dev"][t] for r in runs if r["sampler"] == s) for t in tasks}
        for s in args.samplers
    }
    dev_points = {t: 100 * (dev[cand][t] - dev[base][t]) for t in tasks}
    print(
        f"{cand} / {base} examples/s: median {ratio:.2f}x over {len(pair_ratios)} pairs "
        f"(goal >= 2.5 for block_shuffle / random); dev {cand} - {base} (points): "
        + ", ".join(f"{t} {v:+.1f}" for t, v in dev_points.items())
        + " (goal within 1)"
    )
    if args.plot:
        plot(runs, args.plot, args.samplers)
        print(f"plot: {args.plot}")
    figures = {
        "bench": "train_speed",
        "peer": f"sampler={base} in the same loop",
        "tasks": tasks,
        "epochs": args.epochs,
        "timed": runs[0]["timed"],
        "examples_per_s": {s: [round(v, 3) for v in speed[s]] for s in args.samplers},
        f"ratio_{cand}_vs_{base}": round(ratio, 3),
        "pair_ratios": [round(v, 3) for v in pair_ratios],
        "dev": dev,
        "dev_diff_points": {t: round(v, 2) for t, v in dev_points.items()},
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
