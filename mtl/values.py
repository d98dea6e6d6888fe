"""What a value from a config, a data file or a saved state must be before mtl uses it as a
count or a number. A bool is neither (Python counts True as 1; a user who wrote `true` meant
something else); numpy's integers and floats are both (a loaded array's elements)."""

from __future__ import annotations

from typing import Any

import numpy as np


def is_int(value: Any) -> bool:
    """An integer, Python's or numpy's, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An integer or a float, Python's or numpy's, not a bool (infinite or NaN included)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
