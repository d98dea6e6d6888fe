"""Where a training starts: fresh, again from step 0, or from a checkpoint of the same run.

- `find_start` turns `trainer.resume` into a `Start`: the checkpoint to load (checked to hold
  data only, `mtl.training.checkpoints.trusted`, and to be this run's,
  `mtl.training.checkpoints.compatible`), and whether it resumes in its own folder.
- `check_run_folder` refuses a training into a folder that holds another one (a checkpoint, the
  rows of metrics.jsonl, a best model, results or an export), and a resume whose command would
  change what the run trains (`changed_settings`: its config against the run's `.hydra/` record).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from mtl.artifacts import RunLayout
from mtl.builders.weights import MARKER, check_as_saved, resolve_checkpoint
from mtl.config import flat
from mtl.errors import BadState, MtlError
from mtl.models.lora import frozen_keys
from mtl.training.checkpoints.checkpoint import carry_best
from mtl.training.checkpoints.compatible import check_compatible, unreadable
from mtl.training.checkpoints.trusted import check_data_only

RECORD = Path(".hydra") / "config.yaml"  # the config a run trains with (Hydra's, or mtl's record)
# What a resumed run may change: how long it trains, how often it logs, evaluates and saves, and
# how it runs; every other setting is what the run trains (tasks, model, loader, ...).
CHANGEABLE = (
    "output_dir",
    "trainer.resume",
    "trainer.epochs",
    "trainer.max_steps",
    "trainer.patience",
    "trainer.eval_every",
    "trainer.eval_batch_size",
    "trainer.checkpoint_every",
    "trainer.checkpoint_minutes",
    "trainer.keep_last",
    "trainer.log_every",
    "trainer.progress_bar",
    "trainer.trace",
    "trainer.diagnose_every",
    "trainer.export",
    "trainer.dist_timeout_s",
    "trainer.keep_freed_memory",
    "trainer.compile",
    "trainer.compile_backend",
    "data.num_workers",
    "data.pin_memory",
    "data.persistent_workers",
    "logger",
)


@dataclass(frozen=True)
class Start:
    """Where a training starts: from scratch (`checkpoint` None) or from a checkpoint, in that
    checkpoint's own run folder (`same_run`: the same run continues) or in another one.
    `restart`: the folder holds only the rows of an attempt killed before its first checkpoint
    (this start is that run again)."""

    option: str
    checkpoint: str | None = None
    same_run: bool = False
    restart: bool = False

    def check(self, model, description: dict) -> None:
        """The checkpoint fits the run's model (before anything is loaded)."""
        if self.checkpoint is not None:
            check_compatible(self.checkpoint, model, description, self.option)

    def restore(self, accelerator, model, run_dir: Path, state) -> None:
        """Load the checkpoint (every registered object, `state` too); resuming into another
        folder brings the source run's best model along."""
        if self.checkpoint is None:
            return
        # model.peft: the checkpoint holds what trains (checked by `check`), the rest is the base's
        slim = bool(frozen_keys(accelerator.unwrap_model(model)))
        load_checkpoint(accelerator, self.checkpoint, self.option, strict=not slim)
        if not self.same_run:
            carry_best(accelerator, run_of(self.checkpoint), run_dir, state.best_step)

    def rewind(self, state) -> tuple[int | None, int] | None:
        """What metrics.jsonl is cut back to (rows, step): the checkpoint's rows when the same
        run continues, nothing when it starts again, None when the folder is new."""
        if self.same_run:
            return state.metrics_rows, state.step
        return (0, 0) if self.restart else None


def find_start(resume: str | None, run_dir: Path, cfg: DictConfig | None = None) -> Start:
    """The start `trainer.resume` asks for in `run_dir` with config `cfg`; a folder that holds
    another training is refused (`check_run_folder`)."""
    option = f"trainer.resume={resume}"
    checkpoint = resolve_checkpoint(resume) if resume else None
    if checkpoint is not None:  # every byte as saved, before anything is read or written
        check_as_saved(Path(checkpoint), "give trainer.resume=<an earlier checkpoint of the run>")
    same_run = checkpoint is not None and run_of(checkpoint) == Path(run_dir).resolve()
    restart = check_run_folder(run_dir, same_run, resume, cfg)
    return Start(option, checkpoint, same_run, restart)


def check_run_folder(
    run_dir: Path, same_run: bool, resume: str | None, cfg: DictConfig | None = None
) -> bool:
    """Refuse to train into a folder that holds another training, unless this is that training
    resumed (`same_run`, with no setting changed that it trained with) or, where it saved no
    checkpoint yet (killed before its first), started again with its own config (`cfg` against
    its record): then True, this start is that run again."""
    run_dir = Path(run_dir)
    if same_run:
        check_unchanged(run_dir, cfg, f"trainer.resume={resume}")
        return False
    found = [p.name for p in sorted(run_dir.glob("checkpoints/step_*")) if (p / MARKER).is_file()]
    if found:
        fix = (
            f"train into a new folder to start from trainer.resume={resume} there"
            if resume
            else f"continue it with trainer.resume={run_dir}, or train into a new folder"
        )
        raise MtlError(f"{run_dir} holds another training ({found[-1]}); {fix}", all_ranks=True)
    traces = training_traces(run_dir)
    if not traces:
        return False
    what = f"{run_dir} holds another training ({', '.join(traces)}, no checkpoint)"
    changed = None if cfg is None else changed_settings(run_dir, cfg)
    if changed is None:
        raise MtlError(
            f"{what}, whose config is unknown (no {RECORD}); train into a new folder",
            all_ranks=True,
        )
    if changed:
        raise MtlError(
            f"{what}, trained with {changed[0]}; train into a new folder, or give its settings "
            "to start it again from step 0",
            all_ranks=True,
        )
    return True


def training_traces(run_dir: Path) -> list[str]:
    """What a training left in `run_dir` besides its checkpoints: metrics.jsonl rows, a best
    model, results, an export."""
    layout = RunLayout(run_dir)
    metrics = layout.metrics
    traces = [metrics.name] if metrics.is_file() and metrics.stat().st_size > 0 else []
    for path in (layout.best, layout.results, layout.export):
        if path.exists():
            traces.append(path.relative_to(layout.root).as_posix())
    return traces


def check_unchanged(run_dir: Path, cfg: DictConfig | None, option: str) -> None:
    """One line when the resuming command changes a setting the run trained with."""
    changed = None if cfg is None else changed_settings(run_dir, cfg)
    if changed:
        raise MtlError(
            f"{option}: the run trained with {changed[0]}, the command says {changed[1]}; drop "
            "that override to continue it as it was trained (a resume may change only how long "
            f"it trains and how it logs, saves and runs), or start from its weights in a new "
            f"folder: model.init_from={run_dir}",
            all_ranks=True,
        )


def changed_settings(run_dir: Path, cfg: DictConfig) -> tuple[str, str] | None:
    """The first setting (other than `CHANGEABLE` ones) where `cfg` differs from the run's
    record, as (`key=<recorded>`, `key=<cfg's>`); () when none differs; None without a record."""
    path = Path(run_dir) / RECORD
    try:
        recorded = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, yaml.YAMLError) as err:
        raise MtlError(f"{path} cannot be read ({type(err).__name__}); restore it") from None
    recorded = recorded if isinstance(recorded, dict) else {}
    ours = {k: v for k, v in OmegaConf.to_container(cfg, resolve=False).items() if k != "hydra"}
    tasks = [sorted(recorded.get("task") or {}), sorted(ours.get("task") or {})]
    if tasks[0] != tasks[1]:
        return f"task=[{','.join(tasks[0])}]", f"task=[{','.join(tasks[1])}]"
    theirs, mine = flat(recorded), flat(ours)
    for key in sorted(theirs.keys() | mine.keys()):
        if any(key == c or key.startswith(c + ".") for c in CHANGEABLE):
            continue
        if theirs.get(key, UNSET) != mine.get(key, UNSET):
            return (
                f"{key}={_value(theirs.get(key, UNSET))}",
                f"{key}={_value(mine.get(key, UNSET))}",
            )
    return ()


UNSET = "<unset>"


def _value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def load_checkpoint(accelerator, checkpoint: str, option: str, strict: bool = True) -> None:
    """`accelerator.load_state` of a checkpoint whose files are data only (`check_data_only`); a
    damaged file (right size, wrong contents) is one line. `strict=False`: the model file may
    leave out weights (the frozen base of `model.peft`; `check_compatible` checked the rest)."""
    folder = Path(checkpoint)
    check_data_only(folder, option)
    try:
        accelerator.load_state(checkpoint, **({} if strict else {"strict": False}))
    except BadState as err:
        raise MtlError(
            f"{option}: checkpoint {folder} holds a state mtl did not save ({err}); resume from "
            f"an earlier one: trainer.resume={folder.parent}/step_N",
            all_ranks=True,
        ) from None
    except MtlError:
        raise
    except Exception as err:
        raise unreadable(Path(checkpoint), option, err) from err


def run_of(checkpoint: str) -> Path | None:
    """The run folder a checkpoint folder belongs to (`<run>/checkpoints/step_N`)."""
    layout = RunLayout.of_checkpoint(Path(checkpoint).resolve())
    return layout.root if layout is not None else None
