"""Checks of what a config names outside itself, each failing with one line (`MtlError`).

- `check_arguments` holds a node's keys against the parameters of the class it builds
  (a mistyped key gets "did you mean"), as the schemas do for the typed groups;
- `check_wandb_credentials` finds W&B credentials before an online run starts;
- `check_sweeper` refuses sweeper settings that would end a sweep in a traceback or never end it;
- `check_task_overrides`, `check_chosen_files` and `check_optional_choices` catch what Hydra lets
  pass silently in the config files and options a run chose.
"""

from __future__ import annotations

import dataclasses
import inspect
import netrc
import os
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mtl.artifacts import config_dir
from mtl.errors import MtlError, did_you_mean, import_target  # noqa: F401 (public here too)

HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")
WANDB_HOST = "https://api.wandb.ai"


# The arguments mtl passes itself when it builds a group's object: not config keys.
GIVEN = {
    "loader": ("loaders", "seed", "pad_token_id", "epochs"),
    "sampler": ("lengths", "batch_size", "seed", "num_replicas", "rank"),
    "balancer": ("tasks", "loss_weights", "regression"),
}


def keyword_parameters(obj: Any) -> tuple[dict[str, tuple[Any, Any]], bool]:
    """{name: (type hint, default)} of the keyword parameters `obj` (a class or function)
    takes, and whether it takes other keywords too (`**kwargs`). A `**<name>` whose keys are
    the fields of the dataclass `obj.<name>_options` (a weighted loader's `**mixture`,
    `mtl.loaders.weighted`) counts as those fields."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return {}, True  # cannot tell: let the call decide
    try:
        hints = typing.get_type_hints(obj.__init__ if inspect.isclass(obj) else obj)
    except Exception:  # annotations that do not resolve: no types, the names still count
        hints = {}
    found, more = {}, False
    for p in signature.parameters.values():
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            found[p.name] = (hints.get(p.name, Any), p.default)
        elif p.kind == p.VAR_KEYWORD:
            options = getattr(obj, f"{p.name}_options", None)
            if not dataclasses.is_dataclass(options):
                more = True
                continue
            typed = typing.get_type_hints(options)
            for field in dataclasses.fields(options):
                default = field.default
                if default is dataclasses.MISSING:
                    default = inspect.Parameter.empty
                found.setdefault(field.name, (typed.get(field.name, Any), default))
    return found, more


def parameters(obj: Any) -> tuple[list[str], bool]:
    """The keyword parameters `obj` takes (`keyword_parameters`), and whether it takes others."""
    found, more = keyword_parameters(obj)
    return list(found), more


def unknown_argument(key: str, obj: Any, group: str = "") -> str | None:
    """The fix for `key`, an argument `obj` does not take (None when it takes it)."""
    names, any_keyword = parameters(obj)
    if any_keyword or key in names:
        return None
    names = [n for n in names if n not in GIVEN.get(group, ())]
    name = getattr(obj, "__name__", repr(obj))
    return f"{did_you_mean(key, names)}{name} takes {', '.join(names) or 'no keyword arguments'}"


def check_arguments(node: Mapping[str, Any], obj: Any, group: str) -> None:
    """Every key of `node` (a `_target_` config) is a parameter of `obj`, what it builds."""
    for key in node:
        if key in HYDRA_KEYS:
            continue
        fix = unknown_argument(str(key), obj, group)
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


def check_task_overrides(overrides: list[str]) -> None:
    """`task=[a,a]`: Hydra would silently keep one `a`; a repeated name is a user error."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(overrides):
        if override.key_or_group != "task":
            continue
        names = override.value()
        names = names if isinstance(names, list) else [names]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            names = ", ".join(twice)
            raise MtlError(f"task {names} given twice in task=[...]; list each task once")


CONF_DIR = config_dir()


def check_chosen_files(
    config_name: str | None, overrides: list[str], folders: Sequence[str] = ()
) -> None:
    """Two mistakes in the config files a run chose, which Hydra would let pass silently:

    - a file in a user folder (`folders`, the config folders searched) with the same path as one
      of mtl's is hidden by mtl's (Hydra searches mtl's folder first);
    - a task file `task/[...]/<name>.yaml` must start `# @package task.<name>`: a copied file
      that kept another task's header would merge into that task.
    """
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    loader = GlobalHydra.instance().config_loader()
    defaults = loader.compute_defaults_list(config_name, overrides, RunMode.RUN).defaults
    for chosen in defaults:
        path = chosen.config_path or ""
        own = CONF_DIR / f"{path}.yaml"
        theirs = [Path(f, f"{path}.yaml") for f in folders if Path(f, f"{path}.yaml").is_file()]
        theirs = [f for f in theirs if f.resolve() != own.resolve()]
        if own.is_file():
            for hidden in theirs:
                if hidden.read_text() != own.read_text():
                    raise MtlError(
                        f"{hidden} is hidden by mtl's own {path}.yaml (Hydra finds mtl's first); "
                        "give yours a name of its own (for a task, with a matching @package line)"
                    )
        if not path.startswith("task/") or (chosen.parent or "").startswith("task/"):
            continue
        name = path.rsplit("/", 1)[-1]
        if chosen.package != f"task.{name}":
            found = (
                "no @package line naming its task"
                if chosen.package == "task"
                else f"'# @package {chosen.package}'"
            )
            where = own if own.is_file() else theirs[0] if theirs else f"conf/{path}.yaml"
            raise MtlError(
                f"{where} has {found}; make its first line '# @package task.{name}' "
                "(a task's package is its file name)"
            )


OPTIONAL_GROUPS = ("experiment", "debug", "hparams_search")  # `optional` in conf/config.yaml


def check_optional_choices(choices: Any) -> None:
    """`experiment=nope`: Hydra skips a missing option of an `optional` group silently."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    for group in OPTIONAL_GROUPS:
        choice = choices.get(group)
        if choice is None:
            continue
        options = loader.get_group_options(group)
        if choice not in options:
            raise MtlError(
                f"unknown {group} '{choice}'; choose from {', '.join(sorted(options))}, "
                f"or add conf/{group}/{choice}.yaml"
            )
