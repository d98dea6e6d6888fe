"""What the command line means before Hydra reads it.

`trainer.resume=<run>` continues that run in its own folder: one run however often it is
stopped (its W&B run, metrics.jsonl and checkpoints go on there; see
`mtl.training.checkpoints.resume`), as it was configured: the overrides of its record
(`.hydra/overrides.yaml`) come first, then the command's, so `trainer.resume=<run>` alone is the
whole command again and `trainer.resume=<run> trainer.epochs=4` trains it longer (a command that
would change what the run trains is refused once the config is composed).
Unless the command names the run folder itself (`output_dir=`, `hydra.run.dir=`) or is a
multirun, `continue_in_place` adds `hydra.run.dir=<run>`, so Hydra makes no new folder (the run's
`.hydra/` is rewritten only once the resume is accepted: `mtl.cli.train.Preflight`). To start a new
run from a run's weights, use `model.init_from=<run>`, or name another folder with `output_dir=`.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from mtl.artifacts import HYDRA_SPECIAL, RunLayout
from mtl.errors import MtlError

NAMES_THE_FOLDER = ("output_dir=", "+output_dir=", "hydra.run.dir=", "+hydra.run.dir=")


# Hydra's command-line flags that take a value (`--config-dir conf`, `-cd conf`, ...)
VALUE_FLAGS = {
    "--config-dir",
    "-cd",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--package",
    "-p",
    "--cfg",
    "-c",
    "--experimental-rerun",
}
SEARCH_FLAGS = ("--config-dir", "-cd", "hydra.searchpath=", "+hydra.searchpath=")  # the user's


def split_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's flags with their values, the overrides) of a command line, each in its order:
    Hydra reads its flags before the overrides, so the overrides are kept together after them."""
    flags, overrides, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-"):
            takes = arg in VALUE_FLAGS and i + 1 < len(argv)
            flags += argv[i : i + 1 + takes]
            i += 1 + takes
        else:
            overrides.append(arg)
            i += 1
    return flags, overrides


def continue_in_place(argv: list[str]) -> list[str]:
    """`argv` with the run folder of `trainer.resume=` made the run folder (see above), the
    run's overrides and its config folders (`recorded_search_path`) before the command's own,
    Hydra's flags first."""
    run = resumed_in_place(argv)
    if run is None:
        return argv
    flags, overrides = split_flags(argv)
    extra = [f"hydra.run.dir='{run}'" if HYDRA_SPECIAL & set(str(run)) else f"hydra.run.dir={run}"]
    search = [] if any(a.startswith(SEARCH_FLAGS) for a in argv) else recorded_search_path(run)
    return [*flags, *search, *recorded_overrides(run, overrides), *overrides, *extra]


def resumed_in_place(argv: list[str]) -> Path | None:
    """The run folder `argv` continues in place (`trainer.resume=<run or checkpoint>`, no
    folder of its own named, no multirun); None otherwise (not a run folder or one of its
    checkpoints: the resume check says so)."""
    if "-m" in argv or "--multirun" in argv:
        return None
    overrides = split_flags(argv)[1]
    resumes = [
        a.split("=", 1)[1]
        for a in overrides
        if a.startswith(("trainer.resume=", "+trainer.resume="))
    ]
    if not resumes or any(a.startswith(NAMES_THE_FOLDER) for a in overrides):
        return None
    return run_folder(resumes[-1].strip("'\""))  # Hydra's quotes: `trainer.resume='0_a=1,b=2'`


def started_in(argv: list[str]) -> Path | None:
    """The folder the run that `argv` resumes in place was started in (its record's
    `hydra.runtime.cwd`), where its relative paths (data files) and modules (`_target_`) are
    found; None when `argv` resumes no run in place, or the folder is gone."""
    run = resumed_in_place(argv)
    record = _hydra_record(run) if run is not None else None
    try:
        folder = Path(record["hydra"]["runtime"]["cwd"])  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    return folder if folder.is_dir() else None


def _hydra_record(run: Path) -> dict | None:
    """The run's `.hydra/hydra.yaml` (None when there is none, or it cannot be read)."""
    try:
        record = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return record if isinstance(record, dict) else None


def recorded_search_path(run: Path) -> list[str]:
    """`hydra.searchpath=[...]` of the config folders the run was composed with beside mtl's
    own (`--config-dir`, `hydra.searchpath`: its record's `hydra.runtime.config_sources`, as
    absolute paths), so that a resume finds the user's task files from any folder; [] when
    there are none, or no record of them."""
    try:
        sources = _hydra_record(run)["hydra"]["runtime"]["config_sources"]  # type: ignore[index]
        folders = [
            s["path"] for s in sources if s.get("schema") == "file" and s.get("provider") != "main"
        ]
    except (KeyError, TypeError, AttributeError):
        return []
    folders = [str(f) for f in dict.fromkeys(folders) if Path(str(f)).is_dir()]
    if not folders:
        return []
    quoted = ",".join("'file://" + f.replace("'", "\\'") + "'" for f in folders)
    return [f"hydra.searchpath=[{quoted}]"]


def recorded_overrides(run: Path, argv: list[str]) -> list[str]:
    """The overrides the run was trained with (its `.hydra/overrides.yaml`), less those of keys
    the command gives itself and those naming a folder or checkpoint (`output_dir`,
    `trainer.resume`). One that names code Hydra itself would call at start (a callback, a
    `_target_` under `hydra`) is refused: the `_target_`s mtl calls are checked for their kind
    (`mtl.errors.import_target`), Hydra's are not."""
    path = run / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    try:
        recorded = yaml.safe_load(path.read_text()) or []
        if not isinstance(recorded, list):
            raise ValueError("not a list of overrides")
        parser = OverridesParser.create()
        typed = [a for a in argv if "=" in a and a[:1] != "-"]
        given = {_key(o) for o in parser.parse_overrides(typed)}
        parsed = parser.parse_overrides([str(o) for o in recorded])
    except (OSError, ValueError, yaml.YAMLError, HydraException) as err:
        raise MtlError(
            f"{path} cannot be read ({type(err).__name__}); restore it, or give the run's "
            "overrides beside trainer.resume"
        ) from None
    for text, override in zip(recorded, parsed, strict=True):
        key = _key(override)
        if key.startswith(("hydra.callbacks", "hydra/callbacks")) or (
            key.startswith("hydra") and "_target_" in str(text)
        ):
            raise MtlError(
                f"{path} records {text!r}, code Hydra would run when the run starts; a resume "
                "does not run it from a run's record: give it on the command line yourself if "
                "you trust it"
            )
    skip = given | {"output_dir", "trainer.resume"}
    return [text for text, o in zip(recorded, parsed, strict=True) if _key(o) not in skip]


def _key(override) -> str:
    return override.key_or_group.removeprefix("+")


def run_folder(path: str) -> Path | None:
    """The run folder of a run, its `checkpoints/` or one checkpoint in it (the folder holding
    `.hydra/config.yaml`), or None."""
    run = RunLayout.find(path)
    return None if run is None else run.root
