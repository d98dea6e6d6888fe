"""The one switch for what the libraries print: transformers, datasets and accelerate.

mtl's output is its own (its progress bar, its figures, bad input as one line `mtl: error: ...`).
`quiet_libraries()` sets transformers to errors only and datasets to none (it logs an error before
raising the exception that mtl turns into one line), turns their progress bars off and
accelerate's logger down to warnings. Called, it holds for the rest of the process (the training
loop, the console scripts); as `with quiet_libraries():` the settings before it are back at the
end of the block (reading data, loading or writing a model, where a caller may want them on).
"""

from __future__ import annotations

import logging
from contextlib import ExitStack

ACCELERATE = logging.getLogger("accelerate")


def quiet_libraries() -> ExitStack:
    """Quiet the libraries now; the returned context manager restores them when it exits."""
    # Imported here: a console script imports this module before it reads its arguments, and
    # these two take seconds to import.
    import datasets
    from transformers.utils import logging as hf_logging

    restore = ExitStack()
    restore.callback(hf_logging.set_verbosity, hf_logging.get_verbosity())
    if hf_logging.is_progress_bar_enabled():
        restore.callback(hf_logging.enable_progress_bar)
    restore.callback(datasets.logging.set_verbosity, datasets.logging.get_verbosity())
    if not datasets.utils.are_progress_bars_disabled():
        restore.callback(datasets.utils.enable_progress_bars)
    restore.callback(ACCELERATE.setLevel, ACCELERATE.level)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    datasets.utils.disable_progress_bars()
    ACCELERATE.setLevel(logging.WARNING)
    return restore
