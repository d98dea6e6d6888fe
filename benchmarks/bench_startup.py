"""Seconds from starting a console script to its `--help`, beside a bare interpreter start.

Each row runs `<script> --help` in a fresh process `--repeats` times (5; `--quick`: once, a
smoke run), as a user types it, and reports the median wall time; `python -c pass` (the
interpreter alone) is the floor every row pays. `mtl-train --help` composes the config with
Hydra first, so it is its own row.

    python benchmarks/bench_startup.py [--quick] [--repeats 5]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import emit, parser, table

BIN = Path(sys.executable).parent
ROWS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    **{
        f"{script} --help": [str(BIN / script), "--help"]
        for script in (
            "mtl-dry-run", "mtl-export", "mtl-predict", "mtl-report", "mtl-workspace", "mtl-train"
        )
    },
}  # fmt: skip


def median_seconds(command: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = parser(__doc__, "1 run of each")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    repeats = 1 if args.quick else args.repeats
    seconds = {name: median_seconds(command, repeats) for name, command in ROWS.items()}
    floor = seconds["python -c pass"]
    table(
        ["command", f"median s ({repeats} runs)", "x python -c pass"],
        [(name, s, s / floor) for name, s in seconds.items()],
        digits=[0, 2, 1],
    )
    emit({"bench": "startup", "peer": "python -c pass", "repeats": repeats, "seconds": seconds},
         args.json)  # fmt: skip


if __name__ == "__main__":
    main()
