"""The config schemas: every option of every group composes and validates; types and keys are
checked while Hydra composes (a task file of mtl's names its type's schema; any task is checked
against its type's `Options` when validated); a task file's `@package` line must match its file
name."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from mtl.config import (
    LoggerConfig,
    ModelConfig,
    MtlConfig,
    TaskConfig,
    TrainerConfig,
    check_chosen_files,
    validate,
)
from mtl.errors import MtlError
from mtl.task_types import task_type_class
from tests.conftest import hydra_session

CONF = Path(__file__).resolve().parents[2] / "conf"
BASE = ["task=[synthetic_cls]", "output_dir=unused"]


def group_options(loader, group: str, prefix: str = "") -> list[str]:
    options = [prefix + name for name in loader.get_group_options(group)]
    for sub in loader.list_groups(group):
        options += group_options(loader, f"{group}/{sub}", f"{prefix}{sub}/")
    return options


def every_option() -> list[tuple[str, str]]:
    """(group, option) for every option mtl ships, found through Hydra's config repository
    (Hydra's own groups under hydra/ left out)."""
    with hydra_session():
        loader = GlobalHydra.instance().config_loader()
        groups = [g for g in loader.list_groups("") if g != "hydra"]
        found = [(g, option) for g in groups for option in group_options(loader, g)]
    GlobalHydra.instance().clear()
    return found


OPTIONS = every_option()


def test_every_group_is_found():
    groups = {group for group, _ in OPTIONS}
    assert groups == {
        "task",
        "loader",
        "sampler",
        "balancer",
        "model",
        "trainer",
        "logger",
        "experiment",
        "debug",
        "hparams_search",
    }
    assert ("task", "synthetic_cls") in OPTIONS and ("loader", "mixup") in OPTIONS


def missing_plugin(group: str, option: str) -> str | None:
    """The Hydra option an mtl option selects (`override /hydra/sweeper: optuna`) when no
    installed plugin provides it, e.g. `hydra/sweeper/optuna` without hydra-optuna-sweeper."""
    defaults = (yaml.safe_load((CONF / group / f"{option}.yaml").read_text()) or {}).get(
        "defaults", []
    )
    entries = [item for entry in defaults if isinstance(entry, dict) for item in entry.items()]
    with hydra_session():
        loader = GlobalHydra.instance().config_loader()
        for key, name in entries:
            chosen = key.removeprefix("override").strip().lstrip("/")
            if chosen.startswith("hydra/") and name not in loader.get_group_options(chosen):
                return f"{chosen}/{name}"
    return None


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes_and_validates(group, option):
    if plugin := missing_plugin(group, option):
        pytest.skip(f"{plugin} needs a Hydra plugin that is not installed")
    choice = f"task=[{option}]" if group == "task" else f"{group}={option}"
    with hydra_session():
        cfg = compose("config", overrides=[*BASE, choice])
    settings = validate(cfg)
    assert OmegaConf.get_type(cfg) is MtlConfig
    assert OmegaConf.get_type(cfg.trainer) is TrainerConfig
    if group == "task":
        name = option.rsplit("/", 1)[-1]
        assert list(settings.tasks) == [name]
        task = settings.tasks[name]
        assert isinstance(task, TaskConfig)
        assert type(task) is task_type_class(task.type).Options
    elif group in ("loader", "sampler"):  # the option's own class, not the default's
        assert cfg[group]._target_ == OmegaConf.load(CONF / group / f"{option}.yaml")._target_


def test_yaml_files_keep_their_values_over_the_schema_defaults():
    with hydra_session():
        cfg = compose("config", overrides=BASE)
        tiny = compose("config", overrides=[*BASE, "model=tiny", "logger=none"])
    settings, tiny_settings = validate(cfg), validate(tiny)
    assert settings.trainer == TrainerConfig(epochs=2)
    assert settings.trainer.epochs == 2 and settings.trainer.lr == 1e-4
    assert settings.model == ModelConfig()
    assert settings.logger == LoggerConfig(backend="wandb", project="mtl", mode="offline")
    assert cfg.seed == 0 and settings.data.max_examples is None
    assert tiny_settings.model.random_init is True
    assert tiny_settings.model.config["hidden_size"] == 32
    assert tiny_settings.logger.backend == "none"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.epochs=abc", "epochs"),
        ("trainer.nope=1", "nope"),
        ("model.head_dropout=[1]", "head_dropout"),
        ("task.synthetic_cls.batch_size=many", "batch_size"),
        ("data.nope=1", "nope"),
    ],
)
def test_types_and_keys_are_checked_while_composing(override, key):
    with hydra_session(), pytest.raises(ConfigCompositionException) as err:
        compose("config", overrides=[*BASE, override])
    assert key in str(err.value) + str(err.value.__cause__)


def test_a_task_file_is_typed_by_the_schema(tmp_path):
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "mine.yaml").write_text(
        "# @package task.mine\ntype: regression\nsource: {path: x.csv}\nbatch_size: many\n"
    )
    with hydra_session():
        cfg = compose("config", overrides=[f"hydra.searchpath=[file://{tmp_path}]", "task=[mine]"])
    with pytest.raises(MtlError, match=r"bad config at 'task.mine.batch_size'"):
        validate(cfg)


def write_task(folder: Path, path: str, header: str | None) -> None:
    file = folder / "task" / f"{path}.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# @package {header}"] if header else []
    file.write_text("\n".join([*lines, "type: regression", "source: {bundled: synthetic_reg}"]))


@pytest.mark.parametrize(
    ("path", "header", "problem"),
    [
        ("copy", "task.synthetic_cls", "has '# @package task.synthetic_cls'"),
        ("mine/mnli", "task.mine.mnli", "has '# @package task.mine.mnli'"),
        ("bare", None, "has no @package line naming its task"),
    ],
)
def test_a_task_package_that_is_not_its_file_name_is_refused(tmp_path, path, header, problem):
    write_task(tmp_path, path, header)
    name = path.rsplit("/", 1)[-1]
    overrides = [f"hydra.searchpath=[file://{tmp_path}]", f"task=[synthetic_cls,{path}]"]
    with hydra_session(), pytest.raises(MtlError) as err:
        check_chosen_files("config", overrides, [str(tmp_path)])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path}/task/{path}.yaml {problem}")
    assert f"make its first line '# @package task.{name}'" in message


@pytest.mark.parametrize("path", ["mine", "mine/mnli"])
def test_a_task_package_that_is_its_file_name_passes(tmp_path, path):
    name = path.rsplit("/", 1)[-1]
    write_task(tmp_path, path, f"task.{name}")
    overrides = [f"hydra.searchpath=[file://{tmp_path}]", f"task=[synthetic_cls,{path}]"]
    with hydra_session():
        check_chosen_files("config", overrides, [str(tmp_path)])
        cfg = compose("config", overrides=overrides)
    assert sorted(validate(cfg).tasks) == sorted(["synthetic_cls", name])


def test_a_user_file_hidden_by_one_of_mtl_s_is_refused(tmp_path):
    write_task(tmp_path, "synthetic_cls", "synthetic_cls")
    overrides = [f"hydra.searchpath=[file://{tmp_path}]", "task=[synthetic_cls]"]
    with hydra_session(), pytest.raises(MtlError) as err:
        check_chosen_files("config", overrides, [str(CONF), str(tmp_path)])
    assert str(err.value).startswith(
        f"{tmp_path}/task/synthetic_cls.yaml is hidden by mtl's own task/synthetic_cls.yaml"
    )
    # A copy that is the same as mtl's hides nothing; an unchosen file is not looked at.
    (tmp_path / "task" / "synthetic_cls.yaml").write_text(
        (CONF / "task" / "synthetic_cls.yaml").read_text()
    )
    write_task(tmp_path, "synthetic_reg", "synthetic_reg")
    with hydra_session():
        check_chosen_files("config", overrides, [str(CONF), str(tmp_path)])
