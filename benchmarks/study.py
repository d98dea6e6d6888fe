"""The study behind docs/study.md: which mixing wins, what block shuffle costs, what multi-task
buys.

Everything comes from commands a user can type: Hydra multirun sweeps of the real `train.py`
(run here as subprocesses), each leaving `summary.csv` (mtl.reporting.sweep.SweepSummary), plus two
benchmarks (run as commands too). This script runs them, reads the summaries and writes
`study.md` and its plots.

    python benchmarks/study.py [--out docs] [--work outputs/study] [--seeds 3] [--epochs 1]
        [--max-examples 600] [--loaders random,...] [--samplers random,...] [--skip-runs]
        [--no-bench] [--quick]

Sweeps, on the default tasks (pydoc_topic, pydoc_code, pydoc_code_share) and model (MiniLM):
  (a) mixing: loader=random,round_robin,mixup,sequential x sampler=random,block_shuffle x seeds;
  (b) single: one model per task (task=<one>), the same steps per task as in (a): each loader
      here draws every batch of every task once per epoch, so a task gets as many batches alone
      as it gets mixed;
  (c) benchmarks/bench_vs_trainer.py: mtl vs the Hugging Face Trainer on one task;
  (d) benchmarks/bench_loop_overhead.py: mtl's loop vs a bare loop over identical batches.
Every run: `logger=none trainer.epochs=E data.max_examples=N` (N caps each task's train split;
the dev splits, 275 examples each, are below the cap), no export. `--skip-runs` rebuilds the
report from the sweeps already in `--work`. `--quick`: model=tiny, 2 seeds, few examples (tests).
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import ROOT, emit, parser

LOADERS = ("random", "round_robin", "mixup", "sequential")
SAMPLERS = ("random", "block_shuffle")
TASKS = ("pydoc_topic", "pydoc_code", "pydoc_code_share")
DEFAULT = ("random", "block_shuffle")  # the default config's loader and sampler


def sweep(work: Path, name: str, overrides: list[str]) -> Path:
    """Run `train.py -m <overrides>` into `<work>/<name>`; returns the sweep folder."""
    folder = work / name
    command = [sys.executable, str(ROOT / "train.py"), "-m", *overrides]
    command.append(f"hydra.sweep.dir={folder}")
    print("$", " ".join(command[1:]), flush=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    print(f"  {time.perf_counter() - started:.0f} s, exit {done.returncode}", flush=True)
    if not (folder / "summary.csv").is_file():
        sys.exit(f"study: sweep {name} wrote no summary.csv:\n{done.stderr[-3000:]}")
    return folder


def read_summary(folder: Path) -> tuple[list[dict], list[str]]:
    """The completed jobs of summary.csv (overrides as a dict, numbers as floats), and one line
    for each job that did not complete (failed, or killed: left out of every figure)."""
    rows, left_out = [], []
    with open(folder / "summary.csv", newline="") as f:
        for row in csv.DictReader(f):
            out = {"overrides": dict(o.split("=", 1) for o in row["overrides"].split() if "=" in o)}
            for key, value in row.items():
                if key != "overrides":
                    out[key] = _number(value)
            scored = isinstance(out["monitor"], float) and math.isfinite(out["monitor"])
            if row["status"] == "COMPLETED" and scored:
                rows.append(out)
            elif row["status"] == "COMPLETED":  # ended without an evaluation (a stop signal)
                left_out.append(f"{folder.name} job {row['job']} ({row['overrides']}): no figures")
            else:
                error = f": {row['error']}" if row.get("error") else ""
                left_out.append(
                    f"{folder.name} job {row['job']} ({row['overrides']}): {row['status']}{error}"
                )
    return rows, left_out


def _number(value: str):
    try:
        return float(value)
    except ValueError:
        return value


def mean_sd(values: list[float]) -> tuple[float, float, int]:
    values = [v for v in values if isinstance(v, float) and math.isfinite(v)]
    if not values:
        return math.nan, math.nan, 0
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return statistics.fmean(values), sd, len(values)


def fmt(mean: float, sd: float, digits: int = 4) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if not math.isnan(sd) else f"{mean:.{digits}f}"


def metric_columns(rows: list[dict]) -> dict[str, str]:
    """{task: its main-metric column} from a summary's columns (`<task>/<metric>`)."""
    out = {}
    for key in rows[0]:
        task = key.split("/", 1)[0]
        if "/" in key and task in TASKS and task not in out:
            out[task] = key
    return out


def by_config(rows: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        o = row["overrides"]
        groups.setdefault(
            (o.get("loader", "random"), o.get("sampler", "block_shuffle")), []
        ).append(row)
    return groups


def present(groups, index: int, known: tuple[str, ...]) -> list[str]:
    """The loaders (index 0) or samplers (1) the runs used, in the study's order."""
    used = {key[index] for key in groups}
    return [x for x in known if x in used] + sorted(used - set(known))


def paired_difference(groups, column: str, loaders) -> tuple[float, float, int]:
    """block_shuffle - random, paired by loader and seed: mean difference, its standard error, n."""
    diffs = []
    for loader in loaders:
        a = {
            r["overrides"].get("seed"): r[column] for r in groups.get((loader, "block_shuffle"), [])
        }
        b = {r["overrides"].get("seed"): r[column] for r in groups.get((loader, "random"), [])}
        diffs += [
            a[s] - b[s] for s in a if s in b and isinstance(a[s], float) and isinstance(b[s], float)
        ]
    if len(diffs) < 2:
        return math.nan, math.nan, len(diffs)
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs)


def verdict(diff: float, se: float) -> str:
    if math.isnan(diff) or math.isnan(se):
        return "too few runs to say"
    if abs(diff) <= 2 * se:
        return "no difference beyond 2 standard errors"
    return "higher" if diff > 0 else "lower"


def plot(groups, single, columns, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loaders, samplers = present(groups, 0, LOADERS), present(groups, 1, SAMPLERS)
    fig, axes = plt.subplots(1, len(columns), figsize=(5 * len(columns), 4), squeeze=False)
    for ax, (task, column) in zip(axes[0], columns.items(), strict=True):
        width = 0.8 / len(samplers)
        for j, sampler in enumerate(samplers):
            stats = [mean_sd([r[column] for r in groups.get((lo, sampler), [])]) for lo in loaders]
            xs = [i + (j - (len(samplers) - 1) / 2) * width for i in range(len(loaders))]
            ax.bar(
                xs,
                [s[0] for s in stats],
                width,
                yerr=[s[1] for s in stats],
                label=sampler,
                capsize=3,
            )
        alone = mean_sd([r[column] for r in single.get(task, [])])
        if not math.isnan(alone[0]):
            ax.axhline(alone[0], color="black", ls="--", lw=1, label="single task")
        ax.set_xticks(range(len(loaders)), loaders)
        ax.set_title(column)
        low = min((b.get_height() for b in ax.patches), default=0)
        ax.set_ylim(max(0.0, low - 0.1), None)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("dev metric by loader and sampler (mean ± sd over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mixing_table(groups: dict, columns: dict, loaders: list, samplers: list) -> list[str]:
    """(a): each loader and sampler's dev metrics, steps, time and speed."""
    lines: list[str] = []
    head = ["loader", "sampler", *columns.values(), "eval/mean", "steps", "wall s", "examples/s"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for loader in loaders:
        for sampler in samplers:
            rows = groups.get((loader, sampler), [])
            cells = [fmt(*mean_sd([r[c] for r in rows])[:2]) for c in columns.values()]
            cells.append(fmt(*mean_sd([r["monitor"] for r in rows])[:2]))
            cells.append(fmt(mean_sd([r["steps"] for r in rows])[0], math.nan, digits=0))
            cells.append(fmt(*mean_sd([r["wall_s"] for r in rows])[:2], digits=0))
            cells.append(fmt(*mean_sd([r.get("examples_per_s", math.nan) for r in rows])[:2], 1))
            mark = " (default)" if (loader, sampler) == DEFAULT else ""
            lines.append(f"| {loader}{mark} | {sampler} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Every configuration sees the same examples; `steps` are optimizer steps. A mixup step "
        "holds one batch of every task, so at the same examples and learning rate it takes a "
        "third of the optimizer steps (and pads every row to the step's longest).",
        "",
        "![dev metrics](study_metrics.png)",
        "",
    ]
    return lines


def sampler_section(groups: dict, columns: dict, loaders: list) -> list[str]:
    """What block shuffle costs, and which loader wins per task."""
    lines: list[str] = []
    lines += ["### Does block shuffle cost accuracy?", ""]
    lines += ["block_shuffle minus random, paired by loader and seed (mean ± standard error):", ""]
    for task, column in {**columns, "mean": "monitor"}.items():
        diff, se, n = paired_difference(groups, column, loaders)
        lines.append(f"- {task}: {diff:+.4f} ± {se:.4f} (n={n}): {verdict(diff, se)}")
    speed = [
        mean_sd(
            [r.get("examples_per_s", math.nan) for lo in LOADERS for r in groups.get((lo, s), [])]
        )[0]
        for s in SAMPLERS
    ]
    if all(not math.isnan(x) for x in speed):
        lines.append(f"- training speed: {speed[1] / speed[0]:.2f}x the examples/s of random")
    lines += ["", "### Which loader wins, per task (block_shuffle)", ""]
    for task, column in columns.items():
        stats = {
            lo: mean_sd([r[column] for r in groups.get((lo, "block_shuffle"), [])])
            for lo in LOADERS
        }
        ranked = sorted((lo for lo in stats if stats[lo][2]), key=lambda lo: -stats[lo][0])
        if len(ranked) < 2:
            continue
        top, second = stats[ranked[0]], stats[ranked[1]]
        se = math.sqrt((top[1] ** 2 + second[1] ** 2) / max(top[2], 1))
        gap = top[0] - second[0]
        sure = "clear" if gap > 2 * se else "within the seeds' spread"
        lines.append(
            f"- {task}: {ranked[0]} {top[0]:.4f}, then {ranked[1]} {second[0]:.4f} "
            f"(gap {gap:.4f}, standard error {se:.4f}: {sure}); last {ranked[-1]} "
            f"{stats[ranked[-1]][0]:.4f}"
        )
    return lines


def single_section(groups: dict, columns: dict, single: dict, single_rows: list) -> list[str]:
    """(b): multi-task vs one model per task."""
    lines: list[str] = []
    lines += ["", "## (b) Multi-task vs one model per task", ""]
    lines += [
        "Same steps per task; multi-task = the default config (random loader, block_shuffle).",
        "",
    ]
    head = ["task", "metric", "single task", "multi-task (default)", "difference ± se", "verdict"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for task, column in columns.items():
        alone = mean_sd([r[column] for r in single.get(task, [])])
        mixed = mean_sd([r[column] for r in groups.get(DEFAULT, [])])
        se = math.sqrt(alone[1] ** 2 / max(alone[2], 1) + mixed[1] ** 2 / max(mixed[2], 1))
        diff = mixed[0] - alone[0]
        lines.append(
            f"| {task} | {column.split('/', 1)[1]} | {fmt(*alone[:2])} | {fmt(*mixed[:2])} | "
            f"{diff:+.4f} ± {se:.4f} | {verdict(diff, se)} |"
        )
    wall_single = sum(r["wall_s"] for r in single_rows if isinstance(r["wall_s"], float))
    wall_multi = sum(r["wall_s"] for r in groups.get(DEFAULT, []) if isinstance(r["wall_s"], float))
    if wall_single and wall_multi:
        lines += [
            "",
            f"Wall time: {wall_multi:.0f} s for the multi-task runs of the default "
            f"config vs {wall_single:.0f} s for the single-task runs of the same seeds.",
        ]
    return lines


def report(mixing: list[dict], single_rows: list[dict], bench: dict, args, budget_s: float) -> str:
    columns = metric_columns(mixing)
    groups = by_config(mixing)
    loaders, samplers = present(groups, 0, LOADERS), present(groups, 1, SAMPLERS)
    single: dict[str, list[dict]] = {}
    for row in single_rows:
        task = row["overrides"].get("task", "").strip("[]")
        single.setdefault(task, []).append(row)
    lines = ["# The study: mixing, batching and multi-task on the bundled tasks", ""]
    lines += [
        f"Default tasks ({', '.join(TASKS)}), model `{'tiny' if args.quick else 'minilm'}`, "
        f"{args.epochs} epoch(s) over at most {args.max_examples} training examples per task, "
        f"seeds 0-{args.seeds - 1}; the dev splits are whole. Machine: {os.cpu_count()} CPU cores; "
        f"the whole study took {budget_s / 60:.0f} min. Remade by `python benchmarks/study.py` "
        "(the commands it ran are listed at the end).",
        "",
        "## (a) Loader x sampler: dev main metric, mean ± sd over seeds",
        "",
    ]
    lines += mixing_table(groups, columns, loaders, samplers)
    lines += sampler_section(groups, columns, loaders)
    lines += single_section(groups, columns, single, single_rows)
    lines += ["", "## (c) mtl vs the Hugging Face Trainer, (d) loop overhead", ""]
    for name in ("vs_trainer", "loop_overhead"):
        if name in bench:
            lines += [
                f"`benchmarks/bench_{name}.py`:",
                "",
                "```",
                bench[name]["table"].rstrip(),
                "```",
                "",
            ]
    if args.left_out:
        lines += ["Jobs left out (not completed):", ""]
        lines += [f"- {line}" for line in args.left_out] + [""]
    lines += ["## Commands", "", "```"]
    lines += [*args.commands, "```", ""]
    return "\n".join(lines)


def shown(path: Path) -> str:
    """A path as the commands show it: relative to the checkout when inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def run_bench(script: str, work: Path, quick: bool) -> dict:
    out = work / f"{script}.json"
    command = [sys.executable, str(ROOT / "benchmarks" / script), "--json", str(out)]
    command += ["--quick"] if quick else []
    print("$", " ".join(command[1:]), flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"study: {script} failed:\n{done.stderr[-3000:]}")
    table = "\n".join(line for line in done.stdout.splitlines() if not line.startswith("{"))
    return {"table": table, "figures": json.loads(out.read_text())}


def sweep_plans(args) -> dict[str, list[str]]:
    """The two sweeps' overrides: (a) mixing and (b) single."""
    seeds = ",".join(str(s) for s in range(args.seeds))
    common = [
        "logger=none",
        "trainer.progress_bar=false",
        "trainer.export=false",
        f"trainer.epochs={args.epochs}",
        f"data.max_examples={args.max_examples}",
        f"seed={seeds}",
    ]
    if args.quick:
        common.append("model=tiny")
    return {
        "mixing": [
            f"loader={','.join(args.loaders)}",
            f"sampler={','.join(args.samplers)}",
            *common,
        ],
        "single": [f"task={','.join(TASKS)}", *common],
    }


def main() -> None:
    p = parser(__doc__, "model=tiny, 2 seeds, few examples (tests)")
    p.add_argument("--out", type=Path, default=ROOT / "docs")
    p.add_argument("--work", type=Path, default=ROOT / "outputs" / "study")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-examples", type=int, default=600)
    p.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated")
    p.add_argument("--samplers", default=",".join(SAMPLERS), help="comma-separated")
    p.add_argument("--skip-runs", action="store_true")
    p.add_argument("--no-bench", action="store_true", help="leave out (c) and (d)")
    args = p.parse_args()
    if args.quick:
        args.seeds, args.max_examples = min(args.seeds, 2), min(args.max_examples, 48)
    args.loaders, args.samplers = args.loaders.split(","), args.samplers.split(",")
    plans = sweep_plans(args)
    args.commands = [
        f"python train.py -m {' '.join(o)} hydra.sweep.dir={shown(args.work / name)}"
        for name, o in plans.items()
    ]
    started = time.perf_counter()
    bench: dict = {}
    if not args.skip_runs:
        for name, overrides in plans.items():
            sweep(args.work, name, overrides)
        if not args.no_bench:
            for name in ("vs_trainer", "loop_overhead"):
                bench[name] = run_bench(f"bench_{name}.py", args.work, args.quick)
                (args.work / f"{name}.json").write_text(json.dumps(bench[name]))
    else:
        for name in ("vs_trainer", "loop_overhead"):
            if (args.work / f"{name}.json").is_file():
                bench[name] = json.loads((args.work / f"{name}.json").read_text())
    budget = time.perf_counter() - started
    if args.skip_runs and (args.work / "budget_s").is_file():
        budget = float((args.work / "budget_s").read_text())
    else:
        (args.work / "budget_s").write_text(str(budget))
    args.commands += [f"python benchmarks/bench_{n}.py" for n in bench]
    mixing, left_mixing = read_summary(args.work / "mixing")
    single, left_single = read_summary(args.work / "single")
    args.left_out = left_mixing + left_single
    args.out.mkdir(parents=True, exist_ok=True)
    groups = by_config(mixing)
    single_by_task: dict[str, list[dict]] = {}
    for row in single:
        single_by_task.setdefault(row["overrides"].get("task", "").strip("[]"), []).append(row)
    plot(groups, single_by_task, metric_columns(mixing), args.out / "study_metrics.png")
    text = report(mixing, single, bench, args, budget)
    (args.out / "study.md").write_text(text)
    print(text)
    emit({"bench": "study", "runs": len(mixing) + len(single), "minutes": budget / 60}, args.json)


if __name__ == "__main__":
    main()
