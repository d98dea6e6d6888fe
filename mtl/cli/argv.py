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

from mtl.artifacts import HYDRA_SPECIAL
from mtl.errors import MtlError

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
    return [*recorded_overrides(run, argv), *argv, *extra]


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
    p = Path(path).expanduser().absolute()
    for candidate in (p, p.parent, p.parent.parent):
        if (candidate / ".hydra" / "config.yaml").is_file():
            return candidate
    return None
