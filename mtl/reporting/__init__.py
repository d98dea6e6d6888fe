"""Reporting: what a user reads after training, built from what runs wrote to disk.

It owns the figures of a run, the summary of a sweep (today still `mtl.report` and `mtl.sweep`)
and the W&B workspace (`workspace`, the `mtl-workspace` command). It reads run folders and may
import any layer below it; nothing in training, inference or the loaders imports it.
"""
