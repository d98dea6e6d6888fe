"""Data layer: tasks (bundled, local files, hub), the tokenizer, collators and task loaders."""

from mtl.batching.collators import TaskCollator, make_collator
from mtl.data.bundled import BUNDLED_TASKS, TOPIC_CLASSES, bundled_rows, pydoc_paragraphs
from mtl.data.loading import TokenizedSplit, task_dataset, task_loader
from mtl.data.tasks import Task, build_task, build_task_from_config
from mtl.data.tokenizer import load_tokenizer

__all__ = [
    "BUNDLED_TASKS",
    "TOPIC_CLASSES",
    "Task",
    "TaskCollator",
    "TokenizedSplit",
    "build_task",
    "build_task_from_config",
    "bundled_rows",
    "load_tokenizer",
    "make_collator",
    "pydoc_paragraphs",
    "task_dataset",
    "task_loader",
]
