"""Loaders and samplers hold their defaults once (every option of every group composing and
validating: tests/config/test_config.py).

The loader and sampler YAMLs name `_target_` and deliberate overrides only (each with a comment
saying why); every other value comes from the class's own signature through its schema
(`mtl.config.parts`).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
from hydra.errors import HydraException
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from mtl.artifacts import config_dir
from mtl.config.checks import GIVEN, keyword_parameters

ROOT = Path(__file__).resolve().parents[2]
CONF = config_dir()
BASE = ["task=[synthetic_cls,synthetic_tag]", "model=tiny", "logger=none"]
STRUCTURAL = {"defaults", "_target_", "_partial_"}


def options(group: str) -> list[str]:
    """The options of a config group: its YAML files (task files in subfolders as `glue/cola`)."""
    folder = CONF / group
    names = []
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            names.append(entry.name[: -len(".yaml")])
        elif entry.is_dir() and group == "task":
            names += [f"{entry.name}/{n}" for n in options(f"task/{entry.name}")]
    return sorted(names)


@pytest.fixture
def compose_with(compose_cfg):
    """`compose_with(*overrides)`: the real config with BASE and these overrides."""
    return lambda *overrides: compose_cfg(*BASE, *overrides)


LOADERS_AND_SAMPLERS = [(g, n) for g in ("loader", "sampler") for n in options(g)]


def yaml_keys(group: str, name: str) -> dict[str, tuple[object, str]]:
    """The YAML's own keys (not structural): key -> (value, the comment on its line)."""
    text = (CONF / group / f"{name}.yaml").read_text()
    node = OmegaConf.load(CONF / group / f"{name}.yaml")
    comments = {}
    for line in text.splitlines():
        match = re.match(r"^(\w+):[^#]*(#.*)?$", line)
        if match:
            comments[match.group(1)] = (match.group(2) or "").lstrip("# ")
    return {k: (node[k], comments.get(k, "")) for k in node if k not in STRUCTURAL}


def class_defaults(group: str, target: str) -> dict[str, object]:
    options = keyword_parameters(get_class(target))[0].items()
    return {
        name: default
        for name, (_, default) in options
        if name not in GIVEN[group] and default is not inspect.Parameter.empty
    }


@pytest.mark.parametrize(("group", "name"), LOADERS_AND_SAMPLERS)
def test_yaml_names_its_class_and_only_deliberate_overrides(group, name):
    node = OmegaConf.load(CONF / group / f"{name}.yaml")
    assert list(node.defaults) == [f"/{name}_{group}_schema", "_self_"]
    assert (group == "sampler") == bool(node.get("_partial_"))
    defaults = class_defaults(group, node._target_)
    for key, (value, comment) in yaml_keys(group, name).items():
        assert key in defaults, f"{group}/{name}.yaml: {key} is not an option of {node._target_}"
        assert value != defaults[key], f"{group}/{name}.yaml repeats the class default {key}"
        assert comment.startswith("override:"), f"{group}/{name}.yaml: say why {key} differs"


@pytest.mark.parametrize(("group", "name"), LOADERS_AND_SAMPLERS)
def test_composed_values_are_the_class_defaults_and_the_yaml_overrides(group, name, compose_with):
    cfg = compose_with(f"{group}={name}")
    composed = OmegaConf.to_container(cfg[group])
    target = composed.pop("_target_")
    composed.pop("_partial_", None)
    overrides = {k: v for k, (v, _) in yaml_keys(group, name).items()}
    assert composed == {**class_defaults(group, target), **overrides}


def tiny_loaders(sampler_factory, sizes: dict[str, int]) -> dict[str, DataLoader]:
    loaders = {}
    for i, (task, n) in enumerate(sizes.items()):
        lengths = [1 + j % 7 for j in range(n)]
        sampler = sampler_factory(lengths, 4, seed=1000 * i, num_replicas=1, rank=0)
        data = [{"input_ids": torch.full((k,), 5), "labels": torch.tensor(0)} for k in lengths]
        loaders[task] = DataLoader(data, batch_sampler=sampler, collate_fn=collate)
    return loaders


def collate(rows: list[dict]) -> dict:
    length = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r["input_ids"])] = r["input_ids"]
    return {"input_ids": ids, "attention_mask": (ids > 0).long(), "labels": torch.zeros(len(rows))}


@pytest.mark.parametrize("name", options("sampler"))
def test_every_sampler_builds_as_its_class_with_the_yaml_overrides(name, compose_with):
    node = compose_with(f"sampler={name}").sampler
    overrides = {k: v for k, (v, _) in yaml_keys("sampler", name).items()}
    lengths = [1 + (7 * j) % 23 for j in range(150)]
    built = instantiate(node)(lengths, 8, seed=3, num_replicas=2, rank=1)
    direct = get_class(node._target_)(lengths, 8, seed=3, num_replicas=2, rank=1, **overrides)
    for epoch in range(2):
        assert [b.tolist() for b in built.epoch_batches(epoch)] == [
            b.tolist() for b in direct.epoch_batches(epoch)
        ]


@pytest.mark.parametrize("name", options("loader"))
def test_every_loader_builds_as_its_class_and_runs_an_epoch(name, compose_with):
    cfg = compose_with(f"loader={name}")
    make_sampler = instantiate(cfg.sampler)
    sizes = {"a": 9, "b": 5, "c": 14}
    cls = get_class(cfg.loader._target_)
    given = (
        {"seed": 2, "pad_token_id": 0}
        if "pad_token_id" in inspect.signature(cls).parameters
        else {"seed": 2}
    )
    built = instantiate(cfg.loader, tiny_loaders(make_sampler, sizes), **given)
    direct = cls(tiny_loaders(make_sampler, sizes), **given)
    assert built.options() == direct.options()  # no loader YAML overrides a default
    assert len(list(built)) == len(direct) > 0


@pytest.mark.parametrize("override", ["loader.weightin=uniform", "sampler.sort_bs=3"])
def test_a_mistyped_key_of_a_builtin_loader_or_sampler_is_refused(override, compose_with):
    with pytest.raises(HydraException, match="weightin|sort_bs"):
        compose_with(override)


def test_the_options_of_a_builtin_are_set_from_the_command_line(compose_with):
    cfg = compose_with("loader=random", "loader.weighting=temperature", "loader.temperature=3")
    assert (cfg.loader.weighting, cfg.loader.temperature) == ("temperature", 3.0)
    cfg = compose_with("sampler=token_budget", "sampler.max_tokens=512", "sampler.drop_last=true")
    sampler = instantiate(cfg.sampler)([3] * 40, 4)
    assert (sampler.max_tokens, sampler.drop_last) == (512, True)


def test_a_users_loader_adds_keys_of_its_own(compose_with):
    project = ROOT / "examples" / "custom_project"
    cfg = compose_with(
        f"hydra.searchpath=[file://{project / 'conf'}]", "loader=blocks", "loader.block=2"
    )
    assert cfg.loader._target_ == "my_project.loaders.BlockLoader"
    assert cfg.loader.block == 2
