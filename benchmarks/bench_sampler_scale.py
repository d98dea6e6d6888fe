"""Time and peak memory to build one epoch's batch order, as the dataset grows.

Rows, all at batch size 32 on lognormal lengths (median ~55, sigma 1, clipped to [1, 2048]):
- `permutation`: bare `np.random.permutation(n)`, the floor any shuffling sampler pays;
- `random`: RandomBatchSampler; `block_shuffle(None)` / `block_shuffle(100)`: BlockShuffle with
  the whole epoch / 100-batch chunks sorted; `token_budget`: TokenBudgetBatchSampler(4096 tokens);
- `hf_length_grouped`: the peer, `transformers.trainer_pt_utils.get_length_grouped_indices`
  (mega-batches of 50 * 32, sorted by length; what `group_by_length=True` uses). It sorts with
  Python per example and is skipped at n >= `--hf-max-n` (default 1e6).

Time: best of `--repeats` calls of `epoch_batches(epoch)` (samplers, built once beforehand, so
constructor work such as copying `lengths` is not counted; for token_budget the one-time
`len()` plan is done beforehand too). Memory: peak bytes allocated during one call, traced by
tracemalloc (numpy reports its buffers to it), in a separate untimed call. Prints one table
and one JSON line; the ratios compare rows of the same run.

    python benchmarks/bench_sampler_scale.py [--quick] [--repeats 3] [--hf-max-n 1000000]
        [--plot PATH]
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from harness import emit, hf_length_grouped, lognormal_lengths, parser, table

from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler, TokenBudgetBatchSampler

BATCH_SIZE = 32


def builders(lengths: np.ndarray) -> dict[str, Callable[[int], object]]:
    """Name -> function(epoch) that builds one epoch's batch order."""
    n = len(lengths)
    samplers = {
        "random": RandomBatchSampler(lengths, BATCH_SIZE),
        "block_shuffle(None)": BlockShuffleBatchSampler(lengths, BATCH_SIZE),
        "block_shuffle(100)": BlockShuffleBatchSampler(lengths, BATCH_SIZE, sort_bs_num=100),
        "token_budget": TokenBudgetBatchSampler(lengths, BATCH_SIZE, max_tokens=4096),
    }
    len(samplers["token_budget"])  # one-time plan, outside the timing

    def permutation(epoch: int) -> np.ndarray:
        np.random.seed(epoch)
        return np.random.permutation(n)

    out: dict[str, Callable[[int], object]] = {"permutation": permutation}
    out |= {name: s.epoch_batches for name, s in samplers.items()}
    return out


def measure(build: Callable[[int], object], repeats: int) -> tuple[float, float]:
    """(best seconds, peak MiB traced) for one epoch's order."""
    best = float("inf")
    for epoch in range(repeats):
        t0 = time.perf_counter()
        build(epoch)
        best = min(best, time.perf_counter() - t0)
    tracemalloc.start()
    build(repeats)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak / 2**20


def plot(results: dict[str, dict[str, dict[str, float]]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print('--plot skipped: matplotlib not installed (pip install -e ".[dev]")')
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, by_n in results.items():
        ns = sorted(int(n) for n in by_n)
        ax.loglog(ns, [by_n[str(n)]["s"] for n in ns], marker="o", label=name)
    ax.set(xlabel="examples n", ylabel="seconds per epoch order", title="Sampler build time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


def measure_sizes(sizes: list[int], repeats: int, hf_max_n: int) -> tuple[dict, list[str]]:
    """{row: {n: {"s", "peak_mib"}}} at each size, and the rows skipped."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    skipped = []
    for n in sizes:
        lengths = lognormal_lengths(n, 4.0, 1.0, 1, 2048)
        rows = builders(lengths)
        if n <= hf_max_n:
            rows["hf_length_grouped"] = hf_length_grouped(lengths, BATCH_SIZE)
        else:
            skipped.append(f"hf_length_grouped at n={n:.0e} (per-example Python sort, too slow)")
        for name, build in rows.items():
            seconds, mib = measure(build, 1 if n >= 10_000_000 else repeats)
            results.setdefault(name, {})[str(n)] = {"s": seconds, "peak_mib": mib}
    return results, skipped


def cells(figures: dict[str, float] | None) -> tuple:
    return (figures["s"], figures["peak_mib"]) if figures else ("skipped", "")


def main() -> None:
    args = parser(__doc__, "n = 1e4, 1e5 only (smoke test)")
    args.add_argument("--repeats", type=int, default=3)
    args.add_argument("--hf-max-n", type=int, default=1_000_000)
    args.add_argument("--plot", metavar="PATH", help="also write seconds vs n as a PNG")
    args = args.parse_args()
    sizes = [10_000, 100_000] if args.quick else [100_000, 1_000_000, 10_000_000]

    results, skipped = measure_sizes(sizes, args.repeats, args.hf_max_n)

    table(
        ["method", *(c for n in sizes for c in (f"n={n:.0e} s", "MiB"))],
        [[name, *(c for n in sizes for c in cells(by_n.get(str(n))))]
         for name, by_n in results.items()],
        [0, *([4, 1] * len(sizes))],
    )  # fmt: skip
    for line in skipped:
        print("skipped:", line)

    ref = str(sizes[-1] if args.quick else 1_000_000)

    def ratio(a: str, b: str) -> float | None:
        if ref in results.get(a, {}) and ref in results.get(b, {}):
            return round(results[a][ref]["s"] / results[b][ref]["s"], 2)
        return None

    ratios = {
        "n": int(ref),
        "block_shuffle_none_over_permutation": ratio("block_shuffle(None)", "permutation"),
        "block_shuffle_100_over_permutation": ratio("block_shuffle(100)", "permutation"),
        "hf_over_block_shuffle_none": ratio("hf_length_grouped", "block_shuffle(None)"),
        "hf_over_block_shuffle_100": ratio("hf_length_grouped", "block_shuffle(100)"),
        "token_budget_over_permutation": ratio("token_budget", "permutation"),
    }
    print(
        f"at n={int(ref):.0e}: block_shuffle/permutation = "
        f"{ratios['block_shuffle_none_over_permutation']} (None), "
        f"{ratios['block_shuffle_100_over_permutation']} (100)  [goal <= 3]; "
        f"hf/block_shuffle = {ratios['hf_over_block_shuffle_none']} (None), "
        f"{ratios['hf_over_block_shuffle_100']} (100)  [goal >= 3]"
    )
    if args.plot:
        plot(results, args.plot)
    figures = {
        "bench": "sampler_scale",
        "peer": "np.random.permutation (floor); transformers get_length_grouped_indices",
        "batch_size": BATCH_SIZE,
        "results": results,
        "ratios": ratios,
        "skipped": skipped,
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
