"""mtl: multi-task training with one shared encoder and a head per task."""

__version__ = "0.1.0"


def load_model(path):
    """A trained model from an export or run folder (see `mtl.export.load_model`)."""
    from mtl.export import load_model as load

    return load(path)


__all__ = ["load_model"]
