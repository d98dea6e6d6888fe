"""One way to find a part: task types by import path (short names asked of the exported
classes), each type's own config keys (`Options`), metrics that know their direction, and the
export mapping asked of the type and head."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hydra.core.global_hydra import GlobalHydra

import mtl.task_types as task_types
from mtl.config import validate
from mtl.errors import MtlError
from mtl.models import heads
from mtl.task_types import (
    MultipleChoice,
    QuestionAnswering,
    Regression,
    TaskType,
    builtin_types,
    metric_directions,
    task_config,
    task_type_class,
)
from mtl.training.tracking.logger import summary_of

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
EXAMPLE = ROOT / "examples" / "custom_project"
TASK_FILES = sorted(
    p.relative_to(CONF / "task").with_suffix("") for p in CONF.glob("task/**/*.yaml")
)

# Every key of the task schema before each type declared its own (one closed union), with its
# default then: a task file must compose to these same values.
UNION_DEFAULTS = {
    "batch_size": 32, "max_length": 256, "text_column": "text", "label_column": "label",
    "label_names": None, "dev_fraction": 0.1, "text_pair_column": None, "metrics": None,
    "head": None, "question_column": None, "context_column": None, "choices_column": None,
    "answers_column": None, "stride": None,
}  # fmt: skip


@pytest.fixture
def composed(compose_cfg):
    return lambda *overrides: compose_cfg("output_dir=unused", *overrides)


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield EXAMPLE
    GlobalHydra.instance().clear()


def test_short_names_are_the_exported_types_own():
    found = builtin_types()
    exported = [getattr(task_types, n) for n in task_types.__all__]
    types = [c for c in exported if isinstance(c, type) and issubclass(c, TaskType) and c.type_name]
    assert found == {cls.type_name: cls for cls in types}
    assert len(found) == 7
    for name, cls in found.items():
        assert task_type_class(name) is cls
        assert task_type_class(f"mtl.task_types.{cls.__name__}") is cls
        assert task_type_class(f"{cls.__module__}.{cls.__name__}") is cls


def test_a_mistyped_type_gets_the_closest_name():
    with pytest.raises(MtlError, match=r"did you mean question_answering\? choose one of"):
        task_type_class("question_answer", "qa")
    with pytest.raises(MtlError, match=r"mtl.task_types has no 'Regresion'; did you mean"):
        task_type_class("mtl.task_types.Regresion", "r")
    with pytest.raises(MtlError, match=r"not a subclass of mtl.task_types.base.TaskType"):
        task_type_class("mtl.task_types.metrics.accuracy", "r")


@pytest.mark.parametrize("path", TASK_FILES, ids=str)
def test_every_task_file_composes_to_the_values_it_had(path, composed):
    name = path.name
    settings = validate(composed(f"task=[{path}]"))
    config = settings.tasks[name]
    written = yaml.safe_load((CONF / "task" / f"{path}.yaml").read_text())
    assert type(config) is task_type_class(written["type"]).Options
    for key, default in UNION_DEFAULTS.items():
        assert getattr(config, key, default) == written.get(key, default), key
    assert config.type == written["type"] and config.source == written["source"]


def test_a_types_own_key_is_checked_and_a_typo_gets_the_closest_name(composed):
    settings = validate(composed("task=[squad]", "task.squad.stride=64"))
    assert settings.tasks["squad"].stride == 64
    with pytest.raises(MtlError, match=r"unknown key task.squad.strid; did you mean stride\?"):
        validate(composed("task=[squad]", "+task.squad.strid=64"))
    # a key of another type is not one of this type's
    with pytest.raises(MtlError, match=r"key task.synthetic_cls.stride; TaskConfig has type"):
        validate(composed("task=[synthetic_cls]", "+task.synthetic_cls.stride=64"))


def test_a_users_type_adds_a_key_without_editing_mtl(example, composed):
    conf = f"hydra.searchpath=[file://{example / 'conf'}]"
    settings = validate(composed(conf, "task=[ratings]", "task.ratings.max_stars=4"))
    ratings = settings.tasks["ratings"]
    assert type(ratings).__qualname__ == "StarRating.Options" and ratings.max_stars == 4
    star = task_type_class(ratings.type, "ratings")("ratings", ratings)
    batch = {"labels": torch.zeros(3)}
    assert star.predict(torch.tensor([[0.2], [3.6], [9.0]]), batch) == [1, 4, 4]
    with pytest.raises(MtlError, match=r"unknown key task.ratings.max_star; did you mean max_s"):
        validate(composed(conf, "task=[ratings]", "+task.ratings.max_star=4"))


def test_a_task_config_pickles_and_an_older_exports_keys_still_load():
    config = QuestionAnswering.Options(type="question_answering", source={}, stride=8)
    assert pickle.loads(pickle.dumps(config)) == config
    # exports written before each type declared its keys list them all, unset ones null
    old = {"type": "regression", "source": {}, **UNION_DEFAULTS}
    assert type(task_config(old, "r")) is Regression.Options
    with pytest.raises(MtlError, match=r"task.r.stride is not a key of TaskConfig"):
        task_config({**old, "stride": 3}, "r")


@pytest.fixture
def user_metrics(tmp_path, monkeypatch):
    """A module of the user's metrics: one lower-is-better, one plain function."""
    (tmp_path / "user_metrics.py").write_text(
        "from mtl.task_types import metric\n\n"
        "@metric(higher_is_better=False)\n"
        "def mean_gap(predictions, references):\n    return 0.0\n\n"
        "def plain(predictions, references):\n    return 0.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("user_metrics", None)


def test_metrics_declare_their_direction(user_metrics):
    assert metric_directions({"r": {"type": "regression"}}) == {
        "eval/r/pearson": True,
        "eval/r/spearman": True,
        "eval/r/mse": False,
    }
    qa = {"type": "question_answering", "metrics": ["f1", "user_metrics.mean_gap"]}
    assert metric_directions({"q": qa}) == {"eval/q/f1": True, "eval/q/mean_gap": False}
    plain = {"type": "regression", "metrics": ["user_metrics.plain"]}
    assert metric_directions({"r": plain}) == {"eval/r/plain": True}
    higher = metric_directions({"r": {"type": "regression"}, "q": qa})
    assert summary_of("eval/r/mse", higher) == "min,last"
    assert summary_of("eval/q/mean_gap", higher) == "min,last"
    assert summary_of("eval/r/pearson", higher) == "max,last"
    assert summary_of("eval/r/mse") == "max,last"  # not asked: higher is better
    with pytest.raises(MtlError, match=r"unknown metric 'mae' for Regression; choose from"):
        Regression.resolve_metrics(["mae"], "r")


def test_a_users_metric_with_its_direction(example):
    tasks = {"ratings": {"type": "my_project.task_types.StarRating"}}
    assert metric_directions(tasks) == {"eval/ratings/accuracy": True, "eval/ratings/mae": False}
    from my_project.task_types import mean_abs_error

    assert mean_abs_error([1, 2], [2, 4]) == 1.5


def test_heads_live_in_models_heads():
    from mtl.task_types import choice, multilabel

    assert choice.MultipleChoiceHead is heads.MultipleChoiceHead
    assert multilabel.MultiLabelHead is heads.MultiLabelHead
    for name, cls in builtin_types().items():
        options = {"choices_column": "c"} if cls is MultipleChoice else {}
        task_type = cls("t", cls.Options(type=name, source={}, **options))
        head = task_type.default_head(8, 3, 0.0)
        assert type(head).__module__ == "mtl.models.heads", cls


@pytest.mark.parametrize("name", sorted(builtin_types()))
def test_each_built_in_type_names_its_transformers_model(name):
    cls = builtin_types()[name]
    options = {"choices_column": "c"} if cls is MultipleChoice else {}
    task_type = cls("t", cls.Options(type=name, source={}, **options))
    kind = task_type.export_kind(["a", "b"])
    outs = ("classifier", "qa_outputs", "lm_head")
    assert kind.auto_class.startswith("AutoModelFor") and kind.out in outs
    assert callable(task_type.default_head(8, 2, 0.0).to_transformers)
