"""Reporting: what a user reads after training, built from what runs wrote to disk.

It owns the figures of runs and sweeps (`figures`, `mtl-report`), the summary of a sweep (`sweep`, a
Hydra callback) and the W&B workspace (`workspace`, the `mtl-workspace` command). It reads run
folders and may import any layer below it; nothing in training, inference or the loaders imports it.
"""
