"""The one exception type for bad user input, and the helpers its one-line messages share.

Raise `MtlError` with a single line that names the thing that is wrong and how to fix it.
The command-line entry point prints that line (no traceback) and exits with status 2.
`did_you_mean` gives the closest name for a typo; `import_target` imports what a `_target_` (or
any `package.module.Class` path in a config) names and says which part of the path is wrong.
"""

from __future__ import annotations

import difflib
import importlib
import os
from collections.abc import Iterable
from typing import Any


class MtlError(ValueError):
    """Bad input: unknown task, bad option value, empty or malformed data, label out of range.

    `all_ranks`: every process of a launch raises this error alike (a check all ranks make on
    the same data), so the entry point prints it once, on rank 0; otherwise each rank that
    raises it prints it."""

    def __init__(self, message: str = "", *, all_ranks: bool = False):
        super().__init__(message)
        self.all_ranks = all_ranks


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """The hint `did you mean x? ` for the closest of `names`, or an empty string."""
    close = difflib.get_close_matches(word, list(names), n=1)
    return f"did you mean {close[0]}? " if close else ""


def import_target(target: Any, key: str) -> Any:
    """The object `key: target` names (`package.module.Class`), or one line saying which part
    of the path does not exist."""
    if not isinstance(target, str) or "." not in target:
        raise MtlError(f"{key}={target!r} is not an import path; give package.module.Class")
    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:end])
        try:
            found = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and module_name.startswith(err.name):
                continue  # this prefix is not a module: try a shorter one
            raise MtlError(f"{key}={target!r}: importing {module_name} failed ({err})") from None
        except Exception as err:  # the user's module raised while importing
            raise MtlError(
                f"{key}={target!r}: importing {module_name} failed ({type(err).__name__}: {err})"
            ) from None
        for i, attr in enumerate(parts[end:], start=end):
            if not hasattr(found, attr):
                names = [n for n in dir(found) if not n.startswith("_")]
                where = ".".join(parts[:i])
                raise MtlError(
                    f"{key}={target!r}: {where} has no {attr!r}; {did_you_mean(attr, names)}"
                    "check the spelling (a module of your own must be importable from the "
                    "folder you run in)"
                )
            found = getattr(found, attr)
        return found
    raise MtlError(
        f"{key}={target!r}: no module named {parts[0]!r}; check the spelling (a module of your "
        "own must be importable from the folder you run in)"
    )


def env_rank() -> int:
    """This process's rank in a launch (0 without one): rank 0 prints what every rank would."""
    return int(os.environ.get("RANK", "0"))
