"""Task types: how a kind of task is encoded, batched, predicted and scored (`TaskType`).

`type:` in a task's config is one of `BUILTIN`'s names or the import path of your own
`TaskType` subclass (see docs/extending.md).
"""

from __future__ import annotations

from mtl.config.checks import import_target
from mtl.errors import MtlError
from mtl.task_types.base import TaskType
from mtl.task_types.choice import MultipleChoice
from mtl.task_types.classification import Regression, SequenceClassification
from mtl.task_types.multilabel import MultiLabelClassification
from mtl.task_types.qa import QuestionAnswering
from mtl.task_types.tagging import TokenClassification

BUILTIN: dict[str, type[TaskType]] = {
    "sequence_classification": SequenceClassification,
    "token_classification": TokenClassification,
    "regression": Regression,
    "multiple_choice": MultipleChoice,
    "multi_label_classification": MultiLabelClassification,
    "question_answering": QuestionAnswering,
}


def task_type_class(type_name: str, task: str = "?") -> type[TaskType]:
    """The class `type: <type_name>` selects: a built-in name or `package.module.Class`."""
    if type_name in BUILTIN:
        return BUILTIN[type_name]
    if "." in type_name:
        cls = import_target(type_name, f"task.{task}.type")
        if isinstance(cls, type) and issubclass(cls, TaskType):
            return cls
        raise MtlError(f"task.{task}.type={type_name!r} is not a mtl.task_types.TaskType subclass")
    raise MtlError(
        f"task.{task}.type={type_name!r} is not a task type; choose one of {', '.join(BUILTIN)} "
        "or give the import path of a TaskType subclass"
    )


__all__ = [
    "BUILTIN",
    "MultipleChoice",
    "MultiLabelClassification",
    "QuestionAnswering",
    "Regression",
    "SequenceClassification",
    "TaskType",
    "TokenClassification",
    "task_type_class",
]
