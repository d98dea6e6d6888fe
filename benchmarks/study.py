"""The study behind docs/study.md: which mixture and which balancer, on tasks of unequal size.

Each job is one `python train.py` run (a process of its own, as a user types it) of MiniLM on
the default three tasks with their training rows capped at 1500 / 400 / 100
(`task.<name>.max_train_examples`; the dev splits whole, 275 rows each), max_length 128,
`--epochs` epochs, no logger, no export. Its row (the options, the seed, each task's dev
figure, optimizer steps, wall time, the task-interaction figures of the first and last
evaluation) is appended to `docs/study/<group>.csv` as soon as it ends, so a study stopped at any
moment loses only the job in flight, and `--resume` skips every job whose row is there. The
report, docs/study.md, is made from those CSV files alone (`--report-only` remakes it without
running anything).

Groups (each option x `--seeds` seeds; the first option of a group is its baseline):
  mixtures   loader=random, the same optimizer steps: proportional, uniform, temperature 2,
             annealed, uniform capped at 2 passes a task and epoch, exp3 online, dev_gap online;
  balancers  loader=mixup: sum, uncertainty, dwa, upgrad, pcgrad, mgda (every balancer sees the
             same batches, so equal optimizer steps are equal examples);
  mixup      loader=random against loader=mixup at equal batches (a mixup step holds one batch
             of each task: a third of random's steps) and at equal optimizer steps (random's
             steps; mixup's epoch is the large task's batches, cycling the others), both
             by `trainer.max_steps`;
             its random is mixtures' proportional, typed the same: that job's row, not a rerun;
  plateau    loader=random, proportional, `--plateau-epochs` epochs evaluated after each: how
             many epochs the large task needs to come within 5% of its plateau (`--epochs`).

    python benchmarks/study.py [--groups mixtures,balancers,mixup] [--options a,b] [--seeds 3]
        [--epochs 3] [--resume] [--budget-min 150] [--report-only] [--results docs/study]
        [--out docs/study.md] [--work outputs/study] [--quick]

`--budget-min`: start no job after that many minutes. `--quick`: the tiny model, 48 / 24 / 8
training rows, 1 epoch (tests).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import yaml
from harness import (
    CONF,
    ROOT,
    append_row,
    beyond,
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

CAPS = {"pydoc_topic": 1500, "pydoc_code": 400, "pydoc_code_share": 100}
QUICK_CAPS = {"pydoc_topic": 48, "pydoc_code": 24, "pydoc_code_share": 8}
METRIC = {"pydoc_topic": "accuracy", "pydoc_code": "f1", "pydoc_code_share": "pearson"}
SMALL = "pydoc_code_share"
GROUPS: dict[str, dict[str, list[str]]] = {
    "mixtures": {
        "proportional": [],
        "uniform": ["loader.weighting=uniform"],
        "temperature 2": ["loader.weighting=temperature", "loader.temperature=2"],
        "annealed": ["loader.weighting=annealed"],
        "uniform cap 2 passes": ["loader.weighting=uniform", "loader.max_passes=2"],
        "exp3 online": ["loader.online={policy: exp3, update_every: 20}"],
        "dev_gap online": [
            "loader.online={policy: dev_gap, update_every: 20}",
            "trainer.eval_every=20",
        ],
    },
    "balancers": {
        name: ["loader=mixup", f"balancer={name}"]
        for name in ("sum", "uncertainty", "dwa", "upgrad", "pcgrad", "mgda")
    },
    "mixup": {
        "random": [],
        "mixup equal batches": ["loader=mixup", "trainer.max_steps={random_steps_div3}"],
        "mixup equal steps": [
            "loader=mixup",
            "trainer.epochs={epochs_x3}",
            "trainer.max_steps={random_steps}",
        ],
    },
    "plateau": {"proportional each epoch": ["trainer.epochs={plateau_epochs}"]},
}
BASE = ["logger=none", "trainer.export=false", "trainer.progress_bar=false", "trainer.keep_last=1"]
PAIRS = [(a, b) for i, a in enumerate(CAPS) for b in list(CAPS)[i + 1 :]]
FIELDS = ["option", "seed", "overrides", "steps", "wall_s"] + list(CAPS) + ["epochs_curve"]
FIELDS += [f"{when}_cos/{a}/{b}" for when in ("first", "last") for a, b in PAIRS]
FIELDS += [f"last_affinity/{a}/{b}" for a in CAPS for b in CAPS if a != b]


# -- running ---------------------------------------------------------------------------------------


def job_overrides(args, option_overrides: list[str], seed: int) -> list[str]:
    caps = QUICK_CAPS if args.quick else CAPS
    out = [*BASE, f"seed={seed}", f"trainer.epochs={args.epochs}"]
    out += [f"task.{t}.max_train_examples={n}" for t, n in caps.items()]
    out += [f"task.{t}.max_length={64 if args.quick else 128}" for t in caps]
    out += ["model=tiny"] if args.quick else []
    steps = args.epochs * sum(task_batches(caps).values())  # random's, each_once
    fields = {"{epochs_x3}": 3 * args.epochs, "{plateau_epochs}": args.plateau_epochs}
    fields |= {"{random_steps}": steps, "{random_steps_div3}": -(-steps // 3)}
    for option in option_overrides:  # placeholders only: a value's own braces stay as they are
        for field, value in fields.items():
            option = option.replace(field, str(value))
        out.append(option)
    return out


def task_batches(caps: dict[str, int]) -> dict[str, int]:
    """Each task's batches per pass over its capped training rows, at its configured
    batch_size (conf/task/<name>.yaml)."""
    sizes = {
        t: yaml.safe_load((CONF / "task" / f"{t}.yaml").read_text())["batch_size"] for t in caps
    }
    return {t: -(-n // sizes[t]) for t, n in caps.items()}


def run_job(args, group: str, option: str, seed: int) -> dict:
    """One `train.py` run; its CSV row."""
    overrides = job_overrides(args, GROUPS[group][option], seed)
    folder = Path(args.work) / group / f"{option.replace(' ', '_')}-{seed}"
    wall = train_job(overrides, folder, f"{group} / {option} / seed {seed}")
    row = job_row(folder, option, seed, overrides, wall)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # the figures are in the row
    return row


def job_row(folder: Path, option: str, seed: int, overrides: list[str], wall: float) -> dict:
    """A finished run's CSV row, from its results.json and metrics.jsonl."""
    results = json.loads((folder / "results.json").read_text())
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    evals = [r for r in map(json.loads, lines) if any(k.startswith("eval/") for k in r)]
    diagnosed = [r for r in evals if any(k.startswith("grad_cos/") for k in r)]
    row = {"option": option, "seed": seed, "overrides": " ".join(overrides)}
    row |= {"steps": results["step"], "wall_s": round(wall, 1)}
    row |= {t: results.get(f"eval/{t}/{m}", "") for t, m in METRIC.items()}
    curve = [[r["step"], *(r.get(f"eval/{t}/{m}") for t, m in METRIC.items())] for r in evals]
    row["epochs_curve"] = json.dumps(curve)
    for when, rows in (("first", diagnosed[:1]), ("last", diagnosed[-1:])):
        for a, b in PAIRS:
            row[f"{when}_cos/{a}/{b}"] = rows[0].get(f"grad_cos/{a}/{b}", "") if rows else ""
    last = diagnosed[-1] if diagnosed else {}
    for a in CAPS:
        for b in [b for b in CAPS if b != a]:
            row[f"last_affinity/{a}/{b}"] = last.get(f"affinity/{a}/{b}", "")
    return row


def run_study(args) -> int:
    """Every job of the chosen groups not in the results yet (with --resume); the jobs run."""
    started, ran = time.perf_counter(), 0
    for group in args.groups:
        path = Path(args.results) / f"{group}.csv"
        options = [o for o in GROUPS[group] if not args.options or o in args.options]
        for seed in range(args.seeds):  # seed by seed: every option gets its first seed first
            for option in options:
                done = {(r["option"], int(r["seed"])) for r in read_rows(path)}
                if (option, seed) in done:
                    if args.resume:
                        continue
                    sys.exit(f"study: {path} has {option} seed {seed} already; use --resume")
                if (time.perf_counter() - started) / 60 > args.budget_min:
                    print(f"study: budget of {args.budget_min} min spent", file=sys.stderr)
                    return ran
                same = same_job(args, job_overrides(args, GROUPS[group][option], seed))
                if same:  # mixup's random is mixtures' proportional: one run, its row in both
                    said = f"the row of {same['option']}, the same overrides"
                    print(f"study: {group} / {option} / seed {seed}: {said}", file=sys.stderr)
                    append_row(path, {**same, "option": option})
                    continue
                print(f"study: {group} / {option} / seed {seed}", file=sys.stderr, flush=True)
                append_row(path, run_job(args, group, option, seed))
                ran += 1
    return ran


def same_job(args, overrides: list[str]) -> dict | None:
    """The row of a job already run with exactly these overrides, in any group's CSV."""
    typed = " ".join(overrides)
    rows = [r for g in GROUPS for r in read_rows(Path(args.results) / f"{g}.csv")]
    return next((r for r in rows if r["overrides"] == typed), None)


# -- the report ------------------------------------------------------------------------------------


def group_section(group: str, rows: list[dict]) -> list[str]:
    """A group's table (mean ± standard error over seeds), its paired differences against its
    baseline with the verdicts, and its step-time ratios."""
    options = [o for o in GROUPS[group] if any(r["option"] == o for r in rows)]
    base = next(iter(GROUPS[group]))
    lines = [f"## {group}", ""]
    if not options:
        return lines + ["Not run yet.", ""]
    header = ["option", "seeds", *CAPS, "steps", "s/step"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    speed = {}
    for option in options:
        mine = [r for r in rows if r["option"] == option]
        figures = [mean_cell(*mean_se([number(r[t]) for r in mine])[:2]) for t in CAPS]
        steps = statistics.fmean(number(r["steps"]) for r in mine)
        speed[option] = statistics.fmean(number(r["wall_s"]) / number(r["steps"]) for r in mine)
        lines.append(
            f"| {option} | {len(mine)} | {' | '.join(figures)} | {steps:.0f} | "
            f"{speed[option]:.2f} |"
        )
    lines.append("")
    if group == "mixup":
        lines += ["random is mixtures' proportional (the same overrides): the same runs.", ""]
    if base not in options or options == [base] or group == "plateau":
        return lines
    lines += [f"Paired by seed, each option minus {base} (mean ± standard error, n):", ""]
    for option in [o for o in options if o != base]:
        for task in CAPS:
            diff, se, n = paired(rows, option, base, task)
            small = " (the small task)" if task == SMALL else ""
            lines.append(
                f"- {option}, {task}{small}: {mean_cell(diff, se)} (n={n}): {verdict(diff, se, n)}"
            )
    ratios = ", ".join(f"{o} {speed[o] / speed[base]:.2f}x" for o in options if o != base)
    said = f"Wall time per optimizer step against {base} (the run's wall time over its steps, "
    said += f"start-up and evaluations included): {ratios}."
    return lines + ["", said, "", recommendation(rows, options, base, speed), ""]


def recommendation(rows: list[dict], options: list[str], base: str, speed: dict[str, float]) -> str:
    """The option that is better than `base` beyond 2 standard errors on the most tasks (then
    by the sum of its differences) and worse beyond them on none, among those with 3 seeds or
    more, with its step-time ratio; `base` where none is."""
    scored, unjudged = [], []
    for option in [o for o in options if o != base]:
        diffs = {task: paired(rows, option, base, task) for task in CAPS}
        if any(n < 3 for _, _, n in diffs.values()):
            unjudged.append(option)
            continue
        clear = {t: d for t, (d, se, n) in diffs.items() if beyond(d, se, n)}
        if clear and min(clear.values()) > 0:
            scored.append((len(clear), sum(d for d, _, _ in diffs.values()), option, clear))
    later = f" ({', '.join(unjudged)}: fewer than 3 seeds, not judged)" if unjudged else ""
    if not scored:
        return (
            f"Recommended: {base}. No option is better beyond 2 standard errors on a task "
            f"without being worse beyond them on another{later}."
        )
    _, _, option, clear = max(scored)
    return (
        f"Recommended: {option}. Better than {base} beyond 2 standard errors on "
        f"{', '.join(clear)}, worse beyond them on no task, at "
        f"{speed[option] / speed[base]:.2f}x its wall time per step; of the options that are, "
        f"it is better on the most tasks, then by the most in all{later}."
    )


def interactions(results: dict[str, list[dict]]) -> list[str]:
    """Each group baseline's matrices, mean over its jobs: the gradient cosines on the shared
    encoder at the first and last evaluation, and the last lookahead affinities."""
    lines = [
        "## Task interactions",
        "",
        "On each group's baseline, mean over its jobs (`mtl.training.diagnostics`, on a held dev "
        "batch of each task). Gradient cosine of two tasks on the shared encoder (< 0: they "
        "conflict), at the first evaluation -> the last; lookahead affinity (Fifty et al. 2021) "
        "at the last, row a, column b: `1 - L_b(θ - lr g_a) / L_b(θ)`, in units of 1e-4 (> 0: a "
        "plain step on a lowers b's loss).",
        "",
    ]
    tasks = list(CAPS)
    for group, rows in results.items():
        base = [r for r in rows if r["option"] == next(iter(GROUPS[group]))]
        if not base or group in ("plateau", "mixup"):  # mixup's random: mixtures' runs
            continue
        title = f"{group}, {base[0]['option']} ({len(base)} jobs)"
        for name, value in (("gradient cosine", cosine_cell), ("affinity x 1e4", affinity_cell)):
            lines += [f"| {title}: {name} | {' | '.join(tasks)} |", "|" + "---|" * 4]
            lines += [f"| {a} | {' | '.join(value(base, a, b) for b in tasks)} |" for a in tasks]
            lines.append("")
    return lines


def column_mean(rows: list[dict], column: str) -> float:
    return mean_se([number(r[column]) for r in rows])[0]


def cosine_cell(rows: list[dict], a: str, b: str) -> str:
    """The cosine of a and b (kept once per pair), first evaluation -> last."""
    if a == b:
        return "1"
    a, b = sorted((a, b), key=list(CAPS).index)
    first, last = column_mean(rows, f"first_cos/{a}/{b}"), column_mean(rows, f"last_cos/{a}/{b}")
    return f"{first:+.3f} -> {last:+.3f}"


def affinity_cell(rows: list[dict], a: str, b: str) -> str:
    return "" if a == b else f"{1e4 * column_mean(rows, f'last_affinity/{a}/{b}'):+.1f}"


def plateau_section(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    large = next(iter(CAPS))
    lines = ["## Plateau of the large task (proportional)", ""]
    for row in rows:
        curve = json.loads(row["epochs_curve"])
        best = max(point[1] for point in curve)
        near = next(i for i, point in enumerate(curve) if point[1] >= 0.95 * best)
        figures = ", ".join(f"{point[1]:.3f}" for point in curve)
        lines.append(
            f"- seed {row['seed']}: {large} by evaluation {figures}; plateau {best:.3f}, within "
            f"5% of it from evaluation {near + 1} (step {curve[near][0]})"
        )
    return lines + [""]


def report(results_dir: Path) -> str:
    results = {g: read_rows(results_dir / f"{g}.csv") for g in GROUPS}
    caps = " / ".join(f"{t} {n}" for t, n in CAPS.items())
    lines = [
        "# Which mixture and which balancer, on tasks of unequal size",
        "",
        "Made by `python benchmarks/study.py --report-only` from docs/study/*.csv alone (one row "
        f"a job). MiniLM, the default three tasks with their training rows capped at {caps} "
        "(dev splits whole: 275 rows each), max_length 128; each figure is the task's dev figure "
        f"at the end of the run ({', '.join(f'{t} {m}' for t, m in METRIC.items())}), mean ± "
        "standard error over seeds. A comparison with no rows is not reported. Verdicts: a "
        "paired difference beyond 2 standard errors or within; with 3 seeds that is a loose bar "
        "(a paired t-test on 2 degrees of freedom needs 4.3 standard errors for p < 0.05), so "
        "read beyond as a lead to check on your tasks.",
        "",
    ]
    lines += plateau_section(results["plateau"])
    for group in ("mixtures", "balancers", "mixup"):
        lines += group_section(group, results[group])
    lines += interactions(results)
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    p = parser(__doc__, "the tiny model, 48 / 24 / 8 training rows, 1 epoch")
    p.add_argument("--groups", default="mixtures,balancers,mixup", help="comma-separated")
    p.add_argument("--options", default="", help="comma-separated (default: every option)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--plateau-epochs", type=int, default=8)
    p.add_argument("--resume", action="store_true", help="skip the jobs already in the results")
    p.add_argument("--budget-min", type=float, default=150, help="start no job after this")
    p.add_argument("--report-only", action="store_true", help="remake the report, run nothing")
    p.add_argument("--results", default=str(ROOT / "docs" / "study"))
    p.add_argument("--out", default=str(ROOT / "docs" / "study.md"))
    p.add_argument("--work", default=str(ROOT / "outputs" / "study"))
    args = p.parse_args()
    args.groups = [g for g in args.groups.split(",") if g]
    args.options = [o for o in args.options.split(",") if o]
    unknown = sorted(set(args.groups) - set(GROUPS))
    if unknown:
        p.error(f"--groups: {unknown[0]} is not one of {', '.join(GROUPS)}")
    if args.quick:
        args.epochs, args.plateau_epochs = 1, 2
    ran = 0 if args.report_only else run_study(args)
    Path(args.out).write_text(report(Path(args.results)))
    emit({"bench": "study", "peer": "each group's first option", "jobs_run": ran}, args.json)


if __name__ == "__main__":
    main()
