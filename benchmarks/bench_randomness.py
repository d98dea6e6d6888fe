"""How random are length-grouped batches? Three checks, batch size 32.

1. `adj_corr`: Pearson correlation of the longest length of batch i and batch i+1 within an
   epoch (mean over `--epochs`). Sorted runs of batches show up as a high value; 0 means the
   batch order says nothing about the next batch's length. Peer: HF `group_by_length`
   (`transformers.trainer_pt_utils.get_length_grouped_indices`, mega-batches of 50 batches
   sorted longest first, so neighbours inside a mega-batch are correlated). Goal for ours: <= 0.05.
2. `changed`: share of epoch e+1's batches (as sets of indices) that were not a batch of epoch e
   (mean over consecutive pairs). Goal >= 99%. Reference `sorted_no_shuffle`: block shuffle
   without the shuffle before sorting (a stable sort of the raw order, cut, batches shuffled):
   the same batches every epoch (~0%).
3. `single_label`: labels = length above the median, so sorting groups labels; share of batches
   holding one label only, for block shuffle with `sort_noise` 0, 0.1, 0.3 (random as reference).

Lengths: lognormal (median ~55, sigma 1, `--n` examples) and, unless `--quick`, the word counts
of the bundled pydoc paragraphs (`mtl.data.bundled.pydoc_paragraphs`). Prints one table per
check and one JSON line.

    python benchmarks/bench_randomness.py [--quick] [--n 20000] [--epochs 5]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from harness import cut, emit, hf_length_grouped, lognormal_lengths, parser, table

from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler, TokenBudgetBatchSampler

BATCH_SIZE = 32
Batches = list[np.ndarray]


def hf_batches(lengths: np.ndarray) -> Callable[[int], Batches]:
    order = hf_length_grouped(lengths, BATCH_SIZE)
    return lambda epoch: cut(order(epoch), BATCH_SIZE)


def sorted_no_shuffle(lengths: np.ndarray) -> Callable[[int], Batches]:
    order = np.argsort(-lengths, kind="stable")  # no permutation first: ties keep the raw order
    batches = [order[i : i + BATCH_SIZE] for i in range(0, len(order), BATCH_SIZE)]

    def epoch_batches(epoch: int) -> Batches:
        return [batches[i] for i in np.random.default_rng(epoch).permutation(len(batches))]

    return epoch_batches


def samplers(lengths: np.ndarray) -> dict[str, Callable[[int], Batches]]:
    rows: dict[str, Callable[[int], Batches]] = {
        "random": RandomBatchSampler(lengths, BATCH_SIZE).epoch_batches
    }
    for k in (1, 10, 50, 100, None):
        rows[f"block_shuffle({k})"] = BlockShuffleBatchSampler(
            lengths, BATCH_SIZE, sort_bs_num=k
        ).epoch_batches
    rows["block_shuffle(None, noise=0.1)"] = BlockShuffleBatchSampler(
        lengths, BATCH_SIZE, sort_noise=0.1
    ).epoch_batches
    rows["token_budget(None)"] = TokenBudgetBatchSampler(
        lengths, BATCH_SIZE, max_tokens=4096
    ).epoch_batches
    rows["hf_length_grouped"] = hf_batches(lengths)
    rows["sorted_no_shuffle"] = sorted_no_shuffle(lengths)
    return rows


def adjacent_correlation(lengths: np.ndarray, batches: Batches) -> float:
    maxima = np.array([lengths[b].max() for b in batches], dtype=float)
    return float(np.corrcoef(maxima[:-1], maxima[1:])[0, 1])


def changed_share(a: Batches, b: Batches) -> float:
    before = {frozenset(x.tolist()) for x in a}
    return sum(frozenset(x.tolist()) not in before for x in b) / len(b)


def single_label_share(labels: np.ndarray, batches: Batches) -> float:
    return float(np.mean([labels[b].min() == labels[b].max() for b in batches]))


def check_dataset(lengths: np.ndarray, epochs: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, epoch_batches in samplers(lengths).items():
        per_epoch = [epoch_batches(e) for e in range(epochs)]
        out[name] = {
            "adj_corr": float(np.mean([adjacent_correlation(lengths, b) for b in per_epoch])),
            "changed": float(
                np.mean(
                    [
                        changed_share(a, b)
                        for a, b in zip(per_epoch[:-1], per_epoch[1:], strict=True)
                    ]
                )
            ),
        }
    return out


def check_labels(lengths: np.ndarray, epochs: int) -> dict[str, float]:
    labels = (lengths > np.median(lengths)).astype(int)
    rows = {"random": RandomBatchSampler(lengths, BATCH_SIZE)}
    for k in (50, None):
        for noise in (0.0, 0.1, 0.3):
            rows[f"block_shuffle({k}, noise={noise})"] = BlockShuffleBatchSampler(
                lengths, BATCH_SIZE, sort_bs_num=k, sort_noise=noise
            )
    return {
        name: float(
            np.mean([single_label_share(labels, s.epoch_batches(e)) for e in range(epochs)])
        )
        for name, s in rows.items()
    }


def pydoc_word_counts() -> np.ndarray | None:
    try:
        from mtl.data.bundled import pydoc_paragraphs
    except ImportError:
        return None
    return np.array([len(text.split()) for _, text in pydoc_paragraphs()], dtype=np.int64)


def main() -> None:
    args = parser(__doc__, "small lognormal only (smoke test)")
    args.add_argument("--n", type=int, default=20_000)
    args.add_argument("--epochs", type=int, default=5)
    args = args.parse_args()
    n = 3000 if args.quick else args.n
    datasets = {"lognormal": lognormal_lengths(n, 4, 1, 1, 2048)}
    if not args.quick and (pydoc := pydoc_word_counts()) is not None:
        datasets["pydoc_words"] = pydoc

    results = {name: check_dataset(lengths, args.epochs) for name, lengths in datasets.items()}
    table(
        ["sampler", *(f"{d} {k}" for d in datasets for k in ("corr", "changed"))],
        [[row, *(c for d in datasets for c in (results[d][row]["adj_corr"],
                                              f"{results[d][row]['changed']:.1%}"))]
         for row in results["lognormal"]],
        3,
    )  # fmt: skip

    labels = check_labels(datasets["lognormal"], args.epochs)
    print()
    table(
        ["labels = length > median (lognormal)", "single-label batches"],
        [[row, f"{share:.1%}"] for row, share in labels.items()],
    )

    ours = [r for r in results["lognormal"] if r.startswith("block_shuffle")]
    worst_corr = max(abs(results[d][r]["adj_corr"]) for d in datasets for r in ours)
    worst_changed = min(results[d][r]["changed"] for d in datasets for r in ours)
    # Standard error of a correlation of m pairs is ~1/sqrt(m): pooled over the epochs here.
    std_err = {
        d: 1 / np.sqrt(args.epochs * (len(v) // BATCH_SIZE - 1)) for d, v in datasets.items()
    }
    print(
        f"\nblock_shuffle rows: max |adj_corr| = {worst_corr:.3f} (goal <= 0.05; std error "
        + ", ".join(f"{d} {e:.3f}" for d, e in std_err.items())
        + f"), min changed = {worst_changed:.1%} (goal >= 99%); "
        f"hf adj_corr = {results['lognormal']['hf_length_grouped']['adj_corr']:.3f}"
    )
    figures = {
        "bench": "randomness",
        "peer": "transformers group_by_length (get_length_grouped_indices)",
        "batch_size": BATCH_SIZE,
        "epochs": args.epochs,
        "n": {d: len(v) for d, v in datasets.items()},
        "results": results,
        "single_label": labels,
        "block_shuffle_max_abs_adj_corr": worst_corr,
        "block_shuffle_min_changed": worst_changed,
        "adj_corr_std_err": std_err,
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
