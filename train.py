"""Train one shared encoder with a head per task: `python train.py loader=mixup task=[a,b]`.

The same as the `mtl-train` console script (see `mtl.cli`). Under a launcher (`torchrun`,
`accelerate launch`) the process group starts before Hydra, so that rank 0 picks the run folder
for every rank (see `mtl.training.launch.distributed.start_launch`).
"""

from mtl.cli.entry import train

if __name__ == "__main__":
    train()
