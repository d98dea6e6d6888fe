"""mtl.testing.check_loader holds for every built-in loader, fails a broken one, and the example
in docs/extending.md runs as written on the example project's own classes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from mtl.loaders import MixupLoader, RandomLoader, RoundRobinLoader, SequentialLoader
from mtl.testing import check_loader

ROOT = Path(__file__).resolve().parents[2]

BUILTIN = [
    (SequentialLoader, {}),
    (SequentialLoader, {"shuffle_tasks": False}),
    (SequentialLoader, {"steps_per_epoch": 5}),
    (RoundRobinLoader, {}),
    (RoundRobinLoader, {"exhaust": "first"}),
    (RoundRobinLoader, {"exhaust": "cycle_to_longest"}),
    (RoundRobinLoader, {"steps_per_epoch": 4}),
    (RandomLoader, {}),
    (RandomLoader, {"exhaust": "first"}),
    (RandomLoader, {"exhaust": "cycle_to_longest"}),
    (RandomLoader, {"weighting": "uniform"}),
    (RandomLoader, {"weighting": "temperature", "size_cap": 2, "exhaust": "first"}),
    (RandomLoader, {"steps_per_epoch": 7}),
    (RandomLoader, {"weighting": "annealed", "epochs": 3}),
    (
        RandomLoader,
        {
            "weighting": "temperature",
            "temperature": 1,
            "temperature_end": 4,
            "shape": "cosine",
            "epochs": 3,
        },
    ),  # fmt: skip
    (RandomLoader, {"max_passes": 1.5, "weighting": "uniform"}),
    (RandomLoader, {"max_passes": 1.5, "weighting": "uniform", "exhaust": "cycle_to_longest"}),
    (RandomLoader, {"max_passes": 3, "weighting": "uniform", "steps_per_epoch": 8}),
    (RandomLoader, {"stages": [{"until": 0.4, "weighting": "uniform"}, {}], "epochs": 3}),
    (
        RandomLoader,
        {
            "stages": [
                {"until": 5, "weighting": "uniform"},
                {"weighting": "annealed"},
            ],
            "epochs": 3,
        },
    ),  # fmt: skip
    (MixupLoader, {}),
    (MixupLoader, {"exhaust": "each_once"}),
    (MixupLoader, {"exhaust": "first"}),
    (MixupLoader, {"steps_per_epoch": 3}),
]


@pytest.mark.parametrize(("cls", "options"), BUILTIN, ids=str)
def test_every_builtin_loader_keeps_the_contract(cls, options):
    check_loader(partial(cls, **options), seed=3)


def test_a_task_with_weight_zero_is_left_out_of_each_once():
    weights = {"a": 1.0, "b": 0.0, "c": 2.0}
    check_loader(partial(RandomLoader, weighting=weights), sizes=[{"a": 7, "b": 3, "c": 5}])


class GlobalRandom(RandomLoader):
    """Broken: draws its schedule from numpy's global generator."""

    def build_schedule(self, epoch):
        return np.random.permutation(np.repeat(np.arange(len(self.sizes)), self.sizes))


class OneStepShort(RoundRobinLoader):
    """Broken: len() promises one step more than an epoch has."""

    def __len__(self):
        return super().__len__() + 1


class ForgetsItsStep(RoundRobinLoader):
    """Broken: its state says the epoch starts over, so a resume repeats batches."""

    def state_dict(self):
        return {**super().state_dict(), "step": 0}


class LeavesABatchOut(SequentialLoader):
    """Broken: promises each batch once but leaves the last task's last batch out."""

    def build_schedule(self, epoch):
        last = np.arange(len(self.sizes)) == len(self.sizes) - 1
        return np.repeat(np.arange(len(self.sizes)), self.sizes - last)


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (GlobalRandom, "same seed gave other steps"),
        (OneStepShort, r"len\(\)"),
        (ForgetsItsStep, "resumed after step 1"),
        (LeavesABatchOut, "planned, not the .* of one pass of each task"),
    ],
)
def test_a_broken_loader_fails_the_check_naming_the_promise(broken, message):
    with pytest.raises(AssertionError, match=message):
        check_loader(broken)


def docs_example() -> str:
    text = (ROOT / "docs" / "extending.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (example,) = [b for b in blocks if "mtl.testing" in b]
    return example


def test_the_docs_example_runs_on_the_example_project(tmp_path):
    project = tmp_path / "custom_project"
    shutil.copytree(ROOT / "examples" / "custom_project", project)
    sys.path.insert(0, str(project))
    try:
        exec(compile(docs_example(), "docs/extending.md", "exec"), {})
    finally:
        sys.path.remove(str(project))
        for name in [m for m in sys.modules if m.split(".")[0] == "my_project"]:
            del sys.modules[name]


def test_the_docs_example_fails_on_a_broken_loader(tmp_path):
    """The same example, with the project's loader broken, stops with the broken promise."""
    project = tmp_path / "custom_project"
    shutil.copytree(ROOT / "examples" / "custom_project", project)
    loaders = project / "my_project" / "loaders.py"
    loaders.write_text(loaders.read_text().replace("self.rng(epoch)", "np.random"))
    sys.path.insert(0, str(project))
    try:
        with pytest.raises(AssertionError, match="same seed gave other steps"):
            exec(compile(docs_example(), "docs/extending.md", "exec"), {})
    finally:
        sys.path.remove(str(project))
        for name in [m for m in sys.modules if m.split(".")[0] == "my_project"]:
            del sys.modules[name]


def test_mtl_testing_imports_neither_pytest_nor_hypothesis():
    code = (
        "import sys, mtl.testing; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pytest', 'hypothesis'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
