"""Step-time overhead of online mixing (`loader.online`, exp3) over the static mixture, on the
same batches.

Both runs are `mtl.training.loop.run` on the tiny random BERT (a step costs little, so the
overhead shows) with `loader=random loader.steps_per_epoch=<steps>` and one task (default
`synthetic_cls`): with one task every redraw gives the same steps, so both runs train on the same
batches (checked: the example ids of every step), while the online run does all its work: the
policy's window (its losses and rows per micro-step), the reduce of its figures, exp3's update
and the redraw of the rest of the epoch, every `update_every` steps (rows: 1, the worst case,
and 20). Peer: the static mixture.

Timed with `harness.LoopClock` from the start of step `--warmup` to the end; runs in rounds
(static, online every 1, online every 20, then the reverse order), the ratio is the median over
the rounds. One torch thread. `--processes 2`: the script runs itself under torchrun, every
run a 2-process run on gloo (each rank's batches checked the same in every row; the online
runs also reduce the policy's figures over the processes), rank 0's clock.

    python benchmarks/bench_online.py [--task synthetic_cls] [--steps 300] [--warmup 20]
        [--repeats 4] [--processes 1] [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from harness import LoopClock, compose, emit, parser, quiet_transformers, scratch, table

ROWS = {"static": None, "online every 1": 1, "online every 20": 20}


def one_run(args, every: int | None, out) -> LoopClock:
    from accelerate.state import AcceleratorState

    from mtl.training.loop import run

    overrides = [
        "model=tiny", "logger=none", "trainer.progress_bar=false", f"task=[{args.task}]",
        "loader=random", f"loader.steps_per_epoch={args.steps}", "loader.exhaust=null",
        "trainer.epochs=1", "trainer.max_steps=null", "trainer.log_every=1000000",
        "trainer.export=false", "trainer.diagnose_every=0", "trainer.cpu=true",
        "trainer.dist_timeout_s=60", f"output_dir={out}",
    ]  # fmt: skip
    if every is not None:
        overrides.append(f"loader.online={{policy:exp3,update_every:{every}}}")
    AcceleratorState._reset_state(reset_partial_state=True)
    clock = LoopClock()
    with contextlib.redirect_stdout(io.StringIO()):
        run(compose(overrides), hooks=[clock])
    return clock


def main() -> None:
    p = parser(__doc__, "60 steps, 2 rounds", threads=1)
    p.add_argument("--task", default="synthetic_cls")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--processes", type=int, default=1, help="processes per run (torchrun)")
    p.add_argument("--folder", help=argparse.SUPPRESS)  # a rank's: where its runs go
    args = p.parse_args()
    if args.quick:
        args.steps, args.repeats, args.warmup = 60, 2, 10
    if args.processes > 1 and "LOCAL_RANK" not in os.environ:
        return launch(args)
    torch.set_num_threads(args.threads)
    quiet_transformers()
    if args.folder:  # a rank of `launch`: every rank runs every row, in step
        from mtl.training.launch.distributed import start_launch

        start_launch()
        return rows(args, Path(args.folder))
    with scratch("bench_online_") as folder:
        return report(args, *rows(args, folder))


def launch(args) -> None:
    """Run this script on `args.processes` processes (torchrun), each running every row."""
    with scratch("bench_online_") as folder:
        argv = [__file__, "--task", args.task, "--steps", str(args.steps), "--warmup",
                str(args.warmup), "--repeats", str(args.repeats), "--threads", str(args.threads),
                "--processes", str(args.processes), "--folder", str(folder)]  # fmt: skip
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={args.processes}", *argv]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        times, ids = json.loads((folder / "rows.json").read_text())
    report(args, times, ids)


def rows(args, folder: Path) -> tuple[dict, dict]:
    """Each row's ms/step per round, and each row's example ids of every step (rank 0's, with
    every rank's checked equal between rows)."""
    times: dict[str, list[float]] = {name: [] for name in ROWS}
    ids: dict[str, list] = {}
    for r in range(args.repeats):
        names = list(ROWS) if r % 2 == 0 else list(reversed(ROWS))
        for name in names:
            clock = one_run(args, ROWS[name], folder / f"{r}-{len(times[name])}-{name[-2:]}")
            times[name].append(clock.steady(args.warmup)["ms_per_step"])
            ids.setdefault(name, [x.tolist() for x in clock.example_ids])
    if args.folder:  # a rank: every rank checks its own batches; rank 0 writes its figures
        if any(ids[name] != ids["static"] for name in ROWS):
            raise SystemExit(
                f"rank {os.environ['RANK']}: the rows did not train on the same batches"
            )
        if os.environ["RANK"] == "0":
            (folder / "rows.json").write_text(json.dumps([times, ids]))
    return times, ids


def report(args, times: dict, ids: dict) -> None:
    same = all(ids[name] == ids["static"] for name in ROWS)
    if not same:
        raise SystemExit("bench_online: the runs did not train on the same batches")
    base = statistics.median(times["static"])
    ratio = {
        name: statistics.median(t / s for t, s in zip(times[name], times["static"], strict=True))
        for name in ROWS
    }
    print(f"task {args.task}, tiny model, {args.steps} steps ({args.warmup} not timed), "
          f"{args.processes} process(es), same batches: {same}")  # fmt: skip
    table(
        ["mixture", "ms/step (median)", "x static"],
        [(name, statistics.median(times[name]), ratio[name]) for name in ROWS],
        digits=[0, 2, 3],
    )
    emit(
        {"bench": "online", "peer": "static mixture (loader=random)", "task": args.task,
         "steps": args.steps, "processes": args.processes, "same_batches": same,
         "ms_per_step_static": round(base, 3),
         "ratio": {name: round(v, 4) for name, v in ratio.items()}},
        args.json,
    )  # fmt: skip


if __name__ == "__main__":
    main()
