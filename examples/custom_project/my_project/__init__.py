"""A project of your own that trains with mtl: its own sampler, loader, head, metric and type."""
