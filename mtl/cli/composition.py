"""One line for a config Hydra cannot compose (`composition_error`): the unknown option and the
options there are, the unknown key and the keys its schema or class has, the bad value, the
override that does not parse, the Hydra plugin to install."""

from __future__ import annotations

import re
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from mtl.artifacts import config_dir
from mtl.config.checks import unknown_argument
from mtl.errors import MtlError, did_you_mean, import_target

# Options that Hydra plugins add (`hydra/launcher=slurm` builds on submitit_slurm): their package.
PLUGINS = {
    "hydra/launcher/submitit": "hydra-submitit-launcher",
    "hydra/launcher/joblib": "hydra-joblib-launcher",
    "hydra/launcher/ray": "hydra-ray-launcher",
    "hydra/launcher/rq": "hydra-rq-launcher",
    "hydra/sweeper/optuna": "hydra-optuna-sweeper",
    "hydra/sweeper/ax": "hydra-ax-sweeper",
    "hydra/sweeper/nevergrad": "hydra-nevergrad-sweeper",
}


def composition_error(err: Exception) -> str:
    """One line naming what Hydra could not compose and how to fix it."""
    if isinstance(err, MissingConfigException):
        return _missing_option(err)
    if isinstance(err, OverrideParseException):
        return f"cannot read the override {err.override!r}: {_first_line(err)}"
    cause = err if isinstance(err, OmegaConfBaseException) else err.__cause__ or err.__context__
    where = re.match(r"In '([^']+)'", str(err))
    in_file = f" (in {where.group(1)}.yaml)" if where else ""
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        key = cause.full_key
        if where and where.group(1).startswith("task/") and key.count(".") == 1:
            name = where.group(1).rsplit("/", 1)[-1]  # a task file without its @package line
            return (
                f"{where.group(1)}.yaml puts its keys at task.* ({key}); make its first line "
                f"'# @package task.{name}' (a task's package is its file name)"
            )
        if isinstance(cause, ConfigKeyError) or "not in" in _first_line(cause):
            return f"unknown key {key}{in_file}; {_known_keys(cause, key, str(err))}"
        if isinstance(cause, ValidationError):
            return f"bad value for {key}{in_file}: {_first_line(cause)}"
        return f"bad config at {key}{in_file}: {_first_line(cause)}"
    text = _first_line(err)
    if cause is not None and str(cause).strip():
        text = f"{text}: {_first_line(cause)}"
    return text


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _missing_option(err: MissingConfigException) -> str:
    missing = err.missing_cfg_file or ""
    text = str(err)
    if text.startswith("Cannot find primary config"):
        return (
            f"no primary config '{missing}' in the config search path; check --config-name "
            "and --config-dir"
        )
    # The folders Hydra searched, user folders and hydra.searchpath included.
    sources = re.findall(r"provider=(.+?), path=(\S+)", text)
    if not sources or "/" not in missing:
        return _first_line(err)
    plugin = next((pkg for path, pkg in PLUGINS.items() if missing.startswith(path)), None)
    if plugin:
        return f"{missing} comes with a Hydra plugin that is not installed; pip install {plugin}"
    folders = _searched_folders(sources)
    parts = missing.split("/")
    named = re.search(r"Available options in '([^']+)'", text)
    group = (
        named.group(1)
        if named
        else next(  # `task=[glue/mnli]`: the group is `task`, the option `glue/mnli`
            (
                "/".join(parts[:i])
                for i in range(1, len(parts))
                if any((folder / "/".join(parts[:i])).is_dir() for folder in folders)
            ),
            "/".join(parts[:-1]),
        )
    )
    options = _group_options(folders, group)
    named = [o for o in _named_options(group) if o not in options]
    unknown = named or [missing[len(group) + 1 :]]  # the command line's order: the first first
    option, listed = unknown[0], ", ".join(repr(o) for o in unknown)
    local = Path.cwd() / "conf"
    if (local / group / f"{option}.yaml").is_file() and local.resolve() not in folders:
        return (
            f"unknown {group} {listed}: conf/{group}/{option}.yaml is in this folder's conf/, "
            "which mtl does not search; add --config-dir conf to the command"
        )
    choices = f"choose from {', '.join(options)}, or " if options else ""
    hint = did_you_mean(option, options)
    return f"unknown {group} {listed}; {hint}{choices}add conf/{group}/{option}.yaml"


def _named_options(group: str) -> list[str]:
    """The options of `group` the command line names (`task=[a,b]`, `+task=a`), in its order."""
    try:
        overrides = OverridesParser.create().parse_overrides(sys.argv[1:])
    except HydraException:
        return []
    named: list[str] = []
    for override in overrides:
        if override.key_or_group == group and not override.is_sweep_override():
            value = override.value()
            named += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return named


def _searched_folders(sources: list[tuple[str, str]]) -> list[Path]:
    """mtl's own config folder and the `file://` folders of the search path Hydra reported
    (user folders: `--config-dir`, `hydra.searchpath`)."""
    folders = [config_dir()]
    folders += [
        Path(path.removeprefix("file://")) for _, path in sources if path.startswith("file://")
    ]
    return list(dict.fromkeys(folder.resolve() for folder in folders))


def _group_options(folders: list[Path], group: str) -> list[str]:
    """The options of a group in `folders`, those in its sub-folders as `sub/name`."""
    return sorted(
        {
            path.relative_to(folder / group).with_suffix("").as_posix()
            for folder in folders
            for path in (folder / group).rglob("*.yaml")
        }
    )


def _known_keys(cause: OmegaConfBaseException, key: str, hydra_message: str) -> str:
    """The fix for an unknown key: the keys its schema has (closest first), or Hydra's hint."""
    schema = getattr(cause, "object_type", None)
    if is_dataclass(schema):
        names = [f.name for f in fields(schema)]
        hint = did_you_mean(key.rpartition(".")[2], names)
        return f"{hint}{schema.__name__} has {', '.join(names)}"
    parent = getattr(cause, "parent_node", None)
    target = parent.get("_target_") if isinstance(parent, DictConfig) else None
    if target:  # a loader or sampler: the keys are its class's arguments
        try:
            obj = import_target(target, "_target_")
            fix = unknown_argument(key.rpartition(".")[2], obj, key.partition(".")[0])
        except MtlError:
            fix = None
        if fix:
            return fix
    hint = re.search(r"To append to your config use (\S+)", hydra_message)
    if hint:
        return f"to add it (if its class takes it) use {hint.group(1)}"
    return "remove it or check its spelling"
