"""The one exception type for bad user input.

Raise `MtlError` with a single line that names the thing that is wrong and how to fix it.
The command-line entry point prints that line (no traceback) and exits with status 2.
"""


class MtlError(ValueError):
    """Bad input: unknown task, bad option value, empty or malformed data, label out of range."""
