"""The training loop, top to bottom: set up, train with accelerate, evaluate, checkpoint, log.

`run(cfg)` sets up a run (`mtl.training.setup.run.build_run`: what is built once, and the run's
`Progress`), then trains epoch by epoch (`Training.train_epoch`), each batch a micro-step, every
`grad_accum` of them an optimizer step, after which the window is logged, the model evaluated
and checkpointed when their intervals say so; it ends (`Training.finish`) with a last
checkpoint, evaluation and test, and returns a `RunResults`. The entry point
(`mtl.cli.job`) writes the run's outputs (export, predictions) from those results.

One epoch is one pass of the composite loader (its `exhaust` policy says what that is). The run
lasts `trainer.epochs` epochs, or `trainer.max_steps` optimizer steps if that comes first; the
LR schedule's horizon is that exact number of optimizer steps, summed over the epochs' own
lengths (`planned_steps`: the loader's schedules are pure functions of seed and epoch, so the
lengths are known up front). Evaluation runs after each epoch (and every `trainer.eval_every`
steps); a checkpoint is saved every `trainer.checkpoint_every` steps, at the first step
boundary `trainer.checkpoint_minutes` after the last one (rank 0's clock), and at the end, and
`trainer.resume=<folder>` continues exactly where it stopped. A run stops for one reason
(`StopReason`): its steps or epochs are done, early stopping, or a stop signal (Ctrl-C, SIGTERM,
SIGUSR1: then only a checkpoint is saved, no final evaluation or test).

Several processes (DDP through accelerate): every rank takes the same task(s) at every step (the
loader's schedule is seeded, not drawn from the global RNG) from its own shard of each task, so the
heads used in a step are the same on all ranks and their gradients are all-reduced together. Ranks
that would disagree are refused at start (`mtl.training.launch.distributed.check_same_run`).
Losses are summed on the device and read once per logged window: a NaN/inf loss is found there
(all ranks at once, through one all-gather) and ends the run on every rank with an error naming
the task and rank.
A failing batch ends its rank with an error naming the task; the launcher then stops the others, and
any collective that waits longer than `trainer.dist_timeout_s` fails, not hangs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig

from mtl.artifacts import RunLayout, resume_override, write_file
from mtl.batching import to_device
from mtl.builders.model import build_model
from mtl.builders.weights import earlier_checkpoint
from mtl.config import Settings, validate
from mtl.errors import MtlError
from mtl.quiet import quiet_libraries
from mtl.training.checkpoints.checkpoint import full_model, load_best, save_best, save_checkpoint
from mtl.training.checkpoints.runlock import RunFolder
from mtl.training.checkpoints.signals import StopSignal
from mtl.training.diagnostics import Diagnostics
from mtl.training.evaluate import evaluate
from mtl.training.launch.distributed import make_accelerator
from mtl.training.mixing import mixer_for
from mtl.training.setup.run import Run, build_run
from mtl.training.state import Progress, RunResults, StopReason
from mtl.training.step import Step
from mtl.training.tracking.logger import print_summary
from mtl.training.tracking.window import Window

__all__ = ["RunResults", "StopReason", "StopSignal", "Training", "run"]


def run(cfg: DictConfig | Settings, hooks: Iterable = ()) -> RunResults:
    """Train as the composed config `cfg` (or its validated `Settings`) says and return the
    results. `hooks` are called at fixed points of the loop (`mtl.training.hooks`). The run
    folder is held while it trains (`mtl.training.checkpoints.runlock`). The libraries are quiet
    while it trains (`mtl.quiet`), as they were before once it returns."""
    with quiet_libraries():
        settings = cfg if isinstance(cfg, Settings) else validate(cfg)
        if settings.run_dir is None:
            raise MtlError("output_dir is not set; give output_dir=<run folder>")
        accelerator = make_accelerator(
            settings.trainer, settings.run_dir, log_with_wandb=settings.logger.backend == "wandb"
        )
        folder = RunFolder(settings.run_dir, accelerator)
        folder.take()
        try:
            return Training(*build_run(settings, accelerator, hooks)).train()
        finally:
            folder.release()


class Training:
    """The loop of one run: `run` (built once) and its `progress`, which only the loop changes."""

    def __init__(self, run: Run, progress: Progress):
        self.run, self.progress = run, progress
        self.state, self.hooks = progress.state, run.hooks
        self.signal: StopSignal | None = None
        self.last_saved = time.monotonic()  # when the last checkpoint was saved (or the start)
        acc = run.accelerator
        self.window = Window(list(run.tasks), acc.device, self.state.step + 1, acc.num_processes)
        if self.state.window is not None:  # resumed: the window the checkpoint held
            self.window.load(self.state.window, acc.process_index)
        max_norm = run.settings.trainer.max_grad_norm
        self.step = Step(
            run.model, run.balancer, run.optimizer, run.scheduler, run.accelerator, max_norm
        )
        first = self.state.step + 1  # `loader.online`: what its policy is fed (else nothing)
        self.mixing = mixer_for(run.loader, run.tasks, acc, first, self.state.mixing)
        self.diagnostics = None
        if run.settings.trainer.diagnoses:
            self.diagnostics = Diagnostics(run.model, run.tasks, run.accelerator)

    def train(self) -> RunResults:
        self.run.model.train()
        self.hooks.call("on_train_start", self.run, self.progress)
        with StopSignal() as self.signal:
            try:
                while not self.stopped():
                    self.train_epoch()
            except KeyboardInterrupt:  # a second Ctrl-C: what is on disk to resume from
                raise KeyboardInterrupt(interrupted_line(self.run.run_dir)) from None
        return self.finish()

    def stopped(self) -> bool:
        """Whether the run stops now; sets the reason when its steps or epochs are done."""
        p, t = self.progress, self.run.settings.trainer
        if p.stop is None and (p.state.step >= self.run.total_steps or p.state.epoch >= t.epochs):
            done = t.max_steps and p.state.step >= t.max_steps
            p.stop = StopReason.MAX_STEPS if done else StopReason.EPOCHS
        return p.stop is not None

    def train_epoch(self) -> None:
        """One pass of the composite loader (the rest of it, on resume), or up to the stop."""
        loader, accum = self.run.loader, self.run.settings.trainer.grad_accum
        epoch_len, first = len(loader), loader.position[1]  # first > 0 when resuming mid-epoch
        batches = self.hooks.batches(guarded(loader, self.run.accelerator.process_index))
        for i, batch in enumerate(batches, start=first):
            sync, group = accumulation(i, epoch_len, accum)
            self.micro_step(batch, sync, group)
            if not sync:
                continue
            self.optimizer_step()
            self.after_step()
            if self.stopped():
                return
        self.state.epoch += 1
        self.evaluate()

    def micro_step(self, batch: dict, sync: bool, group: int) -> None:
        """Forward and backward of one batch (`mtl.training.step`); the last of an accumulation
        group (`sync`) synchronises the gradients."""
        self.window.add_batch(batch)
        self.mixing.add_batch(batch)
        batch = to_device(batch, self.run.accelerator.device)
        task_losses, loss = self.step.micro_step(batch, sync, group)
        self.window.add_losses(task_losses)
        self.mixing.add_losses(task_losses)
        self.hooks.call("on_micro_step", self.run, self.progress, batch, loss)

    def optimizer_step(self) -> None:
        self.step.update()
        self.state.step += 1
        self.hooks.call("on_step_end", self.run, self.progress)

    def after_step(self) -> None:
        """Log the window, evaluate and checkpoint when their intervals (or the last step) say
        so; stop for a signal (every rank at the same step)."""
        run, t, step = self.run, self.run.settings.trainer, self.state.step
        self.mixing.after_step(step, self.progress.last_eval)
        if step % t.log_every == 0 or step == run.total_steps:
            self.log_window()
        if t.eval_every and step % t.eval_every == 0:
            self.evaluate()
        if t.diagnose_every and step % t.diagnose_every == 0:
            self.run.logger.log(self.diagnose(), step=step)
        minutes = t.checkpoint_minutes
        due = minutes is not None and time.monotonic() - self.last_saved >= 60 * minutes
        boundary = self.signal.agree(run.accelerator, checkpoint_due=due)
        if boundary.stop:
            run.accelerator.print(self.signal.message(step, run.run_dir), file=sys.stderr)
            self.progress.stop = StopReason.SIGNAL
        elif boundary.checkpoint or (t.checkpoint_every and step % t.checkpoint_every == 0):
            self.checkpoint()

    def checkpoint(self) -> None:
        """Save the step's checkpoint, with the number of metrics.jsonl rows written so far."""
        run = self.run
        self.state.metrics_rows = run.logger.rows
        self.state.window = self.window.state(run.accelerator)
        self.state.mixing = self.mixing.state(run.accelerator)
        keep = run.settings.trainer.keep_last
        save_checkpoint(run.accelerator, run.run_dir, self.state.step, keep, run.description)
        self.last_saved = time.monotonic()

    def log_window(self) -> None:
        """Losses, shares, padding and throughput of the steps since the last window."""
        run, step = self.run, self.state.step
        target = run.loader.target_shares()
        s = self.state
        figures = self.window.figures(run.accelerator, step, s.share_totals, target, s.planned)
        figures |= {f"mix_weight/{t}": w for t, w in run.loader.mix_weights().items()}
        figures |= self.mixing.figures()
        figures["lr"] = run.scheduler.get_last_lr()[0]
        figures["epoch"] = self.state.epoch
        run.logger.log(figures, step=step)
        self.hooks.call("on_log", run, self.progress, figures)

    def evaluate(self) -> None:
        """Dev figures of every task at the current step (and `eval/mean`, the mean of each
        task's main metric), logged; the best model so far is kept (`track_best`)."""
        run, p, t, s = self.run, self.progress, self.run.settings.trainer, self.state
        s.evaluations += 1
        last = s.step >= run.total_steps  # generation tasks generate at the last step's
        figures = evaluate(
            run.model,
            run.tasks,
            run.accelerator,
            t.eval_batch_size,
            tokenizer=run.tokenizer,
            evaluation=None if last else s.evaluations,
        )
        mains = [figures[f"eval/{n}/{task.task_type.main_metric}"] for n, task in run.tasks.items()]
        figures["eval/mean"] = sum(mains) / len(mains)
        p.last_eval = figures
        # diagnostics at each evaluation share its row of metrics.jsonl
        diagnosed = self.diagnose() if t.diagnose_every is None and self.diagnostics else {}
        run.logger.log(figures | diagnosed, step=self.state.step)
        p.evaluated_at = self.state.step
        self.track_best()

    def diagnose(self) -> dict[str, float]:
        """Gradient norms and cosines, lookahead affinities (`mtl.training.diagnostics`) and
        the balancer's task weights at the current step (computed by the main process only:
        they need no other; {} on the others)."""
        run = self.run
        if not run.accelerator.is_main_process:
            return {}
        figures = self.diagnostics.figures(run.settings.trainer.lr)
        return figures | {f"task_weight/{t}": w for t, w in run.balancer.weights().items()}

    def evaluate_test(self) -> dict[str, float]:
        """`test/<task>/<metric>` of every task with a test split, logged."""
        run, batch_size = self.run, self.run.settings.trainer.eval_batch_size
        with_test = {name: task for name, task in run.tasks.items() if "test" in task.splits}
        if not with_test:
            return {}
        figures = evaluate(
            run.model,
            with_test,
            run.accelerator,
            batch_size,
            "test",
            "test",
            tokenizer=run.tokenizer,
        )
        run.logger.log(figures, step=self.state.step)
        return figures

    def track_best(self) -> None:
        """Save the model when `trainer.monitor` improves; after `trainer.patience` evaluations
        without improvement, stop (early stopping)."""
        run, p, s, t = self.run, self.progress, self.state, self.run.settings.trainer
        if t.monitor not in p.last_eval:
            raise MtlError(
                f"trainer.monitor={t.monitor!r} is not an evaluation figure; choose one of "
                f"{', '.join(sorted(p.last_eval))}"
            )
        value, best = p.last_eval[t.monitor], s.best.get(t.monitor)
        if best is None or (value > best if t.monitor_mode == "max" else value < best):
            s.best_step, s.best, s.evals_since_best = s.step, dict(p.last_eval), 0
            save_best(run.accelerator, run.model, run.run_dir, s.step, p.last_eval, run.description)
            return
        s.evals_since_best += 1
        if t.patience and s.evals_since_best >= t.patience:
            run.accelerator.print(
                f"mtl: {t.monitor} has not improved on step {s.best_step}'s {best:.4f} for "
                f"{s.evals_since_best} evaluations: stopping early (trainer.patience={t.patience})",
                file=sys.stderr,
            )
            p.stop = p.stop or StopReason.EARLY_STOP

    def finish(self) -> RunResults:
        """The last checkpoint; unless a stop signal ended the run (`trainer.resume=<run folder>`
        continues from that checkpoint), a final evaluation if the last one is older, the best
        weights loaded, the test splits scored with them, the summary and results.json."""
        run, p = self.run, self.progress
        self.hooks.call("on_train_end", run, p)
        self.checkpoint()  # before the final evaluation: a run killed after it resumes there
        if p.stop is StopReason.SIGNAL:
            run.logger.close()
            if run.accelerator.is_main_process:
                print(f"mtl: run folder {run.run_dir.resolve()}", file=sys.stderr)
            return self.results({})
        if p.evaluated_at != self.state.step:  # stopped by max_steps, or resumed
            self.evaluate()
        load_best(run.accelerator, run.model, run.run_dir)
        results = self.results(self.evaluate_test())
        run.logger.close()
        if run.accelerator.is_main_process:
            print_summary(
                p.last_eval, run.tasks, self.state.best, self.state.best_step, self.state.step
            )
            summary = json.dumps(results.summary(), indent=2)
            write_file(RunLayout(run.run_dir).results, summary, overwrite=True)
        run.accelerator.wait_for_everyone()
        return results

    def results(self, test: dict[str, float]) -> RunResults:
        run, p, t = self.run, self.progress, self.run.settings.trainer
        model = None  # a stopped run's model is its checkpoint's
        if p.stop is not StopReason.SIGNAL:
            rebuild = lambda: build_model(run.settings, run.tasks)  # noqa: E731
            model = full_model(run.accelerator, run.model, rebuild)
        return RunResults(
            run.run_dir,
            self.state.step,
            p.stop,
            t.monitor,
            t.monitor_mode,
            p.last_eval,
            self.state.best_step,
            self.state.best,
            test,
            signal=self.signal.agreed if self.signal is not None else 0,
            model=model,
            tokenizer=run.tokenizer,
            tasks=run.tasks,
            settings=run.settings,
            accelerator=run.accelerator,
        )


def interrupted_line(run_dir: Path) -> str:
    """The line a run stopped at once (a second Ctrl-C) ends with: the checkpoint it resumes
    from, or that it has none yet."""
    latest = earlier_checkpoint(RunLayout(run_dir).checkpoints)
    if latest is None:
        return (
            "mtl: stopped (Ctrl-C) before the run's first checkpoint: nothing to resume; run "
            "the same command again to start it over"
        )
    return (
        f"mtl: stopped (Ctrl-C); the run resumes from its checkpoint {latest.name} with "
        f"{resume_override(run_dir)}"
    )


def accumulation(index: int, epoch_len: int, grad_accum: int) -> tuple[bool, int]:
    """For the `index`-th batch of an epoch: whether an optimizer step follows it, and how many
    batches that step averages (`grad_accum`, fewer for the epoch's last, partial group)."""
    group_start = index - index % grad_accum
    group = min(grad_accum, epoch_len - group_start)
    return index + 1 == group_start + group, group


def guarded(loader, rank: int):
    """The loader's batches; a batch that fails to load ends this rank with the task named."""
    batches = iter(loader)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except MtlError:
            raise
        except Exception as err:
            epoch, step = loader.position
            try:
                tasks = ",".join(map(repr, loader.tasks_at(epoch, step)))
            except Exception:
                tasks = "?"
            detail = (str(err).strip().splitlines() or [""])[-1]
            raise MtlError(
                f"rank {rank}: task {tasks}: loading its batch at epoch {epoch} step {step} "
                f"failed: {type(err).__name__}: {detail}"
            ) from err
        yield batch
