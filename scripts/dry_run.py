"""Print one epoch's task sequence summary of a loader from task sizes alone (no data loaded).

    python scripts/dry_run.py random topic=49 code=49 tiny=5 --option weighting=uniform
    python scripts/dry_run.py mixup topic=49 tiny=5 --epochs 2

Sizes are batches per pass of each task (examples / batch size, rounded up).
"""

from __future__ import annotations

import argparse

import yaml

from mtl.errors import MtlError
from mtl.loaders import dry_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("loader", help="sequential | round_robin | random | mixup")
    parser.add_argument("sizes", nargs="+", help="task=batches, e.g. topic=49")
    parser.add_argument("--option", action="append", default=[], help="key=value loader option")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    try:
        sizes = {k: int(v) for k, v in (item.split("=", 1) for item in args.sizes)}
        options = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.option)}
    except ValueError:
        parser.error("sizes are task=batches (an integer) and options key=value")
    try:
        for epoch in range(args.epochs):
            print(dry_run(args.loader, sizes, epoch=epoch, **options))
    except MtlError as err:
        parser.exit(2, f"dry_run: error: {err}\n")


if __name__ == "__main__":
    main()
