"""Training: the loop (`loop.run`), what a run builds once (`setup`, from the parts `build`
makes), where it stands (`state`), hooks the loop calls (`hooks`), checkpoints and stop signals
(`checkpoint`, `signals`, `resume`, `runlock`), several processes (`distributed`), evaluation,
tracking. It imports no inference code: the run's outputs are written by its entry point
(`mtl.cli.job`)."""
