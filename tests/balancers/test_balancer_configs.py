"""Every `balancer=<name>` composes, takes its defaults from its class, and builds."""

from __future__ import annotations

import inspect

import pytest
import torch
from hydra.errors import HydraException
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from mtl.artifacts import config_dir
from mtl.balancers import Balancer
from mtl.config import validate
from mtl.config.checks import GIVEN
from mtl.training.setup.run import one_task_steps
from tests.conftest import compose_config

CONF = config_dir()
TASKS = ["synthetic_cls", "synthetic_tag"]
OPTIONS = sorted(p.stem for p in (CONF / "balancer").glob("*.yaml"))


def compose_with(*overrides: str):
    base = [f"task=[{','.join(TASKS)}]", "model=tiny", "logger=none"]
    return compose_config(*base, *overrides)


def test_the_default_is_sum():
    assert compose_with().balancer._target_ == "mtl.balancers.Sum"


@pytest.mark.parametrize("name", OPTIONS)
def test_every_balancer_composes_with_its_class_defaults_and_builds(name):
    cfg = compose_with(f"balancer={name}")
    validate(cfg)
    node = OmegaConf.load(CONF / "balancer" / f"{name}.yaml")
    assert list(node.defaults)[-1] == "_self_"
    cls = get_class(cfg.balancer._target_)
    defaults = {
        p.name: p.default
        for p in inspect.signature(cls).parameters.values()
        if p.name not in GIVEN["balancer"] and p.default is not p.empty
    }
    composed = OmegaConf.to_container(cfg.balancer)
    composed.pop("_target_")
    assert set(composed) == set(defaults)
    built = instantiate(cfg.balancer, TASKS)
    assert isinstance(built, Balancer) and built.tasks == TASKS
    assert set(built.weights()) <= set(TASKS)


def test_an_option_is_set_from_the_command_line_and_a_mistyped_one_refused():
    cfg = compose_with("balancer=dwa", "balancer.temperature=3")
    assert instantiate(cfg.balancer, TASKS).temperature == 3.0
    with pytest.raises(HydraException, match="temperatur"):
        compose_with("balancer=dwa", "balancer.temperatur=3")


class Schedule:
    """A loader's schedule as `one_task_steps` reads it."""

    def __init__(self, steps: list[list[str]]):
        self.steps = steps

    def epoch_length(self, epoch: int) -> int:
        return len(self.steps)

    def tasks_at(self, epoch: int, step: int) -> list[str]:
        return self.steps[step]


def test_one_task_steps_are_told_apart_from_steps_with_several():
    round_robin = Schedule([["a"], ["b"], ["c"], ["a"], ["b"], ["c"]])
    assert one_task_steps(round_robin, grad_accum=1)
    assert not one_task_steps(round_robin, grad_accum=3)
    assert not one_task_steps(Schedule([["a", "b"]]), grad_accum=1)  # mixup
    assert one_task_steps(Schedule([["a"], ["a"], ["b"], ["b"]]), grad_accum=2)


def test_a_user_balancer_from_their_own_folder(tmp_path, monkeypatch):
    (tmp_path / "my_balancer.py").write_text(
        "import torch\n"
        "from mtl.balancers import Balancer\n\n\n"
        "class Max(Balancer):\n"
        "    def __init__(self, tasks, scale: float = 1.0):\n"
        "        super().__init__(tasks)\n"
        "        self.scale = scale\n\n"
        "    def loss(self, task_losses):\n"
        "        return self.scale * torch.stack(list(task_losses.values())).max()\n"
    )
    (tmp_path / "conf" / "balancer").mkdir(parents=True)
    (tmp_path / "conf" / "balancer" / "max.yaml").write_text(
        "_target_: my_balancer.Max\nscale: 2.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = compose_with(f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "balancer=max")
    built = instantiate(cfg.balancer, TASKS)
    losses = {"synthetic_cls": torch.tensor(1.0), "synthetic_tag": torch.tensor(3.0)}
    assert built.loss(losses).item() == 6.0
