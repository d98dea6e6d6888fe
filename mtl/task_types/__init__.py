"""Task types: how a kind of task is encoded, batched, predicted and scored (`TaskType`).

Owns each type's encoding, collator, head choice, metrics (each a `metrics.Metric` that knows its
direction), export mapping (`export_kind`) and options schema (`Options`); imports only
`mtl.errors`, `mtl.batching` and `mtl.models` of mtl's own packages.

Finding a type: `type:` in a task's config is the import path of a `TaskType` subclass
(`mtl.task_types.QuestionAnswering`, `my_project.task_types.StarRating`), imported as any
`_target_` is (`mtl.errors.import_target`). A short name (`type: question_answering`) is the
documented shorthand for a built-in type: it is the `type_name` a class exported here declares,
found by asking those classes (`builtin_types()`), so there is no table to keep by hand.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from mtl.errors import MtlError, did_you_mean, import_target
from mtl.task_types.base import TaskConfig, TaskType
from mtl.task_types.choice import MultipleChoice
from mtl.task_types.classification import Regression, SequenceClassification
from mtl.task_types.generation import Generation
from mtl.task_types.metrics import Metric, metric
from mtl.task_types.multilabel import MultiLabelClassification
from mtl.task_types.qa import QuestionAnswering
from mtl.task_types.tagging import TokenClassification

__all__ = [
    "Generation",
    "Metric",
    "MultiLabelClassification",
    "MultipleChoice",
    "QuestionAnswering",
    "Regression",
    "SequenceClassification",
    "TaskConfig",
    "TaskType",
    "TokenClassification",
    "builtin_types",
    "metric",
    "metric_directions",
    "task_config",
    "task_type_class",
]


def builtin_types() -> dict[str, type[TaskType]]:
    """mtl's own task types by their `type_name`: the `TaskType` classes this package exports."""
    exported = (getattr(sys.modules[__name__], name) for name in __all__)
    return {
        cls.type_name: cls
        for cls in exported
        if isinstance(cls, type) and issubclass(cls, TaskType) and cls.type_name
    }


def task_type_class(type_name: str, task: str = "?") -> type[TaskType]:
    """The class `type: <type_name>` selects: `package.module.Class`, or a built-in short name."""
    key = f"task.{task}.type"
    if isinstance(type_name, str) and "." in type_name:
        return import_target(type_name, key, TaskType)
    builtin = builtin_types()
    if type_name in builtin:
        return builtin[type_name]
    raise MtlError(
        f"{key}={type_name!r} is not a task type; {did_you_mean(str(type_name), builtin)}"
        f"choose one of {', '.join(builtin)} or give the import path of a TaskType subclass"
    )


def task_config(values: Mapping[str, Any], task: str = "?") -> TaskConfig:
    """A task's config from plain values (an export's `mtl_tasks.json`) as its type's `Options`.
    A key its type does not have is refused, unless it is null: exports of mtl 0.1.0 list every
    built-in type's keys."""
    options = task_type_class(values.get("type"), task).Options
    names = {f.name for f in fields(options)}
    for key, value in values.items():
        if key not in names and value is not None:
            raise MtlError(
                f"task.{task}.{key} is not a key of {options.__qualname__}; "
                f"{did_you_mean(key, names)}it has {', '.join(sorted(names))}"
            )
    return options(**{k: v for k, v in values.items() if k in names})


def metric_directions(tasks: Mapping[str, Mapping[str, Any]]) -> dict[str, bool]:
    """{"eval/<task>/<metric>": whether higher is better} of every task in `tasks` (task configs
    as mappings, e.g. a run folder's `.hydra/config.yaml`), by asking each task's metrics."""
    out = {}
    for task, config in tasks.items():
        cls = task_type_class(config["type"], task)
        names = list(config.get("metrics") or cls.default_metrics)
        for name, found in cls.resolve_metrics(names, task).items():
            out[f"eval/{task}/{name}"] = found.higher_is_better
    return out


# The built-in types by short name, for readers of the listing (derived, not kept by hand).
BUILTIN: Mapping[str, type[TaskType]] = builtin_types()
