"""`build`: a config node with a `_target_` becomes its object, a bad option one line naming the
config group. Every pluggable part is named in its config: samplers, composite loaders, heads and
balancers by `_target_`, task types by `type:`, metrics by name or import path. Nothing here lists
the choices."""

from __future__ import annotations

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig

from mtl.config.checks import check_arguments, import_target
from mtl.errors import MtlError


def build(node: DictConfig, group: str, kind: type, *args, **kwargs):
    """`instantiate`, with a bad option reported as one line naming the config group: a
    `_target_` that does not import or is not a subclass of `kind` (checked before anything is
    called), a key its class does not take, a value it refuses."""
    check_arguments(node, import_target(node.get("_target_"), f"{group}._target_", kind), group)
    try:
        return instantiate(node, *args, **kwargs)
    except InstantiationException as err:
        raise _one_line(err.__cause__ or err, group) from None


def build_call(factory, group: str, *args, **kwargs):
    """Call a partial from `build` (a sampler factory), with the same one-line errors."""
    try:
        return factory(*args, **kwargs)
    except (MtlError, TypeError, ValueError) as err:
        raise _one_line(err, group) from None


def _one_line(cause: BaseException, group: str) -> MtlError:
    if isinstance(cause, MtlError):  # named already (`loader.online.policy: ...`): once
        text = str(cause)
        return MtlError(text if text.startswith(f"{group}.") else f"{group}: {text}")
    detail = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
    return MtlError(f"{group}: {detail}; see conf/{group}/ for the options")
