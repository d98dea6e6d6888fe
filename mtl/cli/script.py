"""What every console script shares: one argument style and one error exit.

Arguments are `key=value` options, as training overrides are typed (`task=[a,b]`,
`overwrite=true`), after the script's positional arguments where it has any (`mtl-export <run>
[out]`). A script declares each option once (`Option`: name, value, default, meaning) in its
`Command`; `--help` (or `-h`) lists them all. An argument is an option when it holds `=`, its key
has no `/` and, for a script with positional arguments, it is not an existing path (a sweep's job
folder `.../0_lr=0.1` stays a path). An unknown key (with a did-you-mean), a bad or missing value
and a `--flag` are each one line.

`one_line_errors` (a decorator, and a context manager) ends a script on `MtlError`: the line
`mtl: error: <message>` on stderr and exit status 2, no traceback. An error every rank of a launch
raises alike (`MtlError(all_ranks=True)`) is printed once, by rank 0. Ctrl-C that stops a script
at once (a training's second one: the first saves a checkpoint) is the line `mtl: stopped
(Ctrl-C)` and status 130, as a shell reports an interrupted command.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from contextlib import ContextDecorator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtl.artifacts import NO_SPACE_ERRNOS
from mtl.errors import MtlError, did_you_mean, env_rank

REQUIRED: Any = object()  # the default of an option that must be given
KEY = re.compile(r"^[A-Za-z_][\w.\-]*$")
WIDTH = 100  # of the help text
INTERRUPTED = (
    "mtl: stopped (Ctrl-C); a training resumes from its last checkpoint with "
    "trainer.resume=<its run folder>"
)

NO_ROOM = (
    "free some space there and run the command again (a training resumes from its last "
    "checkpoint with trainer.resume=<its run folder>)"
)


@functools.cache  # registered once a process
def freeze_at_exit() -> None:
    """At exit, leave the objects the process made to the OS: the last garbage collection would
    walk every object of torch's and transformers' modules (over a second of each command's exit
    on a laptop core). Files are closed and atexit handlers run as before."""
    atexit.register(gc.freeze)  # registered first: runs after every later handler


class _OneLineErrors(ContextDecorator):
    def __enter__(self) -> _OneLineErrors:
        freeze_at_exit()
        return self

    def __exit__(self, kind: Any, err: BaseException | None, trace: Any) -> None:
        if isinstance(err, BrokenPipeError):  # `mtl-train --help | head`: the reader is done
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error
            sys.exit(0)
        if isinstance(err, KeyboardInterrupt):
            if env_rank() == 0:  # a training's says what it resumes from
                print(err.args[0] if err.args else INTERRUPTED, file=sys.stderr)
            sys.exit(130)
        if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:  # a write of no helper
            err = MtlError(f"{err.filename or 'a write'}: no space left on its disk; {NO_ROOM}")
        if isinstance(err, MtlError):
            if env_rank() == 0 or not err.all_ranks:
                print(f"mtl: error: {err}", file=sys.stderr)
            sys.exit(2)  # raised while handling `err`: it stays the exit's __context__


one_line_errors = _OneLineErrors()


# -- values ----------------------------------------------------------------------------------------


def text(key: str, value: str) -> str:
    if value == "":
        raise MtlError(f"{key}= is empty; give a value")
    return value


def flag(key: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise MtlError(f"{key}={value} must be true or false")
    return value.lower() == "true"


def count(key: str, value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise MtlError(f"{key}={value} must be an integer >= 1")
    return int(value)


def names(key: str, value: str) -> list[str]:
    """`a`, or a list `[a,b]` (`a,b` is read alike)."""
    inner = value.strip()
    inner = inner[1:-1] if inner.startswith("[") and inner.endswith("]") else inner
    found = [name.strip() for name in inner.split(",") if name.strip()]
    if not found:
        raise MtlError(f"{key}= names nothing; give {key}=<name> or {key}=[a,b]")
    return found


# -- declarations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """`name=<value>`: `help` says what it means; `default` is used when it is not given
    (`REQUIRED`: it must be); `read(key, text)` turns the text into the value or raises a
    one-line MtlError."""

    name: str
    value: str
    help: str
    default: Any = None
    read: Callable[[str, str], Any] = text

    def usage(self) -> str:
        if self.default is REQUIRED:
            return f"{self.name}={self.value}"
        shown = str(self.default).lower() if isinstance(self.default, bool) else self.default
        return f"[{self.name}={self.value if shown is None else shown}]"


# The option of every command that reads a folder made elsewhere (mtl-export, mtl-predict).
TRUST = Option(
    "trust_custom_code",
    "false",
    "allow task types, heads and metrics that are not mtl's own (their code is imported and run)",
    False,
    flag,
)


@dataclass(frozen=True)
class Positional:
    name: str
    help: str
    required: bool = True


@dataclass(frozen=True)
class Command:
    """A console script's arguments. `arguments` says in words what its positional arguments
    are (for the error when too few or too many are given). `free`, when set, says what other
    `key=value` pairs mean (mtl-dry-run's task sizes): they are returned under "free", in order,
    instead of refused as unknown keys."""

    prog: str
    summary: str
    options: tuple[Option, ...] = ()
    positionals: tuple[Positional, ...] = ()
    arguments: str = ""
    free: tuple[tuple[str, str], ...] = ()  # (form, meaning) of each kind of other pair
    notes: str = ""

    def usage(self) -> str:
        words = [f"<{p.name}>" if p.required else f"[<{p.name}>]" for p in self.positionals]
        words += [form for form, _ in self.free]
        return " ".join([self.prog, *words, *(o.usage() for o in self.options)])

    def help(self) -> str:
        arguments = [(f"<{p.name}>", p.help) for p in self.positionals] + list(self.free)
        options = [(o.usage(), o.help) for o in self.options]
        width = min(max([len(name) for name, _ in arguments + options] or [0]), 30)
        lines = [f"usage: {self.usage()}", "", *textwrap.wrap(self.summary, WIDTH)]
        for title, rows in (
            ("arguments:", arguments),
            ("options (key=value; the default in brackets):", options),
        ):
            if rows:
                lines += ["", title, *(self._row(name, text, width) for name, text in rows)]
        if self.notes:
            lines += ["", *textwrap.wrap(self.notes, WIDTH)]
        return "\n".join(lines)

    @staticmethod
    def _row(name: str, text: str, width: int) -> str:
        indent = " " * (width + 4)
        first = f"  {name:<{width}}  "
        return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=indent)

    def parse(self, argv: Sequence[str]) -> dict[str, Any]:
        """The values of every option (defaults filled in), the positional arguments by name,
        and the `free` pairs under "free"; `--help` prints the help and exits 0."""
        if any(arg in ("-h", "--help") for arg in argv):
            print(self.help())
            sys.exit(0)
        declared = {o.name: o for o in self.options}
        given: dict[str, str] = {}
        free: dict[str, str] = {}
        words: list[str] = []
        for arg in argv:
            if arg.startswith("--"):
                raise MtlError(self._dashed(arg))
            key, eq, value = arg.partition("=")
            if not (eq and KEY.match(key)) or (self.positionals and Path(arg).exists()):
                words.append(arg)
            elif key in given or key in free:
                raise MtlError(f"{key}= is given twice; give it once")
            elif key in declared:
                given[key] = value
            elif self.free:
                free[key] = value
            else:
                raise MtlError(self._unknown(arg, key))
        return {**self._positionals(words), **self._values(given), "free": free}

    def _positionals(self, words: list[str]) -> dict[str, str | None]:
        least = sum(p.required for p in self.positionals)
        if not least <= len(words) <= len(self.positionals) or "" in words:
            if not self.positionals:
                raise MtlError(self._unknown(words[0], words[0]))
            extra = words[len(self.positionals) :]
            what = f"{extra[0]!r} is not key=value; " if extra else ""
            raise MtlError(f"{what}give {self.arguments}; usage: {self.usage()}")
        padded = [*words, *[None] * (len(self.positionals) - len(words))]
        return {p.name: word for p, word in zip(self.positionals, padded, strict=True)}

    def _values(self, given: dict[str, str]) -> dict[str, Any]:
        values = {}
        for option in self.options:
            if option.name in given:
                values[option.name] = option.read(option.name, given[option.name])
            elif option.default is REQUIRED:
                raise MtlError(f"{option.name}= is missing; usage: {self.usage()}")
            else:
                values[option.name] = option.default
        return values

    def _unknown(self, arg: str, key: str) -> str:
        hint = did_you_mean(key, [o.name for o in self.options])
        return (
            f"unknown option {arg!r}; {hint}{self.prog} takes "
            f"{', '.join(o.name for o in self.options) or 'no options'} ({self.prog} --help)"
        )

    def _dashed(self, arg: str) -> str:
        name = arg[2:].partition("=")[0].replace("-", "_")
        known = {o.name: o for o in self.options}
        if name in known:
            form = f"{name}=true" if known[name].read is flag else f"{name}={known[name].value}"
            return f"{arg}: options are key=value; write {form} ({self.prog} --help)"
        return f"{arg}: options are key=value, not --flags; {self._unknown(arg, name)}"
