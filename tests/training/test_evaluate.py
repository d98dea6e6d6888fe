"""Evaluation batches: every process runs the same number of forward calls (FSDP waits for all
of them at each call), and the processes' kept rows are the split's rows once each."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mtl.training.evaluate import eval_batches


@given(
    lengths=st.lists(st.integers(1, 512), min_size=0, max_size=200),
    batch_size=st.integers(1, 40),
    world=st.integers(1, 8),
)
def test_every_process_runs_as_many_batches_and_keeps_each_row_once(lengths, batch_size, world):
    per_rank = [eval_batches(lengths, batch_size, rank, world) for rank in range(world)]
    assert len({len(batches) for batches in per_rank}) == 1
    kept = [i for batches in per_rank for indices, counted in batches if counted for i in indices]
    assert sorted(kept) == list(range(len(lengths)))
    for batches in per_rank:
        for indices, counted in batches:
            assert 1 <= len(indices) <= batch_size
            assert counted or len(indices) == 1


def test_one_process_takes_the_rows_longest_first_in_batches():
    lengths = [5, 9, 1, 7, 3, 8, 2]
    batches = eval_batches(lengths, 3)
    order = np.argsort(-np.asarray(lengths), kind="stable").tolist()
    assert batches == [(order[0:3], True), (order[3:6], True), (order[6:], True)]


def test_a_process_with_no_rows_left_reruns_one_row_it_does_not_keep():
    # 5 rows, 2 processes, batches of 2: chunks of 4 rows, then 1 row for process 0 only
    assert eval_batches([1] * 5, 2, rank=1, world=2) == [([1, 3], True), ([4], False)]
    assert eval_batches([1] * 5, 2, rank=0, world=2) == [([0, 2], True), ([4], True)]
