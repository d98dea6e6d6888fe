"""What a saved model may make mtl import: only mtl's own task types, heads and metrics.

An export's `mtl_tasks.json` (and a run folder's `.hydra/config.yaml`) name each task's type,
head and metrics. Loading a model reads them as data: a name that is not one of mtl's own is
refused with one line naming it and `trust_custom_code=true`, before anything it names is
imported or called. mtl's own are the built-in task types (`mtl.task_types.builtin_types()`, by
short name or import path), the heads defined in `mtl.models.heads` (also under the paths the
types' modules give them, as exports of mtl 0.1.0 name two of them:
`mtl.task_types.choice.MultipleChoiceHead`, `mtl.task_types.multilabel.MultiLabelHead`), matched
by their exact import path (never by a prefix), and the names of those types' `known_metrics`.

This check names the task that is refused; whatever else a folder names (a family, a peft config
class, transformers' remote code) is refused while it is read by `mtl.errors.untrusted`.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from mtl.errors import MtlError
from mtl.models import heads as own_heads
from mtl.task_types import builtin_types

FLAG = "trust_custom_code=true"


def _paths(cls: type, *modules: str) -> set[str]:
    return {f"{m}.{cls.__qualname__}" for m in (cls.__module__, *modules)}


BUILTIN = builtin_types()
OWN_TYPES: set[str] = set(BUILTIN)
for _cls in BUILTIN.values():
    OWN_TYPES |= _paths(_cls, "mtl.task_types")
OWN_HEADS: set[str] = set()  # the modules defined in mtl.models.heads, where mtl names them
for _module in {own_heads, *(sys.modules[c.__module__] for c in BUILTIN.values())}:
    for _name, _cls in vars(_module).items():
        if inspect.isclass(_cls) and issubclass(_cls, nn.Module):
            if _cls.__module__ == own_heads.__name__ and _name == _cls.__qualname__:
                OWN_HEADS |= _paths(_cls, _module.__name__)


def check_task(name: str, config: Any, head_class: str | None = None, *, trust: bool) -> None:
    """Refuse task `name` (its config: a mapping or `TaskConfig`) if it names a type, head or
    metric that is not mtl's own, unless `trust`. `head_class`: the class an export says its head
    is. Reads names only; imports nothing."""
    if trust:
        return
    get = config.get if isinstance(config, Mapping) else lambda key: getattr(config, key, None)
    type_name = get("type")
    if not isinstance(type_name, str) or type_name not in OWN_TYPES:
        _refuse(name, "task type", type_name)
    head = get("head")
    if head is not None:
        target = head.get("_target_") if isinstance(head, Mapping) else head
        if not isinstance(target, str) or target not in OWN_HEADS:
            _refuse(name, "head", target)
        for key, value in head.items():
            if key != "_target_" and _names_code(value):
                _refuse(name, f"head argument {key!r}", _first_target(value))
    if head_class is not None and head_class not in OWN_HEADS:
        _refuse(name, "head", head_class)
    own_type = BUILTIN.get(type_name) or next(
        cls for cls in BUILTIN.values() if type_name in _paths(cls, "mtl.task_types")
    )
    known = {m.name for m in own_type.known_metrics}
    for metric in get("metrics") or ():
        if metric not in known:
            _refuse(name, "metric", metric)


def _names_code(value: Any) -> bool:
    """Whether a head argument holds anything Hydra would import or call (`_target_`)."""
    if isinstance(value, Mapping):
        return "_target_" in value or any(_names_code(v) for v in value.values())
    if isinstance(value, Sequence) and not isinstance(value, str):
        return any(_names_code(v) for v in value)
    return False


def _first_target(value: Any) -> Any:
    if isinstance(value, Mapping):
        if "_target_" in value:
            return value["_target_"]
        value = list(value.values())
    for item in value:
        if _names_code(item):
            return _first_target(item)
    return None


def _refuse(task: str, what: str, named: Any) -> None:
    raise MtlError(
        f"task {task!r}: {what} {named!r} is not one of mtl's own; loading it would run its "
        f"code: give {FLAG} if you trust where this model came from"
    )
