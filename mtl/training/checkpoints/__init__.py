"""A run that survives being stopped: checkpoints written whole (`checkpoint`), resuming as the same
run (`resume`: W&B run, metrics.jsonl rows, compatibility), one training per run folder
(`runlock`), stop signals (`signals`). Imports tracking, launch and state of `mtl.training`;
reads the checkpoint layout from `mtl.builders.weights`."""
