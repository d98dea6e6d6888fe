"""Console scripts: `mtl-train` (the same as `python train.py`).

`mtl-train` composes mtl's own configs (`mtl/conf/`, shipped with the package) with the user's:
`--config-dir conf` or `hydra.searchpath=[file://conf]` adds a folder whose groups
(`conf/task/my_task.yaml`, ...) sit beside mtl's, so it runs from any folder. Relative paths in
a config (data files) resolve against the folder the command runs in.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from mtl.errors import MtlError


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def _train(cfg: DictConfig) -> float | None:
    from mtl.train import main

    return main(cfg)


def train() -> None:
    """`mtl-train [overrides]`: check the chosen options, start the launch, then Hydra."""
    from mtl.config import check_group_choices
    from mtl.distributed import start_launch

    try:
        check_group_choices(sys.argv[1:])
    except MtlError as err:
        print(f"mtl: error: {err}", file=sys.stderr)
        sys.exit(2)
    start_launch()
    _train()
