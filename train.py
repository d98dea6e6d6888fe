"""Train one shared encoder with a head per task: `python train.py loader=mixup task=[a,b]`."""

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    from mtl.train import main as run

    return run(cfg)


if __name__ == "__main__":
    main()
