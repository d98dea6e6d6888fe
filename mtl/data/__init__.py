"""Data layer: tasks (bundled, local files, hub), the tokenizer and task loaders.

May import `mtl.config` and the layers below it (task types, models, batching).
"""

from mtl.batching import TaskCollator, TokenizedSplit
from mtl.data.bundled import BUNDLED_TASKS, TOPIC_CLASSES, bundled_rows, pydoc_paragraphs
from mtl.data.loading import task_dataset, task_loader
from mtl.data.tasks import Task, build_task_from_config
from mtl.data.tokenizer import load_tokenizer

__all__ = [
    "BUNDLED_TASKS",
    "TOPIC_CLASSES",
    "Task",
    "TaskCollator",
    "TokenizedSplit",
    "build_task_from_config",
    "bundled_rows",
    "load_tokenizer",
    "pydoc_paragraphs",
    "task_dataset",
    "task_loader",
]
