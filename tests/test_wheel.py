"""The wheel on its own: built from a copy of the checkout, installed into a fresh venv outside
it, `mtl-train` and `mtl-predict` run from an empty folder (the configs come from the wheel),
and nothing in the checkout changes.

The fresh venv gets mtl from the wheel alone; the heavy dependencies (torch, transformers, ...)
come from this interpreter's site-packages through a `.pth` path line. Python does not process
`.pth` files of a folder added that way, so the editable install of mtl there stays out."""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Top-level entries of a checkout that are not the source (venvs, run folders, caches).
NOT_SOURCE = {".git", ".venv", "outputs", "multirun", "wandb", "build", ".cache"}
CACHES = {"__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache"}


def copy_source(target: Path) -> Path:
    def ignore(folder: str, names: list[str]) -> set[str]:
        top = NOT_SOURCE if Path(folder) == ROOT else set()
        skip = top | CACHES | {".import_linter_cache"}
        return {n for n in names if n in skip or n.endswith(".egg-info")}

    shutil.copytree(ROOT, target, ignore=ignore)
    return target


def checkout_files() -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file in the checkout, caches and the venv aside."""
    found = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in CACHES | {".git", ".venv", ".import_linter_cache"}]
        for name in files:
            stat = os.lstat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), ROOT)] = (
                stat.st_size,
                stat.st_mtime_ns,
            )
    return found


def run(args: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, f"{args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def fresh_venv(where: Path, wheel: Path, env: dict) -> Path:
    """A venv at `where` holding mtl from `wheel` only; its python."""
    run([sys.executable, "-m", "venv", "--without-pip", where], where.parent, env)
    python = where / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q"]
    run([*pip, "--no-deps", "--no-index", wheel], where.parent, env)
    purelib = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], where, env
    )
    lines = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib.stdout.strip()) / "dependencies.pth").write_text("\n".join(lines) + "\n")
    return python


@pytest.mark.slow
def test_wheel_trains_and_predicts_from_an_empty_folder(tmp_path):
    before = checkout_files()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    source = copy_source(tmp_path / "source")
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation"]
    built = run([*build, "-w", dist, source], tmp_path, env)
    # every conf/ folder is a package of the wheel: no setuptools warning per folder
    assert "absent from the `packages` configuration" not in built.stdout + built.stderr
    (wheel,) = dist.glob("mtl_train-*.whl")

    venv = tmp_path / "venv"
    python = fresh_venv(venv, wheel, env)
    work = tmp_path / "empty"
    work.mkdir()
    check = (
        "import sys, mtl; print(mtl.__file__); print([m for m in sys.modules if 'editable' in m])"
    )
    where, editable = run([python, "-c", check], work, env).stdout.splitlines()
    assert Path(where).is_relative_to(venv), f"mtl imported from {where}, not the fresh venv"
    assert editable == "[]", f"an editable install's finder was loaded: {editable}"

    train = run([venv / "bin" / "mtl-train", "model=tiny", "debug=fast", "logger=none"], work, env)
    (run_dir,) = (work / "outputs" / "runs").glob("*/*")
    assert (run_dir / "results.json").is_file() and (run_dir / "export").is_dir()
    table = r"^(pydoc_\w+)\s+\w+\s+\w+\s+(-?[0-9.]+)\s+-?[0-9.]+$"  # task type metric best last
    figures = {task: float(best) for task, best in re.findall(table, train.stdout, re.M)}
    assert set(figures) == {"pydoc_topic", "pydoc_code", "pydoc_code_share"}, train.stdout

    rows = work / "rows.jsonl"
    texts = ["The for statement iterates over a sequence.", "Unicode strings and bytes."]
    rows.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    predict = [venv / "bin" / "mtl-predict", f"model={run_dir}", "task=pydoc_topic"]
    run([*predict, f"input={rows}", "output=preds.jsonl"], work, env)
    labels = json.loads((run_dir / "export" / "mtl_tasks.json").read_text())["tasks"]
    labels = labels["pydoc_topic"]["label_names"]
    predicted = [json.loads(line) for line in (work / "preds.jsonl").read_text().splitlines()]
    assert [p["text"] for p in predicted] == texts
    assert all(p["prediction"] in labels for p in predicted), predicted

    after = checkout_files()
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert not changed, f"the checkout changed: {changed[:20]}"
