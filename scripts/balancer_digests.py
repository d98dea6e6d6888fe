"""The sha256 of each balancer's final weights on the tiny default config: a refactor of the
training step must leave every line the same.

Each job trains `debug=fast` (the tiny model, the three default tasks, 4 steps) with one
balancer, `loader=random` or `loader=mixup`, with and without `model.loss_weights`, in this
process; the digest covers every tensor of the last step checkpoint's model.safetensors (names
and bytes, sorted by name). Prints one line per job; `--out F` also writes them to F, to diff.

    python scripts/balancer_digests.py [--out digests.txt] [--only sum,upgrad]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
BALANCERS = sorted(p.stem for p in (ROOT / "conf" / "balancer").glob("*.yaml"))
WEIGHTS = ["+model.loss_weights={pydoc_topic:2.0,pydoc_code:0.5}"]


def digest(checkpoint: Path) -> str:
    tensors = load_file(checkpoint / "model.safetensors")
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().view(-1).view(dtype=torch.uint8).numpy())
    return h.hexdigest()


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--out", type=Path)
    args.add_argument("--only", default=",".join(BALANCERS))
    opts = args.parse_args()
    sys.path.insert(0, str(ROOT))
    from accelerate.state import AcceleratorState

    from mtl.cli.job import train
    from mtl.config import register_configs

    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for balancer in opts.only.split(","):
            for loader in ("random", "mixup"):
                for extra in ([], WEIGHTS):
                    out = Path(tmp) / f"{balancer}-{loader}-{len(extra)}"
                    overrides = ["debug=fast", f"balancer={balancer}", f"loader={loader}"]
                    overrides += [*extra, f"output_dir={out}"]
                    GlobalHydra.instance().clear()
                    register_configs()
                    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
                        cfg = compose("config", overrides=overrides)
                    train(cfg)
                    AcceleratorState._reset_state(reset_partial_state=True)
                    last = max((out / "checkpoints").glob("step_*"))
                    line = f"{balancer:12} {loader:7} {'weights' if extra else 'plain':7} "
                    lines.append(line + digest(last))
                    print(lines[-1], flush=True)
    if opts.out:
        opts.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
