"""PNG figures of a run or sweep folder from `metrics.jsonl`, no W&B needed (`report`; the
command `mtl-report <run folder | sweep folder>` is `mtl.cli.report`).

A run folder (it holds `metrics.jsonl`) gets four figures: `report_shares.png` (each task's
share of the window and since the start against its target, one panel per task),
`report_losses.png` (the training loss of each task), `report_dev.png` (each task's dev metrics
at every evaluation) and `report_throughput.png` (padding efficiency and tokens/s); a run with
task-interaction diagnostics also `report_interaction.png` (`mtl.reporting.interaction`), one
mixed online (`loader.online`) also `report_mixing.png` (the policy's figure per task and the
weight it gave).

A sweep folder (a Hydra multirun: job folders, each with `metrics.jsonl` or `results.json`)
gets `report_sweep_monitor.png` (the monitored value of each job, as bars) and
`report_sweep_metrics.png` (every dev metric of every job, one column per task and metric,
coloured within its column). A job's monitored value is the sweep summary's
(`mtl.reporting.sweep.monitored`: `best[monitor]` of its `results.json` when that names one, else
the mean of each task's main dev metric), read at the last evaluation while it runs. Jobs
are named by the overrides that differ between them (`.hydra/overrides.yaml`).

The figures are written into the folder, each whole (`mtl.artifacts`), replacing those of an
earlier report; their paths are printed one per line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from mtl.artifacts import check_target, write_file
from mtl.errors import MtlError
from mtl.reporting.interaction import interaction_figure, legend_below
from mtl.reporting.sweep import monitored
from mtl.task_types import metric_directions

PANEL_W, PANEL_H = 4.6, 3.0


# -- reading ---------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict]:
    """The lines of a `metrics.jsonl`; a truncated last line (a run that was killed) is skipped."""
    try:  # a line cut inside a character is skipped like any other cut line
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise MtlError(f"{path}: cannot read it ({type(err).__name__})") from None
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def directions(folder: Path) -> dict[str, bool]:
    """{"eval/<task>/<metric>": whether higher is better}, asked of the metrics of the tasks in
    the run's `.hydra/config.yaml`; a metric not found there (no config, a metric of a module
    that cannot be imported here) counts as higher-is-better."""
    try:
        config = yaml.safe_load((folder / ".hydra" / "config.yaml").read_text()) or {}
        return metric_directions(config.get("task") or {})
    except (OSError, yaml.YAMLError, MtlError, AttributeError, KeyError, TypeError):
        return {}


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pairs = [(row["step"], row[key]) for row in rows if key in row and row[key] is not None]
    return [s for s, _ in pairs], [v for _, v in pairs]


def keys_with(rows: list[dict], prefix: str) -> list[str]:
    """The logged keys that start with `prefix`, in the order they first appear."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key.startswith(prefix):
                seen.setdefault(key)
    return list(seen)


def eval_tasks(keys: list[str]) -> dict[str, list[str]]:
    """`eval/<task>/<metric>` keys -> {task: [metrics, the main (first) one first]}."""
    tasks: dict[str, list[str]] = {}
    for key in keys:
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "eval":
            tasks.setdefault(parts[1], []).append(parts[2])
    return tasks


# -- a run -----------------------------------------------------------------------------------------


def run_figures(rows: list[dict], higher: dict[str, bool] | None = None) -> dict[str, Figure]:
    """The run's figures by file stem; each panel's title names the key it plots. `higher`:
    each dev metric's direction (`directions`; unlisted: higher is better)."""
    tasks = [key.removeprefix("share/") for key in keys_with(rows, "share/")]
    figures = {
        "report_shares": shares_figure(rows, tasks),
        "report_losses": losses_figure(rows, tasks),
        "report_throughput": throughput_figure(rows),
    }
    evals = eval_tasks(keys_with(rows, "eval/"))
    if evals:
        figures["report_dev"] = dev_figure(rows, evals, higher or {})
    if keys_with(rows, "grad_norm/"):
        figures["report_interaction"] = interaction_figure(rows)
    if keys_with(rows, "mix_policy/"):
        figures["report_mixing"] = mixing_figure(rows, tasks)
    return figures


def grid(n: int, title: str, cols: int = 3) -> tuple[Figure, list]:
    cols = min(cols, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(PANEL_W * cols, PANEL_H * rows + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(title, fontsize=13)
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(n)]
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig, axes


def shares_figure(rows: list[dict], tasks: list[str]) -> Figure:
    fig, axes = grid(len(tasks), "Task shares of the batches (rows for mixup) against the target")
    for ax, task in zip(axes, tasks, strict=True):
        steps, window = series(rows, f"share/{task}")
        ax.plot(
            steps,
            window,
            ls="none",
            marker="o",
            ms=3,
            alpha=0.4,
            color="tab:blue",
            label="logged window",
        )
        ax.plot(*series(rows, f"share_total/{task}"), color="tab:blue", lw=2, label="since start")
        planned_steps, planned = series(rows, f"share_target_total/{task}")
        if planned:  # the target over the same span as the line beside it
            ax.plot(planned_steps, planned, color="tab:red", lw=1.5, label="target since start")
        target_steps, target = series(rows, f"share_target/{task}")
        if target:
            style = {"color": "tab:red", "ls": "--", "lw": 1, "alpha": 0.6}
            ax.plot(target_steps, target, **style, label="this epoch's target")
        weight_steps, weights = series(rows, f"mix_weight/{task}")
        if weights:
            ax.plot(weight_steps, weights, color="tab:green", ls=":", lw=1.5, label="mix weight")
        ax.set_title(task)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("share")
    handles, _ = axes[0].get_legend_handles_labels()
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8)
    return fig


def mixing_figure(rows: list[dict], tasks: list[str]) -> Figure:
    """`loader.online`: each task's figure in the policy (exp3's smoothed reward, loss_softmax's
    loss, dev_gap's gap) and the weight it gave (right-hand axis)."""
    fig, axes = grid(len(tasks), "Online mixing: the policy's figure per task and its weight")
    for ax, task in zip(axes, tasks, strict=True):
        lines = ax.plot(
            *series(rows, f"mix_policy/{task}"),
            marker=".",
            ms=4,
            lw=1.2,
            color="tab:orange",
            label="policy's figure",
        )
        right = ax.twinx()
        lines += right.plot(
            *series(rows, f"mix_weight/{task}"),
            color="tab:green",
            ls=":",
            lw=1.5,
            label="mix weight",
        )
        right.set_ylim(-0.02, 1.02)
        right.set_ylabel("weight")
        ax.set_title(task)
        ax.set_ylabel("policy's figure")
    fig.legend(handles=lines, loc="outside lower center", ncol=2, fontsize=8)
    return fig


def losses_figure(rows: list[dict], tasks: list[str]) -> Figure:
    fig, axes = grid(len(tasks) + 1, "Training loss per task (mean over each logged window)")
    for ax, key in zip(axes, [*(f"loss/{t}" for t in tasks), "loss"], strict=True):
        steps, values = series(rows, key)
        ax.plot(steps, values, marker=".", ms=4, lw=1, color="tab:purple")
        ax.set_title("all tasks" if key == "loss" else key.removeprefix("loss/"))
        ax.set_ylabel("loss")
    return fig


def dev_figure(rows: list[dict], evals: dict[str, list[str]], higher: dict[str, bool]) -> Figure:
    fig, axes = grid(len(evals), "Dev metrics at each evaluation")
    for ax, (task, metrics) in zip(axes, evals.items(), strict=True):
        # Lower-is-better metrics (errors, losses) have scales of their own: a right-hand axis.
        lower = [m for m in metrics if not higher.get(f"eval/{task}/{m}", True)]
        right = ax.twinx() if lower and len(lower) < len(metrics) else None
        lines = []
        for i, metric in enumerate(metrics):
            on = right if right is not None and metric in lower else ax
            steps, values = series(rows, f"eval/{task}/{metric}")
            label = f"{metric} (lower is better{', right' if on is right else ''})"
            lines += on.plot(
                steps,
                values,
                ms=4,
                lw=1.2,
                color=f"C{i}",
                marker="s" if metric in lower else "o",
                mfc="none" if metric in lower else None,
                ls="--" if metric in lower else "-",
                label=label if metric in lower else metric,
            )
        if right is not None:  # the main metrics over the right-hand axis, not under it
            ax.set_zorder(right.get_zorder() + 1)
            ax.patch.set_visible(False)
        ax.set_title(f"{task} (main: {metrics[0]})")
        legend_below(ax, lines, ncol=min(len(lines), 3))
    return fig


def throughput_figure(rows: list[dict]) -> Figure:
    fig, (pad, speed) = grid(2, "Throughput")
    pad.plot(*series(rows, "padding_efficiency"), marker=".", ms=3, lw=1, color="tab:green")
    pad.set_title("padding efficiency (real tokens / padded tokens)")
    pad.set_ylim(0, 1.02)
    speed.plot(*series(rows, "tokens_per_s"), marker=".", ms=3, lw=1, color="tab:orange")
    speed.set_title("real tokens per second")
    speed.set_ylim(bottom=0)
    return fig


# -- a sweep ---------------------------------------------------------------------------------------


def sweep_jobs(folder: Path) -> list[Path]:
    jobs = [
        p
        for p in folder.iterdir()
        if p.is_dir() and ((p / "metrics.jsonl").is_file() or (p / "results.json").is_file())
    ]
    return sorted(jobs, key=lambda p: (not p.name.split("_")[0].isdigit(), _num(p.name), p.name))


def _num(name: str) -> int:
    head = name.split("_")[0]
    return int(head) if head.isdigit() else 0


def job_labels(jobs: list[Path]) -> list[str]:
    """Each job's overrides that differ between the jobs (all of them if none differ)."""
    overrides = []
    for job in jobs:
        path = job / ".hydra" / "overrides.yaml"
        items = yaml.safe_load(path.read_text()) if path.is_file() else None
        overrides.append([str(o) for o in items or []])
    varying = {o for items in overrides for o in items if not all(o in x for x in overrides)}
    labels = []
    for job, items in zip(jobs, overrides, strict=True):
        chosen = [o for o in items if o in varying] or items
        labels.append(", ".join(chosen) or job.name)
    return labels


def job_figures(job: Path) -> tuple[float, str, dict[str, float]]:
    """(monitored value, what it is, the dev figures it comes from) of one job, as the sweep
    summary states it (`mtl.reporting.sweep.monitored`); a job without `results.json` is read
    at its last evaluation. NaN when the job has no evaluation."""
    results_path = job / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    if not results and (job / "metrics.jsonl").is_file():
        rows = read_rows(job / "metrics.jsonl")
        evals = [row for row in rows if any(k.startswith("eval/") for k in row)]
        results = evals[-1] if evals else {}
    config_path = job / ".hydra" / "config.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else None
    found = monitored(results, config if isinstance(config, dict) else None)
    value = float("nan") if found.value is None else float(found.value)
    return value, found.what, task_figures(found.figures)


def task_figures(figures: dict) -> dict[str, float]:
    """The `eval/<task>/<metric>` items (not aggregates such as `eval/mean`)."""
    return {k: v for k, v in figures.items() if k.startswith("eval/") and k.count("/") == 2}


def sweep_figures(folder: Path) -> dict[str, Figure]:
    jobs = sweep_jobs(folder)
    labels = job_labels(jobs)
    found = [job_figures(job) for job in jobs]
    higher = {key: up for job in jobs for key, up in directions(job).items()}
    return {
        "report_sweep_monitor": monitor_figure(labels, found, higher),
        "report_sweep_metrics": metrics_figure(labels, [f for _, _, f in found], higher),
    }


def monitor_figure(
    labels: list[str], found: list[tuple[float, str, dict]], higher: dict[str, bool]
) -> Figure:
    values = [v for v, _, _ in found]
    what = sorted({w for v, w, _ in found if not math.isnan(v)}) or ["no evaluation yet"]
    width = max(6.0, 4.0 + 0.07 * max(len(label) for label in labels))
    fig = Figure(figsize=(width, 1.2 + 0.4 * len(labels)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    lower = any(not higher.get(w.split(" ")[0], True) for w in what)
    finite = [v for v in values if not math.isnan(v)]
    best = (min if lower else max)(finite) if finite else None
    colors = ["tab:green" if v == best else "tab:blue" for v in values]
    y = list(range(len(labels)))
    ax.barh(y, [0 if math.isnan(v) else v for v in values], color=colors)
    for i, v in enumerate(values):
        ax.text(
            0 if math.isnan(v) else v,
            i,
            " no evaluation" if math.isnan(v) else f" {v:.4f}",
            va="center",
            fontsize=9,
        )
    ax.set_yticks(y, labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, (max(finite) if finite else 1) * 1.18)
    ax.set_xlabel(" / ".join(what))
    ax.set_title(f"Monitored value per job ({'lower' if lower else 'higher'} is better)")
    ax.grid(axis="x", alpha=0.3)
    return fig


def metrics_figure(
    labels: list[str], figures: list[dict[str, float]], higher: dict[str, bool]
) -> Figure:
    """Jobs x (task, metric): each cell's value, coloured between its column's worst and best."""
    import numpy as np

    columns = list(dict.fromkeys(k for f in figures for k in f))
    names = [c.removeprefix("eval/").replace("/", "\n") for c in columns]
    values = np.array([[f.get(c, np.nan) for c in columns] for f in figures], dtype=float)
    shade = np.full_like(values, np.nan)
    for j, column in enumerate(columns):
        col = values[:, j]
        lo, hi = np.nanmin(col) if np.isfinite(col).any() else 0, np.nanmax(col, initial=-np.inf)
        scaled = (col - lo) / (hi - lo) if hi > lo else np.full_like(col, 0.5)
        shade[:, j] = scaled if higher.get(column, True) else 1 - scaled
    width = max(6.0, 2.5 + 0.07 * max(len(label) for label in labels) + 1.0 * len(columns))
    fig = Figure(figsize=(width, 1.8 + 0.45 * len(labels)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(shade), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            text = "-" if np.isnan(values[i, j]) else f"{values[i, j]:.3f}"
            dark = not np.isnan(shade[i, j]) and shade[i, j] < 0.6
            ax.text(
                j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black"
            )
    ax.set_xticks(range(len(columns)), names, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(labels)), labels, fontsize=9)
    ax.set_title("Dev metrics per job (colour: from the column's worst, dark, to its best, bright)")
    fig.colorbar(image, ax=ax, shrink=0.8, label="worst → best in column", ticks=[])
    return fig


# -- command ---------------------------------------------------------------------------------------


def report(folder: str | Path) -> list[Path]:
    """Draw the figures of a run or sweep folder into it; returns their paths."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MtlError(f"{folder} is not a folder; pass a run folder or a sweep folder")
    if (folder / "metrics.jsonl").is_file():
        rows = read_rows(folder / "metrics.jsonl")
        if not any("loss" in row for row in rows):
            raise MtlError(f"{folder / 'metrics.jsonl'} has no logged training step yet")
        figures = run_figures(rows, directions(folder))
    elif sweep_jobs(folder):
        figures = sweep_figures(folder)
    else:
        raise MtlError(
            f"{folder} is neither a run folder (with metrics.jsonl) nor a sweep folder (job "
            "folders with metrics.jsonl or results.json); pass outputs/runs/<day>/<time> or "
            "outputs/multirun/<day>/<time>"
        )
    # report_*.png are mtl-report's own names: drawing again replaces them, each whole; a
    # folder of that name (or the current folder) is refused before any figure is written
    paths = [check_target(folder / f"{stem}.png", overwrite=True) for stem in figures]
    for path, fig in zip(paths, figures.values(), strict=True):
        write_file(path, lambda f, fig=fig: fig.savefig(f, format="png", dpi=110), overwrite=True)
    return paths
