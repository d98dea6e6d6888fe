"""Where things are on disk: mtl's own config folder, a run folder's layout (`RunLayout`), an
export's marker files, a sweep job's folder name and the resume override a stopped run prints."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path


def config_dir() -> Path:
    """mtl's own config folder: `conf/` of a source checkout, or the copy that a wheel ships as
    `conf/` (setup.py)."""
    package = Path(__file__).resolve().parents[1]  # mtl/
    installed = package / "conf"
    return installed if installed.is_dir() else package.parent / "conf"


class RunLayout:
    """Where each part of a run folder is: the one place that spells the layout, asked by
    training, resume, export, predict, reports and tests.

        <run>/.hydra/config.yaml          the config it trains with (`record`)
        <run>/metrics.jsonl               every logged row (`metrics`)
        <run>/results.json                the last step, the best evaluation (`results`)
        <run>/checkpoints/step_0000048/   a step checkpoint (`step(48)`; `checkpoints`)
        <run>/checkpoints/best/           the best model (`best`)
        <run>/export/                     the run's export (`export`)
    """

    CHECKPOINTS, BEST = "checkpoints", "best"

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def checkpoints(self) -> Path:
        return self.root / self.CHECKPOINTS

    @property
    def best(self) -> Path:
        return self.checkpoints / self.BEST

    def step(self, step: int) -> Path:
        return self.checkpoints / step_name(step)

    @property
    def export(self) -> Path:
        return self.root / "export"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def results(self) -> Path:
        return self.root / "results.json"

    @property
    def record(self) -> Path:
        return self.root / ".hydra" / "config.yaml"

    @classmethod
    def find(cls, path: str | Path) -> RunLayout | None:
        """The run of a run folder, its `checkpoints/` or one checkpoint in it (the nearest
        of these holding the record `.hydra/config.yaml`); None when none does."""
        p = Path(path).expanduser().absolute()
        for candidate in (p, p.parent, p.parent.parent):
            if cls(candidate).record.is_file():
                return cls(candidate)
        return None

    @classmethod
    def of_checkpoint(cls, checkpoint: str | Path) -> RunLayout | None:
        """The run a checkpoint folder (`<run>/checkpoints/<name>`) belongs to; None for a
        folder that is not in a run's `checkpoints/`."""
        folder = Path(checkpoint)
        return cls(folder.parent.parent) if folder.parent.name == cls.CHECKPOINTS else None


def step_name(step: int) -> str:
    """A step checkpoint's folder name: `step_` and the optimizer step in seven digits."""
    return f"step_{step:07d}"


# An export folder (`mtl-export`, `<run>/export`): its tasks, labels and heads' arguments, the
# marker that says the folder is an export, and every head's weights.
TASKS_FILE = "mtl_tasks.json"


HEADS_FILE = "heads.safetensors"


def is_export(path: str | Path) -> bool:
    """Whether `path` is an export folder (it holds `mtl_tasks.json`)."""
    return (Path(path) / TASKS_FILE).is_file()


HYDRA_SPECIAL = set("=,[]{}()'\" \\")  # characters an override value must quote


JOB_NAME_LENGTH = 64


def job_folder_name(overrides: str) -> str:
    """A sweep job's folder name from its overrides as Hydra joins them (`override_dirname`:
    `loader=mixup,task=[a,b]`): short and shell-safe (`loader-mixup_task-a_b`: letters, digits,
    `.`, `-`, `_`), cut to 64 characters with a digest of the whole where longer. The job's
    overrides themselves are in its record (`.hydra/overrides.yaml`)."""
    name = overrides.translate(str.maketrans("=:,/", "--_-"))
    name = re.sub(r"[^A-Za-z0-9._-]+", "", name)
    name = re.sub(r"([._-])[._-]+", r"\1", name).strip("._-")
    if len(name) > JOB_NAME_LENGTH:
        digest = hashlib.sha1(overrides.encode()).hexdigest()[:8]
        name = f"{name[: JOB_NAME_LENGTH - 9].rstrip('._-')}-{digest}"
    return name or "job"


def resume_override(run_dir: str | Path) -> str:
    """`trainer.resume=<run_dir>` as one shell word that Hydra reads back as that path: a sweep
    job's folder (`0_seed=0,task=[a]`) is quoted for Hydra, then for the shell."""
    path = str(run_dir)
    if not HYDRA_SPECIAL & set(path):
        return f"trainer.resume={path}"
    return f"\"trainer.resume='{path}'\""
