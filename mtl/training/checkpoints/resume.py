"""A resumed training is the same run: same W&B run, each logged row once, the same model.

- `wandb_run_id` keeps the W&B run id in `<run>/wandb_run_id`, written once at the first start:
  every later start in that folder continues that W&B run (`resume="allow"`).
- `rewind_metrics` cuts `<run>/metrics.jsonl` back to the rows written before the checkpoint
  being resumed was saved (atomically), so the steps run again are not logged twice.
- `wandb_seen_step` reads back the `.wandb` files of the run: the last step W&B already holds,
  which the resumed run does not send again.
- `check_compatible` compares the checkpoint's tasks, heads and encoder with the run's model
  before anything is loaded; a mismatch is one line that names what differs.
- `check_run_folder` refuses a training into a folder that holds another one (a checkpoint, the
  rows of metrics.jsonl, a best model, results or an export), and a resume whose command would
  change what the run trains (`changed_settings`: its config against the run's `.hydra/` record).
- `make_logger` puts these together for the training loop.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from mtl.artifacts import write_file
from mtl.builders.weights import DESCRIPTION, MARKER, resolve_checkpoint
from mtl.config import Settings, flat
from mtl.errors import MtlError
from mtl.models.multitask import head_task
from mtl.training.checkpoints.checkpoint import carry_best
from mtl.training.checkpoints.trusted import check_data_only
from mtl.training.tracking.logger import RunLogger, run_group, run_name
from mtl.training.tracking.wandb_file import read_history

RUN_ID_FILE = "wandb_run_id"
RECORD = Path(".hydra") / "config.yaml"  # the config a run trains with (Hydra's, or mtl's record)
# What a resumed run may change: how long it trains, how often it logs, evaluates and saves, and
# how it runs; every other setting is what the run trains (tasks, model, loader, ...).
CHANGEABLE = (
    "output_dir", "trainer.resume", "trainer.epochs", "trainer.max_steps", "trainer.patience",
    "trainer.eval_every", "trainer.eval_batch_size", "trainer.checkpoint_every",
    "trainer.checkpoint_minutes", "trainer.keep_last", "trainer.log_every",
    "trainer.progress_bar", "trainer.trace", "trainer.diagnose_every", "trainer.export",
    "trainer.dist_timeout_s", "trainer.keep_freed_memory", "trainer.compile",
    "trainer.compile_backend", "data.num_workers", "data.pin_memory",
    "data.persistent_workers", "logger",
)  # fmt: skip
DESCRIBED = ("tasks", "model", "tokenizer", "balancer")  # what `describe` records
METRICS = "metrics.jsonl"


def wandb_run_id(run_dir: Path) -> str:
    """The run's W&B id: read from `<run>/wandb_run_id`, or made and written there once."""
    path = Path(run_dir) / RUN_ID_FILE
    if path.is_file():
        run_id = path.read_text().strip()
        if run_id.isalnum():
            return run_id
        raise MtlError(
            f"{path} holds {run_id[:40]!r}, not a W&B run id; restore it or delete it "
            "(the run then continues as a new W&B run)"
        )
    run_id = secrets.token_hex(4)
    write_file(path, run_id + "\n", overwrite=True)
    return run_id


def read_rows(run_dir: Path) -> list[str]:
    path = Path(run_dir) / METRICS
    return path.read_text().splitlines() if path.is_file() else []


def rewind_metrics(run_dir: Path, rows: int | None, step: int) -> list[dict]:
    """Keep the first `rows` lines of metrics.jsonl (those written before the checkpoint; with
    `rows=None`, from a checkpoint that did not count them, those of steps <= `step`), written
    beside and renamed into place. Returns the rows kept."""
    lines = [line for line in read_rows(run_dir) if line.strip()]
    kept, parsed = [], []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            break  # a line cut short by the kill: it and what follows are rewritten
        if (rows is not None and i >= rows) or (rows is None and row.get("step", 0) > step):
            break
        kept.append(line)
        parsed.append(row)
    if len(kept) != len(lines):
        write_file(Path(run_dir) / METRICS, "".join(line + "\n" for line in kept), overwrite=True)
    return parsed


def wandb_seen_step(run_dir: Path, run_id: str) -> int:
    """The highest step in the `.wandb` files of W&B run `run_id` in the run folder (0: none)."""
    seen = 0
    for path in sorted((Path(run_dir) / "wandb").glob(f"*run-*-{run_id}/run-{run_id}.wandb")):
        try:
            rows = read_history(path)
        except (ValueError, OSError):
            continue
        steps = [row.get("step", row.get("_step", 0)) for row in rows]
        seen = max([seen, *(int(s) for s in steps if isinstance(s, int | float))])
    return seen


def describe(settings: Settings, tasks: dict, tokenizer) -> dict:
    """What a checkpoint records of its run, to compare on resume: each task's type, the model,
    the tokenizer (its name and a hash of its vocabulary), the balancer's config (its state and
    optimizer parameters are its own) and each task's label names in id order (what an export
    or prediction of the run names its classes with, whatever the data files say later)."""
    m = settings.model
    vocab = sorted(tokenizer.get_vocab().items())
    return {
        "balancer": OmegaConf.to_container(settings.balancer, resolve=True),
        "tasks": {name: task.type for name, task in tasks.items()},
        "labels": {name: task.label_names for name, task in tasks.items()},
        "model": m.name_or_path or "(packaged MiniLM)",
        "tokenizer": {
            "name": m.tokenizer or m.name_or_path or "(packaged MiniLM)",
            "vocabulary": hashlib.sha256(json.dumps(vocab).encode()).hexdigest()[:16],
        },
    }


def check_compatible(checkpoint: str, model, description: dict, option: str) -> None:
    """One-line MtlError when `checkpoint` was trained with other tasks, heads or encoder than
    `model` (the unwrapped model of this run) and `description` (`describe`)."""
    folder = Path(checkpoint)
    run_of = folder.parent.parent if folder.parent.name == "checkpoints" else folder
    fix = (
        "resume with the config it was trained with, or start from its weights with a fresh "
        f"optimizer: model.init_from={run_of} instead of {option}"
    )
    theirs = _saved_description(folder, option)
    for key in (*DESCRIBED, "labels") if theirs is not None else ():
        if key in theirs and theirs[key] != description[key]:
            raise MtlError(
                f"{option}: the checkpoint was trained with {key} {_show(theirs[key])}, this run "
                f"has {_show(description[key])}; {fix}",
                all_ranks=True,
            )
    shapes = _saved_shapes(folder, option)
    if shapes is None:
        return
    here = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    saved_tasks = sorted({head_task(k) for k in shapes} - {None})
    run_tasks = sorted({head_task(k) for k in here} - {None})
    if saved_tasks != run_tasks:
        raise MtlError(
            f"{option}: the checkpoint was trained with tasks {saved_tasks}, this run has "
            f"{run_tasks}; {fix}",
            all_ranks=True,
        )
    keys = shapes.keys() | here.keys()  # the shared parameters first, then the heads'
    for key in sorted(keys, key=lambda k: (head_task(k) is not None, k)):
        if shapes.get(key) != here.get(key):
            task = head_task(key)
            what = "the encoder" if task is None else f"the head of task {task!r}"
            raise MtlError(
                f"{option}: {what} differs from the checkpoint's ({key}: {_shape(shapes, key)}"
                f" there, {_shape(here, key)} here); {fix}",
                all_ranks=True,
            )


def _saved_description(folder: Path, option: str) -> dict | None:
    """The checkpoint's `describe` (`mtl_run.json`); None when it has none (mtl 0.1.0 wrote
    none: the weights' shapes are still compared)."""
    path = folder / DESCRIPTION
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
        labels = {"labels": saved["labels"]} if "labels" in saved else {}  # mtl >= 0.3
        return {key: saved[key] for key in DESCRIBED} | labels
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise unreadable(folder, option, err) from None


def _saved_shapes(folder: Path, option: str) -> dict[str, tuple] | None:
    from safetensors import safe_open

    path = folder / "model.safetensors"
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), "pt") as f:
            return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    except Exception as err:  # safetensors raises its own error types for a damaged header
        raise unreadable(folder, option, err) from None


def unreadable(folder: Path, option: str, err: Exception) -> MtlError:
    """A checkpoint that cannot be loaded: a file damaged (its size right, its contents not)."""
    detail = (str(err).strip().splitlines() or [""])[-1][:200]
    return MtlError(
        f"{option}: checkpoint {folder} cannot be loaded ({type(err).__name__}: {detail}); "
        f"resume from an earlier one: trainer.resume={folder.parent}/step_N",
        all_ranks=True,
    )


def _shape(shapes: dict, key: str) -> str:
    return f"shape {shapes[key]}" if key in shapes else "absent"


def _show(value) -> str:
    if isinstance(value, dict) and "vocabulary" in value:
        return f"{value['name']!r} (vocabulary {value['vocabulary']})"
    if isinstance(value, dict):
        return "[" + ", ".join(f"{k} ({v})" for k, v in value.items()) + "]"
    return repr(value)


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

    def restore(self, accelerator, run_dir: Path, state) -> None:
        """Load the checkpoint (every registered object, `state` too); resuming into another
        folder brings the source run's best model along."""
        if self.checkpoint is None:
            return
        load_checkpoint(accelerator, self.checkpoint, self.option)
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
    metrics = run_dir / METRICS
    traces = [METRICS] if metrics.is_file() and metrics.stat().st_size > 0 else []
    for name in ("checkpoints/best", "results.json", "export"):
        if (run_dir / name).exists():
            traces.append(name)
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


def load_checkpoint(accelerator, checkpoint: str, option: str) -> None:
    """`accelerator.load_state` of a checkpoint whose files are data only (`check_data_only`); a
    damaged file (right size, wrong contents) is one line."""
    check_data_only(Path(checkpoint), option)
    try:
        accelerator.load_state(checkpoint)
    except MtlError:
        raise
    except Exception as err:
        raise unreadable(Path(checkpoint), option, err) from err


def run_of(checkpoint: str) -> Path | None:
    """The run folder a checkpoint folder belongs to (`<run>/checkpoints/step_N`)."""
    folder = Path(checkpoint).resolve()
    return folder.parent.parent if folder.parent.name == "checkpoints" else None


def make_logger(settings: Settings, accelerator, rewind: tuple | None) -> RunLogger:
    """The run's logger. Resuming in its own folder (`rewind`: the checkpoint's metrics rows
    and step), the same run continues: metrics.jsonl cut back to the checkpoint, the same W&B
    run (its id is kept in the run folder)."""
    run_dir, history, run_id, seen = settings.run_dir, [], None, 0
    if accelerator.is_main_process:
        if rewind is not None:
            history = rewind_metrics(run_dir, *rewind)
        if settings.logger.backend == "wandb" and settings.logger.mode != "disabled":
            run_dir.mkdir(parents=True, exist_ok=True)
            run_id = wandb_run_id(run_dir)
            seen = wandb_seen_step(run_dir, run_id)
    return RunLogger(
        accelerator,
        settings.logger,
        run_dir,
        name=run_name(settings.config),
        group=run_group(),
        config=OmegaConf.to_container(settings.config, resolve=True),
        run_id=run_id,
        history=history,
        seen=seen,
    )
