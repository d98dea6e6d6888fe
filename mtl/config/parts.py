"""The schemas of the `loader`, `sampler` and `balancer` config groups, read from the classes.

A built-in loader or sampler states every option's default once: in its constructor. The schema
of `conf/loader/<name>.yaml` is a dataclass made from that signature (`options_schema`), stored
in Hydra's ConfigStore as `<name>_loader_schema` (samplers: `<name>_sampler_schema`) and named
in the YAML's defaults list, so `loader.<key>=...` works for every option and a mistyped key is
refused while Hydra composes. The YAML names `_target_` and its deliberate overrides only.

A user's class needs no schema: its YAML is free-form and may add any keys of its own.
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import make_dataclass
from typing import Any, Optional

from omegaconf import MISSING

from mtl.balancers import DWA, Aggregate, Sum, Uncertainty
from mtl.config.checks import GIVEN, keyword_parameters
from mtl.loaders.mixup import MixupLoader
from mtl.loaders.random import RandomLoader
from mtl.loaders.round_robin import RoundRobinLoader
from mtl.loaders.sequential import SequentialLoader
from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler, TokenBudgetBatchSampler

_PLAIN = (bool, int, float, str)


def _config_type(hint: Any) -> Any:
    """The OmegaConf type of an option: a plain type, Optional of one, else Any (unchecked)."""
    if hint in _PLAIN:
        return hint
    args = typing.get_args(hint)
    is_union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    if is_union and len(args) == 2 and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        if inner in _PLAIN:
            return Optional[inner]  # noqa: UP045 (OmegaConf reads typing.Optional)
    return Any


def options_schema(cls: type, given: tuple[str, ...], *, partial: bool = False) -> type:
    """A dataclass of the options `cls`'s constructor takes from the config: every parameter
    with a default except `given`, with its type and default as the signature states them
    (`keyword_parameters`). `_target_` has no default (the YAML names the class); `partial`:
    also `_partial_: true`."""
    fields: list[tuple] = [("_target_", str, MISSING)]
    if partial:
        fields.append(("_partial_", bool, True))
    for name, (hint, default) in keyword_parameters(cls)[0].items():
        if name in given or default is inspect.Parameter.empty:
            continue
        fields.append((name, _config_type(hint), default))
    return make_dataclass(f"{cls.__name__}Options", fields)


LOADER_AND_SAMPLER_SCHEMAS = {
    "mixup_loader_schema": options_schema(MixupLoader, GIVEN["loader"]),
    "random_loader_schema": options_schema(RandomLoader, GIVEN["loader"]),
    "round_robin_loader_schema": options_schema(RoundRobinLoader, GIVEN["loader"]),
    "sequential_loader_schema": options_schema(SequentialLoader, GIVEN["loader"]),
    "block_shuffle_sampler_schema": options_schema(
        BlockShuffleBatchSampler, GIVEN["sampler"], partial=True
    ),
    "random_sampler_schema": options_schema(RandomBatchSampler, GIVEN["sampler"], partial=True),
    "token_budget_sampler_schema": options_schema(
        TokenBudgetBatchSampler, GIVEN["sampler"], partial=True
    ),
}

BALANCER_SCHEMAS = {
    "sum_balancer_schema": options_schema(Sum, GIVEN["balancer"]),
    "uncertainty_balancer_schema": options_schema(Uncertainty, GIVEN["balancer"]),
    "dwa_balancer_schema": options_schema(DWA, GIVEN["balancer"]),
    "aggregate_balancer_schema": options_schema(Aggregate, GIVEN["balancer"]),
}
