"""Training: the loop and its state, with one sub-package per concern below them.

- `loop`: `run(cfg)`, the `Training` loop read top to bottom; `step`: one optimizer step
  (forward, backward, the balancer, gradient synchronisation); `state`: where a run stands
  (`TrainState`, saved with each checkpoint; `Progress`; `RunResults`); `hooks`: what the loop
  calls at fixed points; `evaluate`: dev and test figures; `diagnostics`: task interactions;
  `mixing`: what `loader.online`'s policy is fed.
- `setup/`: what a run builds once (`Run`, from the parts `mtl.builders` makes), its optimizer
  and schedule, speed settings.
- `checkpoints/`: saving and resuming a run, the run-folder lock, stop signals.
- `tracking/`: metrics.jsonl and W&B, the logged window.
- `launch/`: several processes and nodes (torchrun, accelerate), sharding.

Layers (the import contract in pyproject.toml): loop > setup > hooks, evaluate, diagnostics,
checkpoints, mixing, step > tracking, launch > state. It imports no inference code: the run's
outputs are written by its entry point (`mtl.cli.job`)."""
