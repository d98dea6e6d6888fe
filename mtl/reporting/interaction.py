"""`report_interaction.png`: the task-interaction diagnostics of a run (`mtl.training.diagnostics`).

Six panels: the gradient cosine matrix and the lookahead affinity matrix at the last diagnosed
step (row a, column b: `grad_cos/<a>/<b>`, symmetric; `affinity/<a>/<b>`, how a step on a
changes b's loss), each over time (one line per pair), the task weights the balancer gave
(`task_weight/<t>`) and the gradient norms on the shared encoder (`grad_norm/<t>`).
"""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import offset_copy


def last_row_with(rows: list[dict], prefix: str) -> dict:
    """The last logged row that holds keys starting with `prefix` ({} if none)."""
    for row in reversed(rows):
        if any(key.startswith(prefix) for key in row):
            return row
    return {}


def interaction_tasks(rows: list[dict]) -> list[str]:
    """The diagnosed tasks, in logging order (from `grad_norm/<t>`)."""
    return [
        k.removeprefix("grad_norm/")
        for k in last_row_with(rows, "grad_norm/")
        if k.startswith("grad_norm/")
    ]


def matrix(row: dict, prefix: str, tasks: list[str], symmetric: bool) -> np.ndarray:
    values = np.full((len(tasks), len(tasks)), np.nan)
    for i, a in enumerate(tasks):
        if symmetric:
            values[i, i] = 1.0
        for j, b in enumerate(tasks):
            if f"{prefix}{a}/{b}" in row:
                values[i, j] = row[f"{prefix}{a}/{b}"]
                if symmetric:
                    values[j, i] = values[i, j]
    return values


def draw_matrix(
    ax, values: np.ndarray, tasks: list[str], title: str, limit: float, unit: str
) -> None:
    image = ax.imshow(values, cmap="coolwarm", vmin=-limit, vmax=limit)
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(tasks)), tasks, fontsize=8)
    for (i, j), value in np.ndenumerate(values):
        if not np.isnan(value):
            ax.text(j, i, f"{value:.2g}", ha="center", va="center", fontsize=8)
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label=unit)


def legend_below(ax, handles: list | None = None, ncol: int = 2) -> None:
    """The panel's legend under its x-axis label (a fixed distance below the axes, whatever
    the panel's height), where it covers neither the lines nor the label; the figure's
    constrained layout makes room for it."""
    below = offset_copy(ax.transAxes, fig=ax.figure, y=-0.5, units="inches")
    ax.legend(
        handles=handles,
        fontsize=7.5,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        bbox_transform=below,
        ncol=ncol,
        borderaxespad=0,
    )


def draw_lines(ax, rows: list[dict], prefix: str, title: str, unit: str) -> None:
    keys = list(dict.fromkeys(k for row in rows for k in row if k.startswith(prefix)))
    for key, style in zip(keys, line_styles(len(keys)), strict=True):
        pairs = [(r["step"], r[key]) for r in rows if key in r]
        ax.plot(*zip(*pairs, strict=True), ms=3, lw=1, label=key.removeprefix(prefix), **style)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(unit)
    ax.grid(alpha=0.3)
    if keys:
        legend_below(ax, ncol=1 if len(keys) > 4 else 2)


def line_styles(n: int) -> list[dict]:
    """A distinct look for each of `n` lines: 20 colours that do not repeat (tab20's dark and
    light pairs), then the same colours again with another marker and dash."""
    colours = [colormaps["tab20"](i) for i in range(0, 20, 2)]
    colours += [colormaps["tab20"](i) for i in range(1, 20, 2)]
    looks = [("o", "-"), ("s", "--"), ("^", ":")]
    return [
        {"color": colours[i % 20], "marker": looks[i // 20 % 3][0], "ls": looks[i // 20 % 3][1]}
        for i in range(n)
    ]


def interaction_figure(rows: list[dict]) -> Figure:
    tasks = interaction_tasks(rows)
    fig = Figure(figsize=(15, 10), layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle("Task interaction on the shared encoder, and the balancer's weights", fontsize=13)
    axes = [fig.add_subplot(2, 3, i + 1) for i in range(6)]
    last = last_row_with(rows, "grad_cos/")
    step = last.get("step", "?")
    cosine = matrix(last, "grad_cos/", tasks, True)
    draw_matrix(
        axes[0],
        cosine,
        tasks,
        f"gradient cosine (step {step})",
        1.0,
        "cosine (< 0: the gradients conflict)",
    )
    affinity = matrix(last_row_with(rows, "affinity/"), "affinity/", tasks, False)
    limit = float(np.nanmax(np.abs(affinity))) if np.isfinite(affinity).any() else 1.0
    draw_matrix(
        axes[1],
        affinity,
        tasks,
        f"affinity: row's step on column (step {step})",
        limit or 1.0,
        "relative loss change: 1 - L_col after / L_col before",
    )
    draw_lines(axes[2], rows, "task_weight/", "task weights", "weight")
    draw_lines(axes[3], rows, "grad_cos/", "gradient cosine over time", "cosine")
    draw_lines(axes[4], rows, "affinity/", "affinity over time", "1 - L after / L before")
    draw_lines(axes[5], rows, "grad_norm/", "gradient norm on the encoder", "L2 norm")
    fig.get_layout_engine().set(w_pad=0.12, wspace=0.06)  # colour bars clear of the next panel
    return fig
