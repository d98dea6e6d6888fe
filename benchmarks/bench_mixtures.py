"""Time to build one epoch's task schedule of `loader=random` with each mixture, beside the static
proportional shuffle (the schedule the loader built before mixtures moved).

Three tasks of 600,000 / 300,000 / 100,000 batches (a 1e6-step epoch under each_once; `--quick`:
1e4), the epoch drawn from scratch each time (`build_schedule`, no cache). Rows:
- `proportional`: every batch once, one permutation (unchanged by the mixtures; the baseline);
- `uniform`, `temperature 3`: the steps split by fixed weights, then one permutation;
- `annealed (epoch 1 of 3)`, `temperature 1 -> 5 cosine`: weights of that epoch;
- `2 stages`: uniform for the first half of the run, proportional after (epoch 0 of 2: one
  boundary inside the epoch);
- `max_passes 1.5 (uniform)`: the steps split with the capped tasks' mass moved to the others.

Time: best of `--repeats` builds per row, interleaved. Prints one table (seconds and the ratio to
`proportional`) and one JSON line.

    python benchmarks/bench_mixtures.py [--quick] [--repeats 3]
"""

from __future__ import annotations

from harness import best_of, emit, parser, table

from mtl.loaders import RandomLoader

ROWS = {
    "proportional": {},
    "uniform": {"weighting": "uniform"},
    "temperature 3": {"weighting": "temperature", "temperature": 3},
    "annealed (epoch 1 of 3)": {"weighting": "annealed", "epochs": 3},
    "temperature 1 -> 5 cosine": {
        "weighting": "temperature", "temperature": 1, "temperature_end": 5, "shape": "cosine",
        "epochs": 3,
    },
    "2 stages": {"stages": [{"until": 0.5, "weighting": "uniform"}, {}], "epochs": 2},
    "max_passes 1.5 (uniform)": {"weighting": "uniform", "max_passes": 1.5},
}  # fmt: skip


def main() -> None:
    p = parser(__doc__, "1e4-step epochs")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    scale = 10_000 if args.quick else 1_000_000
    sizes = {"large": 6 * scale // 10, "medium": 3 * scale // 10, "small": scale // 10}
    stand_ins = {name: range(n) for name, n in sizes.items()}
    loaders = {name: RandomLoader(stand_ins, seed=0, **options) for name, options in ROWS.items()}
    epoch = {
        name: 1 if "epochs" in ROWS[name] and "stages" not in ROWS[name] else 0 for name in ROWS
    }

    def build(name: str):
        def run() -> int:
            loaders[name].build_schedule(epoch[name])
            return 1

        return run

    seconds = best_of({name: build(name) for name in ROWS}, args.repeats)
    base = seconds["proportional"]
    print(f"one epoch of {sum(sizes.values()):,} steps over tasks of {sizes} batches")
    table(
        ["mixture", "seconds", "x proportional"],
        [(name, s, s / base) for name, s in seconds.items()],
        digits=[0, 4, 2],
    )
    emit({"bench": "mixtures", "peer": "proportional (the static shuffle)",
          "steps": sum(sizes.values()), "seconds": seconds, "ratio": {
        name: round(s / base, 3) for name, s in seconds.items()}}, args.json)  # fmt: skip


if __name__ == "__main__":
    main()
