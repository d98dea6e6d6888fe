"""Checks of what a config names outside itself, each failing with one line (`MtlError`).

- `import_target` imports a `_target_` and says which part of the path is wrong;
- `check_arguments` holds a node's keys against the parameters of the class it builds
  (a mistyped key gets "did you mean"), as the schemas do for the typed groups;
- `check_wandb_credentials` finds W&B credentials before an online run starts;
- `check_sweeper` refuses sweeper settings that would end a sweep in a traceback or never end it.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import netrc
import os
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlparse

from mtl.errors import MtlError

HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")
WANDB_HOST = "https://api.wandb.ai"


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


def parameters(obj: Any) -> tuple[list[str], bool]:
    """The keyword parameters `obj` (a class or function) takes, and whether it takes **kwargs."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return [], True  # cannot tell: let the call decide
    params = signature.parameters.values()
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return names, any(p.kind == p.VAR_KEYWORD for p in params)


def unknown_argument(key: str, obj: Any) -> str | None:
    """The fix for `key`, an argument `obj` does not take (None when it takes it)."""
    names, any_keyword = parameters(obj)
    if any_keyword or key in names:
        return None
    name = getattr(obj, "__name__", repr(obj))
    return f"{did_you_mean(key, names)}{name} takes {', '.join(names) or 'no keyword arguments'}"


def check_arguments(node: Mapping[str, Any], obj: Any, group: str) -> None:
    """Every key of `node` (a `_target_` config) is a parameter of `obj`, what it builds."""
    for key in node:
        if key in HYDRA_KEYS:
            continue
        fix = unknown_argument(str(key), obj)
        if fix is not None:
            raise MtlError(f"unknown key {group}.{key}; {fix}")


def has_wandb_credentials() -> bool:
    """Whether W&B would find credentials without asking: WANDB_API_KEY, an identity token
    file, or a netrc entry for the W&B host (WANDB_BASE_URL), as `wandb login` writes."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = os.environ.get("WANDB_BASE_URL") or WANDB_HOST
    try:  # wandb's own lookup, where this wandb has it
        from wandb.sdk.lib.wbauth import wbnetrc

        return wbnetrc.read_netrc_auth(host=host) is not None
    except ImportError:
        pass
    except Exception:  # a netrc entry W&B cannot read: let wandb say what is wrong with it
        return True
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return netrc.netrc(path).authenticators(urlparse(host).hostname or host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def check_wandb_credentials() -> None:
    if not has_wandb_credentials():
        raise MtlError(
            "logger.mode=online needs W&B credentials and none were found (WANDB_API_KEY or "
            "~/.netrc); run `wandb login` once, or log locally with logger.mode=offline"
        )


def check_sweeper(sweeper: Mapping[str, Any]) -> None:
    """Optuna's `n_trials` and `n_jobs` (`hparams_search=...`): at least 1 each (0 trials end
    the sweep in a ValueError, 0 jobs a batch never ends)."""
    if "optuna" not in str(sweeper.get("_target_", "")).lower():
        return
    for key in ("n_trials", "n_jobs"):
        value = sweeper.get(key)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise MtlError(
                f"hydra.sweeper.{key}={value} must be an integer >= 1 "
                f"(e.g. hydra.sweeper.{key}={20 if key == 'n_trials' else 1})"
            )
