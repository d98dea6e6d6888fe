"""The config schemas (dataclasses) and the checks of a composed config.

The dataclasses hold every setting's default and type, once. `register_configs()` stores them in
Hydra's ConfigStore; the YAML files under `conf/` name their schema in their defaults list and
only pick and override, so OmegaConf checks types and keys while Hydra composes. `validate(cfg)`
then checks the value rules and the task files' `@package` lines, and raises `MtlError` with one
line naming the key and the fix. Loader and sampler options are checked by the classes they
build, when they are built. A task's keys are its type's `Options` (`mtl.task_types`: the
common `TaskConfig` keys plus the type's own), checked here once the type is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mtl.config.checks import (  # noqa: F401 (check_chosen_files: a public name here too)
    check_chosen_files,
    check_optional_choices,
    check_task_overrides,
    check_wandb_credentials,
    did_you_mean,
)
from mtl.config.parts import BALANCER_SCHEMAS, LOADER_AND_SAMPLER_SCHEMAS
from mtl.errors import MtlError, import_target
from mtl.models.lora import check_peft
from mtl.task_types import TaskConfig, builtin_types, task_type_class


@dataclass
class TrainerConfig:
    """The accelerate training loop (`mtl.training`); `conf/trainer/*.yaml` pick and override."""

    epochs: int = 2
    max_steps: int | None = None  # stop after this many optimizer steps (before the epochs end)
    lr: float = 1e-4  # encoder learning rate
    head_lr: float = 1e-3  # learning rate of the task heads
    weight_decay: float = 0.01
    warmup_ratio: float = 0.06
    grad_accum: int = 1
    max_grad_norm: float | None = 1.0
    mixed_precision: str = "no"  # no | fp16 | bf16
    # torch.compile the shared encoder (mtl.training.setup.speed); its backend ("inductor", or e.g.
    # "aot_eager" where no C++ compiler is at hand). Lengths are bucketed (data.pad_to_multiple_of)
    compile: bool = False
    compile_backend: str = "inductor"
    cpu: bool = False  # force CPU even where a GPU is present
    # ddp: every process holds the whole model; fsdp: the model sharded over the processes
    # (accelerate's FSDP: a unit per encoder layer), for encoders too large for one GPU.
    strategy: str = "ddp"
    keep_freed_memory: bool = True  # reuse freed host memory between steps (mtl/cli/host_memory.py)
    eval_every: int | None = None  # also evaluate every N optimizer steps (always after each epoch)
    eval_batch_size: int = 64
    checkpoint_every: int | None = None  # save every N optimizer steps (always at the end)
    # also save at the first step this many minutes after the last checkpoint (null: never), so
    # a run killed outright loses at most that much; Ctrl-C and SIGTERM save at the next step
    checkpoint_minutes: float | None = 10.0
    keep_last: int | None = 1  # keep only the N newest step checkpoints (null: all)
    monitor: str = "eval/mean"  # the figure that picks the best model (eval/mean: mean of mains)
    monitor_mode: str = "max"  # max | min: whether a larger monitored value is better
    patience: int | None = None  # stop after this many evaluations without improvement
    resume: str | None = None  # path of a checkpoint folder to continue from
    log_every: int = 10  # optimizer steps per logged window
    progress_bar: bool = True
    # Several processes: a collective waiting longer fails the run instead of hanging.
    dist_timeout_s: float = 600.0
    # Task-interaction diagnostics (gradient norms and cosines, lookahead affinity, task
    # weights) every N optimizer steps; null: at each evaluation (never under fsdp); 0: never.
    diagnose_every: int | None = None
    trace: bool = False  # write trace_rank<r>.jsonl: tasks, example ids, loss, param hash per step
    # At the end, write <run>/export from the best model: mtl.load_model / mtl-predict's folder
    # and <run>/export/<task>/, a standard transformers model per task (mtl.inference.export).
    export: bool = True

    def check(self) -> None:
        _at_least("trainer.epochs", self.epochs, 1)
        _at_least("trainer.max_steps", self.max_steps, 1)
        _at_least("trainer.grad_accum", self.grad_accum, 1)
        _at_least("trainer.eval_every", self.eval_every, 1)
        _at_least("trainer.eval_batch_size", self.eval_batch_size, 1)
        _at_least("trainer.checkpoint_every", self.checkpoint_every, 1)
        _at_least("trainer.keep_last", self.keep_last, 1)
        if self.checkpoint_minutes is not None and self.checkpoint_minutes <= 0:
            raise MtlError(
                f"trainer.checkpoint_minutes={self.checkpoint_minutes} must be > 0; null saves "
                "only every trainer.checkpoint_every steps and at the end"
            )
        _at_least("trainer.patience", self.patience, 1)
        _one_of("trainer.monitor_mode", self.monitor_mode, ("max", "min"))
        _at_least("trainer.log_every", self.log_every, 1)
        _at_least("trainer.diagnose_every", self.diagnose_every, 0)
        if self.dist_timeout_s <= 0:
            raise MtlError(f"trainer.dist_timeout_s={self.dist_timeout_s} must be > 0")
        for key in ("lr", "head_lr"):
            if getattr(self, key) <= 0:
                raise MtlError(f"trainer.{key}={getattr(self, key)} must be > 0 (e.g. 1e-4)")
        if self.weight_decay < 0:
            raise MtlError(f"trainer.weight_decay={self.weight_decay} must be >= 0")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise MtlError(
                f"trainer.max_grad_norm={self.max_grad_norm} must be > 0; "
                "null turns gradient clipping off"
            )
        if not 0 <= self.warmup_ratio < 1:
            raise MtlError(f"trainer.warmup_ratio={self.warmup_ratio} must be in [0, 1)")
        _one_of("trainer.mixed_precision", self.mixed_precision, ("no", "fp16", "bf16"))
        _one_of("trainer.strategy", self.strategy, ("ddp", "fsdp"))
        if self.strategy == "fsdp" and self.diagnose_every:
            raise MtlError(
                f"trainer.diagnose_every={self.diagnose_every}: diagnostics take per-task "
                "gradients of whole parameters, which trainer.strategy=fsdp shards; use "
                "trainer.diagnose_every=0, or trainer.strategy=ddp"
            )

    @property
    def diagnoses(self) -> bool:
        """Whether the run computes diagnostics (never under fsdp: they need whole weights)."""
        return self.diagnose_every != 0 and self.strategy != "fsdp"


@dataclass
class ModelConfig:
    """The shared encoder and the heads; the defaults are the packaged pretrained MiniLM."""

    name_or_path: str | None = None  # null: the packaged MiniLM; or a hub name / local folder
    tokenizer: str | None = None  # null: the model's own tokenizer
    random_init: bool = False  # the architecture only, randomly initialised
    # The encoder's family (pooling, heads' form, packing, export: mtl/models/families.py); null:
    # from the model's config. A family name or package.module.Class of an EncoderAdapter.
    family: str | None = None
    config: dict[str, Any] = field(default_factory=dict)  # overrides of the model's config
    head_dropout: float = 0.1
    # Run a batch with much padding (mixup, sampler=random) on its rows packed end to end, with
    # a block-diagonal attention mask: the same hidden states, less compute (mtl/models/packing.py)
    pack: bool = True
    loss_weights: dict[str, float] = field(default_factory=dict)  # {task: weight}, default 1.0
    # A trained mtl run (its best model, else its latest checkpoint), checkpoint or export folder:
    # its encoder and the heads of the tasks this run shares with it; new tasks get fresh heads.
    init_from: str | None = None
    # Parameter-efficient training (mtl/models/lora.py): null (every encoder weight trains), lora,
    # LoRA's options {r, alpha, dropout, target_modules}, or {_target_: <a peft config>, ...}.
    peft: Any = None

    def check(self) -> None:
        if not 0 <= self.head_dropout < 1:
            raise MtlError(f"model.head_dropout={self.head_dropout} must be in [0, 1)")
        check_peft(self.peft)
        for name, weight in self.loss_weights.items():
            if weight < 0:
                raise MtlError(f"model.loss_weights.{name}={weight} must be >= 0")


@dataclass
class LoggerConfig:
    """The tracker; figures always go to metrics.jsonl in the run folder as well."""

    backend: str = "none"  # wandb | none
    project: str = "mtl"
    entity: str | None = None
    mode: str = "offline"  # offline | online | disabled (W&B: offline needs no account)
    tags: list[str] = field(default_factory=list)

    def check(self) -> None:
        _one_of("logger.backend", self.backend, ("wandb", "none"))
        _one_of("logger.mode", self.mode, ("offline", "online", "disabled"))
        if self.backend == "wandb" and self.mode == "online":
            check_wandb_credentials()


@dataclass
class DataConfig:
    """Settings shared by every task's data."""

    max_examples: int | None = None  # each train and dev split: a seeded sample of this many rows
    num_workers: int = 0
    pin_memory: bool | None = None  # null: on when training on a GPU
    persistent_workers: bool = False
    pad_to_multiple_of: int | None = None  # null: 32 with trainer.compile (length buckets), else 1

    def check(self) -> None:
        _at_least("data.max_examples", self.max_examples, 1)
        _at_least("data.num_workers", self.num_workers, 0)
        _at_least("data.pad_to_multiple_of", self.pad_to_multiple_of, 1)


@dataclass
class MtlConfig:
    """The primary config (`conf/config.yaml`): every top-level key and its type.

    `loader` and `sampler` are free-form: their `_target_` class checks its own arguments.
    `task` is free-form while Hydra composes: each task's type declares its keys (`Options`),
    checked by `validate`.
    """

    seed: int = 0
    output_dir: str = "${hydra:runtime.output_dir}"  # the run folder: metrics, checkpoints, W&B
    data: DataConfig = field(default_factory=DataConfig)
    task: dict[str, Any] = field(default_factory=dict)
    loader: Any = MISSING
    sampler: Any = MISSING
    balancer: Any = MISSING  # mtl.balancers: how the task losses become one update
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


SCHEMAS = {
    "mtl_schema": MtlConfig,
    "trainer_schema": TrainerConfig,
    "model_schema": ModelConfig,
    "logger_schema": LoggerConfig,
    **LOADER_AND_SAMPLER_SCHEMAS,
    **BALANCER_SCHEMAS,
    # A built-in task file names its type's schema: every key the type has, while composing.
    **{f"{name}_task_schema": cls.Options for name, cls in builtin_types().items()},
}


def flat(config: dict, prefix: str = "") -> dict:
    """A plain config as dotted keys: `{"a": {"b": 1}}` is `{"a.b": 1}` (lists and empty
    mappings are values)."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore, where config files name them in their defaults
    (`defaults: [/trainer_schema, _self_]`). Call before composing: `mtl-train` does; so must
    code that composes by hand (`hydra.compose`). Storing again replaces, so it is idempotent."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        store.store(name=name, node=schema)


def _at_least(key: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        raise MtlError(f"{key}={value} must be >= {low}")


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise MtlError(f"{key}={value!r} is not one of {', '.join(allowed)}")


def _typed(schema: type, node: Any, key: str) -> Any:
    """Merge `node` onto the schema: unknown keys and wrong types become one-line MtlErrors.
    A key added with `+` (Hydra lets it into a typed node) is refused like any unknown key."""
    check_keys(schema, node, key)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        problem = str(err).splitlines()[0]
        where = f"{key}.{err.full_key}" if getattr(err, "full_key", None) else key
        raise MtlError(f"bad config at '{where}': {problem}") from None


def check_keys(schema: type, node: Any, where: str) -> None:
    """Every key of `node` is a field of the dataclass `schema`, else one line naming the key
    (with the closest field) and the fields there are."""
    names = [f.name for f in fields(schema)]
    prefix = f"{where}." if where else ""
    for key in node.keys() if hasattr(node, "keys") else ():
        if key not in names:
            raise MtlError(
                f"unknown key {prefix}{key}; {did_you_mean(str(key), names)}"
                f"{schema.__qualname__} has {', '.join(names)}"
            )


def _task(name: str, node: Any) -> TaskConfig:
    """Task `name`'s config as its type's `Options` (the common keys and the type's own)."""
    type_name = node.get("type") if hasattr(node, "get") else None
    if not type_name:
        raise MtlError(
            f"task.{name}.type is not set; give a task type (e.g. sequence_classification) "
            "or the import path of a TaskType subclass"
        )
    return _typed(task_type_class(type_name, name).Options, node, f"task.{name}")


def _run_dir(cfg: DictConfig) -> Path | None:
    """`output_dir` as a path; None while it is Hydra's interpolation outside a Hydra run."""
    value = OmegaConf.select(cfg, "output_dir", throw_on_resolution_failure=False)
    return Path(value) if value else None


def check_sharded_balancer(trainer: TrainerConfig, balancer: Any) -> None:
    """An aggregating balancer takes per-task gradients of whole parameters: not under fsdp."""
    if trainer.strategy != "fsdp" or "_target_" not in balancer:
        return
    cls = import_target(balancer._target_, "balancer._target_")
    if getattr(cls, "aggregates", False):
        name = balancer.get("aggregator") or balancer._target_
        raise MtlError(
            f"balancer {name} aggregates per-task gradients of whole parameters, which "
            "trainer.strategy=fsdp shards; use a loss weighting (balancer=sum, uncertainty, "
            "dwa) or trainer.strategy=ddp"
        )


@dataclass
class Settings:
    """The validated, typed view of a composed config: everything a run is built from.

    `loader`, `sampler` and `balancer` are their config nodes (`_target_` and its arguments:
    their classes check those when built); `config` is the composed config itself, what the run
    folder records and every process compares. `run_dir` is `output_dir` (None where Hydra did
    not compose it: a config composed by hand without `output_dir=`)."""

    trainer: TrainerConfig
    model: ModelConfig
    logger: LoggerConfig
    data: DataConfig
    tasks: dict[str, TaskConfig]
    seed: int = 0
    run_dir: Path | None = None
    loader: Any = None
    sampler: Any = None
    balancer: Any = None
    config: Any = None


def validate(cfg: DictConfig) -> Settings:
    """Check the composed config; returns typed settings or raises a one-line MtlError."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():  # not when composed by hand (tests, notebooks)
        hydra_cfg = HydraConfig.get()
        check_task_overrides(list(hydra_cfg.overrides.task))
        check_chosen_files(
            hydra_cfg.job.config_name,
            [*hydra_cfg.overrides.hydra, *hydra_cfg.overrides.task],
            [s.path for s in hydra_cfg.runtime.config_sources if s.schema == "file"],
        )
        check_optional_choices(hydra_cfg.runtime.choices)
    check_keys(MtlConfig, {k: None for k in cfg if k != "hydra"}, "")
    tasks_node = cfg.get("task") or {}
    if not tasks_node:
        raise MtlError("no task selected: pick some with task=[name,...] (see conf/task/)")
    settings = Settings(
        trainer=_typed(TrainerConfig, cfg.trainer, "trainer"),
        model=_typed(ModelConfig, cfg.model, "model"),
        logger=_typed(LoggerConfig, cfg.logger, "logger"),
        data=_typed(DataConfig, cfg.get("data") or {}, "data"),
        tasks={name: _task(name, node) for name, node in tasks_node.items()},
        seed=cfg.seed,
        run_dir=_run_dir(cfg),
        loader=cfg.get("loader"),
        sampler=cfg.get("sampler"),
        balancer=cfg.get("balancer") or OmegaConf.create({"_target_": "mtl.balancers.Sum"}),
        config=cfg,
    )
    for part in (settings.trainer, settings.model, settings.logger, settings.data):
        part.check()
    for name, task in settings.tasks.items():
        task.check(name)
    check_sharded_balancer(settings.trainer, settings.balancer)
    unknown = set(settings.model.loss_weights) - set(settings.tasks)
    if unknown:
        raise MtlError(
            f"model.loss_weights names unknown task(s) {sorted(unknown)}; "
            f"use {sorted(settings.tasks)}"
        )
    return settings
