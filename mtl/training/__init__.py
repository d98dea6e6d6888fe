"""Training: the loop, building a run, checkpoints, processes, evaluation, tracking."""
