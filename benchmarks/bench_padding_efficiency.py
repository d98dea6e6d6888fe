"""Padding efficiency of the batch samplers and their peers: real tokens / padded tokens.

Rows, all on the same lengths in the same run, batch size 32:
- `block_shuffle(sort_bs_num=k)` at k = 1, 10, 50, 100 and whole-epoch (None);
- `token_budget` (TokenBudgetBatchSampler, whole-epoch sort; `max_tokens` chosen per dataset so
  its mean batch size is ~32, printed), for reference: its batch sizes vary;
- peers: `random` (RandomBatchSampler: shuffled batches), `torch_dataloader` (a plain
  `DataLoader(range(n), batch_size=32, shuffle=True)`, i.e. what you get without a length-aware
  sampler), and `hf_length_grouped` (transformers' `get_length_grouped_indices`, the
  `group_by_length=True` order, with its default mega-batch of min(50, n // (4 * 32)) batches,
  printed, and with 50 batches; the index list is cut into batches of 32).
Lengths: the bundled pydoc_topic train split (MiniLM tokenizer, max_length 256) and a synthetic
long-tailed sample (lognormal, median 40, sigma 0.8, clipped to [4, 512]). A batch costs
`len(batch) * max(length in batch)` token slots; efficiency is the sum of real lengths over the
sum of slots, pooled over `--epochs` epochs (each row reshuffles per epoch with seed + epoch).
Only batch index lists and lengths are used (no tensors). Prints one table and one JSON line;
`--plot PATH` draws efficiency against sort_bs_num for both datasets, the other rows as lines.

    python benchmarks/bench_padding_efficiency.py [--epochs 5] [--synthetic-n 20000]
        [--plot PATH] [--quick]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from harness import cut, emit, hf_length_grouped, lognormal_lengths, parser, ratios, table

from mtl.samplers import BlockShuffleBatchSampler, RandomBatchSampler, TokenBudgetBatchSampler
from mtl.task_types import task_config

SORT_BS_NUMS = (1, 10, 50, 100, None)
Batches = Callable[[np.ndarray, int], list]  # (lengths, epoch) -> that epoch's batches


def efficiency(batches_of: Batches, lengths: np.ndarray, epochs: int) -> float:
    real = slots = 0
    for epoch in range(epochs):
        for batch in batches_of(lengths, epoch):
            batch_lengths = lengths[np.asarray(batch, dtype=np.int64)]
            real += int(batch_lengths.sum())
            slots += len(batch) * int(batch_lengths.max())
    return real / slots


def budget_for_mean_batch(lengths: np.ndarray, batch_size: int, seed: int) -> int:
    """The smallest max_tokens whose epoch-0 batches average at least `batch_size` examples."""
    lo, hi = int(lengths.max()), int(lengths.max()) * batch_size * 4
    while lo < hi:
        mid = (lo + hi) // 2
        sampler = TokenBudgetBatchSampler(lengths, max_tokens=mid, seed=seed)
        if len(lengths) / len(sampler.epoch_batches(0)) >= batch_size:
            hi = mid
        else:
            lo = mid + 1
    return lo


def hf_mega_batch(n: int, batch_size: int) -> int:
    return max(min(n // (batch_size * 4), 50), 1)  # transformers' default for mega_batch_mult


def peer_rows(batch_size: int, seed: int) -> tuple[dict[str, Batches], list[str]]:
    rows: dict[str, Batches] = {}
    skipped = []
    try:
        import torch
        from torch.utils.data import DataLoader

        def dataloader(lengths: np.ndarray, epoch: int) -> list:
            g = torch.Generator().manual_seed(seed + epoch)
            loader = DataLoader(
                range(len(lengths)), batch_size=batch_size, shuffle=True, generator=g
            )
            return [b.numpy() for b in loader]

        rows["torch_dataloader"] = dataloader
    except ImportError:
        skipped.append("torch_dataloader: torch not installed")
    try:
        import transformers  # noqa: F401  (the peer's library; its rows are skipped without it)

        def hf(mega_batch_mult: int | None) -> Batches:
            def batches(lengths: np.ndarray, epoch: int) -> list:
                order = hf_length_grouped(lengths, batch_size, seed, mega_batch_mult)
                return cut(order(epoch), batch_size)

            return batches

        rows["hf_length_grouped"] = hf(None)
        rows["hf_length_grouped(mega=50)"] = hf(50)
    except ImportError:
        skipped.append("hf_length_grouped: transformers not installed")
    return rows, skipped


def pydoc_lengths() -> np.ndarray:
    from mtl.data import build_task_from_config, load_tokenizer

    config = task_config(
        dict(type="sequence_classification", source={"bundled": "pydoc_topic"}, max_length=256)
    )
    task = build_task_from_config("pydoc_topic", config, load_tokenizer())
    return np.asarray(task.train["length"])


def plot(figures: dict[str, dict[str, float]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    positions = list(range(len(SORT_BS_NUMS)))
    fig, axes = plt.subplots(1, len(figures), figsize=(5 * len(figures), 3.8), sharey=True)
    for ax, (data_name, rows) in zip(np.atleast_1d(axes), figures.items(), strict=True):
        ys = [rows[f"block_shuffle(sort_bs_num={k})"] for k in SORT_BS_NUMS]
        ax.plot(positions, ys, "o-", color="tab:blue", label="block_shuffle")
        styles = {
            "token_budget": ("tab:green", "--"),
            "hf_length_grouped": ("tab:orange", "-."),
            "hf_length_grouped(mega=50)": ("tab:red", "-."),
            "random": ("tab:gray", ":"),
            "torch_dataloader": ("black", (0, (1, 3))),
        }
        for name, (color, style) in styles.items():
            if name in rows:
                ax.axhline(rows[name], color=color, linestyle=style, label=name)
        ax.set_xticks(positions, [str(k) if k else "epoch" for k in SORT_BS_NUMS])
        ax.set_xlabel("sort_bs_num (batches per sorted chunk)")
        ax.set_title(data_name)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("real / padded tokens")
    np.atleast_1d(axes)[-1].legend(loc="lower right", fontsize=8)
    fig.suptitle("Padding efficiency, batch size 32")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def sampler_rows(lengths: np.ndarray, bs: int, seed: int, max_tokens: int) -> dict[str, Batches]:
    """mtl's samplers on `lengths`: random, block_shuffle at each sort_bs_num, token_budget."""

    def batches(sampler) -> Batches:
        return lambda _lengths, epoch: sampler.epoch_batches(epoch)

    rows = {"random": batches(RandomBatchSampler(lengths, bs, seed=seed))}
    for k in SORT_BS_NUMS:
        rows[f"block_shuffle(sort_bs_num={k})"] = batches(
            BlockShuffleBatchSampler(lengths, bs, seed=seed, sort_bs_num=k)
        )
    budget = TokenBudgetBatchSampler(lengths, max_tokens=max_tokens, seed=seed)
    rows["token_budget"] = batches(budget)
    return rows


def main() -> None:
    p = parser(__doc__, "2 epochs, 2000 synthetic lengths")
    p.add_argument("--epochs", type=int, default=5, help="epochs pooled (default 5)")
    p.add_argument("--synthetic-n", type=int, default=20_000, help="synthetic sample size")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, help="write a PNG (e.g. docs/padding_efficiency.png)")
    args = p.parse_args()
    if args.quick:
        args.epochs, args.synthetic_n = 2, 2_000
    bs, seed = args.batch_size, args.seed

    synthetic = lognormal_lengths(args.synthetic_n, np.log(40), 0.8, 4, 512, seed)
    datasets = {"pydoc": pydoc_lengths(), "synthetic": synthetic}
    budgets = {name: budget_for_mean_batch(x, bs, seed) for name, x in datasets.items()}

    peers, skipped = peer_rows(bs, seed)
    figures: dict[str, dict[str, float]] = {}
    for data_name, lengths in datasets.items():
        rows = sampler_rows(lengths, bs, seed, budgets[data_name]) | peers
        figures[data_name] = {
            name: round(efficiency(make, lengths, args.epochs), 4) for name, make in rows.items()
        }
    names = list(figures["pydoc"])

    stats = {
        name: f"n={len(x)} median={np.median(x):.0f} p95={np.percentile(x, 95):.0f} max={x.max()}"
        for name, x in datasets.items()
    }
    print(f"padding efficiency (real / padded tokens), batch size {bs}, {args.epochs} epochs")
    for name, x in datasets.items():
        print(
            f"  {name}: {stats[name]}; token_budget max_tokens={budgets[name]}; "
            f"hf mega-batch {hf_mega_batch(len(x), bs)} batches"
        )
    vs_random = {d: ratios(figures[d], "random", 2) for d in datasets}
    table(
        ["sampler", *datasets, *(f"vs random {d[:5]}" for d in datasets)],
        [[name, *(figures[d][name] for d in datasets),
          *(f"{vs_random[d][name]:.2f}x" for d in datasets)] for name in names],
        3,
    )  # fmt: skip
    for line in skipped:
        print("skipped:", line)
    if args.plot:
        plot(figures, args.plot)
        print(f"plot: {args.plot}")
    result = {
        "bench": "padding_efficiency",
        "peer": "shuffled torch DataLoader; transformers get_length_grouped_indices",
        "batch_size": bs,
        "epochs": args.epochs,
        "token_budget_max_tokens": budgets,
        "hf_mega_batch": {n: hf_mega_batch(len(x), bs) for n, x in datasets.items()},
        "skipped": skipped,
        **figures,
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
