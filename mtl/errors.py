"""The one exception type for bad user input.

Raise `MtlError` with a single line that names the thing that is wrong and how to fix it.
The command-line entry point prints that line (no traceback) and exits with status 2.
"""


class MtlError(ValueError):
    """Bad input: unknown task, bad option value, empty or malformed data, label out of range.

    `all_ranks`: every process of a launch raises this error alike (a check all ranks make on
    the same data), so the entry point prints it once, on rank 0; otherwise each rank that
    raises it prints it."""

    def __init__(self, message: str = "", *, all_ranks: bool = False):
        super().__init__(message)
        self.all_ranks = all_ranks
