"""Build a W&B workspace for mtl runs: one section per concern, every panel on a logged key.

    mtl-workspace entity=E project=P run=outputs/runs/<day>/<time>
    mtl-workspace entity=E project=P run=outputs/multirun/<day>/<time>
    mtl-workspace entity=E project=P tasks=[a,b,c] dry_run=true

(the command: `mtl.cli.workspace`; the spec: `folder_spec`, saved by `save_workspace`)

Sections: task shares (one panel per task: `share/<t>`, `share_total/<t>`,
`share_target_total/<t>`, `share_target/<t>`,
`mix_weight/<t>`), online mixing where a run has `loader.online` (`mix_policy/<t>`: the
policy's figure, beside its weight),
losses (`loss/<t>`, `loss`), dev metrics (one panel per task: `eval/<t>/<metric>`), throughput
and padding, task interaction and balancing (`grad_norm/<t>`, `grad_cos/<a>/<b>`,
`affinity/<a>/<b>`, `task_weight/<t>`: `mtl.training.diagnostics`), and a sweep comparison
(a parallel-coordinates plot of the swept parameters and the monitored value, and the
monitored value against each parameter). Every line plot's x-axis
is `step`, the optimizer step mtl logs with every figure.

`run=` reads the task names, their metrics and the swept parameters from a run folder
(`.hydra/config.yaml`, `metrics.jsonl`) or a sweep folder (its jobs' overrides); `tasks=` names
the tasks alone (dev panels then match `eval/<t>/.*`). The monitored value: `monitor=`, else
the `monitor` of the run's `results.json`, else each task's main dev metric. Its best value is
the run summary's `<key>.max` (`.min` for losses and for metrics that declare lower values
better, asked of the run's task types; see `mtl.training.tracking.logger.summary_of`).

`dry_run=true` prints the spec as JSON and touches no network. Without it the spec is built with
`wandb-workspaces` (`pip install 'mtl-train[dashboards]'`) and saved as a new view of the project
(`wandb login` first); the view's URL is printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from mtl.config import flat
from mtl.config.checks import has_wandb_credentials
from mtl.errors import MtlError
from mtl.task_types import metric_directions, task_type_class
from mtl.training.diagnostics import diagnostic_keys
from mtl.training.tracking.logger import summary_of

DEFAULT_PARAMS = ["loader._target_", "sampler._target_", "trainer.lr"]


# -- what a run logs -------------------------------------------------------------------------------


def task_metrics(config: dict) -> dict[str, list[str]]:
    """Each task's dev metrics (the main one first), from the task's config and its type."""
    tasks = {}
    for name, task in config.get("task", {}).items():
        metrics = task.get("metrics")
        if not metrics:
            metrics = list(task_type_class(task["type"], name).default_metrics)
        tasks[name] = [m.rsplit(".", 1)[-1] for m in metrics]
    return tasks


def read_folder(folder: Path) -> dict:
    """Tasks, their metrics, the swept parameters and the monitored key of a run/sweep folder."""
    jobs = (
        [folder]
        if (folder / ".hydra").is_dir()
        else sorted(p for p in folder.iterdir() if (p / ".hydra" / "config.yaml").is_file())
    )
    if not jobs:
        raise MtlError(
            f"{folder} holds no .hydra/config.yaml (nor job folders with one); pass a run "
            "folder (outputs/runs/<day>/<time>) or a sweep folder (outputs/multirun/...)"
        )
    config = yaml.safe_load((jobs[0] / ".hydra" / "config.yaml").read_text())
    overrides = [
        yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()) or []
        if (job / ".hydra" / "overrides.yaml").is_file()
        else []
        for job in jobs
    ]
    swept = [o for o in overrides[0] if len(jobs) == 1 or any(o not in x for x in overrides)]
    keys = [o.split("=", 1)[0].lstrip("+~") for o in swept if "=" in o]
    results = jobs[0] / "results.json"
    monitor = json.loads(results.read_text()).get("monitor") if results.is_file() else None
    return {
        "tasks": task_metrics(config),
        "higher": metric_directions(config.get("task") or {}),
        "params": config_keys(keys, flat(config)) or config_keys(DEFAULT_PARAMS, flat(config)),
        "monitor": monitor,
        "online": any(mixes_online(job) for job in jobs),
    }


def mixes_online(job: Path) -> bool:
    """Whether the job's loader has `loader.online`."""
    config = yaml.safe_load((job / ".hydra" / "config.yaml").read_text()) or {}
    return bool((config.get("loader") or {}).get("online"))


def config_keys(keys: list[str], config: dict) -> list[str]:
    """Override keys as W&B config keys: a scalar as is, a config group by its `_target_`;
    keys with no scalar in the config (task lists, presets) are left out."""
    out = []
    for key in keys:
        if key.startswith(("hydra.", "output_dir", "task", "debug", "experiment")):
            continue
        if key in config:
            out.append(key)
        elif f"{key}._target_" in config:
            out.append(f"{key}._target_")
    return list(dict.fromkeys(out))


# -- the spec --------------------------------------------------------------------------------------


def line(title: str, keys: list[str] | None = None, regex: str | None = None) -> dict:
    panel = {"type": "line", "title": title, "x": "step"}
    if keys is not None:
        panel["y"] = keys
    if regex is not None:
        panel["metric_regex"] = regex
    return panel


def best(key: str, higher: dict[str, bool] | None = None) -> dict:
    """A summary column: the run's best value of a logged key (`higher`: dev metrics'
    directions, `mtl.task_types.metric_directions`; unlisted: higher is better)."""
    agg = "min" if summary_of(key, higher).startswith("min") else "max"
    return {"summary": key, "agg": agg}


def workspace_spec(
    entity: str,
    project: str,
    tasks: dict[str, list[str] | None],
    params: list[str],
    monitor: str | None = None,
    name: str = "mtl",
    higher: dict[str, bool] | None = None,
    online: bool = False,
) -> dict:
    """The workspace as plain data: sections of panels, each naming the keys it plots (with
    `online`, a section of the mixing policy's figure per task, `mix_policy/<t>`)."""
    share_keys = ("share", "share_total", "share_target_total", "share_target", "mix_weight")
    shares = [line(t, [f"{key}/{t}" for key in share_keys]) for t in tasks]
    losses = [line(t, [f"loss/{t}"]) for t in tasks] + [line("all tasks", ["loss"])]
    dev = [
        line(t, [f"eval/{t}/{m}" for m in metrics]) if metrics else line(t, regex=f"^eval/{t}/")
        for t, metrics in tasks.items()
    ]
    throughput = [
        line("padding efficiency", ["padding_efficiency"]),
        line("tokens per second", ["tokens_per_s"]),
        line("examples per second", ["examples_per_s"]),
        line("learning rate", ["lr"]),
    ]
    if monitor:
        watched = [monitor]
    else:
        watched = [f"eval/{t}/{m[0]}" for t, m in tasks.items() if m] or ["loss"]
    columns = [{"config": p} for p in params] + [best(k, higher) for k in watched]
    sweep = [{"type": "parallel_coordinates", "title": "swept parameters", "columns": columns}]
    sweep += [
        {
            "type": "scatter",
            "title": f"{watched[0]} vs {p}",
            "x": {"config": p},
            "y": best(watched[0], higher),
        }
        for p in params
    ]
    sections = [
        {"name": "Task shares (window, since start, target)", "panels": shares},
        {"name": "Losses", "panels": losses},
        {"name": "Dev metrics", "panels": dev},
        {"name": "Throughput and padding", "panels": throughput},
        {"name": "Task interaction and balancing", "panels": interaction_panels(list(tasks))},
        {"name": "Sweep comparison", "panels": sweep},
    ]
    if online:
        mixing = [line(t, [f"mix_policy/{t}", f"mix_weight/{t}"]) for t in tasks]
        sections.insert(
            1, {"name": "Online mixing (the policy's figure, weight)", "panels": mixing}
        )
    return {"entity": entity, "project": project, "name": name, "sections": sections}


def interaction_panels(tasks: list[str]) -> list[dict]:
    """Gradient norms, gradient cosines, the lookahead affinity of a step on each task, and the
    balancer's task weights (`mtl.training.diagnostics`)."""
    keys = diagnostic_keys(tasks)
    panels = [
        line("gradient norm on the encoder", [k for k in keys if k.startswith("grad_norm/")]),
        line("gradient cosine", [k for k in keys if k.startswith("grad_cos/")]),
    ]
    panels += [
        line(f"affinity: a step on {a}", [k for k in keys if k.startswith(f"affinity/{a}/")])
        for a in tasks
    ]
    return panels + [line("task weights", [k for k in keys if k.startswith("task_weight/")])]


def spec_keys(spec: dict) -> dict[str, set[str]]:
    """The logged keys (`history`, summary keys included) and config keys the spec plots."""
    history, config, regexes = set(), set(), set()

    def column(c: dict) -> None:
        (config if "config" in c else history).add(c.get("config") or c["summary"])

    for section in spec["sections"]:
        for panel in section["panels"]:
            if panel["type"] == "line":
                history.update([panel["x"], *panel.get("y", [])])
                if "metric_regex" in panel:
                    regexes.add(panel["metric_regex"])
            elif panel["type"] == "parallel_coordinates":
                for c in panel["columns"]:
                    column(c)
            else:
                column(panel["x"])
                column(panel["y"])
    return {"history": history, "config": config, "regex": regexes}


# -- wandb-workspaces ------------------------------------------------------------------------------


def build_workspace(spec: dict):
    """The spec as a `wandb_workspaces` Workspace (building it needs no network)."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    def metric(c: dict):
        if "config" in c:
            return wr.Config(c["config"])
        return wr.SummaryMetric(f"{c['summary']}.{c['agg']}")

    def panel(p: dict):
        if p["type"] == "line":
            return wr.LinePlot(
                title=p["title"], x=p["x"], y=p.get("y", []), metric_regex=p.get("metric_regex")
            )
        if p["type"] == "parallel_coordinates":
            columns = [wr.ParallelCoordinatesPlotColumn(metric=metric(c)) for c in p["columns"]]
            return wr.ParallelCoordinatesPlot(title=p["title"], columns=columns)
        return wr.ScatterPlot(title=p["title"], x=metric(p["x"]), y=metric(p["y"]))

    sections = [
        ws.Section(name=s["name"], panels=[panel(p) for p in s["panels"]], is_open=True)
        for s in spec["sections"]
    ]
    return ws.Workspace(
        entity=spec["entity"],
        project=spec["project"],
        name=spec["name"],
        sections=sections,
        settings=ws.WorkspaceSettings(x_axis="step"),
    )


def folder_spec(
    entity: str,
    project: str,
    run: str | Path | None = None,
    tasks: list[str] | None = None,
    params: list[str] | None = None,
    monitor: str | None = None,
    name: str = "mtl",
) -> dict:
    """The spec of a workspace for the runs of `run` (a run or sweep folder: its tasks, metrics,
    swept parameters and monitored key) or of the tasks named in `tasks` (one of the two)."""
    if (run is None) == (tasks is None):
        raise MtlError("give run=<run or sweep folder> or tasks=[a,b], one of the two")
    if run is not None:
        found = read_folder(Path(run))
    else:
        found = {"tasks": dict.fromkeys(tasks or []), "params": DEFAULT_PARAMS}
    return workspace_spec(
        entity,
        project,
        found["tasks"],
        params or found["params"],
        monitor or found.get("monitor"),
        name,
        found.get("higher"),
        bool(found.get("online")),
    )


def save_workspace(spec: dict) -> str:
    """Save the spec as a new view of its W&B project (`wandb-workspaces`); its URL. Without W&B
    credentials, or when W&B refuses the save, one line saying what to do."""
    if not has_wandb_credentials():
        raise MtlError(
            "saving a workspace to W&B needs your W&B credentials: run `wandb login` (or set "
            "WANDB_API_KEY), or give dry_run=true to print the workspace's spec instead"
        )
    try:
        workspace = build_workspace(spec)
    except ImportError:
        raise MtlError(
            "saving a workspace needs wandb-workspaces: pip install 'mtl-train[dashboards]'"
        ) from None
    try:
        return workspace.save().url
    except Exception as err:  # wandb's: a key it refuses, no network, no such entity or project
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise MtlError(
            f"W&B refused to save the workspace of {spec.get('entity')}/{spec.get('project')} "
            f"({type(err).__name__}: {detail}); check `wandb login`, the entity and the project, "
            "or give dry_run=true"
        ) from None
