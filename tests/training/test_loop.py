"""End-to-end: the real config composed with overrides, a few training steps in-process."""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from mtl.artifacts import RunLayout
from mtl.training.loop import run
from mtl.training.tracking.wandb_file import read_history

LOADERS = ["sequential", "round_robin", "random", "mixup"]
SAMPLERS = ["random", "block_shuffle"]
TASKS = ["synthetic_cls", "synthetic_tag", "synthetic_reg"]
SLOW = pytest.mark.slow  # in CI; out of the edit loop's fast subset


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# The fast subset keeps two of the eight (a mixed and a one-task batch, each sampler); all in CI.
FAST_PAIRS = {("mixup", "block_shuffle"), ("random", "random")}


@pytest.mark.parametrize(
    ("loader", "sampler"),
    [
        pytest.param(loader, sampler, marks=() if (loader, sampler) in FAST_PAIRS else SLOW)
        for loader in LOADERS
        for sampler in SAMPLERS
    ],
)
def test_every_loader_and_sampler_trains(make_cfg, tmp_path, loader, sampler):
    cfg = make_cfg(f"loader={loader}", f"sampler={sampler}", "trainer.trace=true")
    final = run(cfg).dev
    for task in TASKS:
        assert any(key.startswith(f"eval/{task}/") for key in final)
    rows = read_metrics(tmp_path / "run")
    steps = [r["step"] for r in rows if "loss" in r]
    assert steps == [1, 2, 3, 4]
    assert [r["step"] for r in rows if any(k.startswith("eval/") for k in r)] == [4]
    for row in rows:
        if "loss" in row:
            task_losses = [row[f"loss/{t}"] for t in TASKS if f"loss/{t}" in row]
            assert task_losses and all(loss > 0 for loss in task_losses)
            assert row["loss"] > 0
            assert 0 < row["padding_efficiency"] <= 1
            # sequences per real token: each sequence holds 2 ([CLS] [SEP]) to 64 tokens here
            per_token = row["examples_per_s"] / row["tokens_per_s"]
            assert 1 / 64 <= per_token <= 1 / 2
    assert (RunLayout(tmp_path / "run").step(4)).is_dir()
    assert_shares_are_the_batches_drawn(tmp_path / "run", rows, examples=loader == "mixup")


def assert_shares_are_the_batches_drawn(run_dir: Path, rows: list[dict], examples: bool) -> None:
    """Each logged `share/<task>` is that task's part of the micro-batches the trace says were
    drawn since the previous logged step (of their examples under mixup, whose batches mix
    tasks)."""
    trace = [json.loads(line) for line in (run_dir / "trace_rank0.jsonl").open()]
    micro = {r["step"]: r["micro"] for r in trace if not r.get("header")}
    previous = 0
    for row in (r for r in rows if "loss" in r):
        counts = dict.fromkeys(TASKS, 0)
        for step in range(previous + 1, row["step"] + 1):
            for batch in micro[step]:
                for task, ids in batch["example_ids"].items():
                    counts[task] += len(ids) if examples else 1
        total = sum(counts.values())
        for task in TASKS:
            assert row[f"share/{task}"] == pytest.approx(counts[task] / total), (row, task)
        previous = row["step"]


def losses_by_step(run_dir: Path) -> dict[int, dict]:
    return {
        r["step"]: {k: v for k, v in r.items() if k.startswith("loss")}
        for r in read_metrics(run_dir)
        if "loss" in r
    }


@pytest.mark.parametrize("loader", [pytest.param("random", marks=SLOW), "mixup"])
def test_resume_gives_the_same_losses(make_cfg, tmp_path, loader):
    common = [
        f"loader={loader}",
        "trainer.max_steps=10",
        "trainer.epochs=3",
        "data.max_examples=96",
    ]
    full = tmp_path / "full"
    run(make_cfg(*common, output_dir=full))
    part = tmp_path / "part"
    part_cfg = ("trainer.max_steps=10", "trainer.checkpoint_every=3", "trainer.keep_last=null")
    run(make_cfg(*common, *part_cfg, output_dir=part))
    resumed = tmp_path / "resumed"
    ckpt = RunLayout(part).step(6)
    run(make_cfg(*common, f"trainer.resume={ckpt}", output_dir=resumed))
    expected, got = losses_by_step(full), losses_by_step(resumed)
    assert sorted(got) == [7, 8, 9, 10]
    for step in got:
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6)


def test_wandb_offline_run_logs_the_shares_of_metrics_jsonl(make_cfg, tmp_path):
    """The W&B history holds each logged step's shares as metrics.jsonl has them (the shares
    themselves are checked against the batches drawn above), and the target shares."""
    run(make_cfg("logger=wandb", "loader=mixup"))
    files = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    history = [row for row in read_history(files[0]) if "loss" in row]
    assert len(history) == 4
    logged = [r for r in read_metrics(tmp_path / "run") if "loss" in r]
    for row, same in zip(history, logged, strict=True):
        assert row["step"] == same["step"]
        for task in TASKS:
            assert row[f"share/{task}"] == pytest.approx(same[f"share/{task}"])
        assert {f"share_target/{t}" for t in TASKS} <= set(row)


def test_bad_data_gives_one_clear_line_and_keeps_earlier_outputs(tmp_path, train_here):
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"row {i}", "label": 7}) for i in range(20)))
    task = tmp_path / "conf_extra"
    (task / "task").mkdir(parents=True)
    (task / "task" / "bad.yaml").write_text(
        "# @package task.bad\ntype: sequence_classification\n"
        f"source: {{path: {data}}}\nlabel_names: [neg, pos]\n"
    )
    keep = RunLayout(tmp_path / "run").step(1)
    keep.mkdir(parents=True)
    code, err = train_here(
        "task=[bad]", "debug=fast", f"hydra.searchpath=[file://{task}]",
        f"output_dir={tmp_path / 'run'}", f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert code == 2, err
    line = err.strip().splitlines()
    assert len(line) == 1 and "bad" in line[0] and "7" in line[0]
    assert keep.is_dir()


def test_multirun_sweep_gives_one_folder_and_wandb_run_per_job(tmp_path, train_here):
    code, err = train_here(
        "-m",
        "debug=fast",
        "loader=sequential,mixup",
        "sampler=random,block_shuffle",
        "logger=wandb",
        "task=[synthetic_cls,synthetic_tag]",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert code == 0, err[-2000:]
    jobs = sorted(p for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert len(jobs) == 4
    for job in jobs:
        assert (job / ".hydra" / "config.yaml").is_file()
        assert len(list((job / "wandb").glob("offline-run-*/run-*.wandb"))) == 1
        assert (job / "metrics.jsonl").is_file()


def test_a_multirun_over_precision_trains_each_job_in_its_own(tmp_path, train_here):
    """Hydra's multirun runs its jobs in one process: each job's Accelerator takes its own
    `trainer.mixed_precision` (accelerate keeps the first one process-wide unless told)."""
    code, err = train_here(
        "-m",
        "debug=fast",
        "trainer.mixed_precision=no,bf16",
        "task=[synthetic_cls]",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert code == 0, err[-2000:]
    jobs = sorted(p for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert len(jobs) == 2
    for job in jobs:
        assert any("loss" in json.loads(line) for line in (job / "metrics.jsonl").open())


def test_grad_accum_steps_at_every_epoch_end(make_cfg, tmp_path):
    # 3 tasks x 4 batches = 12 batches per epoch; grad_accum 5 -> groups of 5, 5, 2.
    run(make_cfg("trainer.max_steps=null", "trainer.epochs=2", "trainer.grad_accum=5"))
    steps = [r["step"] for r in read_metrics(tmp_path / "run") if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6]
    epochs = [r["epoch"] for r in read_metrics(tmp_path / "run") if "loss" in r]
    assert epochs == [0, 0, 0, 1, 1, 1]


def test_epochs_of_varying_length_all_run_to_the_end(make_cfg, tmp_path):
    """random + exhaust=first: each epoch's length is its own; the LR horizon is their sum."""
    from mtl.loaders import RandomLoader

    run(
        make_cfg(
            "loader=random",
            "loader.exhaust=first",
            "loader.weighting=uniform",
            "trainer.max_steps=null",
            "trainer.epochs=4",
            "trainer.log_every=3",
            "data.max_examples=96",
            "task.synthetic_cls.batch_size=8",
        )
    )
    # The tasks' batches per pass with 96 examples each: 12 (batch 8), 6 and 6 (batch 16).
    stand_in = RandomLoader(
        {"synthetic_cls": range(12), "synthetic_tag": range(6), "synthetic_reg": range(6)},
        weighting="uniform",
        exhaust="first",
    )
    lengths = [len(stand_in.schedule(epoch)) for epoch in range(4)]
    assert len(set(lengths)) > 1  # the epochs differ, or the test shows nothing
    rows = read_metrics(tmp_path / "run")
    logged = [r for r in rows if "loss" in r]
    assert logged[-1]["step"] == sum(lengths)  # every epoch ran, the last window was logged
    assert logged[-1]["lr"] == pytest.approx(0.0, abs=1e-12)  # the schedule reached its end
    evals = [r["step"] for r in rows if any(k.startswith("eval/") for k in r)]
    assert evals == list(np.cumsum(lengths))


def test_max_length_above_the_encoder_is_clamped_with_a_warning(make_cfg, tmp_path, capsys):
    data = tmp_path / "long.jsonl"
    words = " ".join(f"word{i}" for i in range(900))  # far more tokens than 512 positions
    data.write_text("\n".join(json.dumps({"text": words, "label": i % 2}) for i in range(12)))
    conf = tmp_path / "conf"
    (conf / "task").mkdir(parents=True)
    (conf / "task" / "long.yaml").write_text(
        "# @package task.long\ntype: sequence_classification\n"
        f"source: {{path: {data}}}\nmax_length: 4096\nbatch_size: 4\n"
    )
    final = run(make_cfg("task=[synthetic_cls,long]", f"hydra.searchpath=[file://{conf}]")).dev
    err = capsys.readouterr().err.splitlines()
    warning = [line for line in err if line.startswith("mtl: warning") and "max_length" in line]
    assert warning == [
        "mtl: warning: task 'long': max_length 4096 is more than the encoder takes "
        "(512 tokens); using 512"
    ]
    assert "eval/long/accuracy" in final


class SignalAt:
    """A hook that sends this process `signum` (SIGTERM, as a scheduler would) `times` times at
    the end of step `step`."""

    def __init__(self, step: int, signum: int = signal.SIGTERM, times: int = 1):
        self.step, self.signum, self.times = step, signum, times

    def on_step_end(self, run, progress):
        if progress.state.step == self.step:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)


@SLOW  # the fast subset keeps Ctrl-C's stop and resume below
def test_sigterm_saves_a_checkpoint_that_resumes_the_same_stream(make_cfg, tmp_path, capsys):
    """SIGTERM mid-run (in-process, at step 7; a signal sent from outside to a training process
    is tests/distributed's and tests/reporting/test_sweep.py's): the run saves that step, says
    how to resume and writes no outputs; the resume continues the uninterrupted run's losses."""
    from mtl.cli.job import train

    common = [
        "task=[synthetic_cls,synthetic_tag]",
        "loader=random",
        "trainer.max_steps=20",
        "trainer.epochs=20",
    ]
    full = tmp_path / "full"
    run(make_cfg(*common, output_dir=full))
    part = tmp_path / "part"
    stopped = train(make_cfg(*common, output_dir=part), hooks=[SignalAt(7)])
    assert stopped.stop == "signal" and stopped.step == 7 and stopped.exit_status == 143
    lines = [line for line in capsys.readouterr().err.splitlines() if "SIGTERM" in line]
    assert lines == [
        f"mtl: received SIGTERM: saving a checkpoint at step 7 and stopping; "
        f"resume with trainer.resume={part}"
    ]
    assert [p.name for p in (part / "checkpoints").glob("step_*")] == ["step_0000007"]
    assert not (part / "results.json").exists()
    resumed = tmp_path / "resumed"
    run(make_cfg(*common, f"trainer.resume={part}", output_dir=resumed))
    expected, got = losses_by_step(full), losses_by_step(resumed)
    assert sorted(got) == list(range(8, 21))
    for step in got:
        assert got[step] == pytest.approx(expected[step], rel=1e-5, abs=1e-6)


def test_ctrl_c_saves_a_checkpoint_and_the_resume_ends_bit_equal(make_cfg, tmp_path, capsys):
    """Ctrl-C (SIGINT) at a random step stops as SIGTERM does: a checkpoint at that step, one
    line saying how to resume, no outputs; the resumed run ends with the weights of the run
    never stopped, bit for bit."""
    from mtl.cli.job import train

    common = ["task=[synthetic_cls,synthetic_tag]", "trainer.max_steps=12", "trainer.epochs=20"]
    full = tmp_path / "full"
    run(make_cfg(*common, output_dir=full))
    part, step = tmp_path / "part", random.randrange(1, 12)
    stopped = train(make_cfg(*common, output_dir=part), hooks=[SignalAt(step, signal.SIGINT)])
    assert (stopped.stop, stopped.step) == ("signal", step)
    assert stopped.exit_status == 130  # what mtl-train exits with: a run to resume, not done
    err = capsys.readouterr().err
    assert "mtl: Ctrl-C: stopping after this step with a checkpoint" in err
    assert (
        f"mtl: received SIGINT: saving a checkpoint at step {step} and stopping; "
        f"resume with trainer.resume={part}"
    ) in err
    assert "Traceback" not in err and not (part / "results.json").exists()
    train(make_cfg(*common, f"trainer.resume={part}", output_dir=part))
    want, got = (load_file(last_checkpoint(d) / "model.safetensors") for d in (full, part))
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want), f"stopped at step {step}"


def last_checkpoint(run_dir: Path) -> Path:
    return sorted((run_dir / "checkpoints").glob("step_*"))[-1]


def test_a_second_ctrl_c_stops_at_once_in_one_line(make_cfg, tmp_path, capsys):
    """Ctrl-C twice: the user wants out now (status 130, as a shell reports an interrupted
    command; one line, no traceback); nothing is saved for the step under way."""
    from mtl.cli.job import train
    from mtl.cli.script import one_line_errors

    cfg = make_cfg("trainer.max_steps=12", "trainer.epochs=20", "trainer.checkpoint_every=2")
    with pytest.raises(SystemExit) as stop, one_line_errors:
        train(cfg, hooks=[SignalAt(5, signal.SIGINT, times=2)])
    assert stop.value.code == 130
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        "mtl: stopped (Ctrl-C); the run resumes from its checkpoint step_0000004 with "
        f"trainer.resume={tmp_path / 'run'}"
    )
    assert [p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*")] == ["step_0000004"]


def test_a_second_ctrl_c_before_any_checkpoint_says_there_is_none(make_cfg, tmp_path, capsys):
    from mtl.cli.job import train
    from mtl.cli.script import one_line_errors

    cfg = make_cfg("trainer.max_steps=12", "trainer.epochs=20")
    with pytest.raises(SystemExit) as stop, one_line_errors:
        train(cfg, hooks=[SignalAt(3, signal.SIGINT, times=2)])
    assert stop.value.code == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        "mtl: stopped (Ctrl-C) before the run's first checkpoint: nothing to resume; run the "
        "same command again to start it over"
    )
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("minutes", ["null", "1e-9"])
def test_timed_checkpoints(make_cfg, tmp_path, minutes):
    """`trainer.checkpoint_minutes`: a checkpoint at the first step that long after the last
    one (here: every step), besides the one at the end; null: only the end's."""
    run(make_cfg(f"trainer.checkpoint_minutes={minutes}", "trainer.keep_last=null"))
    steps = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*"))
    every = [f"step_000000{i}" for i in range(1, 5)]
    assert steps == (["step_0000004"] if minutes == "null" else every)


def test_best_model_and_early_stopping(make_cfg, tmp_path, capsys):
    """A monitored figure that is best early (the MSE of a regression task, taken as 'max'):
    the best step is the arg-max over the logged evaluations, the run stops `patience`
    evaluations after it, `main` returns the best value, and the closing table shows the best
    evaluation and the last, each named by its step."""
    from mtl.cli.job import main

    cfg = make_cfg(
        "task=[synthetic_cls,synthetic_reg]",
        "trainer.max_steps=40",
        "trainer.eval_every=1",
        "trainer.monitor=eval/synthetic_reg/mse",
        "trainer.monitor_mode=max",
        "trainer.patience=3",
        "trainer.head_lr=1e-2",
    )
    best_value = main(cfg)
    rows = read_metrics(tmp_path / "run")
    evals = [(r["step"], r["eval/synthetic_reg/mse"]) for r in rows if "eval/mean" in r]
    best_step, expected = max(evals, key=lambda e: (e[1], -e[0]))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["best_step"] == best_step
    assert best_value == results["best"]["eval/synthetic_reg/mse"] == expected
    steps = [step for step, _ in evals]
    assert steps[-1] == steps[steps.index(best_step) + 3] < 40  # stopped by patience
    best = json.loads((tmp_path / "run" / "checkpoints" / "best" / "best.json").read_text())
    assert best["step"] == best_step
    table = capsys.readouterr().out.strip().splitlines()[-3:]
    assert table[0].endswith(f"  best (step {best_step})  last (step {steps[-1]})")
    last = next(r for r in reversed(rows) if "eval/mean" in r)
    for line, (task, metric) in zip(
        table[1:], [("synthetic_cls", "accuracy"), ("synthetic_reg", "pearson")], strict=True
    ):
        shown = [float(v) for v in line.split()[-2:]]
        key = f"eval/{task}/{metric}"
        assert shown == pytest.approx([results["best"][key], last[key]], abs=5e-5)
    for row in rows:  # eval/mean is the mean of each task's main metric
        if "eval/mean" in row:
            mean = (row["eval/synthetic_cls/accuracy"] + row["eval/synthetic_reg/pearson"]) / 2
            assert row["eval/mean"] == pytest.approx(mean)


def test_test_split_is_scored_with_the_best_model(make_cfg, tmp_path):
    rows = [{"text": f"{'good' if i % 2 else 'bad'} item {i}", "label": i % 2} for i in range(40)]
    for split in ("train", "dev"):
        (tmp_path / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    conf = tmp_path / "conf"
    (conf / "task").mkdir(parents=True)
    (conf / "task" / "reviews.yaml").write_text(
        "# @package task.reviews\ntype: sequence_classification\n"
        f"source: {{train: {tmp_path}/train.jsonl, dev: {tmp_path}/dev.jsonl, "
        f"test: {tmp_path}/dev.jsonl}}\nbatch_size: 8\n"
    )
    run(
        make_cfg(
            "task=[reviews]",
            f"hydra.searchpath=[file://{conf}]",
            "trainer.max_steps=12",
            "trainer.eval_every=3",
            "trainer.monitor=eval/reviews/accuracy",
        )
    )
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    # The test file is the dev file: scored with the best weights, it gives the best dev figure.
    assert results["test/reviews/accuracy"] == results["best"]["eval/reviews/accuracy"]
    logged = [r for r in read_metrics(tmp_path / "run") if "test/reviews/accuracy" in r]
    assert len(logged) == 1


ALL_TYPES = [
    "synthetic_cls",
    "synthetic_tag",
    "synthetic_reg",
    "synthetic_pair",
    "synthetic_choice",
    "synthetic_qa",
]


@pytest.mark.parametrize("loader", ["mixup", pytest.param("random", marks=SLOW)])
def test_every_task_type_trains_together(make_cfg, tmp_path, loader):
    # One whole epoch (every batch of every task under random's each_once).
    final = run(
        make_cfg(f"task=[{','.join(ALL_TYPES)}]", f"loader={loader}", "trainer.max_steps=null")
    ).dev
    mains = {
        "synthetic_cls": "accuracy",
        "synthetic_tag": "f1",
        "synthetic_reg": "pearson",
        "synthetic_pair": "accuracy",
        "synthetic_choice": "accuracy",
        "synthetic_qa": "exact_match",
    }
    for task, metric in mains.items():
        assert f"eval/{task}/{metric}" in final
    losses = [r for r in read_metrics(tmp_path / "run") if "loss" in r]
    seen = {t for r in losses for t in ALL_TYPES if r.get(f"loss/{t}", 0) > 0}
    assert seen == set(ALL_TYPES)


def test_a_missing_pair_column_is_one_line(tmp_path, train_here):
    data = tmp_path / "pairs.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"a {i}", "label": i % 2}) for i in range(20)))
    conf = tmp_path / "conf" / "task"
    conf.mkdir(parents=True)
    (conf / "pairs.yaml").write_text(
        "# @package task.pairs\ntype: sequence_classification\n"
        f"source: {{path: {data}}}\ntext_pair_column: hypothesis\n"
    )
    code, err = train_here(
        "task=[pairs]", "debug=fast", f"hydra.searchpath=[file://{conf.parent}]",
        f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "'hypothesis' missing" in lines[0] and "pairs" in lines[0]


def test_init_from_a_trained_run_keeps_the_encoder_and_shared_heads(make_cfg, tmp_path, capsys):
    import torch

    from mtl.builders.model import build_model
    from mtl.builders.tasks import build_tasks
    from mtl.config import validate
    from mtl.data import task_dataset

    trained = tmp_path / "trained"
    run(make_cfg("task=[synthetic_cls,synthetic_reg]", output_dir=trained))
    best = load_file(trained / "checkpoints" / "best" / "model.safetensors")

    def built(*overrides):
        settings = validate(make_cfg(*overrides))
        tasks, _ = build_tasks(settings, 0)
        return build_model(settings, tasks).eval(), tasks

    # Into a single-task run: the shared task's logits are those of the trained model.
    model, tasks = built("task=[synthetic_cls]", f"model.init_from={trained}")
    assert "initialised from" in capsys.readouterr().err
    reference, _ = built("task=[synthetic_cls,synthetic_reg]")  # loaded by hand, strictly
    reference.load_state_dict(best)
    rows = task_dataset(tasks["synthetic_cls"], "dev").__getitems__(list(range(8)))
    batch = tasks["synthetic_cls"].collator()(rows)
    with torch.no_grad():
        ours = model.logits(batch)["synthetic_cls"]
        theirs = reference.logits(batch)["synthetic_cls"]
    assert torch.allclose(ours, theirs, atol=1e-6)
    for key, value in model.state_dict().items():
        assert torch.equal(value, best[key]), key
    # Into a run with a new task: its head is fresh, the rest loaded; and it trains.
    model, _ = built("task=[synthetic_cls,synthetic_tag]", f"model.init_from={trained}")
    state = model.state_dict()
    shared = [k for k in state if not k.startswith("heads.synthetic_tag")]
    assert all(torch.equal(state[k], best[k]) for k in shared)
    assert not any(k.startswith("heads.synthetic_tag") for k in best)
    final = run(make_cfg("task=[synthetic_cls,synthetic_tag]", f"model.init_from={trained}")).dev
    assert "eval/synthetic_tag/f1" in final


class Recorder:
    """A hook that records what the loop tells it."""

    def __init__(self):
        self.requests, self.micro, self.steps, self.logged, self.ended = 0, [], [], [], 0

    def batches(self, batches):
        for batch in batches:
            self.requests += 1
            yield batch

    def on_micro_step(self, run, progress, batch, loss):
        self.micro.append((progress.state.step, float(loss)))

    def on_step_end(self, run, progress):
        self.steps.append(progress.state.step)

    def on_log(self, run, progress, figures):
        self.logged.append((progress.state.step, figures["loss"]))

    def on_train_end(self, run, progress):
        self.ended += 1


def test_run_calls_its_hooks_and_returns_its_results(make_cfg, tmp_path):
    from mtl.training.state import StopReason

    hook = Recorder()
    results = run(make_cfg("trainer.grad_accum=2"), hooks=[hook])
    assert hook.requests == len(hook.micro) == 8  # 4 optimizer steps of 2 micro-batches
    assert [step for step, _ in hook.micro] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert hook.steps == [1, 2, 3, 4] and hook.ended == 1
    logged = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "run") if "loss" in r]
    assert hook.logged == logged and len(logged) == 4
    assert results.stop is StopReason.MAX_STEPS and results.step == 4
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved == json.loads(json.dumps(results.summary()))
    assert results.best_value == saved["best"][saved["monitor"]]
    assert results.dev == {k: v for k, v in saved.items() if k.startswith("eval/")}
    best = load_file(tmp_path / "run" / "checkpoints" / "best" / "model.safetensors")
    assert all(torch.equal(v, best[k]) for k, v in results.model.state_dict().items())


def test_a_run_that_trains_all_its_epochs_stops_for_epochs(make_cfg):
    from mtl.training.state import StopReason

    results = run(make_cfg("trainer.max_steps=null", "trainer.epochs=1"))
    assert results.stop is StopReason.EPOCHS and results.step > 4


def test_resume_keeps_the_best_model_and_early_stops_at_the_same_step(make_cfg, tmp_path):
    """The best evaluation so far and the evaluations since are in the checkpoint: a run resumed
    after its best evaluation (in its own folder or in another) picks the same best model and
    stops early at the same step as the run never stopped."""
    common = [
        "trainer.max_steps=30",
        "trainer.epochs=5",
        "trainer.eval_every=2",
        "trainer.monitor_mode=min",  # the first evaluations are best: the later ones are not
        "trainer.patience=3",
        "data.max_examples=96",
    ]
    full = tmp_path / "full"
    expected = run(make_cfg(*common, output_dir=full))
    assert expected.stop == "early_stop" and expected.best_step < 6  # the case to resume
    part = tmp_path / "part"
    run(make_cfg(*common, "trainer.checkpoint_every=3", "trainer.keep_last=null", output_dir=part))
    checkpoint = RunLayout(part).step(6)
    for resumed in (tmp_path / "elsewhere", part):  # another folder, then the run's own
        got = run(make_cfg(*common, f"trainer.resume={checkpoint}", output_dir=resumed))
        assert (got.step, got.stop, got.best_step) == (
            expected.step,
            "early_stop",
            expected.best_step,
        )
        assert got.best == pytest.approx(expected.best, rel=1e-6)
        best = json.loads((resumed / "checkpoints" / "best" / "best.json").read_text())
        assert best["step"] == expected.best_step
        for key, value in got.model.state_dict().items():  # the best weights, loaded at the end
            torch.testing.assert_close(value, expected.model.state_dict()[key])


def test_annealed_weights_are_logged_and_move_by_epoch(make_cfg, tmp_path):
    """`mix_weight/<task>` beside `share_target/<task>` each window: proportional in the first
    epoch (the planned shares), then annealed towards uniform in the second (a = 0.2)."""
    options = ["task=[synthetic_cls,synthetic_tag]", "loader.weighting=annealed"]
    options += ["trainer.max_steps=null", "trainer.epochs=2", "task.synthetic_tag.source.size=16"]
    run(make_cfg(*options))
    rows = [r for r in read_metrics(tmp_path / "run") if "mix_weight/synthetic_cls" in r]
    first, last = rows[0], rows[-1]
    assert (first["epoch"], last["epoch"]) == (0, 1)
    for task in ("synthetic_cls", "synthetic_tag"):
        assert first[f"mix_weight/{task}"] == pytest.approx(first[f"share_target/{task}"])
    sizes = np.array([first[f"share_target/{t}"] for t in ("synthetic_cls", "synthetic_tag")])
    annealed = sizes**0.2 / (sizes**0.2).sum()  # shares are proportional to sizes
    got = [last[f"mix_weight/{t}"] for t in ("synthetic_cls", "synthetic_tag")]
    assert got == pytest.approx(annealed.tolist()) and not np.allclose(got, sizes)


def test_the_libraries_are_quiet_while_a_run_trains_and_as_before_after(make_cfg):
    """A library caller's logging is its own again once `run` returns."""
    from transformers.utils import logging as hf_logging

    seen = []

    class Listen:
        def on_train_start(self, run, progress) -> None:
            seen.append(hf_logging.get_verbosity())

    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_info()
    try:
        run(make_cfg("trainer.max_steps=1"), hooks=[Listen()])
        assert seen == [hf_logging.ERROR]
        assert hf_logging.get_verbosity() == hf_logging.INFO
    finally:
        hf_logging.set_verbosity(before)


WALL_CLOCK = {"tokens_per_s", "examples_per_s"}  # the only figures that depend on the clock


@pytest.mark.parametrize("step", [7, 10])  # mid-window, and at a window's end
def test_a_run_stopped_and_resumed_writes_the_uninterrupted_runs_rows(make_cfg, tmp_path, step):
    """The logged window under way is in the checkpoint: the row whose window spans the stop
    (steps 6-10 when stopped at 7) is the uninterrupted run's, and so is the whole
    metrics.jsonl, wall-clock figures aside."""
    from mtl.cli.job import train

    common = ["task=[synthetic_cls,synthetic_tag]", "loader=random", "trainer.max_steps=15"]
    common += ["trainer.epochs=20", "trainer.log_every=5", "trainer.eval_every=5"]
    full, part = tmp_path / "full", tmp_path / "part"
    run(make_cfg(*common, output_dir=full))
    stopped = train(make_cfg(*common, output_dir=part), hooks=[SignalAt(step)])
    assert stopped.step == step
    run(make_cfg(*common, f"trainer.resume={part}", output_dir=part))

    def rows(run_dir: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in read_metrics(run_dir)]

    want, got = rows(full), rows(part)
    assert [r.get("step") for r in got] == [r.get("step") for r in want]
    for expected, resumed in zip(want, got, strict=True):
        assert resumed.keys() == expected.keys()
        for key, value in expected.items():
            assert resumed[key] == pytest.approx(value, rel=1e-6, abs=1e-7), (resumed["step"], key)


def test_the_target_since_the_start_meets_the_share_since_the_start(make_cfg, tmp_path):
    """Under a schedule the epoch's plan (`share_target`) moves away from the share since the
    start (`share_total`); `share_target_total`, the plan over the same span, meets it at each
    epoch's end (each_once draws exactly the plan)."""
    out = tmp_path / "run"
    run(
        make_cfg(
            "task=[synthetic_cls,synthetic_reg]", "loader=random", "loader.weighting=temperature",
            "loader.temperature=1", "loader.temperature_end=8", "trainer.epochs=3",
            "trainer.max_steps=null", "trainer.log_every=1",
            "task.synthetic_reg.max_train_examples=12", output_dir=out,
        )
    )  # fmt: skip
    rows = [r for r in read_metrics(out) if "share_total/synthetic_cls" in r]
    last = rows[-1]
    for task in ("synthetic_cls", "synthetic_reg"):
        assert last[f"share_target_total/{task}"] == pytest.approx(last[f"share_total/{task}"])
    assert abs(last["share_target/synthetic_cls"] - last["share_total/synthetic_cls"]) > 0.02
