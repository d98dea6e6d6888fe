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
the rounds. One torch thread. 1 process: the reduce over processes is one more collective per
update on several (not measured here).

    python benchmarks/bench_online.py [--task synthetic_cls] [--steps 300] [--warmup 20]
        [--repeats 4] [--json PATH] [--quick]
"""

from __future__ import annotations

import contextlib
import io
import statistics

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
        f"output_dir={out}",
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
    args = p.parse_args()
    if args.quick:
        args.steps, args.repeats, args.warmup = 60, 2, 10
    torch.set_num_threads(args.threads)
    quiet_transformers()
    times: dict[str, list[float]] = {name: [] for name in ROWS}
    ids: dict[str, list] = {}
    with scratch("bench_online_") as folder:
        for r in range(args.repeats):
            names = list(ROWS) if r % 2 == 0 else list(reversed(ROWS))
            for name in names:
                clock = one_run(args, ROWS[name], folder / f"{r}-{len(times[name])}-{name[-2:]}")
                times[name].append(clock.steady(args.warmup)["ms_per_step"])
                ids.setdefault(name, [x.tolist() for x in clock.example_ids])
    same = all(ids[name] == ids["static"] for name in ROWS)
    if not same:
        raise SystemExit("bench_online: the runs did not train on the same batches")
    base = statistics.median(times["static"])
    ratio = {
        name: statistics.median(t / s for t, s in zip(times[name], times["static"], strict=True))
        for name in ROWS
    }
    print(f"task {args.task}, tiny model, {args.steps} steps ({args.warmup} not timed), same "
          f"batches: {same}")  # fmt: skip
    table(
        ["mixture", "ms/step (median)", "x static"],
        [(name, statistics.median(times[name]), ratio[name]) for name in ROWS],
        digits=[0, 2, 3],
    )
    emit(
        {"bench": "online", "peer": "static mixture (loader=random)", "task": args.task,
         "steps": args.steps, "same_batches": same, "ms_per_step_static": round(base, 3),
         "ratio": {name: round(v, 4) for name, v in ratio.items()}},
        args.json,
    )  # fmt: skip


if __name__ == "__main__":
    main()
