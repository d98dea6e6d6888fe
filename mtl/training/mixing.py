"""Online mixing in training (`loader.online`): what the policy is fed, behind one object the loop
calls at its own events.

The loader's `OnlineMixing` (`mtl.loaders.online`) draws the steps from the policy's weights;
this part feeds it: its own window of the steps since the policy's last update (each task's
losses and rows, summed over the processes), and every `update_every` optimizer steps the update
with those figures and the latest evaluation's main dev figures. `mixer_for` gives a run its
mixer: `PolicyFeed` when the loader mixes online, else `NoMixing`, whose calls do nothing, so
the loop has no branch of its own for online mixing.
"""

from __future__ import annotations

import sys
from typing import Any

from mtl.training.tracking.window import Window


class NoMixing:
    """The mixer of a run without `loader.online`: every call does nothing."""

    def add_batch(self, batch: dict) -> None:
        """A batch's rows per task (host tensors, before it goes to the device)."""

    def add_losses(self, task_losses: dict) -> None:
        """A micro-step's loss of each task it held."""

    def after_step(self, step: int, last_eval: dict[str, float]) -> None:
        """After optimizer step `step`: the policy's update when one is due."""

    def state(self, accelerator) -> dict | None:
        """What a checkpoint holds of it (a collective where there is anything)."""
        return None

    def figures(self) -> dict[str, float]:
        """What it adds to a logged row."""
        return {}


class PolicyFeed(NoMixing):
    """Feeds `loader.online`'s policy: a window of its own, the update every `update_every`
    optimizer steps (the same figures on every rank), `mix_policy/<task>` in each logged row."""

    def __init__(self, loader, tasks: dict, accelerator, first_step: int, saved: dict | None):
        self.loader, self.tasks, self.accelerator = loader, tasks, accelerator
        self.every = loader.online.update_every
        self.window = Window(list(tasks), accelerator.device, first_step, accelerator.num_processes)
        if saved is not None:  # resumed: the window the checkpoint held
            self.window.load(saved, accelerator.process_index)
        if accelerator.is_main_process:
            note_loss_scales(loader.online.policy, tasks)

    def add_batch(self, batch: dict) -> None:
        self.window.add_batch(batch)  # from the host tensors, as the logged window

    def add_losses(self, task_losses: dict) -> None:
        self.window.add_losses(task_losses)

    def after_step(self, step: int, last_eval: dict[str, float]) -> None:
        """Every `update_every` steps: each task's figures since the last update and its latest
        main dev figure (oriented so that higher is better) to the policy; the loader draws the
        rest of the epoch from its weights."""
        if step % self.every:
            return
        figures = self.window.task_figures(self.accelerator, step)
        for name, task in self.tasks.items():
            metric = task.task_type.main_metric
            value = (last_eval or {}).get(f"eval/{name}/{metric}")
            if value is not None:
                higher = task.task_type.metric_directions()[metric]
                figures[name]["dev"] = value if higher else -value
        self.loader.update_mixture(figures, step)

    def state(self, accelerator) -> dict:
        return self.window.state(accelerator)

    def figures(self) -> dict[str, float]:
        shown = getattr(self.loader.online.policy, "shown", None)
        return {f"mix_policy/{t}": float(v) for t, v in shown().items()} if callable(shown) else {}


def note_loss_scales(policy, tasks: dict) -> None:
    """A note at start when a built-in policy that reads raw training losses (exp3,
    loss_softmax) mixes tasks whose losses differ in kind (a generation task's per-token
    cross-entropy over the vocabulary, a regression's squared error, a head's cross-entropy)."""
    scale = getattr(policy, "scale", None)
    if getattr(scale, "normalize", None) != "none":
        return
    kinds = {
        "generation" if t.task_type.writes_text else "regression" if t.task_type.squared_error
        else "cross-entropy"
        for t in tasks.values()
    }  # fmt: skip
    if len(kinds) > 1:
        print(
            f"mtl: note: loader.online rewards the tasks' training losses as they are, and these "
            f"differ in scale ({', '.join(sorted(kinds))}): a task is rewarded for the scale "
            "of its loss, not for how little it has learnt; options: {normalize: first} reads "
            "each over its first window's",
            file=sys.stderr,
        )


def mixer_for(loader, tasks: dict, accelerator, first_step: int, saved: Any) -> NoMixing:
    """The run's mixer: `PolicyFeed` for a loader that mixes online (`saved`: its window from
    the checkpoint, or None), else `NoMixing`."""
    if getattr(loader, "online", None) is None:
        return NoMixing()
    return PolicyFeed(loader, tasks, accelerator, first_step, saved)
