"""Fixtures of tests/inference: a module of the user's own that records being imported."""

from __future__ import annotations

import sys

import pytest

MODULE = """
from pathlib import Path
from mtl.models.heads import SequenceClassificationHead
Path({marker!r}).write_text("imported")

def boom(*args, **kwargs):
    Path({marker!r}).write_text("called")

class UserHead(SequenceClassificationHead):
    def __init__(self, *args, **kwargs):
        Path({marker!r}).write_text("built")
        super().__init__(*args, **kwargs)
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """(module name, marker file): a module on sys.path that records being imported or called."""
    name = f"user_code_{tmp_path.name[-12:].replace('-', '_')}"
    marker = tmp_path / "marker"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{name}.py").write_text(MODULE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    yield name, marker
    sys.modules.pop(name, None)
