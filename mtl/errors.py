"""The one exception type for bad user input, and the helpers its one-line messages share.

Raise `MtlError` with a single line that names the thing that is wrong and how to fix it.
The command-line entry point prints that line (no traceback) and exits with status 2.
`did_you_mean` gives the closest name for a typo; `import_target` imports what a `_target_` (or
any `package.module.Class` path in a config) names and says which part of the path is wrong.

`untrusted(source)` is the one gate on code a file names: while mtl reads a folder it did not
just make (an export, a run folder, a checkpoint) without the user's word to trust it
(`trust_custom_code=true`), `import_target` imports nothing outside mtl's own package (and the
config classes of peft, which mtl imports itself), and `remote_code` refuses transformers'
`trust_remote_code`. Whatever the trust, `import_target(..., kind=)` refuses a function or a
class of another kind before anything is called.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import os
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
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


TRUST_FLAG = "trust_custom_code=true"
_READING: ContextVar[tuple[str, str] | None] = ContextVar("mtl_untrusted_source", default=None)


@contextlib.contextmanager
def untrusted(source: Any, *, trust: bool = False, fix: str = "") -> Iterator[None]:
    """While reading `source` (a folder's path) untrusted: `import_target` and `remote_code`
    refuse code it names, in one line naming `source` and `fix` (default: give
    `trust_custom_code=true`). `trust`: the user's word; nothing is refused."""
    fix = fix or f"give {TRUST_FLAG} if you trust where it came from"
    token = _READING.set(None if trust else (str(source), fix))
    try:
        yield
    finally:
        _READING.reset(token)


def _own(target: str) -> bool:
    """Whether `target` is code mtl runs anyway: its own package, or a class peft exports (its
    config classes, named by `model.peft._target_`), found without importing anything more."""
    top, _, rest = target.partition(".")
    return top == "mtl" or (top == "peft" and "." not in rest and rest.endswith("Config"))


class BadState(MtlError):
    """A state read from a checkpoint that is not what mtl saves (its type, shape or range): the
    resume says which checkpoint, and what to resume from instead."""


class UntrustedCode(MtlError):
    """A folder read untrusted names code (`untrusted`): never reworded as a malformed file."""


def refuse_code(what: str) -> None:
    """One line when reading an untrusted folder that names code (`what`: the key and the code
    it names); nothing otherwise."""
    reading = _READING.get()
    if reading is not None:
        source, fix = reading
        raise UntrustedCode(
            f"{source} names code that mtl would run ({what}), which is not mtl's own; {fix}"
        )


def remote_code(requested: Any, key: str) -> bool:
    """transformers' `trust_remote_code` for a load that `key` asks it of: refused while reading
    an untrusted folder; False (never None: transformers would ask on the terminal) unless
    asked."""
    if requested:
        refuse_code(f"{key}=true")
    return bool(requested)


def import_target(target: Any, key: str, kind: type | None = None) -> Any:
    """The object `key: target` names (`package.module.Class`), or one line saying which part
    of the path does not exist. `kind`: the object must be a subclass of it (a function, an
    instance or another class is refused before it is called). Reading an untrusted folder
    (`untrusted`), a path outside mtl's own package is refused before it is imported."""
    if not isinstance(target, str) or "." not in target:
        raise MtlError(f"{key}={target!r} is not an import path; give package.module.Class")
    if not _own(target):
        refuse_code(f"{key}={target!r}")
    found = _import(target, key)
    module = str(getattr(found, "__module__", "")).partition(".")[0]
    if not (module == "mtl" or (module == "peft" and _own(target))):
        refuse_code(f"{key}={target!r}")  # a name mtl's modules import (`mtl.errors.os.system`)
    if kind is not None and not (inspect.isclass(found) and issubclass(found, kind)):
        what = "a function" if inspect.isroutine(found) else f"a {type(found).__name__}"
        if inspect.isclass(found):
            what = f"the class {found.__name__}"
        raise MtlError(
            f"{key}={target!r} is {what}, not a subclass of {kind.__module__}.{kind.__qualname__};"
            " name a class of that kind"
        )
    return found


def _import(target: str, key: str) -> Any:
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
