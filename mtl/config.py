"""Schemas of the config groups that are plain settings (trainer, model, logger, data, task).

`validate(cfg)` checks the composed config against these dataclasses (unknown keys, types) and
their value rules, and raises `MtlError` with one line naming the key and the fix. Loader and
sampler options are checked by the classes they build, when they are built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mtl.errors import MtlError


@dataclass
class TrainerConfig:
    epochs: int = 3
    max_steps: int | None = None
    lr: float = 1e-4
    head_lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    grad_accum: int = 1
    max_grad_norm: float | None = 1.0
    mixed_precision: str = "no"
    cpu: bool = False
    eval_every: int | None = None
    eval_batch_size: int = 64
    checkpoint_every: int | None = None
    resume: str | None = None
    log_every: int = 10
    progress_bar: bool = True
    dist_timeout_s: float = 600.0
    trace: bool = False

    def check(self) -> None:
        _at_least("trainer.epochs", self.epochs, 1)
        _at_least("trainer.max_steps", self.max_steps, 1)
        _at_least("trainer.grad_accum", self.grad_accum, 1)
        _at_least("trainer.eval_every", self.eval_every, 1)
        _at_least("trainer.eval_batch_size", self.eval_batch_size, 1)
        _at_least("trainer.checkpoint_every", self.checkpoint_every, 1)
        _at_least("trainer.log_every", self.log_every, 1)
        if self.dist_timeout_s <= 0:
            raise MtlError(f"trainer.dist_timeout_s={self.dist_timeout_s} must be > 0")
        if self.lr <= 0 or self.head_lr <= 0:
            raise MtlError("trainer.lr and trainer.head_lr must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            raise MtlError(f"trainer.warmup_ratio={self.warmup_ratio} must be in [0, 1)")
        _one_of("trainer.mixed_precision", self.mixed_precision, ("no", "fp16", "bf16"))


@dataclass
class ModelConfig:
    name_or_path: str | None = None
    tokenizer: str | None = None
    random_init: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    head_dropout: float = 0.1
    loss_weights: dict[str, float] = field(default_factory=dict)

    def check(self) -> None:
        if not 0 <= self.head_dropout < 1:
            raise MtlError(f"model.head_dropout={self.head_dropout} must be in [0, 1)")
        for name, weight in self.loss_weights.items():
            if weight < 0:
                raise MtlError(f"model.loss_weights.{name}={weight} must be >= 0")


@dataclass
class LoggerConfig:
    backend: str = "none"
    project: str = "mtl"
    entity: str | None = None
    mode: str = "offline"
    tags: list[str] = field(default_factory=list)

    def check(self) -> None:
        _one_of("logger.backend", self.backend, ("wandb", "none"))
        _one_of("logger.mode", self.mode, ("offline", "online", "disabled"))


@dataclass
class DataConfig:
    max_examples: int | None = None
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    pad_to_multiple_of: int | None = None

    def check(self) -> None:
        _at_least("data.max_examples", self.max_examples, 1)
        _at_least("data.num_workers", self.num_workers, 0)
        _at_least("data.pad_to_multiple_of", self.pad_to_multiple_of, 1)


@dataclass
class TaskConfig:
    type: str
    source: dict[str, Any]
    batch_size: int = 32
    max_length: int = 256
    text_column: str = "text"
    label_column: str = "label"
    label_names: list[str] | None = None
    dev_fraction: float = 0.1
    text_pair_column: str | None = None  # a second text, encoded as the tokenizer's pair input
    metrics: list[str] | None = None  # metric names (the first is the main one); null: the type's
    head: dict[str, Any] | None = None  # {_target_: ...}: a head of your own instead of the type's

    def check(self, name: str) -> None:
        from mtl.task_types import task_type_class

        task_type_class(self.type, name)
        _at_least(f"task.{name}.batch_size", self.batch_size, 1)
        _at_least(f"task.{name}.max_length", self.max_length, 2)
        if not 0 < self.dev_fraction < 1:
            raise MtlError(f"task.{name}.dev_fraction={self.dev_fraction} must be in (0, 1)")


def _at_least(key: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        raise MtlError(f"{key}={value} must be >= {low}")


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise MtlError(f"{key}={value!r} is not one of {', '.join(allowed)}")


def _typed(schema: type, node: Any, key: str) -> Any:
    """Merge `node` onto the schema: unknown keys and wrong types become one-line MtlErrors."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        problem = str(err).splitlines()[0]
        where = f"{key}.{err.full_key}" if getattr(err, "full_key", None) else key
        raise MtlError(f"bad config at '{where}': {problem}") from None


@dataclass
class Settings:
    """The validated, typed view of a composed config."""

    trainer: TrainerConfig
    model: ModelConfig
    logger: LoggerConfig
    data: DataConfig
    tasks: dict[str, TaskConfig]


def check_task_overrides(overrides: list[str]) -> None:
    """`task=[a,a]`: Hydra would silently keep one `a`; a repeated name is a user error."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(overrides):
        if override.key_or_group != "task":
            continue
        names = override.value()
        names = names if isinstance(names, list) else [names]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            names = ", ".join(twice)
            raise MtlError(f"task {names} given twice in task=[...]; list each task once")


def validate(cfg: DictConfig) -> Settings:
    """Check the composed config; returns typed settings or raises a one-line MtlError."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():  # not when composed by hand (tests, notebooks)
        check_task_overrides(list(HydraConfig.get().overrides.task))
    tasks_node = cfg.get("task") or {}
    if not tasks_node:
        raise MtlError("no task selected: pick some with task=[name,...] (see mtl/conf/task/)")
    settings = Settings(
        trainer=_typed(TrainerConfig, cfg.trainer, "trainer"),
        model=_typed(ModelConfig, cfg.model, "model"),
        logger=_typed(LoggerConfig, cfg.logger, "logger"),
        data=_typed(DataConfig, cfg.get("data") or {}, "data"),
        tasks={name: _typed(TaskConfig, node, f"task.{name}") for name, node in tasks_node.items()},
    )
    for part in (settings.trainer, settings.model, settings.logger, settings.data):
        part.check()
    for name, task in settings.tasks.items():
        task.check(name)
    unknown = set(settings.model.loss_weights) - set(settings.tasks)
    if unknown:
        raise MtlError(
            f"model.loss_weights names unknown task(s) {sorted(unknown)}; "
            f"use {sorted(settings.tasks)}"
        )
    return settings


GROUPS = ("task", "loader", "sampler", "model", "trainer", "logger", "experiment", "debug")


CONF_DIR = Path(__file__).resolve().parent / "conf"


def check_group_choices(args: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Before Hydra: an unknown config option (`task=[nope]`, `loader=mix`) as one line listing
    the choices. Overrides that add config folders (`hydra.searchpath`) are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    if any("searchpath" in a for a in overrides):
        return
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # Hydra reports malformed overrides itself
        return
    for override in parsed:
        group = override.key_or_group.lstrip("+~")
        if group not in GROUPS or override.is_delete():
            continue
        try:
            values = (
                override.sweep_iterator() if override.is_sweep_override() else [override.value()]
            )
            names = [n for v in values for n in (v if isinstance(v, list) else [v])]
        except Exception:  # glob(...) and the like: Hydra expands and checks them
            continue
        known = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
        unknown = [str(n) for n in names if str(n) not in known and n is not None]
        if unknown:
            raise MtlError(
                f"unknown {group} {', '.join(map(repr, unknown))}; choose from "
                f"{', '.join(known)} (conf/{group}/), or add conf/{group}/<name>.yaml"
            )
