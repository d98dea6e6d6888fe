"""Train one shared encoder with a head per task: `python train.py loader=mixup task=[a,b]`.

Under a launcher (`torchrun`, `accelerate launch`) the process group starts before Hydra, so that
rank 0 picks the run folder for every rank (see `mtl.distributed.start_launch`).
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from mtl.config import check_group_choices
from mtl.distributed import start_launch
from mtl.errors import MtlError

CONF = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    from mtl.train import main as run

    return run(cfg)


if __name__ == "__main__":
    try:
        check_group_choices(sys.argv[1:], CONF)
    except MtlError as err:
        print(f"mtl: error: {err}", file=sys.stderr)
        sys.exit(2)
    start_launch()
    main()
