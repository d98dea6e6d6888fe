"""Writing checkpoints that survive a killed job: accelerate's `save_state` folders under
`<run>/checkpoints/step_<N:07d>`, written whole or not at all (the layout, its names and the
reading side: `mtl.builders.weights`).

A checkpoint holds the model, optimizer, scheduler, RNG states (one file per rank), the composite
loader's position and the run counters (`mtl.training.state.TrainState`), so that
`trainer.resume=<folder>` continues exactly.

- `save_checkpoint` writes into `checkpoints/.tmp-step_<N>`, adds the completion marker
  `mtl_checkpoint.json` (the name and size of every file) last, then renames the folder to
  `step_<N>`. A job killed while saving (SLURM preemption) leaves a `.tmp-*` folder, never a
  `step_*` folder that looks complete; `trainer.keep_last` bounds how many are kept.
- `resolve_checkpoint` turns `trainer.resume` into the folder to load: a run folder gives its
  latest complete checkpoint, and the incomplete ones skipped are named in one line.
- `save_best`/`load_best` keep the model weights of the best evaluation in
  `checkpoints/best` (written to `.tmp-best` and renamed, like the step checkpoints).
- `trained_weights` reads the model weights of a run, checkpoint or export folder.
- Under `trainer.strategy=fsdp` each rank holds shards of the weights: checkpoints hold the full
  weights (accelerate's FSDP plugin writes `pytorch_model_fsdp.bin` instead of
  `model.safetensors`), `save_best` gathers them, `load_best` spreads them over the ranks again,
  and `full_model` gives the end of the run a model with the full weights to export.

The folders are on a file system every rank sees (as accelerate's `save_state` assumes). Files
get the modes an ordinary write gets under the umask, and
are flushed to disk (fsync) before the rename, so a machine crash also leaves no `step_*`
folder whose files are still in memory.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mtl.artifacts import (
    RunLayout,
    file_digest,
    fsync,
    no_space,
    ordinary_modes,
    out_of_space,
    put_in_place,
    read_weights,
    resume_override,
)
from mtl.builders.weights import (
    BEST_WEIGHTS,
    DESCRIPTION,
    MARKER,
    OLD_PREFIX,
    SHA256,
    STEP_NAME,
    TMP_PREFIX,
    best_weights_file,
    changed,
    check_as_saved,
    incomplete_reason,
    step_folders,
)
from mtl.models.lora import frozen_keys, without_frozen


def save_checkpoint(
    accelerator,
    run_dir: Path,
    step: int,
    keep_last: int | None = None,
    description: dict | None = None,
) -> Path:
    """Save `accelerator.save_state` as `<run>/checkpoints/step_<N:07d>` and return that path.

    Call it on every rank at an optimizer-step boundary (it is a collective). Every rank writes into
    `checkpoints/.tmp-step_<N>` (the main process its model, optimizer, scheduler, loader and
    counter files, each rank its `random_states_<rank>.pkl`); after a barrier the main process
    flushes the files, writes the marker `mtl_checkpoint.json` last and renames the folder to
    `step_<N>`. A checkpoint of the same step already there is replaced (exchanged, then deleted),
    so at no moment is a `step_*` folder half-written. Then, with `keep_last=K`, only the K complete
    checkpoints of the highest steps are kept (always including this one; `trainer.keep_last`
    is checked with the config: `TrainerConfig`), and folders left by
    killed saves are deleted; `keep_last=None` keeps every checkpoint. Nothing outside
    `<run>/checkpoints` is touched. Returns once the folder is in place on every rank.
    `description` (the run's tasks and model, `mtl.training.checkpoints.compatible.describe`) goes
    to `mtl_run.json`.
    """
    if accelerator.project_configuration.automatic_checkpoint_naming:
        raise ValueError("save_checkpoint names the folders itself: no automatic_checkpoint_naming")
    root = RunLayout(run_dir).checkpoints
    final = RunLayout(run_dir).step(step)
    tmp = root / (TMP_PREFIX + final.name)
    owner = _writes_shared_files(accelerator)
    if owner:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a save of this step that was killed
    accelerator.wait_for_everyone()
    with _room_for(tmp, f"checkpoint of step {step}", run_dir):
        accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()  # every rank's files are in tmp
    if owner:
        with _room_for(tmp, f"checkpoint of step {step}", run_dir):
            if description is not None:
                (tmp / DESCRIPTION).write_text(json.dumps(description, indent=1))
            _seal(tmp, step)
        put_in_place(tmp, final)
        shutil.rmtree(tmp, ignore_errors=True)  # the checkpoint of this step it replaced
        _prune(root, keep_last, final)
    accelerator.wait_for_everyone()
    return final


@contextmanager
def _room_for(tmp: Path, what: str, run_dir: Path) -> Iterator[None]:
    """A write into `tmp` that runs out of disk space: `tmp` deleted, one line saying how to go
    on (the run's earlier checkpoints are kept)."""
    try:
        yield
    except Exception as err:
        if not out_of_space(err, tmp.parent):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        resume = resume_override(run_dir)
        fix = f" (trainer.keep_last=1 keeps one checkpoint), then resume with {resume}"
        raise no_space(tmp.parent, what, fix) from None


def _writes_shared_files(accelerator) -> bool:
    """The process that writes the model files and so creates, seals and renames the folder."""
    if accelerator.project_configuration.save_on_each_node:
        return accelerator.is_local_main_process
    return accelerator.is_main_process


def _seal(folder: Path, step: int) -> None:
    """Flush every file to disk, then write the marker that says the folder is complete: each
    file's size and sha256 (checked before the checkpoint is read: `check_as_saved`). The
    files get the modes of the umask (`ordinary_modes`: accelerate's safetensors writes 0600)."""
    ordinary_modes(folder)
    files, sums = {}, {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            fsync(path)
            name = path.relative_to(folder).as_posix()
            files[name], sums[name] = path.stat().st_size, file_digest(path)
    marker = folder / MARKER
    with open(marker, "w") as f:
        json.dump({"step": step, "files": files, SHA256: sums}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    fsync(folder)


def _prune(root: Path, keep_last: int | None, just_saved: Path) -> None:
    """Delete folders left by killed saves; with `keep_last`, the complete checkpoints beyond
    the `keep_last` highest steps. Incomplete `step_*` folders (no marker: copied by hand) are
    left alone."""
    for path in root.iterdir():
        if path.is_dir() and path.name.startswith((TMP_PREFIX, OLD_PREFIX)):
            if STEP_NAME.match(path.name):
                shutil.rmtree(path, ignore_errors=True)
    if keep_last is None:
        return
    complete = [
        p for p in step_folders(root) if not p.name.startswith(".") and not incomplete_reason(p)
    ]
    for path in complete[:-keep_last]:
        if path != just_saved:
            aside = path.with_name(OLD_PREFIX + path.name)
            os.replace(path, aside)  # a delete cut short leaves a folder resume skips
            shutil.rmtree(aside, ignore_errors=True)


def save_best(
    accelerator, model, run_dir: Path, step: int, figures: dict, description: dict | None = None
) -> Path:
    """The model's weights, `best.json` (step, figures) and `description` (`mtl_run.json`, as in
    a step checkpoint) in `<run>/checkpoints/best`, written whole or not at all. A collective:
    call it on every rank."""
    final = RunLayout(run_dir).best
    tmp = final.with_name(TMP_PREFIX + final.name)
    state = accelerator.get_state_dict(model)  # a collective under some strategies
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with _room_for(tmp, f"best model of step {step}", run_dir):
            accelerator.save(state, tmp / BEST_WEIGHTS, safe_serialization=True)
            (tmp / "best.json").write_text(json.dumps({"step": step, "figures": figures}, indent=1))
            if description is not None:
                (tmp / DESCRIPTION).write_text(json.dumps(description, indent=1))
            _seal(tmp, step)
        put_in_place(tmp, final)
        shutil.rmtree(tmp, ignore_errors=True)  # the best model it replaced
    accelerator.wait_for_everyone()
    return final


def save_trainable_only(accelerator, model) -> None:
    """With an adapter on the encoder (`model.peft`), each step checkpoint's model file holds the
    parameters that train (the adapter's, the heads') and the buffers, not the frozen base
    (`mtl.models.lora.frozen_keys`): the resume reads the base from `model.name_or_path` again.
    `checkpoints/best` keeps every weight (exports and `model.init_from` read it whole)."""
    if not frozen_keys(accelerator.unwrap_model(model)):
        return

    def hook(models: list, weights: list[dict], output_dir: str) -> None:
        for prepared, state in zip(models, weights, strict=False):
            without_frozen(accelerator.unwrap_model(prepared), state)

    accelerator.register_save_state_pre_hook(hook)


def carry_best(accelerator, source_run: Path | None, run_dir: Path, step: int | None) -> None:
    """Resuming into another folder: copy the source run's best model (`checkpoints/best`) when
    it is the one the checkpoint names (`step`), so the best that the resumed run keeps has its
    weights here. A best of a later step is not copied: the resumed run reaches that step again
    and saves it. Main process; every rank waits."""
    if accelerator.is_main_process and source_run is not None and step is not None:
        source = RunLayout(source_run).best
        try:
            saved = json.loads((source / "best.json").read_text())["step"]
        except (OSError, ValueError, KeyError, TypeError):
            saved = None
        if saved == step and incomplete_reason(source) is None and changed(source) is None:
            final = RunLayout(run_dir).best
            tmp = final.with_name(TMP_PREFIX + final.name)
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(source, tmp)
            put_in_place(tmp, final)
            shutil.rmtree(tmp, ignore_errors=True)  # what was there before
    accelerator.wait_for_everyone()


def load_best(accelerator, model, run_dir: Path) -> dict | None:
    """Load the best weights into `model` (every rank); returns best.json, None if none saved."""
    folder = RunLayout(run_dir).best
    if not (folder / MARKER).is_file():
        return None
    check_as_saved(folder, "train again")
    state = read_weights(best_weights_file(folder), "train again")
    if is_sharded(accelerator):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        full = StateDictOptions(full_state_dict=True)  # every rank keeps its shard of it
        set_model_state_dict(accelerator.unwrap_model(model), state, options=full)
    else:
        accelerator.unwrap_model(model).load_state_dict(state)
    return json.loads((folder / "best.json").read_text())


def is_sharded(accelerator) -> bool:
    """Whether the model's parameters are shards (`trainer.strategy=fsdp`)."""
    return accelerator.distributed_type.value == "FSDP"


def full_model(accelerator, model, build):
    """The trained model with its full weights, for the outputs the main process writes: the
    unwrapped model itself, or under FSDP a model made by `build()` holding the gathered
    weights (on the main process; a collective: call it on every rank)."""
    if not is_sharded(accelerator):
        return accelerator.unwrap_model(model)
    state = accelerator.get_state_dict(model)  # full weights on the main process
    if not accelerator.is_main_process:
        return accelerator.unwrap_model(model)
    full = build()
    full.load_state_dict(state)
    return full
