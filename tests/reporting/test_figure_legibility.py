"""mtl-report's figures stay legible with many tasks: every line its own look, legends beside the
lines rather than over them, matrices with their unit, a right-hand axis under the main one."""

from __future__ import annotations

import pytest

from mtl.reporting.figures import dev_figure
from mtl.reporting.interaction import interaction_figure, line_styles

TASKS = ["a", "b", "c", "d"]


def rows() -> list[dict]:
    out = []
    for step in (10, 20, 30):
        row = {"step": step, "eval/r/pearson": step / 40, "eval/r/mse": 1 / step}
        for x in TASKS:
            row[f"grad_norm/{x}"] = step / 10
            for y in TASKS:
                if x != y:
                    row[f"affinity/{x}/{y}"] = 0.01 * step
                if x < y:
                    row[f"grad_cos/{x}/{y}"] = 0.1
        out.append(row)
    return out


@pytest.mark.parametrize("n", [12, 20, 45])
def test_every_line_has_its_own_look(n):
    looks = {(d["color"], d["marker"], d["ls"]) for d in line_styles(n)}
    assert len(looks) == n


def overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_the_affinity_legend_is_beside_its_lines_and_the_matrices_have_units():
    fig = interaction_figure(rows())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_legend() is not None]
    over_time = next(ax for ax in panels if ax.get_title().startswith("affinity over time"))
    assert len(over_time.get_lines()) == 12
    assert len({line.get_color() for line in over_time.get_lines()}) == 12
    for ax in panels:
        legend = ax.get_legend().get_window_extent(renderer)
        assert not overlaps(legend, ax.get_window_extent(renderer)), ax.get_title()
    units = [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert any("cosine" in u for u in units) and any("loss" in u for u in units)


def test_a_lower_is_better_metric_on_its_own_axis_lies_under_the_main_metric():
    fig = dev_figure(rows(), {"r": ["pearson", "mse"]}, {"eval/r/mse": False})
    main = next(ax for ax in fig.axes if ax.get_title().startswith("r "))
    right = next(ax for ax in fig.axes if ax is not main and ax.bbox.bounds == main.bbox.bounds)
    assert main.get_zorder() > right.get_zorder() and not main.patch.get_visible()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = main.get_legend().get_window_extent(renderer)
    assert not overlaps(legend, main.get_window_extent(renderer))
