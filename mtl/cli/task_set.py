"""`mtl-dry-run [loader=]<loader> "task=[a,b]" [override ...] [epochs=N]` (`mtl.cli.dry_run`):
the epochs of a composite loader over a task set as training composes it, its tasks' data read
and batched by the configured sampler, so each task's batches per pass are the run's own."""

from __future__ import annotations

import inspect
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from mtl.artifacts import config_dir
from mtl.builders.loaders import build_train_loaders
from mtl.builders.tasks import build_tasks
from mtl.cli.composition import composition_error
from mtl.cli.script import count
from mtl.config import register_configs, validate
from mtl.errors import MtlError
from mtl.loaders.dry_run import dry_run, loader_class


def task_set_sizes(overrides: list[str]) -> tuple[str, dict[str, int], dict[str, Any], list[str]]:
    """(loader name, each task's batches per pass, the loader's options and the run's `epochs`,
    a line per task) of the config training composes from `overrides`: the tasks built as a run
    builds them (data read, dev split off, `data.max_examples`) and batched by the configured
    sampler."""
    GlobalHydra.instance().clear()
    register_configs()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as err:
        raise MtlError(composition_error(err)) from None
    finally:
        GlobalHydra.instance().clear()
    name = str(cfg.hydra.runtime.choices.get("loader"))
    with open_dict(cfg):
        del cfg["hydra"]
    settings = validate(cfg)
    tasks, _ = build_tasks(settings, settings.seed)
    loaders = build_train_loaders(tasks, settings, cfg.sampler, seed=settings.seed)
    sizes = {task: len(loader) for task, loader in loaders.items()}
    lines = [
        f"{task}: {len(tasks[task].train)} train rows, batch size "
        f"{settings.tasks[task].batch_size}, {sizes[task]} batches per pass"
        for task in sizes
    ]
    options = OmegaConf.to_container(cfg.loader, resolve=True)
    options = {k: v for k, v in options.items() if k not in ("_target_", "_partial_")}
    return name, sizes, {**options, "epochs": settings.trainer.epochs}, lines


def print_task_set(argv: list[str]) -> None:
    """The task-set form: `[loader=]<name> "task=[a,b]" [overrides] [epochs=N]`."""
    epochs = [a for a in argv if a.startswith("epochs=")]
    overrides = [a for a in argv if not a.startswith("epochs=")]
    overrides = [a if "=" in a else f"loader={a}" for a in overrides]  # `random` as loader=
    count_ = count("epochs", epochs[-1].split("=", 1)[1]) if epochs else 1
    name, sizes, options, lines = task_set_sizes(overrides)
    run_epochs = options.pop("epochs")
    print("\n".join(lines))
    loader = loader_class(name)
    if "epochs" in inspect.signature(loader).parameters:
        options.setdefault("epochs", run_epochs)  # mixtures that move over the run
    for epoch in range(count_):
        print(dry_run(name, sizes, epoch=epoch, **options))
