"""Train one shared encoder with a head per task: `python train.py loader=mixup task=[a,b]`.

Under a launcher (`torchrun`, `accelerate launch`) the process group starts before Hydra, so that
rank 0 picks the run folder for every rank (see `mtl.distributed.start_launch`).
"""

import hydra
from omegaconf import DictConfig

from mtl.distributed import start_launch


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    from mtl.train import main as run

    return run(cfg)


if __name__ == "__main__":
    start_launch()
    main()
