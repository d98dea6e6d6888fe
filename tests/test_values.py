"""`mtl.values`: a bool is no count or number; numpy's integers and floats are."""

import numpy as np
import pytest

from mtl.values import is_int, is_number


@pytest.mark.parametrize("value", [0, 7, -3, np.int64(5), np.uint8(1)])
def test_integers_are_ints_and_numbers(value):
    assert is_int(value) and is_number(value)


@pytest.mark.parametrize("value", [1.5, float("inf"), np.float32(0.5), np.float64("nan")])
def test_floats_are_numbers_not_ints(value):
    assert is_number(value) and not is_int(value)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "3", None, [1], 2j])
def test_bools_strings_and_others_are_neither(value):
    assert not is_int(value) and not is_number(value)
