"""The one harness every benchmark uses: common options, timing, one table, one JSON line.

A benchmark answers one question by comparing rows side by side in the same run (a ratio, not an
absolute time) and names the peer it compares with. It builds its options with `parser`, times
with `best_of` (rows interleaved, one warm-up round), `LoopClock` (the training loop's batch
requests) or `run_child` (a fresh process, for memory), prints one `table` and ends with `emit`
(one JSON line of figures, also written to `--json PATH`). What two benchmarks would otherwise
each write lives here too (`compose`, `first_steps`, `checked_packer`, `pack_timed_step`,
`passes`, `lognormal_lengths`, `hf_length_grouped`, `scratch`, `grouped`, and the studies'
CSV rows and paired statistics: `append_row`, `read_rows`, `mean_se`, `paired`, `verdict`);
benchmarks never import each other.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import itertools
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mtl.cli.script import freeze_at_exit

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
# mtl, hydra and transformers are imported inside the functions that use them: the settings above
# must be in place before transformers loads, and the sampler benchmarks need none of them.


# -- options and output ----------------------------------------------------------------------------


def parser(doc: str, quick: str, threads: int | None = None) -> argparse.ArgumentParser:
    """The options every benchmark takes: `--quick` (tiny inputs, a smoke run; `quick` says what
    it shrinks), `--json PATH` (also write the figures there) and, where the benchmark pins torch
    threads, `--threads` (default `threads`)."""
    freeze_at_exit()  # as mtl's own commands: a benchmark that starts processes waits on exits
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--json", metavar="PATH", help="also write the JSON line of figures to PATH")
    if threads is not None:
        default = threads or "torch's own choice"
        p.add_argument("--threads", type=int, default=threads, help=f"torch threads ({default})")
    return p


def cell(value: Any, digits: int) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.{digits}f}"
    return "-" if value is None else str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], digits: int | Sequence[int] = 2):
    """Print `rows` under `header`: the first column left-aligned, the others right-aligned, each
    as wide as its widest cell; floats with `digits` places (one int, or one per column)."""
    rows = list(rows)
    places = [digits] * len(header) if isinstance(digits, int) else list(digits)
    text = [list(header)] + [[cell(v, d) for v, d in zip(r, places, strict=True)] for r in rows]
    widths = [max(len(line[i]) for line in text) for i in range(len(header))]
    for line in text:
        first = f"{line[0]:<{widths[0]}}"
        print("  ".join([first, *(f"{c:>{w}}" for c, w in zip(line[1:], widths[1:], strict=True))]))


def ratios(values: dict[str, float], peer: str, digits: int = 3) -> dict[str, float]:
    """Each row's value over the peer's (side by side in the same run)."""
    return {name: round(v / values[peer], digits) for name, v in values.items()}


def emit(figures: dict, path: str | None = None) -> None:
    """The benchmark's last line: its figures as one JSON line (also written to `path`)."""
    line = json.dumps(figures)
    if path:
        Path(path).write_text(line + "\n")
    print(line)


# -- timing ----------------------------------------------------------------------------------------


def best_of(rows: dict[str, Callable[[], int]], rounds: int) -> dict[str, float]:
    """Best seconds per unit of each row over `rounds` rounds, after one warm-up round; rows run
    interleaved, so a machine that slows down slows all of them. A row returns its units done."""
    best = dict.fromkeys(rows, math.inf)
    for round_index in range(rounds + 1):
        for name, run in rows.items():
            start = time.perf_counter()
            units = run()
            if round_index:
                best[name] = min(best[name], (time.perf_counter() - start) / units)
    return best


class LoopClock:
    """Stamps the training loop's batch requests and keeps each batch's size and example ids: a
    hook of `mtl.training.loop.run(cfg, hooks=[clock])` (its `batches` wraps the iterator each
    epoch draws its batches from); `wrap` does the same for any loop's batches."""

    def __init__(self) -> None:
        self.marks: list[float] = []  # when step i asked for its batch
        self.end = math.nan  # when the loop last stopped asking
        self.seconds = 0.0  # summed over every pass (epoch) wrapped
        self.sizes: list[int] = []
        self.example_ids: list[Any] = []

    @property
    def examples(self) -> int:
        return sum(self.sizes)

    def batches(self, batches: Iterable) -> Iterator:
        """The loop's hook: each epoch's batches, stamped."""
        return self.wrap(batches)

    def wrap(self, batches: Iterable, limit: int | None = None) -> Iterator:
        """Yield `batches` (at most `limit`), stamping each request; the end is stamped when
        the loop stops asking (exhausted, `limit` reached, or the generator closed)."""
        iterator, start = iter(batches), time.perf_counter()
        try:
            for _ in range(limit) if limit else itertools.count():
                self.marks.append(time.perf_counter())
                try:
                    batch = next(iterator)
                except StopIteration:
                    self.marks.pop()
                    return
                self.sizes.append(int(batch["input_ids"].shape[0]))
                self.example_ids.append(batch.get("example_ids"))
                yield batch
        finally:
            self.end = time.perf_counter()
            self.seconds += self.end - start

    def steady(self, warmup: int) -> dict:
        """Figures from the start of step `warmup` to the end."""
        seconds, steps = self.end - self.marks[warmup], len(self.marks) - warmup
        examples = sum(self.sizes[warmup:])
        return {
            "steps": steps,
            "examples": examples,
            "seconds": seconds,
            "examples_per_s": examples / seconds,
            "ms_per_step": 1000 * seconds / steps,
        }


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary folder for the runs' outputs, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def grouped(runs: list[dict], by: str, value: str) -> dict[str, list]:
    """`value` of every run, listed per distinct `by` (in order of first appearance)."""
    out: dict[str, list] = {}
    for run in runs:
        out.setdefault(run[by], []).append(run[value])
    return out


def quiet_transformers() -> None:
    """transformers' warnings and progress bars off (they would break the table)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def peak_rss() -> int:
    """The process's peak RSS in bytes since the last `reset_peak` (Linux: VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak() -> None:
    with contextlib.suppress(OSError):  # Linux: "5" resets the peak RSS to the current RSS
        Path("/proc/self/clear_refs").write_text("5")


def run_child(argv: list[str], env: dict[str, str] | None = None, echo: bool = False) -> Any:
    """Run `python argv` in a fresh process (so its memory figures are its own) and return the
    JSON of its last line; `echo`: print the lines before it (the child's table) here too."""
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    *lines, last = done.stdout.strip().splitlines()
    if echo:
        print("\n".join(lines))
    return json.loads(last)


# -- studies (a job's row per line of a CSV, seeds paired) ---------------------------------------


def train_job(overrides: list[str], folder: Path, name: str) -> float:
    """One study job: `python train.py *overrides` into `folder` (removed first: a job that did
    not end runs again from the start), a process of its own as a user types it. Returns its
    wall seconds; exits naming the job (`name`) with its stderr's end if it fails."""
    if folder.exists():
        shutil.rmtree(folder)
    command = [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={folder}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"study: {name} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def append_row(path: Path, row: dict) -> None:
    """Add `row` to the CSV at `path` (its keys as the header first when new, else the file's
    header), flushed to disk: a study stopped at any moment keeps every finished job."""
    new = not path.is_file()
    fields = list(row) if new else read_header(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new:
            writer.writeheader()
        writer.writerow(row)
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> list[dict]:
    """The rows of a study's CSV ([] before it exists)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_header(path: Path) -> list[str]:
    with open(path, newline="") as f:
        return next(csv.reader(f))


def number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def mean_se(values: list[float]) -> tuple[float, float, int]:
    """Mean, standard error (nan with one value) and count of the finite values."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return math.nan, math.nan, 0
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return statistics.fmean(values), se, len(values)


def mean_cell(mean: float, se: float, digits: int = 3) -> str:
    """`mean ± se` (the mean alone with one value, - with none)."""
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f} ± {se:.{digits}f}" if not math.isnan(se) else f"{mean:.{digits}f}"


def paired(rows: list[dict], option: str, base: str, column: str) -> tuple[float, float, int]:
    """option - base on `column`, paired by seed: mean difference, its standard error, n."""
    a = {r["seed"]: number(r[column]) for r in rows if r["option"] == option}
    b = {r["seed"]: number(r[column]) for r in rows if r["option"] == base}
    return mean_se([a[s] - b[s] for s in a if s in b])


def judged(se: float, n: int) -> bool:
    """Whether a paired difference over `n` seeds can be judged: 2 seeds give one degree of
    freedom, and 2 standard errors say nothing there."""
    return n >= 3 and not math.isnan(se)


def beyond(diff: float, se: float, n: int) -> bool:
    return judged(se, n) and abs(diff) > 2 * se


def verdict(diff: float, se: float, n: int) -> str:
    if not judged(se, n):
        return "too few seeds to say"
    if beyond(diff, se, n):
        return "beyond 2 standard errors"
    return "within 2 standard errors (no difference shown)"


# -- shared fixtures -------------------------------------------------------------------------------


def compose(overrides: list[str]):
    """The real config, composed as `train.py` would with `overrides`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from mtl.config import register_configs

    GlobalHydra.instance().clear()
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return hydra_compose("config", overrides=overrides)


def first_steps(overrides: list[str], steps: int):
    """(settings, tasks, batches): the first `steps` batches a run of `overrides` trains on."""
    from mtl.builders.loaders import build_composite_loader, build_train_loaders
    from mtl.builders.tasks import build_tasks
    from mtl.config import validate

    cfg = compose(["output_dir=/tmp/mtl_benchmarks", "logger=none", *overrides])
    settings = validate(cfg)
    tasks, tokenizer = build_tasks(settings, cfg.seed)
    loaders = build_train_loaders(tasks, settings, cfg.sampler, seed=cfg.seed)
    loader = build_composite_loader(
        cfg.loader, loaders, seed=cfg.seed, pad_token_id=tokenizer.pad_token_id
    )
    return settings, tasks, list(itertools.islice(iter(loader), steps))


def checked_packer(model, steps: list[dict]):
    """The model's packer after its one-time check of the encoder on the first of `steps` worth
    packing (outside any timing), or None when the encoder does not pack."""
    from mtl.models.packing import Packing

    packer = model.packed
    for batch in steps:
        packing = Packing(batch["attention_mask"])
        if packing.worth_it():
            inputs = model.adapter.encoder_inputs(batch)
            with contextlib.redirect_stderr(io.StringIO()):
                packer.supported = packer.check(model.encoder, inputs, packing)
            break
    return packer if packer.supported else None


def pack_timed_step(model, batch, packer) -> tuple[float, float]:
    """(seconds, loss) of forward + backward of `batch` with `packer` (None: padded)."""
    model.packed, saved = packer, model.packed
    model.zero_grad()
    start = time.perf_counter()
    loss = sum(model(batch)["task_losses"].values())  # unweighted: what packing changes
    loss.backward()
    seconds = time.perf_counter() - start
    model.packed = saved
    return seconds, loss.item()


QUICK_TASKS = "task=[synthetic_cls,synthetic_tag,synthetic_pair,synthetic_choice,synthetic_qa]"
QUICK_MIXUP = ["loader=mixup", "model=tiny", "data.max_examples=64", QUICK_TASKS]


def passes(loader) -> Iterator:
    """One task's batches pass after pass, each with `batch_sampler.set_epoch(pass)` (what mtl's
    composite loaders do for a task that runs out)."""
    for index in itertools.count():
        loader.batch_sampler.set_epoch(index)
        yield from loader


def lognormal_lengths(n: int, mean_log: float, sigma: float, low: int, high: int, seed: int = 0):
    """`n` long-tailed example lengths (median e**mean_log), clipped to [low, high]."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(mean_log, sigma, n), low, high).astype(np.int64)


def hf_length_grouped(
    lengths: np.ndarray, batch_size: int, seed: int = 0, mega_batch_mult: int | None = None
) -> Callable[[int], list[int]]:
    """The peer of the length-aware samplers: epoch -> transformers' `group_by_length` order
    (`get_length_grouped_indices`, mega-batches sorted longest first), seeded with seed + epoch."""
    import torch
    from transformers.trainer_pt_utils import get_length_grouped_indices

    as_list = lengths.tolist()  # what the HF sampler holds

    def order(epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(seed + epoch)
        return get_length_grouped_indices(
            as_list, batch_size, mega_batch_mult=mega_batch_mult, generator=g
        )

    return order


def cut(order: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """An index order cut into batches."""
    order = np.asarray(order)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
