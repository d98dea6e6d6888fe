"""The study behind docs/study_generative.md: a generation task alone and beside head tasks on one
decoder, and what the mixture costs or gives each side.

Each job is one `python train.py` run (a process of its own, as a user types it) of
`model=decoder` (GPT-2, 4 layers of 256, random init) at `trainer.lr=1e-3`, `loader=random`,
`--epochs` epochs, no logger, no export: the bundled generation task pydoc_heading (its 1558
training rows whole) and the bundled head tasks pydoc_topic (classification) and pydoc_code
(token tagging) with their training rows capped at `--head-rows` (400) each; dev splits whole
(275 rows each), max_length 128. Each task alone (the single-task baselines) and the three
together under proportional, temperature 2 and exp3 (online, each loss over its first window's:
`normalize: first`; and with the raw losses, `normalize: none`), `--seeds` seeds. Under
`each_once` a mixed run's epoch is one pass of every task's batches, the shares split it:
proportional sees each task's rows as often as its single-task run does.

A job's row (the options, the seed, the dev figures, optimizer steps, wall time, the gradient
cosines between the tasks at the last evaluation) is appended to
`docs/study_generative/runs.csv` as soon as it ends; `--resume` skips the jobs whose row is there.
The report is made from that file alone (`--report-only`).

    python benchmarks/study_generative.py [--seeds 3] [--epochs 2] [--head-rows 400] [--resume]
        [--options a,b] [--budget-min 110] [--report-only] [--results docs/study_generative]
        [--out docs/study_generative.md] [--work outputs/study_generative] [--quick]

`--quick`: 32 / 16 / 16 training rows, 1 epoch, 8 generated rows, exp3 updating every step
(tests).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from harness import (
    ROOT,
    append_row,
    emit,
    mean_cell,
    mean_se,
    number,
    paired,
    parser,
    read_rows,
    train_job,
    verdict,
)

GENERATIVE, HEADS = "pydoc_heading", ["pydoc_topic", "pydoc_code"]
TASKS = [GENERATIVE, *HEADS]
# each task's dev figures in the report, and which way is better
COLUMNS = {
    f"{GENERATIVE}/loss": "lower",
    f"{GENERATIVE}/exact_match": "higher",
    f"{GENERATIVE}/token_accuracy": "higher",
    "pydoc_topic/accuracy": "higher",
    "pydoc_code/f1": "higher",
}
MIXED = f"task=[{','.join(TASKS)}]"
OPTIONS: dict[str, list[str]] = {
    **{f"{task} alone": [f"task=[{task}]"] for task in TASKS},
    "proportional": [MIXED],
    "temperature 2": [MIXED, "loader.weighting=temperature", "loader.temperature=2"],
    "exp3": [
        MIXED,
        "loader.online={policy: exp3, update_every: 10, options: {normalize: first}}",
    ],
    "exp3 raw losses": [MIXED, "loader.online={policy: exp3, update_every: 10}"],
}
MIXTURES = ["proportional", "temperature 2", "exp3", "exp3 raw losses"]
BASE = [
    "model=decoder",
    "trainer.lr=1e-3",
    "loader=random",
    "logger=none",
    "trainer.export=false",
    "trainer.progress_bar=false",
    "trainer.keep_last=1",
]
PAIRS = [(a, b) for i, a in enumerate(TASKS) for b in TASKS[i + 1 :]]


def tasks_of(option: str) -> list[str]:
    return TASKS if option in MIXTURES else [option.removesuffix(" alone")]


def job_overrides(args, option: str, seed: int) -> list[str]:
    out = [*BASE, f"seed={seed}", f"trainer.epochs={args.epochs}", *OPTIONS[option]]
    if args.quick:  # a few steps: the policy updates every step
        out = [o.replace("update_every: 10", "update_every: 1") for o in out]
    for task in tasks_of(option):
        if args.quick:
            rows = 32 if task == GENERATIVE else 16
        else:  # the generation task whole, the head tasks capped
            rows = None if task == GENERATIVE else args.head_rows
        if rows:
            out.append(f"task.{task}.max_train_examples={rows}")
        out.append(f"task.{task}.max_length=128")
    if args.quick and GENERATIVE in tasks_of(option):
        out.append(f"task.{GENERATIVE}.generate_rows=8")
    return out


def run_job(args, option: str, seed: int) -> dict:
    """One `train.py` run; its CSV row."""
    overrides = job_overrides(args, option, seed)
    folder = Path(args.work) / f"{option.replace(' ', '_')}-{seed}"
    wall = train_job(overrides, folder, f"{option} / seed {seed}")
    row = job_row(folder, option, seed, overrides, wall)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # the figures are in the row
    return row


def job_row(folder: Path, option: str, seed: int, overrides: list[str], wall: float) -> dict:
    """A finished run's CSV row, from its results.json and metrics.jsonl: the dev figures, each
    task's share of the run's batches and its mixture weight at the end, the last cosines."""
    results = json.loads((folder / "results.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    logged = {key: value for r in rows for key, value in r.items()}  # the latest of each key
    diagnosed = [r for r in rows if any(k.startswith("grad_cos/") for k in r)]
    row = {"option": option, "seed": seed, "overrides": " ".join(overrides)}
    row |= {"steps": results["step"], "wall_s": round(wall, 1)}
    row |= {column: results.get(f"eval/{column}", "") for column in COLUMNS}
    for task in TASKS:
        row[f"share/{task}"] = logged.get(f"share_total/{task}", "")
        row[f"mix_weight/{task}"] = logged.get(f"mix_weight/{task}", "")
    last = diagnosed[-1] if diagnosed else {}
    row |= {f"last_cos/{a}/{b}": last.get(f"grad_cos/{a}/{b}", "") for a, b in PAIRS}
    return row


def run_study(args) -> int:
    path, started, ran = Path(args.results) / "runs.csv", time.perf_counter(), 0
    options = [o for o in OPTIONS if not args.options or o in args.options]
    for seed in range(args.seeds):  # seed by seed: every option gets its first seed first
        for option in options:
            if (option, str(seed)) in {(r["option"], r["seed"]) for r in read_rows(path)}:
                if args.resume:
                    continue
                sys.exit(f"study: {path} has {option} seed {seed} already; use --resume")
            if (time.perf_counter() - started) / 60 > args.budget_min:
                print(f"study: budget of {args.budget_min} min spent", file=sys.stderr)
                return ran
            print(f"study: {option} / seed {seed}", file=sys.stderr, flush=True)
            append_row(path, run_job(args, option, seed))
            ran += 1
    return ran


def report(results_dir: Path, args) -> str:
    rows = read_rows(results_dir / "runs.csv")
    lines = [
        "# A generation task beside head tasks on one decoder",
        "",
        "Made by `python benchmarks/study_generative.py --report-only` from "
        "docs/study_generative/runs.csv alone (one row a job). `model=decoder` (GPT-2 4 x 256, "
        "random init), lr 1e-3, `loader=random`, the bundled pydoc_heading (generation, 1558 "
        f"training rows) beside pydoc_topic and pydoc_code (training rows capped at "
        f"{args.head_rows} each), max_length 128, {args.epochs} epoch(s); dev figures at the end "
        "of the run (275 rows each; exact match on 64 generated rows), mean ± standard error "
        "over seeds. exp3 is online (`update_every: 10`) with each task's loss over its first "
        "window's (`normalize: first`), or as it is (raw losses). mix_weight is each task's "
        "weight at the end of the run (the online policy's; the static ones: the planned "
        "share of the batches).",
        "",
    ]
    options = [o for o in OPTIONS if any(r["option"] == o for r in rows)]
    if not options:
        return "\n".join(lines + ["Not run yet.", ""])
    header = ["option", "seeds", *COLUMNS, "steps", "s/step"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for option in options:
        mine = [r for r in rows if r["option"] == option]
        cells = []
        for column in COLUMNS:
            mean, se, n = mean_se([number(r[column]) for r in mine])
            cells.append(mean_cell(mean, se) if n else "")
        steps = statistics.fmean(number(r["steps"]) for r in mine)
        speed = statistics.fmean(number(r["wall_s"]) / number(r["steps"]) for r in mine)
        lines.append(
            f"| {option} | {len(mine)} | {' | '.join(cells)} | {steps:.0f} | {speed:.2f} |"
        )
    mixes = [o for o in MIXTURES if o in options]
    if mixes:
        lines += [
            "",
            "Each task's share of the run's batches, and its mixture weight at the end:",
            "",
        ]
        lines += ["| option | " + " | ".join(TASKS) + " |", "|" + "---|" * (len(TASKS) + 1)]
        for option in mixes:
            mine = [r for r in rows if r["option"] == option]
            cells = []
            for task in TASKS:
                share = mean_se([number(r.get(f"share/{task}")) for r in mine])[0]
                weight = mean_se([number(r.get(f"mix_weight/{task}")) for r in mine])[0]
                cells.append(f"{share:.2f} (weight {weight:.2f})")
            lines.append(f"| {option} | {' | '.join(cells)} |")
    lines += ["", "Each mixture minus each task's single-task run, paired by seed:", ""]
    for option in [o for o in MIXTURES if o in options]:
        for column, better in COLUMNS.items():
            base = f"{column.split('/')[0]} alone"
            diff, se, n = paired(rows, option, base, column)
            if n:
                lines.append(
                    f"- {option}, {column} ({better} is better): {mean_cell(diff, se)} (n={n}): "
                    f"{verdict(diff, se, n)}"
                )
    base = [r for r in rows if r["option"] == MIXTURES[0]]
    cos = [
        f"{a} / {b} {mean_se([number(r[f'last_cos/{a}/{b}']) for r in base])[0]:+.3f}"
        for a, b in PAIRS
    ]
    if base:
        lines += [
            "",
            "Gradient cosines on the shared decoder at the last evaluation (proportional, mean "
            f"over seeds; tied embeddings are shared): {', '.join(cos)}.",
        ]
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    p = parser(__doc__, "32 / 16 / 16 training rows, 1 epoch, 8 generated rows")
    p.add_argument("--options", default="", help="comma-separated (default: every option)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--head-rows", type=int, default=400)
    p.add_argument("--resume", action="store_true", help="skip the jobs already in the results")
    p.add_argument("--budget-min", type=float, default=110, help="start no job after this")
    p.add_argument("--report-only", action="store_true", help="remake the report, run nothing")
    p.add_argument("--results", default=str(ROOT / "docs" / "study_generative"))
    p.add_argument("--out", default=str(ROOT / "docs" / "study_generative.md"))
    p.add_argument("--work", default=str(ROOT / "outputs" / "study_generative"))
    args = p.parse_args()
    args.options = [o for o in args.options.split(",") if o]
    unknown = sorted(set(args.options) - set(OPTIONS))
    if unknown:
        p.error(f"--options: {unknown[0]} is not one of {', '.join(OPTIONS)}")
    if args.quick:
        args.epochs = 1
    ran = 0 if args.report_only else run_study(args)
    Path(args.out).write_text(report(Path(args.results), args))
    emit({"bench": "study_generative", "peer": "each task alone", "jobs_run": ran}, args.json)


if __name__ == "__main__":
    main()
