"""mtl against the Hugging Face `Trainer`: examples/s and dev accuracy on one task, same model.

One sequence classification task (default `pydoc_topic`), the same model, data, batch size,
epochs, learning rate, max_length and seed for both; peer: transformers' `Trainer`.

- mtl: the real `mtl.training.loop.run` on the composed config (as `train.py` would; see
  benchmarks/bench_train_speed.py) with `logger=none trainer.progress_bar=false task=[<task>]
  trainer.epochs=<epochs> trainer.lr=<lr> trainer.head_lr=<lr> trainer.warmup_ratio=0` and the
  default sampler (block_shuffle) and loader. mtl always evaluates after each epoch; that, setup
  (tokenizing, model load) and the final checkpoint are not timed. Timed: every epoch's pass over
  the loader (data, forward, backward, optimizer, logging every `trainer.log_every` steps), by
  the loop's `batches` hook (`harness.LoopClock`).
- Trainer: `AutoModelForSequenceClassification.from_pretrained(<the packaged MiniLM>)` (BERT's
  pooler -> dropout -> linear, exactly mtl's sentence head; `model=tiny` with `--quick`: the same
  tiny config, randomly initialised) on the train/dev rows of the task built by mtl's own data
  layer (`mtl.builders.tasks.build_tasks`: the same examples and token ids), converted to a
  `datasets.Dataset` (input_ids, attention_mask, token_type_ids, labels). Its fastest settings:
  length-grouped batches (`group_by_length`, or `train_sampling_strategy="group_by_length"` in
  transformers 5), `optim="adamw_torch_fused"` where this torch has fused AdamW on the device
  (else `adamw_torch`; the table says which; mtl makes the same choice),
  `DataCollatorWithPadding`, mtl's `data.num_workers` dataloader workers, no evaluation or saving
  during training, `report_to="none"`, `use_cpu` without a GPU, no bf16/fp16. Both use mtl's
  weight decay, `max_grad_norm`, a linear schedule without warmup and one learning rate for all
  parameters. Timed: the `trainer.train()` call (model load and the dev predictions are not).

examples/s = training examples seen / timed seconds; dev accuracy after the last epoch (mtl's
`eval/<task>/accuracy`; Trainer: argmax of `trainer.predict(dev)` against the labels). "run s" is
the whole mtl `run()` and, for the Trainer, model load + train + predict. Not the same: the
heads' output layer starts from PyTorch's default init in mtl and from normal(0, 0.02) in
transformers, and the two draw their batches differently (block shuffle vs length groups).

Each run is a fresh process of this script (`--tool mtl|trainer`), so neither tool inherits
the other's state: the mtl run tunes host memory as `mtl-train` does (`trainer.keep_freed_memory`,
glibc keeps freed blocks), the Trainer's process runs with the allocator as it comes. Runs come
in pairs (`--repeats`) in alternating order (mtl trainer, trainer mtl, ...), so a machine that
speeds up or slows down favours neither; the ratio is the median of the pairs' ratios, and the
machine's load average over the runs is printed with them.

    python benchmarks/bench_vs_trainer.py [--task pydoc_topic] [--epochs 1] [--lr 1e-4]
        [--batch-size N] [--max-length N] [--seed 0] [--threads 2] [--repeats 2] [--json PATH]
        [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import statistics
import time
from pathlib import Path

from harness import LoopClock, compose, emit, grouped, parser, quiet_transformers, scratch, table

QUICK_EXAMPLES = 128  # --quick: cap per split (4 steps of 32)
TOOLS = ("mtl", "trainer")
KEPT = ("tool", "examples", "seconds", "examples_per_s", "dev_accuracy", "run_seconds")


def overrides(args: argparse.Namespace, out_dir: Path, cuda: bool) -> list[str]:
    """The config both tools are set from (mtl trains on it; the Trainer copies its values)."""
    task = args.task
    out = [
        "logger=none",
        "trainer.progress_bar=false",
        f"task=[{task}]",
        f"trainer.epochs={args.epochs}",
        f"trainer.lr={args.lr}",
        f"trainer.head_lr={args.lr}",
        "trainer.warmup_ratio=0",
        f"seed={args.seed}",
        f"output_dir={out_dir}",
    ]
    if args.batch_size:
        out.append(f"task.{task}.batch_size={args.batch_size}")
    if args.max_length:
        out.append(f"task.{task}.max_length={args.max_length}")
    if args.quick:
        out += ["model=tiny", f"data.max_examples={QUICK_EXAMPLES}"]
    if not cuda:
        out.append("trainer.cpu=true")
    return out


def run_mtl(cfg, task: str) -> dict:
    from mtl.training.loop import run

    start = time.perf_counter()
    clock = LoopClock()
    with contextlib.redirect_stdout(io.StringIO()):  # run()'s summary
        final = run(cfg, hooks=[clock]).dev
    total = time.perf_counter() - start
    return {
        "examples": clock.examples,
        "seconds": clock.seconds,
        "examples_per_s": clock.examples / clock.seconds,
        "dev_accuracy": final[f"eval/{task}/accuracy"],
        "run_seconds": total,
    }


def hf_split(split):
    """A tokenized mtl split as the rows `DataCollatorWithPadding` and BERT take."""
    from datasets import Dataset

    ids = split["input_ids"]
    if "token_type_ids" in split.column_names:
        types = split["token_type_ids"]
    else:
        types = [[0] * len(row) for row in ids]
    return Dataset.from_dict(
        {
            "input_ids": ids,
            "attention_mask": [[1] * len(row) for row in ids],
            "token_type_ids": types,
            "labels": split["labels"],
        }
    )


def hf_model(settings, num_labels: int):
    """transformers' sequence classifier on mtl's encoder settings (path, config overrides,
    random init), with mtl's head dropout."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from mtl.models import resolve_model_path

    m = settings.model
    path = resolve_model_path(m.name_or_path)
    config = AutoConfig.from_pretrained(
        path, num_labels=num_labels, classifier_dropout=m.head_dropout, **dict(m.config)
    )
    if m.random_init:
        return AutoModelForSequenceClassification.from_config(config)
    return AutoModelForSequenceClassification.from_pretrained(path, config=config)


def fused_adamw(device: str) -> bool:
    import torch

    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2, device=device))], fused=True)
        return True
    except (RuntimeError, TypeError):
        return False


def training_args(settings, task: str, out_dir: Path, cuda: bool, seed: int):
    from transformers import TrainingArguments

    t, data = settings.trainer, settings.data
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    grouping = (
        {"group_by_length": True}
        if "group_by_length" in names
        else {"train_sampling_strategy": "group_by_length"}
    )
    return TrainingArguments(
        output_dir=str(out_dir),
        per_device_train_batch_size=settings.tasks[task].batch_size,
        per_device_eval_batch_size=t.eval_batch_size,
        num_train_epochs=t.epochs,
        learning_rate=t.lr,
        weight_decay=t.weight_decay,
        warmup_steps=0,
        lr_scheduler_type="linear",
        max_grad_norm=t.max_grad_norm or 0.0,
        optim="adamw_torch_fused" if fused_adamw("cuda" if cuda else "cpu") else "adamw_torch",
        dataloader_num_workers=data.num_workers,
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not cuda,
        bf16=False,
        fp16=False,
        seed=seed,
        **grouping,
    )


def run_trainer(cfg, task: str, out_dir: Path, cuda: bool) -> dict:
    import numpy as np
    from transformers import DataCollatorWithPadding, Trainer, set_seed

    from mtl.builders.tasks import build_tasks
    from mtl.config import validate

    class CountingTrainer(Trainer):
        """Counts the training examples it steps on."""

        examples = 0

        def training_step(self, model, inputs, *args, **kwargs):
            self.examples += int(inputs["input_ids"].shape[0])
            return super().training_step(model, inputs, *args, **kwargs)

    settings = validate(cfg)
    tasks, tokenizer = build_tasks(settings, cfg.seed)
    built = tasks[task]
    train, dev = hf_split(built.train), hf_split(built.dev)
    start = time.perf_counter()
    set_seed(cfg.seed)
    model = hf_model(settings, built.num_labels)
    args = training_args(settings, task, out_dir, cuda, cfg.seed)
    trainer = CountingTrainer(
        model=model,
        args=args,
        train_dataset=train,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
    )
    train_start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # its own summary line
        trainer.train()
    seconds = time.perf_counter() - train_start
    predicted = trainer.predict(dev)
    accuracy = float(np.mean(predicted.predictions.argmax(-1) == predicted.label_ids))
    return {
        "examples": trainer.examples,
        "seconds": seconds,
        "examples_per_s": trainer.examples / seconds,
        "dev_accuracy": accuracy,
        "run_seconds": time.perf_counter() - start,
        "optim": str(getattr(args.optim, "value", args.optim)),
    }


def one_tool(args: argparse.Namespace) -> dict:
    """Train with `args.tool` alone in this process; its figures."""
    import torch

    from mtl.cli.host_memory import keep_freed_memory
    from mtl.config import validate

    quiet_transformers()
    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    with scratch("bench_vs_trainer_") as workdir:
        cfg = compose(overrides(args, workdir / "mtl", cuda))
        settings = validate(cfg)
        if args.tool == "trainer":
            return run_trainer(cfg, args.task, workdir / "trainer", cuda)
        if settings.trainer.keep_freed_memory:  # what `mtl-train` does before its run
            keep_freed_memory()
        return run_mtl(cfg, args.task)


def child_argv(args: argparse.Namespace, tool: str) -> list[str]:
    """This script's command line for one tool's run in a fresh process."""
    argv = [__file__, "--tool", tool, "--task", args.task, "--epochs", str(args.epochs)]
    argv += ["--lr", str(args.lr), "--seed", str(args.seed), "--threads", str(args.threads)]
    for flag, value in (("--batch-size", args.batch_size), ("--max-length", args.max_length)):
        if value:
            argv += [flag, str(value)]
    return argv + (["--quick"] if args.quick else [])


def load() -> float:
    """The machine's one-minute load average (other processes compete for its cores)."""
    return round(os.getloadavg()[0], 2)


def main() -> None:
    p = parser(__doc__, f"tiny model, {QUICK_EXAMPLES} rows", threads=2)
    p.add_argument("--task", default="pydoc_topic", help="a sequence_classification task")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-4, help="one LR for encoder and head")
    p.add_argument("--batch-size", type=int, default=None, help="default: the task's")
    p.add_argument("--max-length", type=int, default=None, help="default: the task's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=2, help="pairs of runs (default 2; --quick: 1)")
    p.add_argument("--tool", choices=TOOLS, help="run one tool in this process (internal)")
    args = p.parse_args()
    if args.tool:
        emit(one_tool(args))
        return
    if args.quick:
        args.repeats = 1

    from harness import run_child

    from mtl.config import validate

    with scratch("bench_vs_trainer_") as workdir:
        settings = validate(compose(overrides(args, workdir, cuda=False)))
    if settings.tasks[args.task].type != "sequence_classification":
        p.error(
            f"--task {args.task} is {settings.tasks[args.task].type}; give a "
            "sequence_classification task (the Trainer side is a classifier)"
        )
    loads, runs = [load()], []
    for repeat in range(args.repeats):
        for tool in TOOLS if repeat % 2 == 0 else TOOLS[::-1]:  # A B B A ...
            figures = run_child(child_argv(args, tool))
            runs.append({"tool": tool, "repeat": repeat, **figures})
            loads.append(load())
    report(args, settings.tasks[args.task], runs, loads)


def report(args: argparse.Namespace, task, runs: list[dict], loads: list[float]) -> None:
    """The table of runs, the ratio (median over the pairs) and the JSON line."""
    import torch

    cuda = torch.cuda.is_available()
    speed = grouped(runs, "tool", "examples_per_s")
    ratios = [m / t for m, t in zip(speed["mtl"], speed["trainer"], strict=True)]
    ratio = statistics.median(ratios)
    optim = next(r["optim"] for r in runs if r["tool"] == "trainer")
    device = torch.cuda.get_device_name() if cuda else f"CPU, {args.threads} torch threads"
    print(
        f"task {args.task}, model {'tiny' if args.quick else 'minilm'}, {args.epochs} epoch(s), "
        f"batch {task.batch_size}, max_length {task.max_length}, lr {args.lr}, seed {args.seed}, "
        f"{device}; Trainer optim {optim}; each run in its own process; load average "
        f"{min(loads)}-{max(loads)}"
    )
    table(
        ["run", "tool", "examples", "train s", "ex/s", "dev acc", "run s"],
        [[i + 1, r["tool"], r["examples"], r["seconds"], r["examples_per_s"], r["dev_accuracy"],
          r["run_seconds"]] for i, r in enumerate(runs)],
        [0, 0, 0, 1, 2, 4, 1],
    )  # fmt: skip
    print(
        f"mtl / Trainer examples/s: median {ratio:.2f}x over {len(ratios)} pair(s) "
        f"({', '.join(f'{r:.2f}' for r in ratios)})"
    )
    figures = {
        "bench": "vs_trainer",
        "peer": "transformers Trainer",
        "task": args.task,
        "model": "tiny" if args.quick else "minilm",
        "device": device,
        "separate_processes": True,
        "load_average": [min(loads), max(loads)],
        "epochs": args.epochs,
        "batch_size": task.batch_size,
        "max_length": task.max_length,
        "lr": args.lr,
        "seed": args.seed,
        "trainer_optim": optim,
        "runs": [
            {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items() if k in KEPT}
            for r in runs
        ],
        "pair_ratios": [round(r, 3) for r in ratios],
        "ratio_mtl_vs_trainer": round(ratio, 3),
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
