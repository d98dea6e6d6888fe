"""What the command line means before Hydra reads it.

`trainer.resume=<run>` continues that run in its own folder: one run however often it is
stopped (its W&B run, metrics.jsonl and checkpoints go on there; see
`mtl.training.checkpoints.resume`).
Unless the command names the run folder itself (`output_dir=`, `hydra.run.dir=`) or is a
multirun, `continue_in_place` adds `hydra.run.dir=<run>` and `hydra.output_subdir=null`, so Hydra
neither makes a new folder nor rewrites the run's `.hydra/` (its config stays the one it was
trained with). To start a new run from a run's weights, use `model.init_from=<run>`, or name
another folder with `output_dir=`.
"""

from __future__ import annotations

from pathlib import Path

from mtl.artifacts import HYDRA_SPECIAL

NAMES_THE_FOLDER = ("output_dir=", "+output_dir=", "hydra.run.dir=", "+hydra.run.dir=")


def continue_in_place(argv: list[str]) -> list[str]:
    """`argv` with the run folder of `trainer.resume=` made the run folder (see above)."""
    if "-m" in argv or "--multirun" in argv:
        return argv
    resumes = [
        a.split("=", 1)[1] for a in argv if a.startswith(("trainer.resume=", "+trainer.resume="))
    ]
    if not resumes or any(a.startswith(NAMES_THE_FOLDER) for a in argv):
        return argv
    run = run_folder(resumes[-1].strip("'\""))  # Hydra's quotes: `trainer.resume='0_a=1,b=2'`
    if run is None:  # not a run folder or one of its checkpoints: the resume check says so
        return argv
    extra = [f"hydra.run.dir='{run}'" if HYDRA_SPECIAL & set(str(run)) else f"hydra.run.dir={run}"]
    if not any(a.startswith("hydra.output_subdir=") for a in argv):
        extra.append("hydra.output_subdir=null")
    return [*argv, *extra]


def run_folder(path: str) -> Path | None:
    """The run folder of a run, its `checkpoints/` or one checkpoint in it (the folder holding
    `.hydra/config.yaml`), or None."""
    p = Path(path).expanduser().absolute()
    for candidate in (p, p.parent, p.parent.parent):
        if (candidate / ".hydra" / "config.yaml").is_file():
            return candidate
    return None
