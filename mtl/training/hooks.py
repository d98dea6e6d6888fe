"""Hooks: what the training loop calls at fixed points of a run, for timers, tracers and the
progress bar. Nothing the loop computes depends on them.

A hook is any object with some of these methods (each is optional):

- `on_train_start(run, progress)`: once the run is set up (a resumed run's checkpoint loaded),
  before its first step.
- `batches(batches) -> iterator`: wraps the iterator an epoch draws its batches from (the
  loader's, from where it resumes); the loop takes the returned iterator. It runs lazily, so a
  wrapper sees each request for a batch and when the epoch stops asking.
- `on_micro_step(run, progress, batch, loss)`: after each batch's forward and backward (`batch`
  on the device, `loss` the loss the balancer backpropagated, detached: under a gradient
  aggregation, the weighted sum of task losses its per-task gradients came from).
- `on_step_end(run, progress)`: after each optimizer step (`progress.state.step` counts it).
- `on_log(run, progress, figures)`: after each logged window, with its figures.
- `on_train_end(run, progress)`: when the run stops, before its final checkpoint.

`run` is the run's `mtl.training.setup.run.Run` (what is built once), `progress` its
`mtl.training.state.Progress`; hooks read them and change neither. `run(cfg, hooks=[...])`
(`mtl.training.loop`) adds hooks of your own after the configured ones (`trainer.trace`,
`trainer.progress_bar`); they are called in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from mtl.training.tracking.window import mix_text

EVENTS = ("on_train_start", "on_micro_step", "on_step_end", "on_log", "on_train_end")


class Hooks:
    """Calls each event's method on every hook that has it, in the hooks' order."""

    def __init__(self, hooks: Iterable = ()):
        self.hooks = list(hooks)
        self._wrappers = [h.batches for h in self.hooks if hasattr(h, "batches")]
        self._methods = {e: [getattr(h, e) for h in self.hooks if hasattr(h, e)] for e in EVENTS}

    def batches(self, batches: Iterator[dict]) -> Iterator[dict]:
        for wrap in self._wrappers:
            batches = wrap(batches)
        return batches

    def call(self, event: str, *args) -> None:
        for method in self._methods[event]:
            method(*args)


class ProgressBar:
    """A tqdm bar of the run's optimizer steps, with the last window's loss and task mix."""

    def __init__(self, total_steps: int, initial: int):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total_steps, initial=initial, desc="train", dynamic_ncols=True)

    def on_step_end(self, run, progress) -> None:
        self.bar.update(1)

    def on_log(self, run, progress, figures: dict) -> None:
        self.bar.set_postfix(loss=f"{figures['loss']:.3f}", mix=mix_text(figures, list(run.tasks)))

    def on_train_end(self, run, progress) -> None:
        self.bar.close()
