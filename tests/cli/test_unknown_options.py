"""An option that does not exist: the one line names it (the first the command gave), the
nearest option, and a user's config folder that mtl was not pointed at."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAST = ["model=tiny", "debug=fast"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's project folder with two tasks of its own in ./conf/task."""
    for name in ("my_tags", "my_b"):
        text = (ROOT / "conf/task/synthetic_cls.yaml").read_text()
        (tmp_path / "conf/task").mkdir(parents=True, exist_ok=True)
        (tmp_path / f"conf/task/{name}.yaml").write_text(text.replace("synthetic_cls", name))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("mtl: error: "), err
    return lines[0]


def test_a_task_typo_names_the_nearest_task(train_here, project):
    code, err = train_here("task=[pydoc_topc]", *FAST)
    assert code == 2
    line = one_error(err)
    assert "unknown task 'pydoc_topc'; did you mean pydoc_topic?" in line
    assert line.endswith("add conf/task/pydoc_topc.yaml")


def test_the_tasks_of_a_folder_not_searched_point_to_config_dir(train_here, project):
    code, err = train_here("task=[my_tags,nope,my_b]", *FAST)
    assert code == 2
    line = one_error(err)
    assert "unknown task 'my_tags', 'nope', 'my_b'" in line  # the command's order
    assert "conf/task/my_tags.yaml is in this folder's conf/" in line
    assert "--config-dir conf" in line
    assert not list(project.glob("outputs/**/*.yaml"))  # no run folder left


def test_with_config_dir_the_unknown_one_is_named(train_here, project):
    code, err = train_here("--config-dir", str(project / "conf"), "task=[my_tags,nope]", *FAST)
    assert code == 2
    line = one_error(err)
    assert "unknown task 'nope';" in line and "my_tags" not in line.split(";")[0]
    assert "--config-dir" not in line


def test_an_option_typo_of_another_group(train_here, project):
    code, err = train_here("loader=mixp", *FAST)
    assert code == 2
    assert "unknown loader 'mixp'; did you mean mixup?" in one_error(err)
