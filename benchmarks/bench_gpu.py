"""The speed paths side by side in one run: sampler, precision, compile, packing, LoRA, Trainer.

Every row trains with the real loop (`mtl.training.loop.run` on the composed config, as
`train.py` would) on the same data and seed and times its steps with the loop's `batches` hook
(`harness.LoopClock`, steady state from step `--warmup`: compiling and the first batches are not
timed); evaluation and checkpoints at the end are not timed. Every row runs `--rounds` times (2),
the rows in the same order each round, and its fastest round counts: the first round also meets
every new width's kernels (block_shuffle gives many), which the first row of a precision would
otherwise pay alone. Each comparison names its peer (first) and gives candidate / peer examples/s:

- sampler: `sampler=random` vs `sampler=block_shuffle` (fp32), on one task (`pydoc_topic`)
- precision: fp32 vs `trainer.mixed_precision=bf16` (block_shuffle)
- compile: eager vs `trainer.compile=true` (block_shuffle, bf16)
- packing: `loader=mixup` over five bundled tasks, `model.pack=false` vs packed (bf16)
- lora: the whole model trained vs one LoRA adapter (`model.peft=lora`; block_shuffle, bf16)
- bare: a bare loop (the same transformers encoder and head arithmetic on the same batches, plain
  PyTorch: bf16 autocast, fused AdamW, clipping, the same schedule; no mtl in the step), eager
  and with the encoder compiled, vs mtl's block_shuffle bf16 row (eager, compiled)
- Trainer: `benchmarks/bench_vs_trainer.py` in processes of its own (each tool one process).

Every row also reports, over `--profile` steps after the timed ones (under torch.profiler): the
GPU's busy share of the wall time (its kernels' and copies' time / the steps' wall time), the
host's own milliseconds per step (wall time less the time it waited in `cuda*Synchronize`), and
MFU: model FLOPs per second (6 x non-embedding parameters x tokens + 12 x layers x hidden x
length^2 per sequence, forward and backward) over the GPU's dense peak for the row's precision
(`PEAK_TFLOPS`: bf16, or TF32 / FP32 for an fp32 row as `torch.backends.cuda.matmul.allow_tf32`
says), counted over real tokens and over padded token slots. TF32 is stated in the table.

The encoder is BERT-base-sized and randomly initialised (12 layers, hidden 768, 12 heads,
intermediate 3072: MiniLM's architecture and tokenizer), batch 32, max_length 256. `--quick`:
the tiny model on the small synthetic tasks (32 examples each), 3 steps, 1 round, compile with the
`eager` backend (dynamo traces and guards, no code generation) and fp32 in the bf16 rows (bf16 on a
CPU without bf16 units runs at about 0.2 GFLOP/s): the same pipeline as a smoke run on a CPU, whose
figures say nothing of a GPU's.
`--markdown PATH` appends the table as a dated section (with the device's name) to PATH.

    python benchmarks/bench_gpu.py [--steps 60] [--warmup 10] [--rounds 2]
        [--markdown docs/benchmarks.md] [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from datetime import date
from pathlib import Path

from harness import (
    LoopClock,
    compose,
    emit,
    parser,
    passes,
    quiet_transformers,
    run_child,
    scratch,
    table,
)

BERT_BASE = [
    "model=tiny",  # random init, MiniLM's tokenizer; the sizes below make it BERT-base
    "model.config.hidden_size=768",
    "model.config.num_hidden_layers=12",
    "model.config.num_attention_heads=12",
    "model.config.intermediate_size=3072",
]
ONE_TASK = {"full": ["pydoc_topic"], "quick": ["synthetic_cls"]}
MIXUP = {
    "full": ["pydoc_topic", "pydoc_code", "pydoc_pair", "pydoc_choice", "pydoc_qa"],
    "quick": ["synthetic_cls", "synthetic_tag", "synthetic_pair"],
}
BF16 = ["trainer.mixed_precision=bf16"]
# name -> (tasks, overrides); the comparisons below pair them (peer first)
ROWS = {
    "random fp32": (ONE_TASK, ["sampler=random"]),
    "block_shuffle fp32": (ONE_TASK, []),
    "block_shuffle bf16": (ONE_TASK, BF16),
    "mixup padded bf16": (MIXUP, ["loader=mixup", *BF16, "model.pack=false"]),
    "mixup packed bf16": (MIXUP, ["loader=mixup", *BF16]),
    "block_shuffle bf16 lora": (ONE_TASK, [*BF16, "model.peft=lora"]),
    "block_shuffle bf16 compiled": (ONE_TASK, [*BF16, "trainer.compile=true"]),  # compiles
    "bare eager bf16": (ONE_TASK, BF16),  # `bare_row`: the same batches, no mtl in the step
    "bare compiled bf16": (ONE_TASK, [*BF16, "trainer.compile=true"]),
}
BARE = {"bare eager bf16", "bare compiled bf16"}
COMPARISONS = {
    "sampler": ("random fp32", "block_shuffle fp32"),
    "precision": ("block_shuffle fp32", "block_shuffle bf16"),
    "compile": ("block_shuffle bf16", "block_shuffle bf16 compiled"),
    "packing": ("mixup padded bf16", "mixup packed bf16"),
    "lora": ("block_shuffle bf16", "block_shuffle bf16 lora"),
    "mtl vs bare": ("bare eager bf16", "block_shuffle bf16"),
    "mtl vs bare, compiled": ("bare compiled bf16", "block_shuffle bf16 compiled"),
}
# Dense peak TFLOP/s per GPU (the vendors' data sheets): bf16, TF32, FP32. H200 = H100 SXM.
PEAK_TFLOPS = {"H200": (989.4, 494.7, 66.9), "H100": (989.4, 494.7, 66.9), "A100": (312, 156, 19.5)}
SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}


class StepClock(LoopClock):
    """`LoopClock` that also keeps each batch's real lengths and width, the model's sizes (at
    `on_train_start`, or `measure(model)`), and profiles the steps `[start, start + count)`."""

    def __init__(self, start: int, count: int) -> None:
        super().__init__()
        self.start, self.count = start, count
        self.lengths: list = []
        self.widths: list[int] = []
        self.profile: dict = {}
        self.sizes_of_model: tuple[int, int, int] = (0, 0, 0)  # parameters, layers, hidden

    def on_train_start(self, run, progress) -> None:
        self.measure(run.accelerator.unwrap_model(run.model))

    def measure(self, model) -> None:
        """Non-embedding parameters of the encoder and its heads, layers, hidden size."""
        config = model.encoder.config
        named = model.named_parameters()
        params = sum(p.numel() for n, p in named if "embeddings" not in n)
        layers = getattr(config, "num_hidden_layers", 0)
        self.sizes_of_model = (params, layers, getattr(config, "hidden_size", 0))

    def wrap(self, batches, limit=None):
        profiler = None
        try:
            for index, batch in enumerate(super().wrap(batches, limit)):
                if index == self.start + self.count and profiler is not None:
                    self.profile, profiler = stop_profile(profiler, self.count), None
                if index == self.start:
                    profiler = start_profile()
                mask = batch["attention_mask"]
                self.lengths.append(mask.sum(1).tolist())
                self.widths.append(int(mask.shape[1]))
                yield batch
        finally:  # the loop stopped asking (its last step), inside the profiled steps
            if profiler is not None:
                self.profile = stop_profile(profiler, len(self.marks) - self.start)

    def flops(self, first: int, last: int, padded: bool) -> float:
        """Model FLOPs (forward and backward) of steps [first, last)."""
        params, layers, hidden = self.sizes_of_model
        total = 0.0
        for lengths, width in zip(self.lengths[first:last], self.widths[first:last], strict=True):
            rows = [width] * len(lengths) if padded else lengths
            total += 6 * params * sum(rows) + 12 * layers * hidden * sum(n * n for n in rows)
        return total


def start_profile():
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        activities.append(ProfilerActivity.CUDA)
    profiler = profile(activities=activities)
    profiler.__enter__()
    profiler.started = time.perf_counter()  # type: ignore[attr-defined]
    return profiler


def stop_profile(profiler, steps: int) -> dict:
    """The profiled steps' GPU busy share and the host's own ms per step."""
    import time

    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()  # the steps' kernels done: the wall time holds them
    wall = time.perf_counter() - profiler.started
    profiler.__exit__(None, None, None)
    events = profiler.key_averages()
    busy = sum(getattr(e, "self_device_time_total", 0) for e in events) / 1e6
    waited = sum(e.self_cpu_time_total for e in events if e.key in SYNCS) / 1e6
    return {
        "profiled_steps": steps,
        "gpu_busy": busy / wall if torch.cuda.is_available() else None,
        "host_ms_per_step": 1000 * (wall - waited) / max(steps, 1),
    }


def peak_flops(device: str, bf16: bool) -> float | None:
    import torch

    for name, (b, tf32, fp32) in PEAK_TFLOPS.items():
        if name in device:
            return 1e12 * (b if bf16 else tf32 if torch.backends.cuda.matmul.allow_tf32 else fp32)
    return None


def step_figures(clock: StepClock, warmup: int, device: str, bf16: bool) -> dict:
    """Steady state over steps [warmup, the first profiled step), with the profile and MFU."""
    stop = min(clock.start, len(clock.marks) - 1)
    warmup = min(warmup, stop - 1)
    seconds = clock.marks[stop] - clock.marks[warmup]
    steps, examples = stop - warmup, sum(clock.sizes[warmup:stop])
    peak = peak_flops(device, bf16)
    figures = {
        "steps": steps,
        "examples": examples,
        "seconds": seconds,
        "examples_per_s": examples / seconds,
        "ms_per_step": 1000 * seconds / steps,
        "gpu_busy": None,
        "host_ms_per_step": None,
        **clock.profile,
    }
    for kind, padded in (("real", False), ("padded", True)):
        rate = clock.flops(warmup, stop, padded) / seconds
        figures[f"mfu_{kind}"] = None if peak is None else rate / peak
    return figures


def row_config(row: tuple, args: argparse.Namespace, out_dir: Path, cuda: bool):
    """The composed config of a row: its tasks and overrides, the sizes, the steps."""
    tasks, overrides = row[0]["quick" if args.quick else "full"], row[1]
    if args.quick:
        overrides = [o for o in overrides if o not in BF16]
    common = [
        "logger=none",
        "trainer.progress_bar=false",
        f"task=[{','.join(tasks)}]",
        "trainer.epochs=1",  # of exactly the steps timed and profiled: no evaluation inside
        f"loader.steps_per_epoch={args.steps + args.profile}",
        f"trainer.max_steps={args.steps + args.profile}",
        "trainer.log_every=1000000",  # one window, at the end: no logging inside the timing
        "trainer.export=false",
        "trainer.diagnose_every=0",  # the task-interaction diagnostics at evaluation: not timed
        f"seed={args.seed}",
        f"output_dir={out_dir}",
    ]
    if args.quick:
        # toy sizes: the dry run checks the pipeline, not the figures
        common += ["model=tiny", "data.max_examples=32", "trainer.compile_backend=eager"]
    else:
        common += [*BERT_BASE, "task.pydoc_topic.batch_size=32", "task.pydoc_topic.max_length=256"]
    if not cuda:
        common.append("trainer.cpu=true")
    return compose([*common, *overrides])


def one_row(name: str, args: argparse.Namespace, out_dir: Path, device: str) -> dict:
    """A row's steady-state figures: mtl's loop, or the bare loop (`BARE`)."""
    import torch

    from mtl.training.loop import run

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.empty_cache()
    cfg = row_config(ROWS[name], args, out_dir, cuda)
    clock = StepClock(args.steps, args.profile)
    if name in BARE:
        bare_loop(cfg, clock, args.steps + args.profile)
    else:
        with contextlib.redirect_stdout(io.StringIO()):  # run()'s summary
            run(cfg, hooks=[clock])
    bf16 = cfg.trainer.mixed_precision == "bf16"
    figures = step_figures(clock, min(args.warmup, args.steps - 1), device, bf16)
    # what the row trained (the tiny model's 32 with --quick; MiniLM's config names none)
    return figures | {"hidden_size": cfg.model.config.get("hidden_size")}


def bare_loop(cfg, clock: StepClock, steps: int) -> None:
    """`steps` plain PyTorch steps on the row's batches: the transformers encoder (compiled
    with `trainer.compile`, as mtl compiles it) and the task's head, bf16 autocast with
    `trainer.mixed_precision=bf16`, clipping, fused AdamW over mtl's parameter groups, the same
    linear schedule; built by mtl's builders from the same config and seed (same weights, same
    batches), nothing of mtl's in the step."""
    import torch
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    from mtl.builders.loaders import build_train_loaders
    from mtl.builders.model import build_model
    from mtl.builders.tasks import build_tasks
    from mtl.config import validate
    from mtl.training.setup.optim import make_optimizer, param_groups
    from mtl.training.setup.speed import loader_settings

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    settings = loader_settings(validate(cfg), device)  # pinned memory; compile's length buckets
    t = settings.trainer
    set_seed(cfg.seed, device_specific=True)  # as mtl's build_run, in the same order
    tasks, _ = build_tasks(settings, cfg.seed)
    (loader,) = build_train_loaders(tasks, settings, cfg.sampler, seed=cfg.seed).values()
    model = build_model(settings, tasks).to(device).train()
    clock.measure(model)
    (head,) = model.heads.values()
    if t.compile:
        model.encoder.compile(backend=t.compile_backend)
    optimizer = make_optimizer(param_groups(model, t.lr, t.head_lr, t.weight_decay))
    scheduler = get_linear_schedule_with_warmup(optimizer, int(t.warmup_ratio * steps), steps)
    params, bf16 = list(model.parameters()), t.mixed_precision == "bf16"
    for batch in clock.wrap(passes(loader), steps):
        on = {k: v.to(device, non_blocking=True) for k, v in batch.items() if torch.is_tensor(v)}
        inputs = {k: on[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in on}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            hidden = model.encoder(**inputs).last_hidden_state
            loss = head.loss(head(hidden, on["attention_mask"]), on["labels"])
        loss.backward()
        if t.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, t.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def trainer_row(args: argparse.Namespace) -> dict:
    """bench_vs_trainer.py, one pair of processes (MiniLM; the tiny model with --quick); its
    table printed before this script's."""
    script = Path(__file__).with_name("bench_vs_trainer.py")
    argv = [str(script), "--repeats", "1", "--threads", str(args.threads)]
    return run_child(argv + (["--quick"] if args.quick else []), echo=True)


def markdown(device: str, args, rows: dict, ratios: dict, trainer: dict) -> str:
    model = (
        "tiny model, synthetic tasks, fp32 in the bf16 rows (--quick)"
        if args.quick
        else "BERT-base-sized encoder (random init), pydoc_topic batch 32, max_length 256"
    )
    lines = [
        f"\n### {device}, {date.today().isoformat()} (`scripts/gpu_check.sh`)\n",
        f"{model}; {args.steps} steps per row ({args.warmup} not timed), the fastest of "
        f"{args.rounds} round(s), seed {args.seed}.\n",
        "| comparison | peer | examples/s | candidate | examples/s | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, (peer, candidate) in COMPARISONS.items():
        a, b = rows[peer]["examples_per_s"], rows[candidate]["examples_per_s"]
        lines.append(f"| {name} | {peer} | {a:.1f} | {candidate} | {b:.1f} | {ratios[name]:.2f}x |")
    speed = {r["tool"]: r["examples_per_s"] for r in trainer["runs"]}
    lines.append(
        f"| mtl vs Trainer ({trainer['model']}, own processes) | Trainer | {speed['trainer']:.1f} "
        f"| mtl | {speed['mtl']:.1f} | {trainer['ratio_mtl_vs_trainer']:.2f}x |"
    )
    lines += [
        "",
        f"Per row ({args.profile} profiled steps after the timed ones; {tf32_line()}):",
        "",
        "| row | ms/step | host ms/step | GPU busy | MFU real | MFU padded |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in rows.items():
        cells = [percent(r.get(k)) for k in ("gpu_busy", "mfu_real", "mfu_padded")]
        host = r.get("host_ms_per_step")
        host_text = "-" if host is None else f"{host:.1f}"
        lines.append(
            f"| {name} | {r['ms_per_step']:.1f} | {host_text} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def percent(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def tf32_line() -> str:
    import torch

    matmul = "on" if torch.backends.cuda.matmul.allow_tf32 else "off"
    return f"TF32 matmul {matmul} in the fp32 rows (torch's default)"


def main() -> None:
    quick = "tiny model, synthetic tasks, 3 steps, compile backend eager, fp32 throughout"
    p = parser(__doc__, quick, threads=2)
    p.add_argument("--steps", type=int, default=60, help="optimizer steps per row")
    p.add_argument("--warmup", type=int, default=10, help="first steps left out of timing")
    p.add_argument("--rounds", type=int, default=2, help="runs of each row; the fastest counts")
    p.add_argument("--profile", type=int, default=5, help="steps profiled after the timed ones")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--markdown", metavar="PATH", help="append the table as a section to PATH")
    args = p.parse_args()
    if args.quick:  # one thread: on a busy CPU two threads wait on each other every tiny op
        args.steps, args.warmup, args.threads, args.rounds, args.profile = 3, 1, 1, 1, 2

    import torch

    quiet_transformers()
    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else f"CPU, {args.threads} torch threads"
    rows: dict[str, dict] = {}
    by_round: dict[str, list[float]] = {name: [] for name in ROWS}
    with scratch("bench_gpu_") as workdir:
        for round_index in range(args.rounds):
            for i, name in enumerate(ROWS):
                start = time.perf_counter()
                got = one_row(name, args, workdir / f"{round_index}-{i}", device)
                got["run_seconds"] = time.perf_counter() - start
                by_round[name].append(got["examples_per_s"])
                if name not in rows or got["examples_per_s"] > rows[name]["examples_per_s"]:
                    rows[name] = got
                print(
                    f"{name}, round {round_index + 1}: {got['run_seconds']:.0f} s, "
                    f"{got['examples_per_s']:.1f} examples/s",
                    file=sys.stderr,
                )
    trainer = trainer_row(args)
    ratios = {
        name: rows[c]["examples_per_s"] / rows[peer]["examples_per_s"]
        for name, (peer, c) in COMPARISONS.items()
    }
    ratios["mtl_vs_trainer"] = trainer["ratio_mtl_vs_trainer"]
    print(
        f"{device}; {args.steps} steps per row, {args.warmup} not timed; the fastest of "
        f"{args.rounds} round(s)"
    )
    table(
        ["row", "steps", "examples", "seconds", "ex/s", "ms/step", "host ms", "busy", "MFU real"],
        [[n, r["steps"], r["examples"], r["seconds"], r["examples_per_s"], r["ms_per_step"],
          r["host_ms_per_step"], percent(r["gpu_busy"]), percent(r["mfu_real"])]
         for n, r in rows.items()],
        [0, 0, 0, 2, 1, 1, 1, 0, 0],
    )  # fmt: skip
    print("; ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items()))
    if args.markdown:
        with open(args.markdown, "a") as out:
            out.write(markdown(device, args, rows, ratios, trainer))
    figures = {
        "bench": "gpu",
        "peer": "per comparison: random sampler, fp32, eager, padded mixup, the whole model, "
        "HF Trainer",
        "device": device,
        "model": "tiny" if args.quick else "bert-base-sized",
        "steps": args.steps,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "examples_per_s": {n: round(r["examples_per_s"], 3) for n, r in rows.items()},
        "examples_per_s_by_round": {n: [round(v, 3) for v in vs] for n, vs in by_round.items()},
        "hidden_size": {n: r["hidden_size"] for n, r in rows.items()},
        "host_ms_per_step": {n: r["host_ms_per_step"] for n, r in rows.items()},
        "gpu_busy": {n: r["gpu_busy"] for n, r in rows.items()},
        "mfu_real": {n: r["mfu_real"] for n, r in rows.items()},
        "mfu_padded": {n: r["mfu_padded"] for n, r in rows.items()},
        "tf32": tf32_line(),
        "ratios": {n: round(v, 3) for n, v in ratios.items()},
        "trainer": trainer,  # bench_vs_trainer.py's own figures
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
