"""mtl-report figures, the W&B workspace spec and the W&B run summaries, on a real tiny run."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import yaml
from matplotlib.colors import to_rgba

from mtl.cli.report import main
from mtl.cli.workspace import main as workspace_main
from mtl.reporting import workspace
from mtl.reporting.figures import (
    directions,
    job_figures,
    read_rows,
    report,
    run_figures,
    sweep_figures,
)
from mtl.training.loop import run
from mtl.training.tracking.wandb_file import records

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["synthetic_cls", "synthetic_tag", "synthetic_reg"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, compose_cfg) -> Path:
    """A real tiny run with the W&B tracker (offline), evaluated every 2 of its 8 steps."""
    out = tmp_path_factory.mktemp("report") / "run"
    overrides = [
        "debug=fast",
        f"task=[{','.join(TASKS)}]",
        "logger=wandb",
        "trainer.max_steps=8",
        "trainer.eval_every=2",
        f"output_dir={out}",
    ]
    cfg = compose_cfg(*overrides)
    run(cfg)
    hydra = out / ".hydra"  # what Hydra writes next to a run launched by train.py
    hydra.mkdir()
    from omegaconf import OmegaConf

    (hydra / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (hydra / "overrides.yaml").write_text(yaml.safe_dump(overrides[:-1]))
    return out


def logged_keys(run_dir: Path) -> set[str]:
    return {key for row in read_rows(run_dir / "metrics.jsonl") for key in row}


def test_run_report_writes_a_png_per_concern(run_dir, capsys):
    main([str(run_dir)])
    printed = capsys.readouterr().out.split()
    names = {"report_shares", "report_losses", "report_dev", "report_throughput"}
    names.add("report_interaction")  # diagnostics run at each evaluation by default
    assert {Path(p).stem for p in printed} == names
    for path in map(Path, printed):
        assert path.parent == run_dir and path.stat().st_size > 10_000
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_figures_plot_each_tasks_logged_shares_and_dev_metrics(run_dir):
    rows = read_rows(run_dir / "metrics.jsonl")
    higher = directions(run_dir)  # asked of the run's task types, through .hydra/config.yaml
    assert higher["eval/synthetic_reg/mse"] is False and higher["eval/synthetic_cls/accuracy"]
    figures = run_figures(rows, higher)
    shares = figures["report_shares"].axes
    assert [ax.get_title() for ax in shares] == TASKS
    for ax, task in zip(shares, TASKS, strict=True):
        window, total, planned, target, weight = ax.get_lines()
        assert (planned.get_label(), target.get_label()) == (
            "target since start",
            "this epoch's target",
        )
        logged = [row for row in rows if f"share_total/{task}" in row]
        assert list(weight.get_ydata()) == [row[f"mix_weight/{task}"] for row in logged]
        assert list(total.get_xdata()) == [row["step"] for row in logged]
        assert list(total.get_ydata()) == [row[f"share_total/{task}"] for row in logged]
        assert list(target.get_ydata()) == [row[f"share_target/{task}"] for row in logged]
        assert list(planned.get_ydata()) == [row[f"share_target_total/{task}"] for row in logged]
        assert list(window.get_ydata()) == [row[f"share/{task}"] for row in logged]
    assert len(figures["report_losses"].axes) == len(TASKS) + 1
    # One panel per task; regression's mse (lower is better) gets a right-hand axis of its own.
    dev = figures["report_dev"].axes
    assert len(dev) == len(TASKS) + 1
    evals = [row for row in rows if "eval/synthetic_reg/mse" in row]
    mse = next(line for ax in dev for line in ax.get_lines() if "mse" in line.get_label())
    assert list(mse.get_ydata()) == [row["eval/synthetic_reg/mse"] for row in evals]
    assert mse.get_label() == "mse (lower is better, right)"
    assert len(evals) == 4
    # without directions every metric counts as higher-is-better: no right-hand axis
    assert len(run_figures(rows)["report_dev"].axes) == len(TASKS)


def test_run_figures_keep_legends_and_labels_clear_of_each_other(run_dir):
    """As drawn in the PNG: every panel with its tick labels inside the figure, no legend over
    a panel, an axis label or a title, no colour bar's label against the next panel."""
    figures = run_figures(read_rows(run_dir / "metrics.jsonl"), directions(run_dir))
    for name, fig in figures.items():
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        inside = fig.bbox.expanded(1.001, 1.001)
        for ax in fig.axes:
            drawn = ax.get_tightbbox(renderer)  # with its tick labels, axis labels, title
            assert _within(drawn, inside), (name, ax.get_title(), drawn)
        texts = [t for ax in fig.axes for t in (ax.xaxis.label, ax.yaxis.label, ax.title)]
        boxes = [t.get_window_extent(renderer) for t in texts if t.get_text()]
        boxes += [ax.get_window_extent(renderer) for ax in fig.axes]
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + fig.legends
        for legend in legends:
            frame = legend.get_window_extent(renderer)
            assert _within(frame, inside), name
            assert not [b for b in boxes if frame.overlaps(b)], (name, legend.texts[0].get_text())
        bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
        panels = [ax.get_tightbbox(renderer) for ax in fig.axes if ax not in bars]
        for bar in bars:
            label = bar.yaxis.label.get_window_extent(renderer)
            assert not [p for p in panels if label.overlaps(p) or 0 <= p.x0 - label.x1 < 8], name


def _within(box, outer) -> bool:
    return box.x0 >= outer.x0 and box.x1 <= outer.x1 and box.y0 >= outer.y0 and box.y1 <= outer.y1


def test_sweep_figures_ask_each_metric_which_way_is_better(tmp_path):
    a = {"eval/b/pearson": 0.3, "eval/b/mse": 2.0}
    b = {"eval/b/pearson": 0.4, "eval/b/mse": 1.0}
    for i, figures in enumerate([a, b]):
        job = tmp_path / f"{i}_seed={i}"
        write_job(job, [f"seed={i}"], [figures], {"monitor": "eval/b/mse", "best": figures})
        config = {"task": {"b": {"type": "regression", "metrics": ["pearson", "mse"]}}}
        (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    figures = sweep_figures(tmp_path)
    bars = figures["report_sweep_monitor"].axes[0]
    assert "lower is better" in bars.get_title()
    assert [p.get_facecolor() for p in bars.patches][1] == to_rgba("tab:green")  # mse 1.0
    shade = figures["report_sweep_metrics"].axes[0].images[0].get_array()
    assert shade[:, 0].tolist() == [0.0, 1.0]  # pearson: the higher, the better
    assert shade[:, 1].tolist() == [0.0, 1.0]  # mse: the lower, the better


def write_job(folder: Path, overrides: list[str], evals: list[dict], results: dict | None):
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    rows = [{"step": 1, "loss": 1.0, "share/a": 1.0}]
    rows += [{"step": 2 * (i + 1), **figures} for i, figures in enumerate(evals)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if results is not None:
        (folder / "results.json").write_text(json.dumps(results))


def test_sweep_report_bars_the_monitored_value_of_each_job(tmp_path):
    early = {"eval/a/accuracy": 0.5, "eval/a/f1": 0.1, "eval/b/pearson": 0.3, "eval/b/mse": 2.0}
    late = {"eval/a/accuracy": 0.7, "eval/a/f1": 0.2, "eval/b/pearson": 0.4, "eval/b/mse": 1.0}
    best = {"eval/mean": 0.65, **early}
    write_job(tmp_path / "0_loader=random", ["loader=random", "seed=1"], [early, late],
              {"monitor": "eval/mean", "best_step": 2, "best": best, **late})  # fmt: skip
    write_job(tmp_path / "1_loader=mixup", ["loader=mixup", "seed=1"], [late, early], None)
    write_job(tmp_path / "2_loader=round_robin", ["loader=round_robin", "seed=1"], [], None)
    (tmp_path / "multirun.yaml").write_text("{}")

    values = [job_figures(job)[0] for job in sorted(p for p in tmp_path.iterdir() if p.is_dir())]
    assert values[0] == 0.65  # results.json: best[monitor]
    assert values[1] == pytest.approx((0.5 + 0.3) / 2)  # each task's first metric, last eval
    assert values[2] != values[2]  # no evaluation: NaN

    figures = sweep_figures(tmp_path)
    bars = figures["report_sweep_monitor"].axes[0]
    assert [t.get_text() for t in bars.get_yticklabels()] == [
        "loader=random",
        "loader=mixup",
        "loader=round_robin",
    ]
    assert [p.get_width() for p in bars.patches] == pytest.approx([0.65, 0.4, 0.0])
    table = figures["report_sweep_metrics"].axes[0]
    cells = [t.get_text() for t in table.texts]
    assert cells[:4] == ["0.500", "0.100", "0.300", "2.000"]  # job 0 at its best step
    assert cells[4:8] == ["0.500", "0.100", "0.300", "2.000"]  # job 1 at its last evaluation
    assert cells[8:] == ["-"] * 4

    paths = report(tmp_path)
    assert [p.name for p in paths] == ["report_sweep_monitor.png", "report_sweep_metrics.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)


@pytest.mark.parametrize("make", ["missing", "empty", "no_jobs"])
def test_a_folder_that_is_neither_gives_one_line(tmp_path, make, capsys):
    folder = tmp_path / "x"
    if make != "missing":
        folder.mkdir()
    if make == "no_jobs":
        (folder / "notes").mkdir()
        (folder / "notes" / "a.txt").write_text("x")
    with pytest.raises(SystemExit) as stop:
        main([str(folder)])
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtl: error: ") and str(folder) in lines[0]
    assert out == ""


def workspace_script(*args: str) -> dict:
    """`mtl-workspace entity=e project=p dry_run=true *args` in this process: the spec it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        workspace_main(["entity=e", "project=p", "dry_run=true", *args])
    return json.loads(out.getvalue())


def load_script():
    return workspace


def test_workspace_panels_plot_only_keys_the_trainer_logs(run_dir):
    script = load_script()
    spec = workspace_script(f"run={run_dir}")
    keys = script.spec_keys(spec)
    assert not keys["regex"]
    logged = logged_keys(run_dir)
    assert keys["history"] <= logged, keys["history"] - logged
    config = script.flat(yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text()))
    assert keys["config"] and keys["config"] <= set(config)
    for task in TASKS:
        assert {f"share/{task}", f"share_target/{task}", f"eval/{task}/accuracy"} & keys["history"]
    assert {k for k in logged if k.startswith("eval/")} <= keys["history"]
    names = [s["name"] for s in spec["sections"]]
    assert len(names) == 6 and names[-1] == "Sweep comparison"

    workspace = script.build_workspace(spec)  # wandb-workspaces objects, no network
    assert [len(s.panels) for s in workspace.sections] == [
        len(s["panels"]) for s in spec["sections"]
    ]


def test_workspace_from_task_names_matches_dev_metrics_by_pattern(run_dir):
    spec = workspace_script(f"tasks=[{','.join(TASKS)}]")
    keys = load_script().spec_keys(spec)
    logged = logged_keys(run_dir)
    assert keys["history"] <= logged
    for pattern in keys["regex"]:
        assert any(re.search(pattern, key) for key in logged), pattern
    assert len(keys["regex"]) == len(TASKS)


def test_wandb_summary_holds_the_best_dev_value_and_the_lowest_loss(run_dir):
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    summary, job_type = {}, None
    for payload in records(path):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "run":
            job_type = record.run.job_type
    assert job_type == "train"
    rows = read_rows(run_dir / "metrics.jsonl")
    for key in logged_keys(run_dir) - {"step"}:
        values = [row[key] for row in rows if key in row]
        if key.endswith("/mse") or key == "loss" or key.startswith("loss/"):
            assert summary[key] == {"min": pytest.approx(min(values)), "last": values[-1]}, key
        elif key.startswith("eval/"):
            assert summary[key] == {"max": pytest.approx(max(values)), "last": values[-1]}, key
        else:
            assert summary[key] == {"last": pytest.approx(values[-1])}, key


def test_report_again_replaces_its_figures_and_writes_nothing_else(run_dir, tmp_path, capsys):
    import shutil

    folder = shutil.copytree(run_dir, tmp_path / "run")
    main([str(folder)])
    first = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    main([str(folder)])
    printed = capsys.readouterr().out.split()
    # five figures per report: the four concerns and the task interaction
    assert len(printed) == 10 and {p.name for p in folder.iterdir()} == set(first)
    assert all(first[Path(p).name] < Path(p).stat().st_mtime_ns for p in printed[5:])


@pytest.mark.parametrize("bad", ["figure name is a folder", "metrics not utf-8"])
def test_report_bad_run_folders_are_one_line_and_change_nothing(run_dir, tmp_path, capsys, bad):
    import shutil

    folder = shutil.copytree(run_dir, tmp_path / "run")
    if bad == "figure name is a folder":
        (folder / "report_dev.png").unlink(missing_ok=True)  # drawn by an earlier test
        (folder / "report_dev.png").mkdir()
        (folder / "report_dev.png" / "mine.txt").write_text("keep")
    else:
        (folder / "metrics.jsonl").write_bytes(b"\xff\xfe\x00not text")
    before = {p.relative_to(tmp_path): p.read_bytes() if p.is_file() else None
              for p in tmp_path.rglob("*")}  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        main([str(folder)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("mtl: error: ") and err.count("\n") == 1
    after = {p.relative_to(tmp_path): p.read_bytes() if p.is_file() else None
             for p in tmp_path.rglob("*")}  # fmt: skip
    assert after == before
