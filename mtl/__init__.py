"""mtl: multi-task training with one shared encoder and a head per task."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from mtl.inference.export import LoadedModel

__version__ = "0.1.0"


def load_model(path: str | Path, *, trust_custom_code: bool = False) -> LoadedModel:
    """A trained model from an export or run folder (see `mtl.inference.export.load_model`).
    Only mtl's own task types and heads are built unless `trust_custom_code=True` (it imports and
    runs the code that the model's `mtl_tasks.json` names)."""
    # Not at module level: `import mtl.<any module>` runs this file, and the inference stack
    # (torch, transformers, datasets) takes seconds to import; `mtl.errors` needs none of it.
    from mtl.inference.export import load_model as load

    return load(path, trust_custom_code=trust_custom_code)


__all__ = ["load_model"]
