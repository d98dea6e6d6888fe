"""A run folder as a model (`mtl.load_model`, `mtl-predict model=<run>`): built from its base
model's config and its trained weights, without the base's own weights or load report; a base
model that has moved is one line pointing to the export."""

from __future__ import annotations

import shutil

import pytest
from omegaconf import OmegaConf

import mtl
from mtl.cli.job import train
from mtl.errors import MtlError
from mtl.inference.predict import predict_task
from mtl.models.tiny import save_tiny_model

ROWS = [{"text": "def f(x): return x"}, {"text": "The with statement"}]


@pytest.fixture
def trained(tmp_path, make_cfg):
    """A two-step run on a tiny BERT saved in a folder of its own (the run's base model)."""
    base = save_tiny_model("bert", tmp_path / "base")
    cfg = make_cfg(
        "task=[synthetic_cls]", f"model.name_or_path={base}", "model.random_init=false",
        "trainer.max_steps=2", output_dir=tmp_path / "run",
    )  # fmt: skip
    (tmp_path / "run" / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, tmp_path / "run" / ".hydra" / "config.yaml")  # as Hydra's run writes it
    train(cfg)
    return tmp_path, base


def test_a_run_folder_predicts_as_its_export(trained, capfd):
    root, _ = trained
    from_run = mtl.load_model(root / "run")
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "Loading weights" not in err and "MISSING" not in err
    from_export = mtl.load_model(root / "run" / "export")
    got = predict_task(from_run, "synthetic_cls", ROWS)
    want = predict_task(from_export, "synthetic_cls", ROWS)
    assert [r["prediction"] for r in got] == [r["prediction"] for r in want]
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in want], abs=1e-6)


def test_a_run_whose_base_model_moved_points_to_its_export(trained):
    root, base = trained
    moved = root / "moved"
    shutil.move(base, moved)
    try:
        with pytest.raises(MtlError) as err:
            mtl.load_model(root / "run")
        message = str(err.value)
        assert f"base model {base} is gone" in message
        assert f"{root / 'run'}/export" in message and "\n" not in message
        assert mtl.load_model(root / "run" / "export").tasks  # the export needs no base
    finally:
        shutil.move(moved, base)
