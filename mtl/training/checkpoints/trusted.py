"""What a checkpoint may load on resume: data, never code.

A checkpoint's torch and pickle files (the optimizer's and scheduler's state, each rank's random
states, the loader's, the counters' and the balancer's state) are read by accelerate, which reads
the registered objects' states with the full unpickler: a file made to carry code would run it.
`check_data_only` reads every such file first with torch's `weights_only` loader (tensors, numbers,
strings, lists and dicts, numpy arrays: all mtl and accelerate save). A file that needs more is
refused in one line naming it (torch's reader cannot tell a payload from random bytes, so the
line says both), as is a damaged one, so nothing in the checkpoint runs and no
state is silently left unrestored (accelerate goes on without the random states it cannot read:
the resume would no longer be exact).
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

from mtl.errors import MtlError

PICKLED = ("*.pkl", "*.bin", "*.pt")
RANDOM_STATES = ("random_state", "numpy_random_seed", "torch_manual_seed")  # accelerate's keys


def check_data_only(checkpoint: Path, option: str) -> None:
    """One line (MtlError, every rank) for a file of `checkpoint` that is not plain data."""
    from accelerate.utils import load

    for path in sorted(p for pattern in PICKLED for p in Path(checkpoint).glob(pattern)):
        try:
            with warnings.catch_warnings():  # torch warns of a pickle protocol it does not read
                warnings.simplefilter("ignore")
                loaded = load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:  # torch's data-only reader met more than data
            raise MtlError(
                f"{option}: {path} is not plain data (damaged, or made to run code when "
                "loaded), so mtl does not load it; resume from an earlier checkpoint "
                f"(trainer.resume={path.parent.parent}/step_N) or one you trust, or start from "
                "its weights alone: model.init_from=<its run folder>",
                all_ranks=True,
            ) from None
        except Exception as err:  # torch and zipfile raise their own types for a damaged file
            raise _damaged(path, option, err) from None
        if path.name.startswith("random_states_") and not (
            isinstance(loaded, dict) and all(key in loaded for key in RANDOM_STATES)
        ):
            raise _damaged(path, option, ValueError("not the random states accelerate saves"))


def _damaged(path: Path, option: str, err: Exception) -> MtlError:
    detail = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
    return MtlError(
        f"{option}: {path} cannot be loaded ({type(err).__name__}: {detail}); resume from an "
        f"earlier checkpoint: trainer.resume={path.parent.parent}/step_N",
        all_ranks=True,
    )
