"""mtl: multi-task training with one shared encoder and a head per task."""

__version__ = "0.1.0"
