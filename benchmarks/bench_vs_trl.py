"""mtl against trl's SFTTrainer: completion-only fine-tuning of a decoder, examples/s and loss.

One generation task (default the bundled `pydoc_heading`: a paragraph -> its section heading),
the same decoder weights, token ids, batch size, epochs, learning rate, schedule and seed for
both; peer: trl's `SFTTrainer` (`pip install trl`; measured with 1.16), each tool with and
without packing, each run in a fresh process of this script (`--tool`, `--packing`).

- The decoder: a GPT-2 made by `mtl.models.tiny` (the packaged tokenizer, `<|endoftext|>` its
  EOS), `--model tiny` (2 layers of 32) or `small` (4 layers of 256, `model=decoder`'s shape,
  about 11M parameters), saved once with its random weights: both tools start from them.
- The rows: mtl's data layer builds the task (`mtl.builders.tasks.build_tasks`); trl gets the
  same token ids, pre-tokenized (`input_ids`, and `completion_mask` from mtl's labels: the
  completion and its end token), so both train on the same tokens with the loss on the same.
- mtl: the real `mtl.training.loop.run` (`logger=none`, the default sampler `block_shuffle`,
  `model.pack=true|false`: a padded batch packed end to end into one causal call, the same
  examples per step), its loss the mean over each batch's completion tokens (`token`).
  Timed: every epoch's pass over the loader (`harness.LoopClock`).
- trl: `SFTTrainer` with `completion_only_loss`, its fastest settings for each: without
  packing, length-grouped batches; with packing, `packing=True` (its best-fit-decreasing
  strategy: rows packed into sequences of `max_length`, so a step holds more rows and there are
  fewer steps), `eval_packing=False`. `optim` fused AdamW where torch has it on the device.
  Timed: `trainer.train()`.

Both: weight decay, `max_grad_norm`, a linear schedule without warmup, one learning rate. The
figures: examples/s (train rows x epochs / timed seconds), the train loss of the last logged
window, and the dev loss (cross-entropy per completion token over the whole dev split, the
same computation for both, teacher-forced), peak RSS of the process (and peak CUDA memory
on a GPU). Runs alternate tools (mtl trl, trl mtl, ...) per seed and packing setting; the
ratio is the median over seeds. Rows: mtl's default (block_shuffle batches, packed calls), its
padded calls (`model.pack=false`), mtl on shuffled batches (`sampler=random`: batches drawn as
trl's are, for the loss comparison: length-sorted batches learn differently per step), trl
padded (length-grouped) and trl packed. Peak RSS is the process's from the start of training (mtl:
of `run`, with its data and model setup; trl: of `trainer.train()`).

    python benchmarks/bench_vs_trl.py [--model small] [--task pydoc_heading] [--epochs 1]
        [--lr 1e-3] [--batch-size 16] [--max-length N] [--seeds 0 1] [--threads 2]
        [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import statistics
import time
from pathlib import Path

from harness import (
    LoopClock,
    compose,
    emit,
    parser,
    peak_rss,
    quiet_transformers,
    reset_peak,
    scratch,
    table,
)

SIZES = {"tiny": {}, "small": {"n_embd": 256, "n_layer": 4, "n_head": 4, "n_inner": 1024}}
TOOLS = ("mtl", "trl")
# (tool, batches, packing): mtl's default (block_shuffle, packed calls) and its padded calls;
# mtl on shuffled batches (the batches' statistics as trl's: the loss comparison); trl padded
# (length-grouped: its fastest padded batches) and packed.
ROWS = (
    ("mtl", "block_shuffle", "on"),
    ("mtl", "block_shuffle", "off"),
    ("mtl", "random", "on"),
    ("trl", "grouped", "off"),
    ("trl", "packed", "on"),
)
QUICK_EXAMPLES = 96


def decoder(folder: Path, model: str) -> Path:
    """The decoder both tools start from, saved once (its random weights)."""
    from mtl.models.tiny import save_tiny_model

    path = folder / f"decoder-{model}"
    if not (path / "config.json").is_file():
        with contextlib.redirect_stderr(io.StringIO()):
            save_tiny_model("gpt2", path, **SIZES[model])
    return path


def overrides(args: argparse.Namespace, model: Path, out_dir: Path, packing: bool) -> list[str]:
    task = args.task
    out = [
        "logger=none", "trainer.progress_bar=false", f"task=[{task}]",
        f"model.name_or_path={model}", f"model.pack={str(packing).lower()}",
        f"trainer.epochs={args.epochs}", f"trainer.lr={args.lr}", f"trainer.head_lr={args.lr}",
        "trainer.warmup_ratio=0", f"trainer.log_every={args.log_every}", f"seed={args.seed}",
        f"task.{task}.batch_size={args.batch_size}", f"task.{task}.metrics=[loss]",
        "trainer.monitor=eval/mean", "trainer.monitor_mode=min", "trainer.export=false",
        f"output_dir={out_dir}", "trainer.cpu=true", f"sampler={args.sampler}",
    ]  # fmt: skip
    if args.max_length:
        out.append(f"task.{task}.max_length={args.max_length}")
    if args.quick:
        out.append(f"data.max_examples={QUICK_EXAMPLES}")
    return out


def run_mtl(cfg, task: str, out_dir: Path) -> dict:
    from mtl.training.loop import run

    clock = LoopClock()
    reset_peak()
    with contextlib.redirect_stdout(io.StringIO()):  # run()'s summary
        final = run(cfg, hooks=[clock]).dev
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").open()]
    losses = [r[f"loss/{task}"] for r in rows if f"loss/{task}" in r]
    return {
        "examples": clock.examples,
        "seconds": clock.seconds,
        "train_loss": losses[-1],
        "curve": losses,
        "dev_loss": final[f"eval/{task}/loss"],
    }


def dev_loss(model, split, batch_size: int, pad_id: int) -> float:
    """Cross-entropy per completion token over the dev rows (teacher-forced; labels -100 off),
    as mtl's `eval/<task>/loss`."""
    import torch
    import torch.nn.functional as F

    total, count = 0.0, 0
    model.eval()
    ids, labels = split["input_ids"], split["labels"]
    with torch.no_grad():
        for start in range(0, len(ids), batch_size):
            rows = ids[start : start + batch_size]
            width = max(len(r) for r in rows)
            x = torch.full((len(rows), width), pad_id)
            y = torch.full((len(rows), width), -100)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, (r, lab) in enumerate(
                zip(rows, labels[start : start + batch_size], strict=True)
            ):
                x[i, : len(r)], y[i, : len(r)], mask[i, : len(r)] = (
                    torch.tensor(r),
                    torch.tensor(lab),
                    1,
                )
            logits = model(input_ids=x, attention_mask=mask).logits[:, :-1].float()
            token = F.cross_entropy(logits.transpose(1, 2), y[:, 1:], reduction="sum")
            total, count = total + float(token), count + int((y[:, 1:] != -100).sum())
    return total / count


def run_trl(cfg, args: argparse.Namespace, model_path: Path, out_dir: Path, packing: bool) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, set_seed
    from trl import SFTConfig, SFTTrainer

    from mtl.builders.tasks import build_tasks
    from mtl.config import validate

    settings = validate(cfg)
    tasks, tokenizer = build_tasks(settings, cfg.seed)
    built, t = tasks[args.task], settings.trainer
    train = Dataset.from_dict(
        {
            "input_ids": built.train["input_ids"],
            "completion_mask": [[int(y != -100) for y in row] for row in built.train["labels"]],
        }
    )
    set_seed(cfg.seed)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    fused = "adamw_torch_fused" if fused_adamw() else "adamw_torch"
    fields = {f.name for f in dataclasses.fields(SFTConfig)}
    grouping = {}
    if not packing:  # its fastest padded batches: rows of similar length together
        grouping = (
            {"group_by_length": True}
            if "group_by_length" in fields
            else {"train_sampling_strategy": "group_by_length"}
        )
    config = SFTConfig(
        output_dir=str(out_dir), per_device_train_batch_size=args.batch_size,
        num_train_epochs=args.epochs, learning_rate=args.lr, weight_decay=t.weight_decay,
        warmup_steps=0, lr_scheduler_type="linear", max_grad_norm=t.max_grad_norm or 0.0,
        optim=fused, logging_steps=args.log_every, save_strategy="no", eval_strategy="no",
        report_to="none", disable_tqdm=True, use_cpu=not torch.cuda.is_available(), seed=cfg.seed,
        packing=packing, eval_packing=False, completion_only_loss=True,
        max_length=built.task_type.config.max_length, dataloader_num_workers=0, **grouping,
    )  # fmt: skip
    trainer = SFTTrainer(model=model, args=config, train_dataset=train, processing_class=tokenizer)
    reset_peak()
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    seconds = time.perf_counter() - start
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    return {
        "examples": len(train) * args.epochs,
        "seconds": seconds,
        "train_loss": losses[-1],
        "curve": losses,
        "dev_loss": dev_loss(trainer.model, built.dev, 32, tokenizer.pad_token_id),
        "optim": fused,
    }


def fused_adamw() -> bool:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2, device=device))], fused=True)
        return True
    except (RuntimeError, TypeError):
        return False


def one_tool(args: argparse.Namespace) -> dict:
    """Train with `args.tool` alone in this process; its figures."""
    import torch

    quiet_transformers()
    torch.set_num_threads(args.threads)
    packing = args.packing == "on"
    with scratch("bench_vs_trl_") as workdir:
        model = Path(args.decoder)
        cfg = compose(overrides(args, model, workdir / "mtl", packing))
        if args.tool == "trl":
            figures = run_trl(cfg, args, model, workdir / "trl", packing)
        else:
            figures = run_mtl(cfg, args.task, workdir / "mtl")
    figures["examples_per_s"] = figures["examples"] / figures["seconds"]
    figures["peak_rss_mib"] = peak_rss() / 2**20
    if torch.cuda.is_available():
        figures["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return figures


def child_argv(args: argparse.Namespace, row: tuple[str, str, str], seed: int, model: Path):
    tool, batches, packing = row
    sampler = batches if tool == "mtl" else "random"  # trl's batches are its own
    argv = [__file__, "--tool", tool, "--packing", packing, "--seed", str(seed)]
    argv += ["--sampler", sampler]
    argv += ["--decoder", str(model), "--model", args.model, "--task", args.task]
    argv += ["--epochs", str(args.epochs), "--lr", str(args.lr), "--threads", str(args.threads)]
    argv += ["--batch-size", str(args.batch_size), "--log-every", str(args.log_every)]
    if args.max_length:
        argv += ["--max-length", str(args.max_length)]
    return argv + (["--quick"] if args.quick else [])


def main() -> None:
    p = parser(__doc__, f"the tiny decoder, {QUICK_EXAMPLES} rows, one seed", threads=2)
    p.add_argument("--model", choices=sorted(SIZES), default="small")
    p.add_argument("--task", default="pydoc_heading", help="a generation task")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=None, help="default: the task's")
    p.add_argument("--log-every", type=int, default=10, help="steps per logged train loss")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--tool", choices=TOOLS, help=argparse.SUPPRESS)
    p.add_argument("--packing", choices=("on", "off"), default="off", help=argparse.SUPPRESS)
    p.add_argument("--decoder", help=argparse.SUPPRESS)
    p.add_argument("--sampler", default="block_shuffle", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.tool:
        emit(one_tool(args))
        return
    if args.quick:
        args.model, args.seeds, args.log_every = "tiny", args.seeds[:1], 2
    from harness import run_child

    rows = ROWS
    if importlib.util.find_spec("trl") is None:
        print("trl is not installed (pip install trl): its rows are skipped")
        rows = tuple(row for row in ROWS if row[0] == "mtl")
    runs = []
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    with scratch("bench_vs_trl_models_") as folder:
        model = decoder(folder, args.model)
        for i, seed in enumerate(args.seeds):
            for row in rows if i % 2 == 0 else rows[::-1]:  # A B B A ...
                figures = run_child(child_argv(args, row, seed, model), env=env)
                runs.append({"tool": row[0], "batches": row[1], "packing": row[2], "seed": seed})
                runs[-1] |= figures
    report(args, runs, rows)


def report(args: argparse.Namespace, runs: list[dict], rows: tuple) -> None:
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    optim = next((r["optim"] for r in runs if r["tool"] == "trl"), "-")
    print(
        f"task {args.task}, decoder {args.model} (GPT-2, random init), {args.epochs} epoch(s), "
        f"batch {args.batch_size}, lr {args.lr}, seeds {args.seeds}, {device}, "
        f"{args.threads} threads; trl optim {optim}; each run in its own process"
    )
    table(
        ["tool", "batches", "packing", "seed", "train s", "ex/s", "train loss", "dev loss",
         "peak RSS MiB"],
        [[r["tool"], r["batches"], r["packing"], r["seed"], r["seconds"], r["examples_per_s"],
          r["train_loss"], r["dev_loss"], r["peak_rss_mib"]] for r in runs],
        [0, 0, 0, 0, 1, 1, 4, 4, 0],
    )  # fmt: skip
    figures: dict = {"bench": "vs_trl", "peer": "trl SFTTrainer", "model": args.model}
    figures |= {"task": args.task, "runs": runs}
    if rows == ROWS:
        speed = {row: [r["examples_per_s"] for r in runs if same(r, row)] for row in ROWS}
        loss = {row: [r["dev_loss"] for r in runs if same(r, row)] for row in ROWS}
        default, padded, shuffled, grouped, packed = ROWS
        for name, theirs in (("padded", grouped), ("packed", packed)):
            ratio = median_ratio(speed[default], speed[theirs])
            print(f"mtl (default) / trl {name}: examples/s, median over seeds {ratio:.2f}x")
            figures[f"ratio_vs_trl_{name}"] = round(ratio, 3)
        spread = max(loss[grouped]) - min(loss[grouped])
        gap = statistics.mean(loss[shuffled]) - statistics.mean(loss[grouped])
        print(
            f"dev loss, mtl on shuffled batches - trl padded: {gap:+.4f} (trl's spread over "
            f"seeds {spread:.4f}); mtl's default (block_shuffle) - trl padded: "
            f"{statistics.mean(loss[default]) - statistics.mean(loss[grouped]):+.4f}"
        )
        figures |= {"dev_loss_gap_shuffled": round(gap, 4), "trl_seed_spread": round(spread, 4)}
    emit(figures, args.json)


def same(run: dict, row: tuple[str, str, str]) -> bool:
    return (run["tool"], run["batches"], run["packing"]) == row


def median_ratio(ours: list[float], theirs: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


if __name__ == "__main__":
    main()
