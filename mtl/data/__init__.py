"""Data layer: tasks (bundled, local files, hub), the tokenizer, collators and task loaders."""

from mtl.data.bundled import BUNDLED_TASKS, TOPIC_CLASSES, bundled_rows, pydoc_paragraphs
from mtl.data.collators import TaskCollator, make_collator
from mtl.data.loading import TokenizedSplit, make_task_loader, task_dataset
from mtl.data.tasks import TASK_TYPES, Task, build_task
from mtl.data.tokenizer import load_tokenizer

__all__ = [
    "BUNDLED_TASKS",
    "TASK_TYPES",
    "TOPIC_CLASSES",
    "Task",
    "TaskCollator",
    "TokenizedSplit",
    "build_task",
    "bundled_rows",
    "load_tokenizer",
    "make_collator",
    "make_task_loader",
    "pydoc_paragraphs",
    "task_dataset",
]
